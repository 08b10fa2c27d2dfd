package identity

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
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
	// reviewTimeout bounds one review call; reviewCacheSize the answers
	// kept per kind, least recently used first out.
	reviewTimeout   = 10 * time.Second
	reviewCacheSize = 10000
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
// audience and authorizes their subject with a SubjectAccessReview, each
// answer cached. It sends them with REST clients that know these two API
// groups only: k8s.io/apiserver's delegating factories, or client-go's
// typed clients (whose scheme holds every built-in API group), would make
// the sidecar's binary much bigger.
type Kubernetes struct {
	cfg     KubernetesConfig
	tokens  *rest.RESTClient
	access  *rest.RESTClient
	reviews *reviewCache[tokenReview]
	allowed *reviewCache[bool]
}

// tokenReview is the answer of a TokenReview: user is set when the token
// is accepted for the agent's audience.
type tokenReview struct {
	user *authnv1.UserInfo
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
	scheme := runtime.NewScheme()
	if err := errors.Join(authnv1.AddToScheme(scheme), authzv1.AddToScheme(scheme)); err != nil {
		return nil, fmt.Errorf("failed to register the review types: %w", err)
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	client := func(gv schema.GroupVersion) (*rest.RESTClient, error) {
		rc := rest.CopyConfig(cfg.REST)
		rc.GroupVersion, rc.APIPath, rc.NegotiatedSerializer = &gv, "/apis", codecs
		if rc.UserAgent == "" {
			rc.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		c, err := rest.RESTClientFor(rc)
		if err != nil {
			return nil, fmt.Errorf("failed to create %s client: %w", gv, err)
		}
		return c, nil
	}
	tokens, err := client(authnv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	access, err := client(authzv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	reviews, err := newReviewCache[tokenReview](reviewCacheSize)
	if err != nil {
		return nil, err
	}
	allowed, err := newReviewCache[bool](reviewCacheSize)
	if err != nil {
		return nil, err
	}
	return &Kubernetes{
		cfg: cfg, tokens: tokens, access: access,
		reviews: reviews, allowed: allowed,
	}, nil
}

// Verify implements Verifier.
func (k *Kubernetes) Verify(r *http.Request) (Caller, error) {
	token := BearerToken(r)
	if token == "" {
		return Caller{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	// Keyed by the token's hash: the cache never holds a token.
	key := sha256.Sum256([]byte(token))
	tr, err := k.reviews.get(string(key[:]), func() (tokenReview, time.Duration, error) {
		tr, err := k.reviewToken(r.Context(), token)
		return tr, k.cfg.TokenCacheTTL, err
	})
	switch {
	case err != nil:
		return Caller{}, fmt.Errorf("%w: TokenReview failed", ErrUnavailable)
	case tr.user == nil:
		return Caller{}, fmt.Errorf("%w: token not accepted for audience %q", ErrUnauthenticated, k.cfg.Audience)
	}
	// Username, UID, groups and extra, as JSON (map keys sorted), are what
	// the SubjectAccessReview asks about.
	subject, err := json.Marshal(tr.user)
	if err != nil {
		return Caller{}, fmt.Errorf("failed to encode the subject of %s: %w", tr.user.Username, err)
	}
	allowed, err := k.allowed.get(string(subject), func() (bool, time.Duration, error) {
		allowed, err := k.reviewAccess(r.Context(), tr.user)
		if allowed {
			return true, k.cfg.AllowCacheTTL, err
		}
		return false, k.cfg.DenyCacheTTL, err
	})
	switch {
	case err != nil:
		return Caller{}, fmt.Errorf("%w: SubjectAccessReview failed", ErrUnavailable)
	case !allowed:
		return Caller{}, fmt.Errorf("%w: %s may not %s %s/%s %q in namespace %q", ErrForbidden,
			tr.user.Username, RBACVerb, RBACResource, RBACSubresource, k.cfg.Agent, k.cfg.Namespace)
	}
	return Caller{User: tr.user.Username, Groups: tr.user.Groups}, nil
}

// reviewToken asks the API server whether token is valid for the agent's
// audience. Its errors never hold the token.
func (k *Kubernetes) reviewToken(ctx context.Context, token string) (tokenReview, error) {
	var tr authnv1.TokenReview
	err := k.retry(ctx, func(ctx context.Context) error {
		return k.tokens.Post().Resource("tokenreviews").Body(&authnv1.TokenReview{
			Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{k.cfg.Audience}},
		}).Do(ctx).Into(&tr)
	})
	if err != nil {
		return tokenReview{}, fmt.Errorf("failed to create TokenReview: %w", err)
	}
	if !tr.Status.Authenticated || !slices.Contains(tr.Status.Audiences, k.cfg.Audience) {
		return tokenReview{}, nil
	}
	return tokenReview{user: &tr.Status.User}, nil
}

// reviewAccess asks the API server whether user may use the agent.
func (k *Kubernetes) reviewAccess(ctx context.Context, user *authnv1.UserInfo) (bool, error) {
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for name, values := range user.Extra {
		extra[name] = authzv1.ExtraValue(values)
	}
	var sar authzv1.SubjectAccessReview
	err := k.retry(ctx, func(ctx context.Context) error {
		return k.access.Post().Resource("subjectaccessreviews").Body(&authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: k.cfg.Namespace, Verb: RBACVerb, Group: RBACGroup, Resource: RBACResource,
				Subresource: RBACSubresource, Name: k.cfg.Agent,
			},
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		}}).Do(ctx).Into(&sar)
	})
	if err != nil {
		return false, fmt.Errorf("failed to create SubjectAccessReview: %w", err)
	}
	return sar.Status.Allowed && !sar.Status.Denied, nil
}

// retry calls review until it succeeds or the backoff runs out. Each call
// has its own timeout and outlives the request that started it: the
// requests waiting on the same review must not fail with it.
func (k *Kubernetes) retry(ctx context.Context, review func(context.Context) error) error {
	ctx = context.WithoutCancel(ctx)
	return retry.OnError(*k.cfg.Backoff, func(error) bool { return true }, func() error {
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		return review(ctx)
	})
}

// Challenge implements Verifier.
func (k *Kubernetes) Challenge() string {
	return fmt.Sprintf(`Bearer realm="adk2goose", scope=%q`, k.cfg.Audience)
}

// Scheme implements Verifier.
func (k *Kubernetes) Scheme() Scheme {
	return Scheme{Description: fmt.Sprintf("a Kubernetes ServiceAccount token with audience %q whose subject may %s %s/%s %q",
		k.cfg.Audience, RBACVerb, RBACResource, RBACSubresource, k.cfg.Agent)}
}
