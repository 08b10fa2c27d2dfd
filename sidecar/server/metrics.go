package server

import (
	"bufio"
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/peering"
)

// metrics are the sidecar's Prometheus series. Labels are route names from a
// fixed set, HTTP codes, token kinds and outcome codes: never session ids.
type metrics struct {
	reg            *prometheus.Registry
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	streamDuration *prometheus.HistogramVec
	firstEvent     *prometheus.HistogramVec
	openStreams    *prometheus.GaugeVec
	tokens         *prometheus.CounterVec
	turns          *prometheus.CounterVec
	turnDuration   prometheus.Histogram
	turnFirstEvent prometheus.Histogram
	repliesActive  prometheus.Gauge
	peerLookups    *prometheus.CounterVec
}

// countUsers exports, as a gauge without labels (user ids never become
// label values), the number of distinct ADK users count reports.
func (m *metrics) countUsers(count func() (int, error)) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "adk2goose_users", Help: "Distinct ADK users with a session on this pod (in an identity mode, verified callers).",
	}, func() float64 {
		n, err := count()
		if err != nil {
			return math.NaN()
		}
		return float64(n)
	}))
}

func newMetrics() *metrics {
	streamBuckets := []float64{.1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adk2goose_http_requests_total", Help: "HTTP requests by route, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "adk2goose_http_request_duration_seconds", Help: "Duration of non-streaming HTTP requests.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		streamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "adk2goose_stream_duration_seconds", Help: "Duration of streaming (SSE) responses.",
			Buckets: streamBuckets,
		}, []string{"route"}),
		firstEvent: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "adk2goose_stream_time_to_first_event_seconds", Help: "Time from request to the first streamed event.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"route"}),
		openStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "adk2goose_open_streams", Help: "Streaming responses currently open.",
		}, []string{"route"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adk2goose_goose_tokens_total", Help: "Tokens goose reported, by kind (input, output, total).",
		}, []string{"kind"}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adk2goose_goose_turns_total", Help: "Agent turns by outcome (ok, awaiting_confirmation or a GOOSE_* error code).",
		}, []string{"outcome"}),
		turnDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "adk2goose_goose_turn_duration_seconds", Help: "Duration of one agent turn (one goose reply).",
			Buckets: streamBuckets,
		}),
		turnFirstEvent: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "adk2goose_goose_turn_time_to_first_event_seconds", Help: "Time from turn start to the first ADK event.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		repliesActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "adk2goose_goose_replies_in_flight", Help: "goose replies currently running.",
		}),
		peerLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adk2goose_peer_lookups_total",
			Help: "Requests for a session or task not on this pod, by outcome (forwarded, placed, local, unavailable, error).",
		}, []string{"outcome"}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.streamDuration, m.firstEvent, m.openStreams,
		m.tokens, m.turns, m.turnDuration, m.turnFirstEvent, m.repliesActive, m.peerLookups,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

func (m *metrics) turnFinished(res gooseagent.TurnResult) {
	outcome := res.ErrorCode
	switch {
	case outcome != "":
	case res.AwaitingConfirmation:
		outcome = "awaiting_confirmation"
	default:
		outcome = "ok"
	}
	m.turns.WithLabelValues(outcome).Inc()
	m.turnDuration.Observe(res.Duration.Seconds())
	if res.Events > 0 {
		m.turnFirstEvent.Observe(res.FirstEvent.Seconds())
	}
	if res.Usage.InputTokens > 0 {
		m.tokens.WithLabelValues("input").Add(float64(res.Usage.InputTokens))
	}
	if res.Usage.OutputTokens > 0 {
		m.tokens.WithLabelValues("output").Add(float64(res.Usage.OutputTokens))
	}
	if total := res.Usage.Total(); total > 0 {
		m.tokens.WithLabelValues("total").Add(float64(total))
	}
}

// routeName maps a request to a fixed label value.
func routeName(r *http.Request) string {
	p := r.URL.Path
	switch p {
	case "/run_sse", "/run_sse/":
		return "run_sse"
	case "/run", "/run/":
		return "run"
	case A2APathV1:
		return "a2a_v1"
	case A2APathV03:
		return "a2a_v0_3"
	case "/.well-known/agent-card.json":
		return "agent_card"
	case peering.OwnerPath:
		return "peer_owner"
	case budget.UsagePath:
		return "peer_usage"
	case "/healthz", "/readyz", "/health", "/stats", "/metrics", "/list-apps", "/version", "/run_live":
		return strings.TrimPrefix(p, "/")
	}
	switch {
	case strings.HasPrefix(p, "/apps/") && strings.Contains(p, "/artifacts"):
		return "artifacts"
	case strings.HasPrefix(p, "/apps/") && strings.Contains(p, "/sessions"):
		return "sessions"
	case strings.HasPrefix(p, "/apps/"):
		return "apps"
	case strings.HasPrefix(p, "/debug/"):
		return "debug"
	case strings.HasPrefix(p, "/dev/"):
		return "dev"
	}
	return "other"
}

// meterAndDrain is the outermost layer. It meters every request (counts,
// durations, open streams), and makes it drainable: counted in flight for
// Serve's drain, its context cancelled when the drain times out, and an SSE
// stream cut that way ended with an error frame.
func (s *Server) meterAndDrain(next http.Handler) http.Handler {
	m := s.metrics
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		start := time.Now()
		route := routeName(r)

		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		unlink := context.AfterFunc(s.stop, func() { cancel(context.Cause(s.stop)) })
		defer unlink()
		r = r.WithContext(ctx)

		rec := &recorder{ResponseWriter: w, status: http.StatusOK, start: start}
		defer func() {
			if rec.streaming {
				m.openStreams.WithLabelValues(route).Dec()
			}
		}()
		rec.onStream = func() { m.openStreams.WithLabelValues(route).Inc() }
		var rpc rpcID
		r = r.WithContext(context.WithValue(ctx, rpcIDKey{}, &rpc))
		serveDrainable(next, rec, r)

		if rec.streaming && !rec.hijacked && errors.Is(context.Cause(ctx), ErrDraining) {
			writeDrainFrame(rec, route, rpc.id)
		}
		elapsed := time.Since(start).Seconds()
		m.requests.WithLabelValues(route, r.Method, strconv.Itoa(rec.status)).Inc()
		if rec.streaming {
			m.streamDuration.WithLabelValues(route).Observe(elapsed)
			if !rec.first.IsZero() {
				m.firstEvent.WithLabelValues(route).Observe(rec.first.Sub(start).Seconds())
			}
		} else {
			m.duration.WithLabelValues(route).Observe(elapsed)
		}
	})
}

// recorder notes the status, whether the response is an event stream and
// when its first body byte went out. Flush and Unwrap keep
// http.ResponseController (adkrest's write deadline, a2asrv's flushes) working.
type recorder struct {
	http.ResponseWriter
	start       time.Time
	status      int
	wroteHeader bool
	streaming   bool
	hijacked    bool
	first       time.Time
	onStream    func()
	once        sync.Once
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.wroteHeader = true
		r.status = code
		if strings.HasPrefix(r.Header().Get("Content-Type"), "text/event-stream") {
			r.streaming = true
			r.once.Do(r.onStream)
		}
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	if r.first.IsZero() && len(b) > 0 {
		r.first = time.Now()
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.hijacked = true
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// activity implements gooseagent.Observer: in-flight replies per session for
// /stats, and turn metrics.
type activity struct {
	m        *metrics
	mu       sync.Mutex
	inflight map[gooseagent.SessionKey]int
}

func newActivity(m *metrics) *activity {
	return &activity{m: m, inflight: map[gooseagent.SessionKey]int{}}
}

func (a *activity) TurnStarted(k gooseagent.SessionKey) {
	a.mu.Lock()
	a.inflight[k]++
	a.mu.Unlock()
	a.m.repliesActive.Inc()
}

func (a *activity) TurnFinished(k gooseagent.SessionKey, res gooseagent.TurnResult) {
	a.mu.Lock()
	if a.inflight[k]--; a.inflight[k] <= 0 {
		delete(a.inflight, k)
	}
	a.mu.Unlock()
	a.m.repliesActive.Dec()
	a.m.turnFinished(res)
}

func (a *activity) snapshot() map[gooseagent.SessionKey]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[gooseagent.SessionKey]bool, len(a.inflight))
	for k := range a.inflight {
		out[k] = true
	}
	return out
}
