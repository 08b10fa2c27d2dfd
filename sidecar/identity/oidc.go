package identity

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	lru "github.com/hashicorp/golang-lru/v2"
)

// Defaults of the OIDC mode. A token stays accepted until it expires: an
// issuer cannot revoke a JWT. A verified token is kept for at most
// DefaultOIDCCacheTTL (and never past its expiry), so a change of the
// allowed users or groups, which restarts the pods, applies at once.
const (
	DefaultUserClaim    = "sub"
	DefaultGroupsClaim  = "groups"
	DefaultOIDCCacheTTL = time.Minute
	// oidcCacheSize bounds the verified tokens kept, least recently used
	// first out.
	oidcCacheSize = 10000
)

// OIDCConfig configures NewOIDC.
type OIDCConfig struct {
	// IssuerURL is the issuer; its discovery document is
	// IssuerURL/.well-known/openid-configuration. Required.
	IssuerURL string `json:"issuerURL"`
	// Audience is the token's required aud (the client ID). Required.
	Audience string `json:"audience"`
	// UserClaim names the claim that is the ADK user. Default "sub".
	UserClaim string `json:"userClaim,omitempty"`
	// GroupsClaim names the claim listing the caller's groups. Default
	// "groups".
	GroupsClaim string `json:"groupsClaim,omitempty"`
	// AllowedUsers and AllowedGroups, when either is set, admit only those
	// users and members of those groups; both empty admit every caller the
	// issuer vouches for.
	AllowedUsers  []string `json:"allowedUsers,omitempty"`
	AllowedGroups []string `json:"allowedGroups,omitempty"`
	// CacheTTL defaults to DefaultOIDCCacheTTL.
	CacheTTL time.Duration `json:"-"`
	// HTTPClient reaches the issuer; default http.DefaultClient.
	HTTPClient *http.Client `json:"-"`
}

// OIDC verifies JWTs of an OIDC issuer with go-oidc: discovery on first
// use, JWKS with key rotation, issuer, audience, expiry, not-before and the
// signing algorithms the issuer advertises.
type OIDC struct {
	cfg   OIDCConfig
	cache *lru.Cache[[sha256.Size]byte, oidcEntry]
	// ctx carries the issuer's HTTP client for go-oidc, which also uses it
	// for the key fetches of the verifier it makes.
	ctx context.Context
	// lastFailure is when the issuer last failed to answer (unix ns): go-oidc
	// reports a failed key fetch as a bad signature, so Verify tells the two
	// apart with it.
	lastFailure atomic.Int64

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
}

// oidcEntry is a verified token, good until expires: the token's expiry
// or the cache TTL, whichever comes first.
type oidcEntry struct {
	caller  Caller
	expires time.Time
}

// NewOIDC returns an OIDC verifier. It does not reach the issuer: discovery
// happens on the first request, so a sidecar starts while its issuer is
// down (and answers 503 until it is up).
func NewOIDC(ctx context.Context, cfg OIDCConfig) (*OIDC, error) {
	switch {
	case cfg.IssuerURL == "":
		return nil, errors.New("failed to configure oidc auth: no issuer URL")
	case cfg.Audience == "":
		return nil, errors.New("failed to configure oidc auth: no audience")
	}
	if cfg.UserClaim == "" {
		cfg.UserClaim = DefaultUserClaim
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = DefaultGroupsClaim
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultOIDCCacheTTL
	}
	base := http.DefaultTransport
	if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
		base = cfg.HTTPClient.Transport
	}
	cache, err := lru.New[[sha256.Size]byte, oidcEntry](oidcCacheSize)
	if err != nil {
		return nil, fmt.Errorf("failed to create token cache: %w", err)
	}
	o := &OIDC{cfg: cfg, cache: cache}
	client := &http.Client{Transport: failureTransport{base, &o.lastFailure}, Timeout: 10 * time.Second}
	o.ctx = oidc.ClientContext(context.WithoutCancel(ctx), client)
	return o, nil
}

// Verify implements Verifier.
func (o *OIDC) Verify(r *http.Request) (Caller, error) {
	raw := BearerToken(r)
	if raw == "" {
		return Caller{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	key := sha256.Sum256([]byte(raw))
	now := time.Now()
	e, ok := o.cache.Get(key)
	if !ok || !now.Before(e.expires) {
		var err error
		if e, err = o.verify(r.Context(), raw, now); err != nil {
			return Caller{}, err
		}
		o.cache.Add(key, e)
	}
	if !o.allowed(e.caller) {
		return Caller{}, fmt.Errorf("%w: %s is neither an allowed user nor in an allowed group", ErrForbidden, e.caller.User)
	}
	return e.caller, nil
}

func (o *OIDC) verify(ctx context.Context, raw string, start time.Time) (oidcEntry, error) {
	v, err := o.tokenVerifier()
	if err != nil {
		return oidcEntry{}, err
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		if o.lastFailure.Load() >= start.UnixNano() {
			return oidcEntry{}, fmt.Errorf("%w: the issuer's keys could not be fetched", ErrUnavailable)
		}
		// go-oidc's errors name the failed check, never the token.
		return oidcEntry{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return oidcEntry{}, fmt.Errorf("%w: failed to decode claims: %w", ErrUnauthenticated, err)
	}
	user, _ := claims[o.cfg.UserClaim].(string)
	if user == "" {
		return oidcEntry{}, fmt.Errorf("%w: the token has no %q claim", ErrUnauthenticated, o.cfg.UserClaim)
	}
	c := Caller{User: user}
	if gs, ok := claims[o.cfg.GroupsClaim].([]any); ok {
		for _, g := range gs {
			if s, ok := g.(string); ok {
				c.Groups = append(c.Groups, s)
			}
		}
	}
	expires := start.Add(o.cfg.CacheTTL)
	if tok.Expiry.Before(expires) {
		expires = tok.Expiry
	}
	return oidcEntry{caller: c, expires: expires}, nil
}

// tokenVerifier discovers the issuer once; a failed discovery is retried
// by the next request.
func (o *OIDC) tokenVerifier() (*oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.verifier != nil {
		return o.verifier, nil
	}
	p, err := oidc.NewProvider(o.ctx, o.cfg.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("%w: failed to discover issuer %s: %w", ErrUnavailable, o.cfg.IssuerURL, err)
	}
	o.verifier = p.Verifier(&oidc.Config{ClientID: o.cfg.Audience})
	return o.verifier, nil
}

func (o *OIDC) allowed(c Caller) bool {
	if len(o.cfg.AllowedUsers) == 0 && len(o.cfg.AllowedGroups) == 0 {
		return true
	}
	return slices.Contains(o.cfg.AllowedUsers, c.User) || c.In(o.cfg.AllowedGroups)
}

// Challenge implements Verifier.
func (o *OIDC) Challenge() string {
	return fmt.Sprintf(`Bearer realm="adk2goose", scope="openid", error_description=%q`,
		"send an ID token of "+o.cfg.IssuerURL+" for audience "+o.cfg.Audience)
}

// Scheme implements Verifier.
func (o *OIDC) Scheme() Scheme {
	return Scheme{
		OpenIDConnectURL: strings.TrimSuffix(o.cfg.IssuerURL, "/") + "/.well-known/openid-configuration",
		Description:      "an ID token of " + o.cfg.IssuerURL + " for audience " + o.cfg.Audience,
	}
}

// failureTransport records when the issuer failed to answer.
type failureTransport struct {
	next http.RoundTripper
	at   *atomic.Int64
}

func (t failureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil || resp.StatusCode >= 500 {
		t.at.Store(time.Now().UnixNano())
	}
	return resp, err
}
