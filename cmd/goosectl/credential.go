package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/secretfile"
)

// credentialOptions are the flags that choose the credential goosectl sends
// an agent (--token, --token-file, --service-account).
type credentialOptions struct {
	token, tokenFile, serviceAccount string
}

// agentCredential is the bearer token goosectl sends an agent's sidecar.
// Token is called for every request: a token with a lifetime is renewed
// behind it.
type agentCredential struct {
	// From says where the token comes from, for error messages.
	From  string
	Token func(context.Context) (string, error)
}

// agentCredentialFor picks the credential of the agent's auth mode, the
// one place goosectl decides how a person reaches an agent:
//   - --token or --token-file, in any mode: that token as is;
//   - mode token: the agent's shared token, from its Secret;
//   - mode kubernetes: a TokenRequest for the agent's audience of the
//     ServiceAccount --service-account names, renewed before it expires. The
//     person's own kubeconfig credential is not forwarded: it is a
//     credential for the API server (an agent accepting it could use it
//     there), a client certificate cannot be forwarded at all, and
//     TokenReview accepts audience-less tokens only for the API server's
//     own audiences;
//   - mode oidc: the kubeconfig user's bearer token (a static token, an
//     exec plugin or the oidc auth-provider), asked for each time so that
//     the plugin may refresh it.
func agentCredentialFor(ctx context.Context, kc *kubeClients, cfg *rest.Config, a *agentsv1alpha1.GooseAgent, o credentialOptions) (*agentCredential, error) {
	switch {
	case o.token != "":
		return staticCredential("--token", o.token), nil
	case o.tokenFile != "":
		t, err := secretfile.Read(o.tokenFile, "token file")
		if err != nil {
			return nil, err
		}
		return staticCredential("--token-file "+o.tokenFile, t), nil
	}
	switch mode := a.Spec.Sidecar.Auth.Mode; mode {
	case "", agentsv1alpha1.AuthModeToken:
		if o.serviceAccount != "" {
			return nil, fmt.Errorf("GooseAgent %s/%s is in mode token, which takes the agent's token, not --service-account", a.Namespace, a.Name)
		}
		t, from, err := kc.readToken(ctx, a)
		if err != nil {
			return nil, err
		}
		return staticCredential(from, t), nil
	case agentsv1alpha1.AuthModeKubernetes:
		if o.serviceAccount == "" {
			return nil, fmt.Errorf("GooseAgent %s/%s is in mode kubernetes: pass --service-account SA, a ServiceAccount of namespace %s that a RoleBinding lets use the agent and that you may create tokens for (kubectl auth can-i create serviceaccounts/token -n %s)",
				a.Namespace, a.Name, a.Namespace, a.Namespace)
		}
		return serviceAccountCredential(kc, a.Namespace, o.serviceAccount, render.Audience(a)), nil
	case agentsv1alpha1.AuthModeOIDC:
		if o.serviceAccount != "" {
			return nil, fmt.Errorf("GooseAgent %s/%s is in mode oidc, which takes your kubeconfig user's OIDC token, not --service-account", a.Namespace, a.Name)
		}
		return kubeconfigCredential(cfg)
	default:
		return nil, fmt.Errorf("GooseAgent %s/%s has auth mode %q, which this goosectl does not know", a.Namespace, a.Name, mode)
	}
}

func staticCredential(from, token string) *agentCredential {
	return &agentCredential{From: from, Token: func(context.Context) (string, error) { return token, nil }}
}

// tokenLifetime is what goosectl asks a TokenRequest for; the API server
// may shorten it.
const tokenLifetime = time.Hour

// serviceAccountCredential requests tokens of ServiceAccount ns/sa for
// audience, each renewed once four fifths of its life have passed.
func serviceAccountCredential(kc *kubeClients, ns, sa, audience string) *agentCredential {
	from := fmt.Sprintf("a token of ServiceAccount %s/%s for audience %s", ns, sa, audience)
	var (
		mu      sync.Mutex
		current string
		renewAt time.Time
	)
	return &agentCredential{From: from, Token: func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if current != "" && time.Now().Before(renewAt) {
			return current, nil
		}
		secs := int64(tokenLifetime.Seconds())
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &secs}}
		tr := &authenticationv1.TokenRequest{}
		start := time.Now()
		err := kc.core.Post().Namespace(ns).Resource("serviceaccounts").Name(sa).SubResource("token").Body(req).Do(ctx).Into(tr)
		switch {
		case apierrors.IsForbidden(err):
			return "", fmt.Errorf("your credentials may not create tokens of ServiceAccount %s/%s (kubectl auth can-i create serviceaccounts/token -n %s): %w", ns, sa, ns, err)
		case apierrors.IsNotFound(err):
			return "", fmt.Errorf("ServiceAccount %s/%s does not exist: %w", ns, sa, err)
		case err != nil:
			return "", fmt.Errorf("failed to request a token of ServiceAccount %s/%s: %w", ns, sa, err)
		case tr.Status.Token == "":
			return "", fmt.Errorf("the API server returned no token for ServiceAccount %s/%s", ns, sa)
		}
		current = tr.Status.Token
		renewAt = start.Add(tr.Status.ExpirationTimestamp.Sub(start) * 4 / 5)
		return current, nil
	}}
}

// kubeconfigCredential is the bearer token client-go sends the API server
// for the kubeconfig's user, read by running client-go's own
// authentication wrappers (static token, token file, exec plugin, the oidc
// auth-provider) over a transport that only records the header.
func kubeconfigCredential(cfg *rest.Config) (*agentCredential, error) {
	var captured capturingTransport
	rt, err := rest.HTTPWrappersForConfig(cfg, &captured)
	if err != nil {
		return nil, fmt.Errorf("failed to load the kubeconfig user's credentials: %w", err)
	}
	var mu sync.Mutex
	return &agentCredential{From: "your kubeconfig user's token", Token: func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/version", nil)
		if err != nil {
			return "", err
		}
		if _, err := rt.RoundTrip(req); err != nil && !errors.Is(err, errCaptured) {
			return "", fmt.Errorf("failed to get the kubeconfig user's token: %w", err)
		}
		scheme, token, ok := strings.Cut(captured.authorization, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return "", errors.New("your kubeconfig user has no bearer token to send (a client certificate cannot be forwarded): use a kubeconfig user with an OIDC token, or pass --token-file")
		}
		return strings.TrimSpace(token), nil
	}}, nil
}

var errCaptured = errors.New("request captured, not sent")

// capturingTransport records a request's Authorization header and sends
// nothing.
type capturingTransport struct{ authorization string }

func (c *capturingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.authorization = r.Header.Get("Authorization")
	return nil, errCaptured
}
