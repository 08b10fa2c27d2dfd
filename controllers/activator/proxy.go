package activator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

type targetKey struct{}

// newProxy forwards a request to the pod its context names (forward),
// flushing every write at once: /run_sse and A2A streams reach the client
// event by event.
func newProxy(transport http.RoundTripper, log *slog.Logger) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(*url.URL)
			pr.SetURL(t)
			pr.Out.Host = pr.In.Host
			if req := requestOf(pr.In); req != nil {
				pr.Out.URL.RawQuery = req.rawQuery
			}
			pr.SetXForwarded()
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away
			}
			t := r.Context().Value(targetKey{}).(*url.URL)
			log.Warn("failed to forward to pod", "pod", t.Host, "path", r.URL.Path, "error", err.Error())
			server.WriteError(w, r, http.StatusBadGateway, codeBadGateway, fmt.Sprintf("failed to reach the agent's pod %s", t.Host))
		},
	}
}

// forward sends r to the agent's pod.
func (a *Activator) forward(w http.ResponseWriter, r *http.Request, req *request, pod *corev1.Pod) {
	t := &url.URL{Scheme: "http", Host: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(render.Port(req.agent))))}
	a.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}
