package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/peering"
	"github.com/adk2goose/goose-operator/sidecar/server/internal/wsframe"
)

// LivePath is adkrest's live route: one WebSocket for a whole conversation
// (see package gooseagent for what goose does with its messages).
const LivePath = "/run_live"

const codeTooManyConns = "TOO_MANY_CONNECTIONS"

// WebSocket close codes the sidecar sends itself (RFC 6455 §7.4.1).
const (
	closeGoingAway  = 1001
	closeMessageBig = 1009
)

// liveQuery is what a /run_live URL names, in adkrest's spellings.
type liveQuery struct{ app, user, session string }

func liveQueryOf(r *http.Request) (liveQuery, bool) {
	q := r.URL.Query()
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := q.Get(k); v != "" {
				return v
			}
		}
		return ""
	}
	lq := liveQuery{first("appName", "app_name"), first("userId", "user_id"), first("sessionId", "session_id")}
	return lq, lq.app != "" && lq.user != "" && lq.session != ""
}

// livePeerKey names the session of a /run_live request for peering.
func livePeerKey(r *http.Request) (peering.Key, bool) {
	if r.URL.Path != LivePath {
		return peering.Key{}, false
	}
	lq, ok := liveQueryOf(r)
	return peering.Key{User: lq.user, Session: lq.session}, ok
}

// liveEntry runs before authentication on /run_live. A browser cannot set
// headers on a WebSocket, so the api_key query parameter is moved into the
// Authorization header, where every auth mode looks, and out of the URL,
// where logs would see it. A browser's Origin must be this server's own
// or one of the CORS origins; adk-go's handler checks only the first
// (gorilla's default), so the header is removed once allowed.
func liveEntry(next http.Handler, origins []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != LivePath {
			next.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		if key := q.Get("api_key"); key != "" {
			q.Del("api_key")
			r.URL.RawQuery = q.Encode()
			if r.Header.Get("Authorization") == "" && r.Header.Get("X-API-Key") == "" {
				r.Header.Set("Authorization", "Bearer "+key)
			}
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !originAllowed(origin, r.Host, origins) {
				writeJSONError(w, r, http.StatusForbidden, codeForbidden,
					fmt.Sprintf("origin %q may not open %s: it is neither this server's nor a CORS origin (-cors-origins)", origin, LivePath))
				return
			}
			r.Header.Del("Origin")
		}
		next.ServeHTTP(w, r)
	})
}

func originAllowed(origin, host string, allowed []string) bool {
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, host) {
		return true
	}
	origin = strings.TrimRight(origin, "/")
	for _, o := range allowed {
		if o = strings.TrimRight(strings.TrimSpace(o), "/"); o == "*" || o == origin {
			return true
		}
	}
	return false
}

// guardLive gives /run_live, adkrest's own handler (next), the rules of the
// other routes before the upgrade: refusals are JSON answers (400, 404,
// 409, 429, 503), the socket holds its session's turn for its whole life
// (a /run_sse of the session waits for it), and each user has at most
// LiveConnsPerUser sockets. After the upgrade the connection (liveConn)
// caps each message, times out writes and closes an idle socket; each
// turn asks for the budget (admitLiveTurn).
func (s *Server) guardLive(next http.Handler) http.Handler {
	tracer := tracerProvider(s.cfg.TracerProvider).Tracer(TracerName)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lq, ok := liveQueryOf(r)
		switch {
		case !ok:
			writeJSONError(w, r, http.StatusBadRequest, codeBadRequest, LivePath+" needs the appName, userId and sessionId query parameters")
			return
		case !websocket.IsWebSocketUpgrade(r):
			writeJSONError(w, r, http.StatusBadRequest, codeBadRequest, LivePath+" is a WebSocket: send a WebSocket upgrade request")
			return
		case lq.app != s.cfg.AppName:
			writeJSONError(w, r, http.StatusNotFound, codeAppNotFound, s.unknownApp(lq.app))
			return
		}
		key := gooseagent.SessionKey{AppName: lq.app, UserID: lq.user, SessionID: lq.session}
		leave, ok := s.live.enter(lq.user)
		if !ok {
			w.Header().Set("Retry-After", "5")
			writeJSONError(w, r, http.StatusTooManyRequests, codeTooManyConns,
				fmt.Sprintf("user %q has %d live connections open, the most this server allows (-live-conns-per-user); close one first", lq.user, s.cfg.LiveConnsPerUser))
			return
		}
		defer leave()
		release, ok := s.takeTurn(w, r, key)
		if !ok {
			return
		}
		defer release()
		ctx := runContext(r.Context(), lq.app, lq.user, lq.session)
		_, err := s.sessions.Get(ctx, &session.GetRequest{AppName: lq.app, UserID: lq.user, SessionID: lq.session})
		switch {
		case errors.Is(err, session.ErrNotFound):
			writeJSONError(w, r, http.StatusNotFound, codeSessionNotFound,
				fmt.Sprintf("session %q of user %q not found: create it first (POST /apps/%s/users/%s/sessions)", lq.session, lq.user, lq.app, url.PathEscape(lq.user)))
			return
		case err != nil:
			s.log.Error("failed to load a session before a live connection; letting the runner answer", "error", err)
		}
		defer func() {
			if err := s.sessions.flush(sessionID{lq.app, lq.user, lq.session}); err != nil {
				s.log.Error("failed to store a live message", "session", lq.session, "error", err)
			}
		}()
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, "GET "+LivePath, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("url.path", LivePath), attribute.String("gen_ai.conversation.id", lq.session)))
		defer span.End()
		lw := &liveWriter{ResponseWriter: w, s: s, key: key}
		defer lw.done()
		next.ServeHTTP(lw, r.WithContext(ctx))
	})
}

// admitLiveTurn is gooseagent's AdmitLiveTurn: a live turn that would start
// a goose reply is refused, as a /run_sse would be, while the pod drains or
// the token budget is spent.
func (s *Server) admitLiveTurn(_ context.Context, _ gooseagent.SessionKey) error {
	if s.turns.isDraining() {
		return codedError{code: codeDraining, err: errDraining}
	}
	if refusal := s.budget.Check(); refusal != nil {
		s.budget.Refused("live")
		return codedError{code: budget.ReasonExhausted, err: refusal}
	}
	return nil
}

// codedError gives a live turn's error event its ErrorCode.
type codedError struct {
	code string
	err  error
}

func (e codedError) Error() string     { return e.err.Error() }
func (e codedError) Unwrap() error     { return e.err }
func (e codedError) ErrorCode() string { return e.code }

// liveConns counts the open live sockets per user and holds each one's
// connection, for the drain.
type liveConns struct {
	max   int
	mu    sync.Mutex
	users map[string]int
	conns map[*liveConn]struct{}
	// draining: new connections are closed at once (drain was called).
	draining bool
}

func newLiveConns(max int) *liveConns {
	return &liveConns{max: max, users: map[string]int{}, conns: map[*liveConn]struct{}{}}
}

func (l *liveConns) enter(user string) (leave func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.users[user] >= l.max {
		return nil, false
	}
	l.users[user]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.users[user]--; l.users[user] <= 0 {
			delete(l.users, user)
		}
	}, true
}

func (l *liveConns) add(c *liveConn) {
	l.mu.Lock()
	draining := l.draining
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	if draining {
		c.drain()
	}
}

func (l *liveConns) remove(c *liveConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// drain closes every live socket once no turn of it runs.
func (l *liveConns) drain() {
	l.mu.Lock()
	l.draining = true
	conns := make([]*liveConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.drain()
	}
}

// liveWriter hands adk-go's handler a liveConn when it hijacks the
// connection.
type liveWriter struct {
	http.ResponseWriter
	s    *Server
	key  gooseagent.SessionKey
	conn *liveConn
}

func (w *liveWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *liveWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	raw, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	s := w.s
	c := &liveConn{
		Conn: raw, writeTimeout: s.cfg.LiveWriteTimeout, idle: s.cfg.LiveIdleTimeout,
		in:   wsframe.Scanner{Max: s.cfg.MaxMessageBytes},
		busy: func() bool { return s.activity.running(w.key) },
	}
	// Bytes the client sent after its request, already buffered, are
	// scanned like the rest: gorilla reads them through c.
	if n := brw.Reader.Buffered(); n > 0 {
		c.early, _ = brw.Reader.Peek(n)
		c.early = slices.Clone(c.early)
		_, _ = brw.Reader.Discard(n)
	}
	c.timer = time.AfterFunc(c.idle, c.onIdle)
	w.conn = c
	s.metrics.openStreams.WithLabelValues("run_live").Inc()
	s.live.add(c)
	return c, bufio.NewReadWriter(bufio.NewReader(c), brw.Writer), nil
}

// done runs when adk-go's handler has returned.
func (w *liveWriter) done() {
	if c := w.conn; c != nil {
		_ = c.Close()
		w.s.live.remove(c)
		w.s.metrics.openStreams.WithLabelValues("run_live").Dec()
	}
}

// liveConn is the hijacked connection of one live socket, under adk-go's
// gorilla connection, which sets no read limit and no write deadline. It
// refuses a message over the cap from its frame header (close 1009), gives
// every write a deadline, and closes the socket (1001) when neither side
// sent anything for the idle timeout while no turn ran, or when the pod
// drains. Its own close frames go between the server's frames.
type liveConn struct {
	net.Conn
	writeTimeout, idle time.Duration
	busy               func() bool // a turn of the socket's session runs
	timer              *time.Timer

	early []byte // read before the hijack, not yet given to gorilla
	in    wsframe.Scanner
	inErr error

	mu        sync.Mutex // writes
	out       wsframe.Scanner
	handshake bool   // the 101 answer has been written
	closing   []byte // a close frame to send at the next frame boundary
	closed    bool   // a close frame of ours went out: nothing more may
	gone      bool   // Close was called
	draining  bool
}

func (c *liveConn) Read(p []byte) (int, error) {
	if c.inErr != nil {
		return 0, c.inErr
	}
	var n int
	var err error
	if len(c.early) > 0 {
		n = copy(p, c.early)
		c.early = c.early[n:]
	} else {
		n, err = c.Conn.Read(p)
	}
	if n > 0 {
		c.timer.Reset(c.idle)
		ok, ferr := c.in.Feed(p[:n])
		if ferr != nil {
			c.inErr = fmt.Errorf("failed to read a live message: %w", ferr)
			code := websocket.CloseProtocolError
			if errors.Is(ferr, wsframe.ErrMessageTooBig) {
				code = closeMessageBig
			}
			c.sendClose(code, ferr.Error())
			if ok == 0 {
				return 0, c.inErr
			}
			// The frames before the refused one are whole.
			return ok, nil
		}
	}
	return n, err
}

func (c *liveConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.timer.Reset(c.idle)
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	n, err := c.Conn.Write(p)
	if !c.handshake {
		// gorilla writes the 101 answer in one write before any frame.
		c.handshake = true
	} else if _, ferr := c.out.Feed(p[:n]); ferr != nil {
		c.closed = true
		return n, fmt.Errorf("failed to follow the server's frames: %w", ferr)
	}
	if err == nil && c.closing != nil && c.out.BetweenFrames() {
		c.flushCloseLocked()
	}
	return n, err
}

// SetWriteDeadline is liveConn's own business: every write gets
// writeTimeout (gorilla would clear it for each frame).
func (c *liveConn) SetWriteDeadline(time.Time) error { return nil }

// SetDeadline sets only the read deadline, for the same reason.
func (c *liveConn) SetDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }

// sendClose sends a close frame with code and reason as soon as no frame
// of the server's is half written, then lets the client answer it for a
// second before reads fail.
func (c *liveConn) sendClose(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.closing != nil {
		return
	}
	c.closing = wsframe.CloseFrame(code, reason)
	if c.handshake && c.out.BetweenFrames() {
		c.flushCloseLocked()
	}
}

// Close closes the connection and ends the socket's timers.
func (c *liveConn) Close() error {
	c.mu.Lock()
	c.gone = true
	if c.draining && !c.closed && c.handshake && c.out.BetweenFrames() {
		// A turn cut by the drain's timeout ended the stream before the
		// socket could be closed between turns: say why now.
		c.closing = wsframe.CloseFrame(closeGoingAway, drainReason)
		c.flushCloseLocked()
	}
	c.mu.Unlock()
	c.timer.Stop()
	return c.Conn.Close()
}

func (c *liveConn) flushCloseLocked() {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	_, _ = c.Conn.Write(c.closing)
	c.closed = true
	_ = c.Conn.SetReadDeadline(time.Now().Add(time.Second))
}

// onIdle closes the socket when no turn runs; otherwise it looks again
// later.
func (c *liveConn) onIdle() {
	if c.busy() {
		c.timer.Reset(c.idle)
		return
	}
	c.sendClose(closeGoingAway, "idle for "+c.idle.String()+": reconnect to go on")
}

// drain closes the socket now if no turn runs, else as soon as none does.
func (c *liveConn) drain() {
	c.mu.Lock()
	gone := c.gone
	c.draining = true
	c.mu.Unlock()
	if gone {
		return
	}
	if c.busy() {
		time.AfterFunc(drainPoll, c.drain)
		return
	}
	c.sendClose(closeGoingAway, drainReason)
}

const drainReason = "adk2goose is draining: its pod is stopping; reconnect"

// drainPoll is how often a draining socket looks whether its turn ended.
const drainPoll = 100 * time.Millisecond

// running reports whether a turn of session k runs.
func (a *activity) running(k gooseagent.SessionKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inflight[k] > 0
}
