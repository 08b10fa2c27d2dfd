package server

import (
	"net/http"
	"slices"
	"strings"
)

// cors mirrors adk-go's api launcher (which adkrest itself lacks) so the ADK
// web UI served from another origin can call the sidecar: allowed origins get
// Access-Control-Allow-* headers, and preflights are answered here, before
// auth, because browsers send them without credentials.
func cors(next http.Handler, origins []string) http.Handler {
	var allowed []string
	for _, o := range origins {
		if o = strings.TrimRight(strings.TrimSpace(o), "/"); o != "" {
			allowed = append(allowed, o)
		}
	}
	if len(allowed) == 0 {
		return next
	}
	anyOrigin := slices.Contains(allowed, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && (anyOrigin || slices.Contains(allowed, origin)) {
			h := w.Header()
			if anyOrigin {
				h.Set("Access-Control-Allow-Origin", "*")
			} else {
				h.Set("Access-Control-Allow-Origin", origin)
				h.Add("Vary", "Origin")
			}
			h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization, X-API-Key, A2A-Version, A2A-Extensions")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
