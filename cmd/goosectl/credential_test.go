package main

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest"
)

// startIdentitySidecar runs a real adk2goose server over a fake `goose
// serve` whose callers v verifies.
func startIdentitySidecar(t *testing.T, v identity.Verifier) string {
	t.Helper()
	f := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	b, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return servertest.Start(t, server.Config{Backend: b, AppName: "coder", DataDir: t.TempDir(), AuthToken: "peer-token", Identity: v}).Addr
}

// agentBehindService creates a GooseAgent in mode with its Service and one
// ready pod, as the operator and the kubelet would leave them.
func agentBehindService(t *testing.T, env *testenv.Env, ns string, auth agentsv1alpha1.SidecarAuth) *agentsv1alpha1.GooseAgent {
	t.Helper()
	ctx, c := t.Context(), env.Client
	a := &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder"},
		Spec: agentsv1alpha1.GooseAgentSpec{
			Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"},
			Sidecar:  agentsv1alpha1.SidecarSpec{Auth: auth},
		},
	}
	must(t, c.Create(ctx, a))
	sel := map[string]string{"app.kubernetes.io/instance": "coder"}
	must(t, c.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder"},
		Spec:       corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromString("http")}}},
	}))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder-0", Labels: sel},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "adk2goose", Image: "adk2goose", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
		}},
	}
	must(t, c.Create(ctx, p))
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	must(t, c.Status().Update(ctx, p))
	return a
}

// TestUIIdentityModes: goosectl ui reaches an agent in mode kubernetes as a
// ServiceAccount RBAC lets use it (a TokenRequest for the agent's
// audience), is refused for one it does not, and in mode oidc sends the
// kubeconfig user's token; the UI opens as the user /whoami names and
// chats as that user.
func TestUIIdentityModes(t *testing.T) {
	env := testenv.Start(t)
	ctx, c := t.Context(), env.Client

	t.Run("kubernetes", func(t *testing.T) {
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ui-kube-"}}
		must(t, c.Create(ctx, nsObj))
		ns := nsObj.Name
		a := agentBehindService(t, env, ns, agentsv1alpha1.SidecarAuth{Mode: agentsv1alpha1.AuthModeKubernetes})
		for _, sa := range []string{"alice", "mallory"} {
			must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}))
		}
		must(t, c.Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "use-coder"},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{identity.RBACGroup}, Resources: []string{identity.RBACResource + "/" + identity.RBACSubresource},
				ResourceNames: []string{"coder"}, Verbs: []string{identity.RBACVerb},
			}},
		}))
		must(t, c.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice-uses-coder"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "use-coder"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "alice", Namespace: ns}},
		}))
		alice := "system:serviceaccount:" + ns + ":alice"
		waitForUse(t, env, alice, ns)
		v, err := identity.NewKubernetes(identity.KubernetesConfig{REST: rest.CopyConfig(env.Config), Audience: render.Audience(a), Namespace: ns, Agent: "coder"})
		if err != nil {
			t.Fatal(err)
		}
		fwd := &tcpForwarder{target: startIdentitySidecar(t, v)}
		kube := []string{"coder", "-n", ns, "--kubeconfig", env.Kubeconfig}

		r, err := startUI(t, fwd, append(kube, "--service-account", "alice")...)
		if err != nil {
			t.Fatal(err)
		}
		wantURL := r.origin + "/ui/?" + url.Values{"userId": {alice}}.Encode()
		if out := r.out.String(); !strings.Contains(out, " as "+alice+": "+wantURL) {
			t.Fatalf("the UI does not open as %s (%s):\n%s", alice, wantURL, out)
		}
		chatAs(t, r.origin, alice)
		r.stop(t)

		for name, tc := range map[string]struct {
			args []string
			want string
		}{
			"no binding":           {[]string{"--service-account", "mallory"}, "the agent refused the caller"},
			"no service account":   {nil, "is in mode kubernetes: pass --service-account SA"},
			"unknown account":      {[]string{"--service-account", "nobody"}, "ServiceAccount " + ns + "/nobody does not exist"},
			"shared token refused": {[]string{"--token", "peer-token-guess"}, "the agent rejected the token"},
		} {
			t.Run(name, func(t *testing.T) {
				r, err := startUI(t, fwd, append(kube, tc.args...)...)
				if err == nil {
					r.stop(t)
					t.Fatalf("served; want an error containing %q", tc.want)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %q does not contain %q", err, tc.want)
				}
			})
		}
	})

	t.Run("oidc", func(t *testing.T) {
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ui-oidc-"}}
		must(t, c.Create(ctx, nsObj))
		ns := nsObj.Name
		is := newTestIssuer(t)
		agentBehindService(t, env, ns, agentsv1alpha1.SidecarAuth{
			Mode: agentsv1alpha1.AuthModeOIDC,
			OIDC: &agentsv1alpha1.OIDCAuth{IssuerURL: "https://issuer.invalid", Audience: "coder"},
		})
		v, err := identity.NewOIDC(ctx, identity.OIDCConfig{IssuerURL: is.srv.URL, Audience: "coder"})
		if err != nil {
			t.Fatal(err)
		}
		fwd := &tcpForwarder{target: startIdentitySidecar(t, v)}
		// The envtest admin's kubeconfig with an ID token added: the API
		// server authenticates the admin by its client certificate, and
		// goosectl sends the agent the token, as it would a user's
		// oidc auth-provider or exec plugin token.
		kc := kubeconfigWithToken(t, env.Kubeconfig, is.token(t, "ada@example.com"))
		r, err := startUI(t, fwd, "coder", "-n", ns, "--kubeconfig", kc)
		if err != nil {
			t.Fatal(err)
		}
		if out := r.out.String(); !strings.Contains(out, " as ada@example.com: ") {
			t.Fatalf("the UI does not open as ada@example.com:\n%s", out)
		}
		chatAs(t, r.origin, "ada@example.com")
		r.stop(t)

		if r, err := startUI(t, fwd, "coder", "-n", ns, "--kubeconfig", env.Kubeconfig); err == nil {
			r.stop(t)
			t.Fatal("served with a kubeconfig user that has no bearer token")
		} else if !strings.Contains(err.Error(), "has no bearer token to send") {
			t.Fatalf("a client-certificate user: %v", err)
		}
	})
}

// TestServiceAccountCredentialRenews: a TokenRequest token is reused while
// young and replaced once four fifths of its life have passed.
func TestServiceAccountCredentialRenews(t *testing.T) {
	var requests int
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/team/serviceaccounts/alice/token" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Spec struct {
				Audiences []string `json:"audiences"`
			} `json:"spec"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if len(req.Spec.Audiences) != 1 || req.Spec.Audiences[0] != "aud" {
			http.Error(w, "wrong audience", http.StatusBadRequest)
			return
		}
		requests++
		// A token that lives 2 seconds, so that renewal comes within the test.
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
			"status": map[string]any{"token": fmt.Sprint("tok-", requests), "expirationTimestamp": time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)},
		})
	}))
	defer api.Close()
	kc, err := newKubeClients(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	cred := serviceAccountCredential(kc, "team", "alice", "aud")
	first, err := cred.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := cred.Token(t.Context()); again != first || requests != 1 {
		t.Fatalf("a young token was not reused: %q then %q, %d requests", first, again, requests)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		tok, err := cred.Token(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if tok != first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the token was never renewed (%d requests)", requests)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kubeconfigWithToken copies a kubeconfig and gives its users token.
func kubeconfigWithToken(t *testing.T, path, token string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Token = token
	}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, clientcmd.WriteToFile(*cfg, out))
	return out
}

// testIssuer is a local OIDC issuer: discovery and the JWKS of one key.
type testIssuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &testIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

// token is an ID token for sub, valid for an hour.
func (is *testIssuer) token(t *testing.T, sub string) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: is.key}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims, _ := json.Marshal(map[string]any{"iss": is.srv.URL, "aud": "coder", "sub": sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	jws, err := s.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitForUse waits until the authorizer lets user use the agent "coder"
// (gooseagents/invoke), as the sidecar's SubjectAccessReview asks: a
// RoleBinding takes effect a moment after its create returned.
func waitForUse(t *testing.T, env *testenv.Env, user, ns string) {
	t.Helper()
	poll.UntilNil(t, user+" may use the agent", func() error {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: identity.RBACVerb, Group: identity.RBACGroup, Resource: identity.RBACResource,
				Subresource: identity.RBACSubresource, Name: "coder",
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
