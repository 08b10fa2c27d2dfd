// Package identity tells who calls the sidecar: a Verifier checks the
// bearer token of a request against Kubernetes (TokenReview, then a
// SubjectAccessReview on the agent) or an OIDC issuer, and the Caller it
// returns is the ADK user of the request everywhere (REST paths and run
// bodies, A2A tasks, workspaces). Results are cached briefly; a Verifier that
// cannot reach its authority answers ErrUnavailable, never a caller.
package identity

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// Modes of spec.sidecar.auth.mode and the sidecar's -auth-mode flag.
const (
	// ModeToken: one shared token; the ADK user is whatever the client names.
	ModeToken = "token"
	// ModeKubernetes: a token the cluster accepts, for the agent's audience,
	// whose subject RBAC lets use the agent.
	ModeKubernetes = "kubernetes"
	// ModeOIDC: a JWT from an OIDC issuer.
	ModeOIDC = "oidc"
)

// Errors of Verify; Status maps them to HTTP.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
	ErrUnavailable     = errors.New("identity check unavailable")
)

// Status is the HTTP status of a Verify error: 401, 403 or 503.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	default:
		return http.StatusUnauthorized
	}
}

// Caller is a verified identity.
type Caller struct {
	// User is the ADK user id: the Kubernetes username
	// (system:serviceaccount:<ns>:<name>) or the OIDC user claim.
	User   string
	Groups []string
}

// In reports whether the caller belongs to one of groups.
func (c Caller) In(groups []string) bool {
	return slices.ContainsFunc(c.Groups, func(g string) bool { return slices.Contains(groups, g) })
}

// Verifier checks the credentials of a request.
type Verifier interface {
	// Verify returns the caller of r, or an error wrapping
	// ErrUnauthenticated, ErrForbidden or ErrUnavailable. The error never
	// holds the token.
	Verify(r *http.Request) (Caller, error)
	// Challenge is the WWW-Authenticate value of a 401.
	Challenge() string
	// Scheme names how clients authenticate, for the A2A agent card.
	Scheme() Scheme
}

// Scheme is what a client needs to know to authenticate.
type Scheme struct {
	// OpenIDConnectURL is the issuer's discovery document; empty for a
	// plain bearer token.
	OpenIDConnectURL string
	Description      string
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom is the caller ctx carries; false when the request was not
// verified as someone (token mode, or a peer's own call).
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// BearerToken is the token of `Authorization: Bearer <t>`; "" when absent.
func BearerToken(r *http.Request) string {
	scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(t)
}

// Headers carrying the caller on a hop between the agent's pods. They are
// honoured only on a request authenticated with the pods' shared peer
// token (see FromHop), so a client cannot set them.
const (
	HeaderUser  = "X-Adk2goose-Caller"
	HeaderGroup = "X-Adk2goose-Caller-Group"
)

// ToHop puts the caller of ctx, if any, on a request to a peer pod, and
// removes whatever the client sent under those names.
func ToHop(ctx context.Context, h http.Header) {
	h.Del(HeaderUser)
	h.Del(HeaderGroup)
	c, ok := CallerFrom(ctx)
	if !ok {
		return
	}
	h.Set(HeaderUser, c.User)
	for _, g := range c.Groups {
		h.Add(HeaderGroup, g)
	}
}

// FromHop is the caller a peer pod put on r (ToHop); false when it sent
// none. Call it only once r is known to come from a peer.
func FromHop(r *http.Request) (Caller, bool) {
	u := r.Header.Get(HeaderUser)
	if u == "" {
		return Caller{}, false
	}
	return Caller{User: u, Groups: r.Header.Values(HeaderGroup)}, true
}

// WhoAmIPath is the sidecar's route that answers who it takes the caller
// to be (WhoAmI), behind the same authentication as every other route, so
// that a client (goosectl ui) learns the ADK user it must name.
const WhoAmIPath = "/whoami"

// WhoAmI is the JSON body of GET /whoami.
type WhoAmI struct {
	// Verified: the caller was verified (mode kubernetes or oidc). In mode
	// token it is false, User is empty, and the ADK user is whatever the
	// client names.
	Verified bool `json:"verified"`
	// User is the caller's ADK user: the only one it may name in paths
	// and run bodies unless Admin.
	User   string   `json:"user,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Admin: the caller is in one of the admin groups and may act for any
	// user.
	Admin bool `json:"admin"`
}
