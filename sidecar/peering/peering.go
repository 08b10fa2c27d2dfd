// Package peering makes the adk2goose sidecars of one GooseAgent act as one
// server when the agent runs more than one replica.
//
// Each pod keeps its sessions on its own volume (SQLite wants one writer) and
// goose keeps its history beside them, so a session lives on the pod that
// created it. The agent's Service spreads requests over all pods; a request
// that names a session (or an A2A context or task) the receiving pod does not
// have is forwarded to the pod that does, found by asking every peer's
// OwnerPath. Requests that name none are served where they land, so new
// sessions spread over the pods. A session no pod has is served by the one
// pod its id hashes to (place), so that two pods given the same new id at
// once (a client retrying through the Service, say) do not both create it.
//
// Session ids cannot name their owning pod (clients choose them: POST
// .../sessions/{id}, A2A contextIds), so ownership is asked for instead,
// one parallel round of peer queries per forwarded request.
package peering

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/adk2goose/goose-operator/internal/relay"
	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// OwnerPath answers 200 when this pod owns the session (query user and
// session) or the A2A task (query task) and 404 when not.
const OwnerPath = "/peer/v1/owner"

// HopHeader marks a request one sidecar sent to another. Such a request is
// always served locally: it cannot loop.
const HopHeader = "X-Adk2goose-Peer-Hop"

// Key names what a request works on: an ADK session (an A2A context is the
// session of user adkcompat.A2AUserID) or an A2A task.
type Key struct {
	User, Session string
	Task          string
}

func (k Key) String() string {
	if k.Task != "" {
		return "task " + k.Task
	}
	return "session " + k.Session
}

func (k Key) query() url.Values {
	if k.Task != "" {
		return url.Values{"task": {k.Task}}
	}
	return url.Values{"user": {k.User}, "session": {k.Session}}
}

// Owner tells whether this pod has a session or task.
type Owner interface {
	OwnsSession(ctx context.Context, user, session string) (bool, error)
	OwnsTask(ctx context.Context, task string) (bool, error)
}

func owns(ctx context.Context, o Owner, k Key) (bool, error) {
	if k.Task != "" {
		return o.OwnsTask(ctx, k.Task)
	}
	return o.OwnsSession(ctx, k.User, k.Session)
}

// Peers lists the base URLs (http://host:port) of the agent's other sidecars.
type Peers func(ctx context.Context) ([]string, error)

// URL is the base URL peers reach the sidecar at ip:port by, as DNSPeers
// lists it.
func URL(ip string, port int) string {
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(port))
}

// DNSPeers resolves host (the agent's headless Service, which lists every
// pod, ready or not) to the other sidecars on port, skipping selfIP.
func DNSPeers(host string, port int, selfIP string) Peers {
	var r net.Resolver
	return func(ctx context.Context) ([]string, error) {
		ips, err := r.LookupHost(ctx, host)
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return nil, nil // no pod has an address yet
		}
		if err != nil {
			return nil, fmt.Errorf("failed to resolve peers %s: %w", host, err)
		}
		out := make([]string, 0, len(ips))
		for _, ip := range ips {
			if ip != selfIP {
				out = append(out, URL(ip, port))
			}
		}
		return out, nil
	}
}

// Config configures a Router.
type Config struct {
	// AppName is the ADK app this sidecar serves; other apps' paths are
	// served locally (and 404 there).
	AppName string
	// A2APaths are the A2A JSON-RPC endpoints whose requests name contexts
	// and tasks.
	A2APaths []string
	Owner    Owner
	Peers    Peers
	// Self is this sidecar's base URL as its peers list it (URL). With it,
	// a session no pod has is served by the pod place picks; empty, where
	// the request lands.
	Self string
	// Token authenticates everything sent to peers (owner queries, forwarded
	// requests, session lists); the agent's sidecars share it.
	Token string
	// MaxBodyBytes bounds the A2A bodies read to find a key. Larger
	// requests are served locally, which rejects them.
	MaxBodyBytes int64
	// RunKey names the session of an ADK run (/run, /run_sse), whose body
	// the sidecar has decoded before the router sees it; false for any
	// other request. Nil: runs are served locally.
	RunKey func(*http.Request) (Key, bool)
	// LookupTimeout bounds one round of owner queries. Default 3s.
	LookupTimeout time.Duration
	// Forwarded, if set, is told the outcome of every peer lookup:
	// "forwarded", "placed" (no pod had it: sent to the pod place picks),
	// "local" (no pod had it and it is placed here), "unavailable" (a peer
	// did not answer) or "error" (this pod could not look).
	Forwarded func(outcome string)
	// Tracer makes the span of each forwarded request; its context reaches
	// the owner pod as a W3C traceparent. Default: no spans.
	Tracer trace.Tracer
	Logger *slog.Logger
}

// Router forwards requests for other pods' sessions; see the package doc.
type Router struct {
	cfg    Config
	log    *slog.Logger
	proxy  *httputil.ReverseProxy
	client *http.Client // owner queries and peers' session lists
}

type peerKey struct{}

// New returns a Router.
func New(cfg Config) *Router {
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Forwarded == nil {
		cfg.Forwarded = func(string) {}
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	r := &Router{cfg: cfg, log: cfg.Logger, client: &http.Client{Timeout: cfg.LookupTimeout}}
	r.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(peerKey{}).(*url.URL)
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			r.hop(pr.Out)
			// The owner pod runs the request as the caller this pod verified.
			identity.ToHop(pr.In.Context(), pr.Out.Header)
			// This pod already answered CORS; the peer would add its headers a
			// second time, which browsers reject.
			pr.Out.Header.Del("Origin")
			// The owner's spans continue this pod's trace.
			propagation.TraceContext{}.Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
			relay.LimitBody(pr.Out)
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		// Stream /run_sse and A2A SSE events as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if cause := context.Cause(req.Context()); cause != nil {
				if errors.Is(cause, context.Canceled) {
					return // the client went away
				}
				// This pod stopped the forward (its shutdown): the owner may
				// have the request and still run it, so this is no
				// "try again" (no 503, no Retry-After), which would have the
				// client send a message the owner is answering a second time.
				r.log.Warn("stopped forwarding a request to the pod that serves its session", "peer", req.Context().Value(peerKey{}), "cause", cause)
				http.Error(w, fmt.Sprintf("adk2goose: forwarding this request to the pod that serves its session was stopped (%v); that pod may still serve it, so check the session before sending it again", cause), http.StatusBadGateway)
				return
			}
			if errors.Is(err, context.Canceled) {
				return // the client went away
			}
			r.log.Warn("failed to forward a request to the pod that serves its session", "peer", req.Context().Value(peerKey{}), "error", err)
			http.Error(w, "adk2goose: the pod that serves this session did not answer; retry", http.StatusBadGateway)
		},
	}
	return r
}

// Wrap returns next behind the router.
func (r *Router) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// OPTIONS is unauthenticated (CORS preflight): it must not make this
		// pod query its peers.
		if req.Header.Get(HopHeader) != "" || req.Method == http.MethodOptions {
			next.ServeHTTP(w, req)
			return
		}
		if user, ok := r.listPath(req); ok {
			r.serveList(w, req, user, next)
			return
		}
		k, req, ok := r.keyOf(req)
		if !ok {
			next.ServeHTTP(w, req)
			return
		}
		ctx := req.Context()
		local, err := owns(ctx, r.cfg.Owner, k)
		if err != nil {
			r.cfg.Forwarded("error")
			r.log.Error("failed to look up a session locally; serving it here", "key", k.String(), "error", err)
		}
		if local || err != nil {
			next.ServeHTTP(w, req)
			return
		}
		peer, peers, unanswered := r.find(ctx, k)
		switch {
		case peer != nil:
			r.cfg.Forwarded("forwarded")
		case unanswered > 0:
			// Serving it here could fork a conversation its owner still has.
			r.cfg.Forwarded("unavailable")
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("adk2goose: %s is not on this pod and %d peer pod(s) did not answer; retry", k, unanswered), http.StatusServiceUnavailable)
			return
		default:
			if peer = place(k, r.cfg.Self, peers); peer == nil {
				r.cfg.Forwarded("local")
				next.ServeHTTP(w, req)
				return
			}
			r.cfg.Forwarded("placed")
		}
		r.forward(w, req, peer, k)
	})
}

// forward sends req to peer, which serves it locally (HopHeader).
func (r *Router) forward(w http.ResponseWriter, req *http.Request, peer *url.URL, k Key) {
	ctx, span := r.cfg.Tracer.Start(req.Context(), "adk2goose.peer_forward", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("adk2goose.peer", peer.Host), attribute.String("adk2goose.key", k.String())))
	defer span.End()
	r.proxy.ServeHTTP(w, req.WithContext(context.WithValue(ctx, peerKey{}, peer)))
}

// place picks the pod that serves session k, which no pod has: the one
// whose URL, hashed with k, ranks highest (rendezvous hashing). Every pod
// that sees the same pods picks the same one, and adding or removing a pod
// moves only the ids it wins or held. nil: this pod (self), or self is
// unknown, or k is a task (tasks are named by the pod that made them, so
// one no pod has does not exist).
func place(k Key, self string, peers []*url.URL) *url.URL {
	if self == "" || k.Task != "" {
		return nil
	}
	var best *url.URL
	top := placeRank(k, self)
	for _, p := range peers {
		if r := placeRank(k, p.String()); r > top {
			best, top = p, r
		}
	}
	return best
}

// placeRank is pod's rank for session k: the first 8 bytes of a SHA-256, a
// hash every pod computes alike (maphash is seeded per process).
func placeRank(k Key, pod string) uint64 {
	h := sha256.New()
	for _, s := range []string{pod, k.User, k.Session} {
		_, _ = io.WriteString(h, s)
		_, _ = h.Write([]byte{0})
	}
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// find asks every peer whether it owns k. It returns the owner, or the
// peers (all of them answered no when unanswered is 0).
func (r *Router) find(ctx context.Context, k Key) (owner *url.URL, peers []*url.URL, unanswered int) {
	listed, err := r.cfg.Peers(ctx)
	if err != nil {
		r.log.Warn("failed to list peer pods", "error", err)
		return nil, nil, 1
	}
	for _, p := range listed {
		u, err := url.Parse(p)
		if err != nil {
			r.log.Warn("failed to parse a peer pod's URL", "peer", p, "error", err)
			unanswered++
			continue
		}
		peers = append(peers, u)
	}
	if len(peers) == 0 {
		return nil, nil, unanswered
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.LookupTimeout)
	defer cancel()
	type answer struct {
		peer  *url.URL
		owns  bool
		error error
	}
	answers := make(chan answer, len(peers))
	var wg sync.WaitGroup
	for _, u := range peers {
		wg.Go(func() {
			owns, err := r.ask(ctx, u, k)
			answers <- answer{peer: u, owns: owns, error: err}
		})
	}
	defer wg.Wait()
	for range peers {
		a := <-answers
		switch {
		case a.owns:
			cancel() // the others' answers no longer matter
			return a.peer, peers, 0
		case a.error != nil:
			r.log.Warn("a peer pod did not answer an owner query", "peer", a.peer, "error", a.error)
			unanswered++
		}
	}
	return nil, peers, unanswered
}

func (r *Router) ask(ctx context.Context, peer *url.URL, k Key) (bool, error) {
	u := *peer
	u.Path, u.RawQuery = OwnerPath, k.query().Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, fmt.Errorf("failed to build owner query: %w", err)
	}
	r.hop(req)
	resp, err := r.client.Do(req)
	if err != nil {
		return false, fmt.Errorf("failed to query owner: %w", err)
	}
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("failed to query owner: %s", resp.Status)
}

// hop marks out as sent by a peer and authenticates it with the agent's
// token. This pod has already checked the client's credentials, in whichever
// form they came (a bearer header, X-API-Key, or the api_key query parameter
// that was stripped before forwarding), so the peer is shown one form that
// always survives the hop instead of the client's.
func (r *Router) hop(out *http.Request) {
	out.Header.Set(HopHeader, "1")
	if r.cfg.Token == "" {
		return
	}
	out.Header.Del("X-API-Key")
	out.Header.Set("Authorization", "Bearer "+r.cfg.Token)
}

// OwnerHandler serves OwnerPath from o.
func OwnerHandler(o Owner, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		k := Key{User: q.Get("user"), Session: q.Get("session"), Task: q.Get("task")}
		if k.Task == "" && (k.User == "" || k.Session == "") {
			http.Error(w, "adk2goose: an owner query needs task, or user and session", http.StatusBadRequest)
			return
		}
		ok, err := owns(req.Context(), o, k)
		switch {
		case err != nil:
			log.Error("failed to answer an owner query", "key", k.String(), "error", err)
			http.Error(w, "adk2goose: failed to look up "+k.String(), http.StatusInternalServerError)
		case ok:
			w.WriteHeader(http.StatusOK)
		default:
			http.Error(w, "adk2goose: "+k.String()+" is not on this pod", http.StatusNotFound)
		}
	})
}
