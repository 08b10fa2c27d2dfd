// Package examples_test runs the samples of this directory against a real
// adk2goose sidecar in mode kubernetes, whose callers a real API server
// (envtest) issues ServiceAccount tokens for and reviews: the account a
// RoleBinding lets use the agent gets an answer, the one without gets 403.
package examples_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest"
)

const (
	ns       = "team"
	agent    = "helper"
	audience = "agents.adk2goose.dev/team/helper"
)

// fixture is a sidecar in mode kubernetes and a token file for each of
// alice (allowed by a RoleBinding) and mallory (not).
type fixture struct {
	url    string
	tokens map[string]string // ServiceAccount → token file
}

func start(t *testing.T) *fixture {
	t.Helper()
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
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	must(cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "use-" + agent},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{identity.RBACGroup}, Resources: []string{identity.RBACResource + "/" + identity.RBACSubresource},
			ResourceNames: []string{agent}, Verbs: []string{identity.RBACVerb},
		}},
	}, metav1.CreateOptions{}))
	must(cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-uses-" + agent},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "use-" + agent},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "alice", Namespace: ns}},
	}, metav1.CreateOptions{}))
	f := &fixture{tokens: map[string]string{}}
	dir := t.TempDir()
	for _, sa := range []string{"alice", "mallory"} {
		must(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}))
		exp := int64(3600)
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("failed to request a token for %s: %v", sa, err)
		}
		f.tokens[sa] = filepath.Join(dir, sa+"-token")
		if err := os.WriteFile(f.tokens[sa], []byte(tr.Status.Token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	waitForUse(t, env, "system:serviceaccount:"+ns+":alice", ns)

	v, err := identity.NewKubernetes(identity.KubernetesConfig{REST: rest.CopyConfig(env.Config), Audience: audience, Namespace: ns, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	g := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	b, err := acp.New(acp.Config{URL: g.URL, SecretKey: g.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	f.url = servertest.Start(t, server.Config{Backend: b, AppName: agent, DataDir: t.TempDir(), AuthToken: "peer-token", Identity: v}).URL
	return f
}

// run runs a sample command and returns its output; err carries stderr.
func run(t *testing.T, dir string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = &runError{err: err, stderr: errb.String()}
	}
	return out.String(), err
}

type runError struct {
	err    error
	stderr string
}

func (e *runError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }

func TestSamples(t *testing.T) {
	f := start(t)

	t.Run("adk-go remoteagent", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "adk-go-remoteagent")
		if out, err := run(t, ".", "go", "build", "-o", bin, "./adk-go-remoteagent"); err != nil {
			t.Fatalf("go build: %v %s", err, out)
		}
		out, err := run(t, ".", bin, "-url", f.url, "-token-file", f.tokens["alice"], "-text", "hello from adk-go")
		if err != nil || !strings.Contains(out, "echo: hello from adk-go") {
			t.Fatalf("alice: %q %v", out, err)
		}
		if out, err := run(t, ".", bin, "-url", f.url, "-token-file", f.tokens["mallory"], "-text", "hi"); err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("mallory, without a RoleBinding: want a 403, got %q %v", out, err)
		}
	})

	t.Run("a2a-js", func(t *testing.T) {
		if _, err := exec.LookPath("node"); err != nil {
			t.Skip("node is not installed")
		}
		if out, err := run(t, "a2a-js", "npm", "ci", "--no-audit", "--no-fund"); err != nil {
			t.Skipf("npm ci failed (no registry?): %v %s", err, out)
		}
		out, err := run(t, "a2a-js", "node", "client.mjs", f.url, f.tokens["alice"], "hello from a2a-js")
		if err != nil || !strings.Contains(out, "echo: hello from a2a-js") {
			t.Fatalf("alice: %q %v", out, err)
		}
		if out, err := run(t, "a2a-js", "node", "client.mjs", f.url, f.tokens["mallory"], "hi"); err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("mallory, without a RoleBinding: want a 403, got %q %v", out, err)
		}
	})
}

// waitForUse waits until the authorizer lets user use the agent "helper"
// (gooseagents/invoke), as the sidecar's SubjectAccessReview asks: a
// RoleBinding takes effect a moment after its create returned.
func waitForUse(t *testing.T, env *testenv.Env, user, ns string) {
	t.Helper()
	poll.UntilNil(t, user+" may use the agent", func() error {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: identity.RBACVerb, Group: identity.RBACGroup, Resource: identity.RBACResource,
				Subresource: identity.RBACSubresource, Name: "helper",
			},
		}}
		if err := env.Client.Create(t.Context(), sar); err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("not yet: %+v", sar.Status)
		}
		return nil
	})
}
