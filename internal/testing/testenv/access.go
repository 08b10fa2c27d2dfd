package testenv

import (
	"context"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// Access is one request a user may or may not make.
type Access struct {
	Group, Resource, Verb string
	// Allowed is the answer to wait for.
	Allowed bool
}

func (a Access) String() string {
	word := "may not"
	if a.Allowed {
		word = "may"
	}
	return fmt.Sprintf("%s %s.%s %q", word, a.Verb, a.Resource, a.Group)
}

// WaitForAccess waits until the API server's authorizer gives user in
// namespace ns every answer in want. RBAC objects take effect only once the
// authorizer's informers have them, which under load is after their create
// returned: a test that just wrote a Role must wait for it, not assume it.
func (e *Env) WaitForAccess(t testing.TB, user, ns string, want ...Access) {
	t.Helper()
	for _, w := range want {
		poll.UntilNil(t, fmt.Sprintf("user %s in %s: %s", user, ns, w), func() error {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Group: w.Group, Resource: w.Resource, Verb: w.Verb,
				},
			}}
			if err := e.Client.Create(context.Background(), sar); err != nil {
				return err
			}
			if sar.Status.Allowed != w.Allowed {
				return fmt.Errorf("last answer %+v", sar.Status)
			}
			return nil
		})
	}
}
