package identity_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/identity"
)

const (
	testNS       = "team"
	testAgent    = "helper"
	testAudience = "adk2goose:team:helper"
)

// kubeFixture is a real API server with two ServiceAccounts: alice, whom a
// RoleBinding lets use the agent, and mallory, whom none does.
type kubeFixture struct {
	env *testenv.Env
	cs  *kubernetes.Clientset
}

func startKube(t *testing.T) *kubeFixture {
	env := testenv.Start(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}))
	for _, sa := range []string{"alice", "mallory"} {
		must(cs.CoreV1().ServiceAccounts(testNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}))
	}
	must(cs.RbacV1().Roles(testNS).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "use-helper"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{identity.RBACGroup}, Resources: []string{identity.RBACResource + "/" + identity.RBACSubresource},
			ResourceNames: []string{testAgent}, Verbs: []string{identity.RBACVerb},
		}},
	}, metav1.CreateOptions{}))
	must(cs.RbacV1().RoleBindings(testNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-uses-helper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "use-helper"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "alice", Namespace: testNS}},
	}, metav1.CreateOptions{}))
	return &kubeFixture{env: env, cs: cs}
}

// token is a TokenRequest token of ServiceAccount sa for audience.
func (f *kubeFixture) token(t *testing.T, sa, audience string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := f.cs.CoreV1().ServiceAccounts(testNS).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("failed to request a token for %s: %v", sa, err)
	}
	return tr.Status.Token
}

// reviewCounts counts the reviews sent.
type reviewCounts struct{ tokens, access atomic.Int64 }

type countingTransport struct {
	next   http.RoundTripper
	counts *reviewCounts
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
		c.counts.tokens.Add(1)
	case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
		c.counts.access.Add(1)
	}
	return c.next.RoundTrip(r)
}

func (f *kubeFixture) verifier(t *testing.T, counts *reviewCounts) *identity.Kubernetes {
	t.Helper()
	rc := rest.CopyConfig(f.env.Config)
	if counts != nil {
		rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, counts} })
	}
	v, err := identity.NewKubernetes(identity.KubernetesConfig{REST: rc, Audience: testAudience, Namespace: testNS, Agent: testAgent})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func verify(v identity.Verifier, token string) (identity.Caller, error) {
	r := httptest.NewRequest(http.MethodGet, "/list-apps", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return v.Verify(r)
}

func TestKubernetesModeAgainstAPIServer(t *testing.T) {
	f := startKube(t)
	v := f.verifier(t, nil)
	alice := f.token(t, "alice", testAudience)

	// The RoleBinding takes effect once the API server's authorizer has
	// it; an early deny stays cached for DenyCacheTTL, so poll a fresh
	// verifier until alice is allowed.
	var caller identity.Caller
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		caller, err = verify(f.verifier(t, nil), alice)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("alice was never allowed: %v", err)
	}
	if want := "system:serviceaccount:" + testNS + ":alice"; caller.User != want {
		t.Fatalf("caller = %q, want %q", caller.User, want)
	}
	if !caller.In([]string{"system:serviceaccounts:" + testNS}) {
		t.Fatalf("caller groups %v lack the namespace's ServiceAccount group", caller.Groups)
	}

	tests := []struct {
		name  string
		token string
		want  int
	}{
		{"bound ServiceAccount", alice, http.StatusOK},
		{"ServiceAccount without a binding", f.token(t, "mallory", testAudience), http.StatusForbidden},
		{"wrong audience", f.token(t, "alice", "some-other-agent"), http.StatusUnauthorized},
		{"not a token", "not-a-token", http.StatusUnauthorized},
		{"no token", "", http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify(v, tc.token)
			got := http.StatusOK
			if err != nil {
				got = identity.Status(err)
				if tc.token != "" && strings.Contains(err.Error(), tc.token) {
					t.Fatalf("the error holds the token: %v", err)
				}
			}
			if got != tc.want {
				t.Fatalf("status %d (%v), want %d", got, err, tc.want)
			}
		})
	}

	t.Run("review API down", func(t *testing.T) {
		rc := rest.CopyConfig(f.env.Config)
		rc.Host = "https://127.0.0.1:1" // nothing listens there
		down, err := identity.NewKubernetes(identity.KubernetesConfig{
			REST: rc, Audience: testAudience, Namespace: testNS, Agent: testAgent,
			Backoff: &wait.Backoff{Duration: time.Millisecond, Steps: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = verify(down, alice)
		if identity.Status(err) != http.StatusServiceUnavailable {
			t.Fatalf("verify with the API server down: %v, want 503", err)
		}
		if strings.Contains(err.Error(), alice) {
			t.Fatalf("the error holds the token: %v", err)
		}
	})

	t.Run("one review per token under a burst", func(t *testing.T) {
		var counts reviewCounts
		v := f.verifier(t, &counts)
		token := f.token(t, "alice", testAudience)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 1000 {
			wg.Go(func() {
				if _, err := verify(v, token); err != nil {
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Fatalf("%d of 1000 requests failed", n)
		}
		if n := counts.tokens.Load(); n != 1 {
			t.Fatalf("%d TokenReviews for one token, want 1", n)
		}
		if n := counts.access.Load(); n != 1 {
			t.Fatalf("%d SubjectAccessReviews for one caller, want 1", n)
		}
	})
}

// TestKubernetesOutageIsNotCached: a review that failed is asked again by
// the next request, which gets the caller once the API server answers.
func TestKubernetesOutageIsNotCached(t *testing.T) {
	api := newFakeReviewAPI(t)
	api.down.Store(true)
	v, err := identity.NewKubernetes(identity.KubernetesConfig{
		REST: api.config, Audience: testAudience, Namespace: testNS, Agent: testAgent,
		Backoff: &wait.Backoff{Duration: time.Millisecond, Steps: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	const token = "a-service-account-token"
	_, err = verify(v, token)
	if identity.Status(err) != http.StatusServiceUnavailable {
		t.Fatalf("verify with the review API failing: %v, want 503", err)
	}
	if strings.Contains(err.Error(), token) {
		t.Fatalf("the error holds the token: %v", err)
	}
	api.down.Store(false)
	caller, err := verify(v, token)
	if err != nil {
		t.Fatalf("verify once the review API answers: %v", err)
	}
	if caller.User != "system:serviceaccount:team:alice" {
		t.Fatalf("caller = %q", caller.User)
	}
}
