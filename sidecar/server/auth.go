package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"

	"github.com/adk2goose/goose-operator/internal/jsonhttp"
	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// Routes served without the inbound token: probes must work without
// credentials, and the agent card is public discovery data that itself
// declares how to authenticate.
var openPaths = map[string]bool{
	"/healthz":                     true,
	"/readyz":                      true,
	"/health":                      true, // adkrest's own health route
	"/.well-known/agent-card.json": true,
}

// authenticate requires credentials on every other route. Without a
// verifier they are the shared token, taken from `Authorization: Bearer
// <t>`, `X-API-Key: <t>` or the `api_key` query parameter (browsers'
// EventSource cannot set headers); an empty token disables the check. With
// a verifier (an identity mode) the caller's bearer token is verified and
// the caller put on the request context (identity.CallerFrom); the shared
// token then authenticates only the agent's own pods, whose hops carry the
// caller they verified (identity.FromHop). CORS preflights pass: browsers
// never send credentials on them.
func authenticate(next http.Handler, token string, v identity.Verifier, log *slog.Logger) http.Handler {
	if token == "" && v == nil {
		return next
	}
	// Comparing fixed-length digests keeps the comparison constant-time even
	// for a presented token of a different length.
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] || r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		got, how := presentedToken(r)
		if token != "" && got != "" {
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
				if how == "query" {
					// Keep the token out of anything downstream that logs URLs.
					q := r.URL.Query()
					q.Del("api_key")
					r.URL.RawQuery = q.Encode()
				}
				if c, ok := identity.FromHop(r); ok && v != nil {
					r = r.WithContext(identity.WithCaller(r.Context(), c))
				}
				next.ServeHTTP(w, r)
				return
			}
		}
		if v != nil {
			c, err := v.Verify(r)
			if err == nil {
				next.ServeHTTP(w, r.WithContext(identity.WithCaller(r.Context(), c)))
				return
			}
			status := identity.Status(err)
			log.Info("unauthorized request", "path", r.URL.Path, "method", r.Method, "status", status, "reason", err.Error())
			switch status {
			case http.StatusUnauthorized:
				w.Header().Set("WWW-Authenticate", v.Challenge())
			case http.StatusServiceUnavailable:
				w.Header().Set("Retry-After", "5")
			}
			writeJSONError(w, r, status, statusCode(status), err.Error())
			return
		}
		reason := "missing credentials"
		if got != "" {
			reason = "invalid credentials"
		}
		log.Info("unauthorized request", "path", r.URL.Path, "method", r.Method, "reason", reason, "via", how)
		w.Header().Set("WWW-Authenticate", `Bearer realm="adk2goose"`)
		if hasBody(r) {
			// Answer now; net/http would first drain what the client sends.
			w.Header().Set("Connection", "close")
		}
		jsonhttp.Write(w, http.StatusUnauthorized, map[string]string{
			"error":  "unauthorized",
			"detail": reason + ": send the token as 'Authorization: Bearer <token>', 'X-API-Key: <token>' or the api_key query parameter",
		})
	})
}

func presentedToken(r *http.Request) (token, how string) {
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, t, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(t), "bearer"
		}
		return "", "authorization"
	}
	if t := r.Header.Get("X-API-Key"); t != "" {
		return t, "x-api-key"
	}
	if t := r.URL.Query().Get("api_key"); t != "" {
		return t, "query"
	}
	return "", "none"
}
