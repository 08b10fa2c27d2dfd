package identity

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// What a RoleBinding grants to let a subject use an agent: verb "use" on
// gooseagents/invoke with the agent's name (RBAC accepts any subresource
// name, served or not).
const (
	RBACGroup       = "agents.adk2goose.dev"
	RBACResource    = "gooseagents"
	RBACSubresource = "invoke"
	RBACVerb        = "use"
)

// Cache TTLs of the Kubernetes mode, controller-runtime's metrics filter's:
// a revoked token (pod or ServiceAccount deleted) stops working within
// TokenCacheTTL, a removed RoleBinding within AllowCacheTTL.
const (
	DefaultTokenCacheTTL = time.Minute
	DefaultAllowCacheTTL = 5 * time.Minute
	DefaultDenyCacheTTL  = 30 * time.Second
)

// KubernetesConfig configures NewKubernetes.
type KubernetesConfig struct {
	// REST reaches the API server with the sidecar's own ServiceAccount,
	// which may create tokenreviews and subjectaccessreviews. Required.
	REST *rest.Config `json:"-"`
	// Audience a token must be issued for (the agent's). Required.
	Audience string `json:"audience"`
	// Namespace and Agent name the GooseAgent a caller must be allowed to
	// use. Required.
	Namespace string `json:"namespace"`
	Agent     string `json:"agent"`
	// TokenCacheTTL, AllowCacheTTL and DenyCacheTTL default to the Default
	// constants.
	TokenCacheTTL, AllowCacheTTL, DenyCacheTTL time.Duration `json:"-"`
	// Backoff retries a failed review; default controller-runtime's (about
	// 5 s in all before the request gets 503).
	Backoff *wait.Backoff `json:"-"`
}

// Kubernetes verifies bearer tokens with a TokenReview bound to the agent's
// audience and authorizes their subject with a SubjectAccessReview, through
// k8s.io/apiserver's delegating authenticator and authorizer and their
// caches.
type Kubernetes struct {
	authn authenticator.Request
	authz authorizer.Authorizer
	auds  authenticator.Audiences
	attrs authorizer.AttributesRecord
}

// NewKubernetes returns a Kubernetes verifier.
func NewKubernetes(cfg KubernetesConfig) (*Kubernetes, error) {
	switch {
	case cfg.REST == nil:
		return nil, errors.New("failed to configure kubernetes auth: no API server configuration")
	case cfg.Audience == "":
		return nil, errors.New("failed to configure kubernetes auth: no audience")
	case cfg.Namespace == "" || cfg.Agent == "":
		return nil, errors.New("failed to configure kubernetes auth: no agent namespace and name")
	}
	if cfg.TokenCacheTTL <= 0 {
		cfg.TokenCacheTTL = DefaultTokenCacheTTL
	}
	if cfg.AllowCacheTTL <= 0 {
		cfg.AllowCacheTTL = DefaultAllowCacheTTL
	}
	if cfg.DenyCacheTTL <= 0 {
		cfg.DenyCacheTTL = DefaultDenyCacheTTL
	}
	if cfg.Backoff == nil {
		cfg.Backoff = &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	}
	rc := rest.CopyConfig(cfg.REST)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return reviewTransport{rt} })
	authnClient, err := authenticationv1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("failed to create TokenReview client: %w", err)
	}
	authzClient, err := authorizationv1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("failed to create SubjectAccessReview client: %w", err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 cfg.TokenCacheTTL,
		TokenAccessReviewClient:  authnClient,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      cfg.Backoff,
		APIAudiences:             authenticator.Audiences{cfg.Audience},
	}.New()
	if err != nil {
		return nil, fmt.Errorf("failed to create token authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authzClient,
		AllowCacheTTL:             cfg.AllowCacheTTL,
		DenyCacheTTL:              cfg.DenyCacheTTL,
		WebhookRetryBackoff:       cfg.Backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("failed to create authorizer: %w", err)
	}
	return &Kubernetes{
		authn: authn,
		authz: authz,
		auds:  authenticator.Audiences{cfg.Audience},
		attrs: authorizer.AttributesRecord{
			Verb: RBACVerb, Namespace: cfg.Namespace, APIGroup: RBACGroup, Resource: RBACResource,
			Subresource: RBACSubresource, Name: cfg.Agent, ResourceRequest: true,
		},
	}, nil
}

// Verify implements Verifier.
func (k *Kubernetes) Verify(r *http.Request) (Caller, error) {
	if BearerToken(r) == "" {
		return Caller{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	// The audience on the context binds the TokenReview (and its cache
	// entry) to this agent. The authenticator removes the Authorization
	// header it accepts, so it is done on a copy.
	rr := r.Clone(authenticator.WithAudiences(r.Context(), k.auds))
	resp, ok, err := k.authn.AuthenticateRequest(rr)
	switch {
	case errors.Is(err, errReviewUnavailable):
		return Caller{}, fmt.Errorf("%w: TokenReview failed", ErrUnavailable)
	case !ok:
		// err is the API server's reason for refusing the token; it never
		// holds the token itself.
		return Caller{}, fmt.Errorf("%w: token not accepted for audience %q", ErrUnauthenticated, k.auds[0])
	}
	attrs := k.attrs
	attrs.User = resp.User
	decision, _, err := k.authz.Authorize(r.Context(), attrs)
	switch {
	case err != nil:
		return Caller{}, fmt.Errorf("%w: SubjectAccessReview failed", ErrUnavailable)
	case decision != authorizer.DecisionAllow:
		return Caller{}, fmt.Errorf("%w: %s may not %s %s/%s %q in namespace %q", ErrForbidden,
			resp.User.GetName(), attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Name, attrs.Namespace)
	}
	return Caller{User: resp.User.GetName(), Groups: resp.User.GetGroups()}, nil
}

// Challenge implements Verifier.
func (k *Kubernetes) Challenge() string {
	return fmt.Sprintf(`Bearer realm="adk2goose", scope=%q`, k.auds[0])
}

// Scheme implements Verifier.
func (k *Kubernetes) Scheme() Scheme {
	return Scheme{Description: fmt.Sprintf("a Kubernetes ServiceAccount token with audience %q whose subject may %s %s/%s %q",
		k.auds[0], RBACVerb, RBACResource, RBACSubresource, k.attrs.Name)}
}

// errReviewUnavailable marks a review that did not get an answer: the API
// server refuses a bad token with an error too, so the review's transport
// tells the two apart.
var errReviewUnavailable = errors.New("review API unavailable")

// reviewTransport turns failures to reach the review APIs, and their
// answers other than success, into errors wrapping errReviewUnavailable.
type reviewTransport struct{ next http.RoundTripper }

func (t reviewTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errReviewUnavailable, err)
	}
	if resp.StatusCode >= 300 {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w: %s", errReviewUnavailable, resp.Status)
	}
	return resp, nil
}
