// Package webui serves the ADK web UI that adk-go ships, on one loopback
// origin, together with a reverse proxy to an adk2goose sidecar under /api/
// that adds the sidecar's bearer token. The browser talks to one origin only,
// so it needs no CORS and never holds the token.
package webui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"

	"github.com/gorilla/mux"
	"google.golang.org/adk/cmd/launcher"
	adkwebui "google.golang.org/adk/cmd/launcher/web/webui"

	"github.com/adk2goose/goose-operator/internal/relay"
)

// APIPrefix is the path the UI's backendUrl points at; requests under it go
// to the sidecar with the prefix removed.
const APIPrefix = "/api"

// UIPath is where adk-go's UI handler serves the bundle.
const UIPath = "/ui/"

// Config configures a Handler.
type Config struct {
	// Origin is the scheme://host:port the browser loads the UI from, e.g.
	// http://127.0.0.1:8000. The UI's backendUrl is Origin+APIPrefix.
	Origin string
	// Backend is the sidecar's base URL (the local end of a port-forward).
	Backend *url.URL
	// Token is sent to the sidecar as `Authorization: Bearer`.
	Token string
	// TokenFunc, when set instead of Token, gives the token for each
	// request, so that one with a lifetime can be renewed behind it.
	TokenFunc func(context.Context) (string, error)
	// Logger gets proxy errors; nil discards them.
	Logger *slog.Logger
}

// NewHandler returns the UI plus the /api/ proxy.
func NewHandler(cfg Config) (http.Handler, error) {
	origin, err := url.Parse(cfg.Origin)
	if err != nil || origin.Scheme != "http" || origin.Host == "" || origin.Path != "" {
		return nil, fmt.Errorf("webui: origin must be http://host:port, got %q", cfg.Origin)
	}
	if cfg.Backend == nil || cfg.Backend.Host == "" {
		return nil, errors.New("webui: backend URL is required")
	}
	tokens := cfg.TokenFunc
	switch {
	case tokens == nil && cfg.Token == "":
		return nil, errors.New("webui: token is required")
	case tokens == nil:
		tokens = func(context.Context) (string, error) { return cfg.Token, nil }
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	// adk-go's webui sublauncher is the only way to reach its embedded bundle
	// (the embed.FS is unexported); it also serves runtime-config.json with the
	// backendUrl we pass, the / redirect and the SPA fallback.
	ui := adkwebui.NewLauncher()
	if _, err := ui.Parse([]string{"-api_server_address", cfg.Origin + APIPrefix}); err != nil {
		return nil, err
	}
	router := mux.NewRouter().StrictSlash(true) // as adk-go's web launcher builds it
	if err := ui.SetupSubrouters(router, &launcher.Config{}); err != nil {
		return nil, err
	}

	m := http.NewServeMux()
	m.Handle(APIPrefix+"/", withToken(newProxy(cfg.Backend, log), tokens, log))
	m.Handle("/", router)
	return guard(m, origin.Host), nil
}

type tokenKey struct{}

// withToken gets the token for a request before the proxy sends it, and
// answers 502 when there is none (a renewal that failed).
func withToken(next http.Handler, tokens func(context.Context) (string, error), log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := tokens(r.Context())
		if err != nil {
			log.Warn("no token for the agent", "path", r.URL.Path, "err", err)
			http.Error(w, "goosectl ui: no token for the agent: "+err.Error(), http.StatusBadGateway)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, token)))
	})
}

// newProxy forwards /api/* to the sidecar with the token withToken got.
// FlushInterval -1 writes each /run_sse frame to the browser as soon as the
// sidecar sends it.
func newProxy(backend *url.URL, log *slog.Logger) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Path = strings.TrimPrefix(out.URL.Path, APIPrefix)
			out.URL.RawPath = strings.TrimPrefix(out.URL.RawPath, APIPrefix)
			pr.SetURL(backend)
			// Only the token we hold authenticates: drop any credential or
			// browser-only header the page sent.
			for _, h := range []string{"Authorization", "X-Api-Key", "Cookie", "Origin", "Referer"} {
				out.Header.Del(h)
			}
			if q := out.URL.Query(); q.Has("api_key") {
				q.Del("api_key")
				out.URL.RawQuery = q.Encode()
			}
			token, _ := pr.In.Context().Value(tokenKey{}).(string)
			out.Header.Set("Authorization", "Bearer "+token)
			relay.LimitBody(out)
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("proxy to the agent failed", "path", r.URL.Path, "err", err)
			http.Error(w, "goosectl ui: the agent did not answer through the port-forward: "+err.Error(), http.StatusBadGateway)
		},
	}
}

// guard admits only requests addressed to our own origin. The proxy adds a
// credential to whatever reaches it, so a page on another site must not be
// able to drive it: through DNS rebinding (a foreign Host header) or a
// cross-site request (Origin / Sec-Fetch-Site) that could start agent runs.
// The UI files hold nothing secret, so links from elsewhere may open them.
func guard(next http.Handler, host string) http.Handler {
	_, port, _ := strings.Cut(host, ":")
	alias := "localhost:" + port
	self := "http://" + host
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != host {
			// The UI's backendUrl names one host; loading the page under
			// another would make every API call cross-origin.
			if r.Host == alias && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
				http.Redirect(w, r, self+r.URL.RequestURI(), http.StatusTemporaryRedirect)
				return
			}
			http.Error(w, fmt.Sprintf("goosectl ui: unexpected Host %q: open %s", r.Host, self), http.StatusMisdirectedRequest)
			return
		}
		if p := path.Clean(r.URL.Path); p != APIPrefix && !strings.HasPrefix(p, APIPrefix+"/") {
			next.ServeHTTP(w, r)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != self {
			http.Error(w, "goosectl ui: cross-origin request refused", http.StatusForbidden)
			return
		}
		if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
			http.Error(w, "goosectl ui: cross-site request refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
