// Package acp is the goose.Backend for `goose serve`: ACP (JSON-RPC) over
// WebSockets on /acp, one per session, with github.com/coder/acp-go-sdk doing
// the JSON-RPC and the types. The wire is described in
// shared/reference/goose-acp.md; section numbers in comments refer to it.
package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/gorilla/websocket"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// Config configures a Client.
type Config struct {
	// URL is goose serve's base URL, e.g. http://127.0.0.1:3284. ws:// and
	// wss:// work too; a trailing /acp is accepted.
	URL string
	// SecretKey is GOOSE_SERVER__SECRET_KEY, sent as X-Secret-Key on the
	// WebSocket upgrade (§1). Empty for --dangerously-unauthenticated.
	SecretKey string
	// ClientName and ClientVersion go into initialize's clientInfo.
	ClientName    string
	ClientVersion string
	// HTTPClient serves Health; defaults to a client with a 5 s timeout.
	HTTPClient *http.Client
	// DialTimeout bounds the WebSocket dial plus initialize; default 10 s.
	DialTimeout time.Duration
	// Logger receives connection diagnostics; default discards them.
	Logger *slog.Logger

	// IdleTimeout closes a session's connection after it ran no reply for
	// this long; goose then frees the session's agent and extensions, and
	// the next reply dials again. Default goose.DefaultServeIdleTimeout;
	// negative: never.
	IdleTimeout time.Duration
	// UnusedIdleTimeout is IdleTimeout for a connection that has run no
	// reply yet: a session started ahead of its first turn (an ADK client
	// creates a session, e.g. each time the web UI opens, and may never
	// send a message) holds an agent and its extensions in goose for this
	// long only. Default goose.DefaultServeUnusedIdleTimeout; never longer
	// than IdleTimeout.
	UnusedIdleTimeout time.Duration
	// MaxMessageBytes caps a user message, JSON-encoded; default
	// goose.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MaxFrameBytes bounds one frame read from goose; a larger one ends its
	// session's connection. Default DefaultMaxFrameBytes (16 MiB).
	MaxFrameBytes int
	// MaxQueuedEvents is how many events of one reply may wait for a slow
	// reader before the session's connection stops being read (goose is
	// then slowed through TCP). Default 1024.
	MaxQueuedEvents int
	// MaxDials bounds connections being dialled at once. Default 32.
	MaxDials int
}

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("goose ACP client closed")

// Client is a goose.Backend over ACP.
//
// Each session's replies run on a WebSocket of its own, dialled on the
// session's first use, kept while the session is in use and closed after
// IdleTimeout (UnusedIdleTimeout before its first reply); calls not tied to
// a reply share one control connection, closed after IdleTimeout without a
// call. goose has no flow control and no
// per-session error on a connection: a frame over its 16 MiB limit or a
// full 1024-message outbound queue drops the whole socket
// (goose-acp-connections.md §4). Sharing one socket let any session's fault
// or burst end every turn in flight; one socket per session bounds that to
// the session, makes a slow reader slow only its own session (see wsConn)
// and costs goose no more than it spends per session anyway (an agent and
// its extensions per session and connection, §1).
type Client struct {
	cfg     Config
	httpURL string // base for /status
	wsURL   string
	header  http.Header
	dialer  *websocket.Dialer
	httpc   *http.Client
	log     *slog.Logger

	dialSlots chan struct{} // bounds dials in flight

	mu           sync.Mutex
	closed       bool
	control      *conn
	sessions     map[string]*conn   // each session's own connection
	all          map[*conn]struct{} // every open connection, registered or not
	dialing      map[string]*dialing
	dialFailures int               // consecutive failed dials
	retryAt      time.Time         // no dial before this, after failures
	replies      map[string]*reply // by session id
	// usage and cwd are kept per session while it has a connection
	// (forgetSessionLocked): the last accumulated usage seen, and the
	// working dir session/load needs; both are asked of goose again later.
	usage map[string]goose.Usage
	cwd   map[string]string
	// runsChanged is closed (and replaced) whenever a conn's runs change.
	runsChanged chan struct{}
	// lost are, by session, tool calls whose approval goose asked again on
	// session/load (a turn resumed from before an adk2goose restart),
	// refused because nobody holds their confirmation any more; the
	// session's next reply reports them.
	lost map[string][]*goose.ToolResponse

	wg sync.WaitGroup // connection watchers
}

var (
	_ goose.Backend           = (*Client)(nil)
	_ goose.WorkingDirResumer = (*Client)(nil) // gooseagent finds it by assertion: a lost method would not fail the build
)

// New validates cfg and returns a Client. It does not dial: goose may not be
// up yet when the sidecar starts.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("failed to parse goose URL %q: %w", cfg.URL, errors.Join(err, errors.New("host required")))
	}
	hu, wu := *u, *u
	switch u.Scheme {
	case "http", "ws":
		hu.Scheme, wu.Scheme = "http", "ws"
	case "https", "wss":
		hu.Scheme, wu.Scheme = "https", "wss"
	default:
		return nil, fmt.Errorf("failed to parse goose URL %q: unsupported scheme", cfg.URL)
	}
	base := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/acp")
	hu.Path, wu.Path = base, base+"/acp"
	hu.RawQuery, hu.Fragment, wu.Fragment = "", "", ""

	if cfg.ClientName == "" {
		cfg.ClientName = "adk2goose"
	}
	if cfg.ClientVersion == "" {
		cfg.ClientVersion = "dev"
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = goose.DefaultServeIdleTimeout
	}
	if cfg.UnusedIdleTimeout <= 0 {
		cfg.UnusedIdleTimeout = goose.DefaultServeUnusedIdleTimeout
	}
	if cfg.IdleTimeout > 0 {
		cfg.UnusedIdleTimeout = min(cfg.UnusedIdleTimeout, cfg.IdleTimeout)
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = goose.DefaultMaxMessageBytes
	}
	if cfg.MaxQueuedEvents <= 0 {
		cfg.MaxQueuedEvents = 1024
	}
	if cfg.MaxDials <= 0 {
		cfg.MaxDials = 32
	}
	c := &Client{
		cfg:     cfg,
		httpURL: strings.TrimSuffix(hu.String(), "/"),
		wsURL:   wu.String(),
		header:  http.Header{},
		dialer: &websocket.Dialer{
			HandshakeTimeout: cfg.DialTimeout,
			// A connection per session, most of them idle: 1 KiB buffers
			// instead of gorilla's 4 KiB (binding target: memory per stream).
			ReadBufferSize:  1 << 10,
			WriteBufferSize: 1 << 10,
			// No Origin header is sent, which goose's Origin policy allows (§1).
		},
		httpc:     cfg.HTTPClient,
		log:       cfg.Logger,
		dialSlots: make(chan struct{}, cfg.MaxDials),
		sessions:  make(map[string]*conn),
		all:       make(map[*conn]struct{}),
		dialing:   make(map[string]*dialing),
		replies:   make(map[string]*reply),
		usage:     make(map[string]goose.Usage),
		cwd:       make(map[string]string),
		lost:      make(map[string][]*goose.ToolResponse),

		runsChanged: make(chan struct{}),
	}
	if c.httpc == nil {
		c.httpc = &http.Client{Timeout: 5 * time.Second}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if cfg.SecretKey != "" {
		c.header.Set("X-Secret-Key", cfg.SecretKey)
	}
	return c, nil
}

// Flavor reports goose.FlavorServe.
func (c *Client) Flavor() goose.Flavor { return goose.FlavorServe }

// Health checks GET /status, which goose serves without auth (§1).
func (c *Client) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.httpURL+"/status", nil)
	if err != nil {
		return fmt.Errorf("failed to check health: %w", err)
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("failed to check health: %w", ctx.Err())
		}
		return fmt.Errorf("failed to check health: %w: %w", goose.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return httpStatusErr("check health", resp.StatusCode, body)
}

func httpStatusErr(what string, code int, body []byte) error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusUnauthorized:
		return fmt.Errorf("failed to %s: %w", what, goose.ErrUnauthorized)
	case code == http.StatusServiceUnavailable:
		return fmt.Errorf("failed to %s: %w", what, goose.ErrUnavailable)
	default:
		return fmt.Errorf("failed to %s: %w", what, &goose.HTTPError{StatusCode: code, Body: string(body)})
	}
}

// conn is one WebSocket connection and its ACP agent in goose (each
// connection gets its own agent instance, §2.1). A session's replies run on
// a connection of its own (see Client), so whatever goes wrong on one
// connection ends one session's turn at most.
type conn struct {
	c   *Client
	rpc *wsConn

	// session is the session this connection is dedicated to, "" for the
	// control connection; loaded says session/new or session/load made the
	// session active in this connection's agent. Both under c.mu.
	session string
	loaded  bool
	// idle closes a connection that has run no reply or call for
	// Config.IdleTimeout (a session's: Config.UnusedIdleTimeout until
	// replied); both under c.mu.
	idle    *time.Timer
	replied bool
	// inUse counts the callers live handed this connection to that have not
	// released it (c.mu): a connection handed out is in use before its
	// request is sent, so the idle timer never closes it under a caller.
	inUse int

	// custom is set once goose sent a _goose/... notification, i.e. it
	// honoured customNotifications; the stable usage_update is then redundant.
	custom atomic.Bool
	// reply is the reply running on this connection, if any.
	reply atomic.Pointer[reply]
	// runs is goose's active run per session on this connection, from
	// session_info_update (§2.6); c.mu. Runs die with their connection.
	runs map[string]string
	// loading marks sessions with a session/load in flight; c.mu.
	loading map[string]bool
}

func (cn *conn) dead() bool {
	select {
	case <-cn.rpc.Done():
		return true
	default:
		return false
	}
}

// lostErr says why a connection is gone: the transport's own reason when it
// ended it (an oversized or undecodable frame), else "connection lost".
func (cn *conn) lostErr() error {
	if err := cn.rpc.faultErr(); err != nil {
		return fmt.Errorf("connection closed: %w", err)
	}
	return errors.New("connection lost")
}

// handle accepts goose's requests on this connection (on its reader) and
// returns the work that answers each; notifications are routed by the
// transport (wsConn.read).
func (cn *conn) handle(f *frame) func(context.Context) (any, *acpsdk.RequestError) {
	method := f.Method
	if method == methodRequestPermission {
		return cn.c.acceptPermission(cn, &f.Params)
	}
	// We advertise no fs/terminal capabilities, so goose sends nothing else
	// that needs an answer (§5).
	return func(context.Context) (any, *acpsdk.RequestError) { return nil, acpsdk.NewMethodNotFound(method) }
}

// sessionConn returns the session's own connection, dialling it if needed;
// the caller releases it (release).
func (c *Client) sessionConn(ctx context.Context, id string) (*conn, error) {
	return c.live(ctx, id)
}

// connFor is the session's own connection when one is open, otherwise the
// control connection: a session-scoped call never opens a session connection
// (and so never starts the session's agent and extensions in goose). The
// caller releases it (release).
func (c *Client) connFor(ctx context.Context, id string) (*conn, error) {
	c.mu.Lock()
	cn := c.sessions[id]
	if cn != nil && !cn.dead() {
		cn.inUse++
		c.mu.Unlock()
		return cn, nil
	}
	c.mu.Unlock()
	return c.live(ctx, "")
}

// release ends a use of cn that live or connFor handed out; the last one
// starts its idle time, unless a reply runs on it.
func (c *Client) release(cn *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked(cn)
}

// releaseLocked is release with c.mu held.
func (c *Client) releaseLocked(cn *conn) {
	cn.inUse--
	if cn.inUse > 0 || cn.reply.Load() != nil {
		return
	}
	if (cn.session == "" && c.control == cn) || (cn.session != "" && c.sessions[cn.session] == cn) {
		c.idleLocked(cn)
	}
}

// dialing is a dial in progress that callers needing the same connection
// wait for instead of dialling again.
type dialing struct {
	done chan struct{}
	err  error
}

// live returns the live connection registered under key (a session id, or
// "" for the control connection), dialling one when there is none. It
// counts as in use (conn.inUse) until the caller releases it.
func (c *Client) live(ctx context.Context, key string) (*conn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		cn := c.control
		if key != "" {
			cn = c.sessions[key]
		}
		if cn != nil && !cn.dead() {
			cn.inUse++
			c.mu.Unlock()
			return cn, nil
		}
		if d := c.dialing[key]; d != nil {
			c.mu.Unlock()
			select {
			case <-d.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("failed to connect to goose: %w", ctx.Err())
			}
			// The dialler's own context may have ended its dial; ours has
			// not, so try again.
			if d.err != nil && !errors.Is(d.err, context.Canceled) && !errors.Is(d.err, context.DeadlineExceeded) {
				return nil, d.err
			}
			continue
		}
		d := &dialing{done: make(chan struct{})}
		c.dialing[key] = d
		c.mu.Unlock()

		cn, err := c.dial(ctx)
		c.mu.Lock()
		delete(c.dialing, key)
		if err == nil && c.closed {
			cn, err = nil, ErrClosed // Close has closed it
		}
		if err == nil {
			c.register(key, cn)
			cn.inUse++ // its idle time starts at its release
		}
		d.err = err
		c.mu.Unlock()
		close(d.done)
		return cn, err
	}
}

// register makes cn the connection for key; c.mu held. Its idle timer
// starts when the caller says (idleLocked).
func (c *Client) register(key string, cn *conn) {
	cn.session = key
	if key == "" {
		c.control = cn
		return
	}
	c.sessions[key] = cn
}

// idleLocked (re)starts cn's idle timer; c.mu held.
func (c *Client) idleLocked(cn *conn) {
	if c.cfg.IdleTimeout < 0 {
		return
	}
	after := c.cfg.IdleTimeout
	if cn.session != "" && !cn.replied {
		after = c.cfg.UnusedIdleTimeout
	}
	if cn.idle == nil {
		cn.idle = time.AfterFunc(after, func() { c.closeIdle(cn) })
		return
	}
	cn.idle.Reset(after)
}

// closeIdle closes a session connection that ran no reply for IdleTimeout
// (UnusedIdleTimeout when it never ran one): goose then drops the session's
// agent and extensions (§2.5); the next reply dials again and goose
// activates the session lazily. The control connection closes after
// IdleTimeout without a call; the next call dials it again.
func (c *Client) closeIdle(cn *conn) {
	c.mu.Lock()
	if cn.session == "" {
		if c.control != cn {
			c.mu.Unlock()
			return
		}
	} else if r := c.replies[cn.session]; (r != nil && r.cn == cn) || c.sessions[cn.session] != cn {
		c.mu.Unlock()
		return
	}
	if cn.inUse > 0 {
		c.mu.Unlock()
		return // its last release starts its idle time again
	}
	if cn.rpc.awaiting() {
		// A call is under way (StartSession's after session/new, a
		// session/load replaying a long history): not idle yet.
		c.idleLocked(cn)
		c.mu.Unlock()
		return
	}
	if cn.session == "" {
		c.control = nil
	} else {
		delete(c.sessions, cn.session)
	}
	c.mu.Unlock()
	_ = cn.rpc.Close() // an idle connection: nobody waits on it
}

// dialBackoff is the wait before the next dial after consecutive failures.
func dialBackoff(failures int) time.Duration {
	return min(100*time.Millisecond<<min(failures-1, 10), 5*time.Second)
}

// dial opens and initializes one connection. After failed dials it first
// waits out a backoff, so a goose that is down or restarting is not hit by
// every session at once; Config.MaxDials bounds dials in flight.
func (c *Client) dial(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	wait := time.Until(c.retryAt)
	c.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("failed to connect to goose: %w", ctx.Err())
		}
	}
	select {
	case c.dialSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("failed to connect to goose: %w", ctx.Err())
	}
	cn, err := c.dialOnce(ctx)
	<-c.dialSlots
	c.mu.Lock()
	switch {
	case err == nil:
		c.dialFailures, c.retryAt = 0, time.Time{}
	case errors.Is(err, goose.ErrUnavailable):
		c.dialFailures++
		c.retryAt = time.Now().Add(dialBackoff(c.dialFailures))
	}
	c.mu.Unlock()
	return cn, err
}

func (c *Client) dialOnce(ctx context.Context) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	ws, resp, err := c.dialer.DialContext(dctx, c.wsURL, c.header)
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if serr := httpStatusErr("connect to goose", resp.StatusCode, body); serr != nil {
				return nil, serr
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("failed to connect to goose: %w", ctx.Err())
		}
		return nil, fmt.Errorf("failed to connect to goose: %w: %w", goose.ErrUnavailable, err)
	}

	cn := &conn{c: c, runs: make(map[string]string), loading: make(map[string]bool)}
	cn.rpc = newWSConn(ws, c.cfg.MaxFrameBytes, c.log, func(f *frame) {
		c.route(cn, f)
	}, cn.handle)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = ws.Close() // never used
		return nil, fmt.Errorf("failed to connect to goose: %w", ErrClosed)
	}
	c.wg.Add(1) // done by forget, on the connection's reader
	c.all[cn] = struct{}{}
	c.mu.Unlock()
	cn.rpc.start(func() { c.forget(cn) })

	// initialize with customNotifications to get accumulated usage,
	// message_usage and status_message (§2.6, §3.1); no fs/terminal so goose
	// never calls back into us for them (§5).
	init := acpsdk.InitializeRequest{
		ProtocolVersion: acpsdk.ProtocolVersionNumber,
		ClientCapabilities: acpsdk.ClientCapabilities{
			Meta: map[string]any{"goose": map[string]any{"customNotifications": true}},
		},
		ClientInfo: &acpsdk.Implementation{Name: c.cfg.ClientName, Version: c.cfg.ClientVersion},
	}
	if _, err := request[json.RawMessage](dctx, cn.rpc, methodInitialize, init); err != nil {
		_ = cn.rpc.Close() // the connection failed already; its error is the one to report
		if ctx.Err() != nil {
			return nil, fmt.Errorf("failed to initialize ACP connection: %w", ctx.Err())
		}
		return nil, fmt.Errorf("failed to initialize ACP connection: %w", c.mapErr(cn, err))
	}

	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		_ = cn.rpc.Close() // Close raced the dial; nothing uses it yet
		return nil, fmt.Errorf("failed to connect to goose: %w", ErrClosed)
	}
	return cn, nil
}

// forget drops a connection that has ended, so the next call redials. It
// runs on the connection's reader as it stops. In-flight replies learn of the
// drop from their own session/prompt call.
func (c *Client) forget(cn *conn) {
	defer c.wg.Done()
	c.mu.Lock()
	delete(c.all, cn)
	if c.control == cn {
		c.control = nil
	}
	if cn.session != "" && c.sessions[cn.session] == cn {
		delete(c.sessions, cn.session)
	}
	if cn.session != "" {
		c.forgetSessionLocked(cn.session)
	}
	if cn.idle != nil {
		cn.idle.Stop()
	}
	c.mu.Unlock()
	if err := cn.rpc.faultErr(); err != nil {
		c.log.Warn("closed a goose connection", "session", cn.session, "err", err)
	}
}

// forgetSessionLocked drops what the client keeps of session id once
// nothing of it is open here (no connection, reply or dial): the usage and
// working dir it remembers would otherwise stay for every session the
// sidecar ever served. c.lost stays: it is the session's next reply's to
// report. c.mu held.
func (c *Client) forgetSessionLocked(id string) {
	if c.sessions[id] != nil || c.replies[id] != nil || c.dialing[id] != nil {
		return
	}
	delete(c.usage, id)
	delete(c.cwd, id)
}

// Close closes every connection; in-flight replies end with an error
// wrapping goose.ErrStreamBroken. Sessions persist in goose.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := make([]*conn, 0, len(c.all))
	for cn := range c.all {
		conns = append(conns, cn)
	}
	c.mu.Unlock()
	for _, cn := range conns {
		_ = cn.rpc.Close() // replies learn of it through their own calls
	}
	c.wg.Wait()
	return nil
}

// mapErr turns a transport or JSON-RPC error into the goose error
// vocabulary.
func (c *Client) mapErr(cn *conn, err error) error {
	if errors.Is(err, errConnClosed) {
		return fmt.Errorf("%w: %w", goose.ErrUnavailable, cn.lostErr())
	}
	var re *acpsdk.RequestError
	if !errors.As(err, &re) {
		return err
	}
	switch re.Code {
	case -32002: // resource not found (§3)
		return fmt.Errorf("%w: %s", goose.ErrSessionNotFound, errDetail(re))
	case -32800:
		return fmt.Errorf("%w: %s", context.Canceled, errDetail(re))
	}
	return &goose.AgentError{Code: re.Code, Message: errDetail(re)}
}

func errDetail(re *acpsdk.RequestError) string {
	if re.Data == nil {
		return re.Message
	}
	b, err := json.Marshal(re.Data)
	if err != nil {
		return re.Message
	}
	return re.Message + ": " + string(b)
}

// call sends one request on cn.
func call[T any](ctx context.Context, c *Client, cn *conn, what, method string, params any) (T, error) {
	var zero T
	res, err := request[T](ctx, cn.rpc, method, params)
	if err != nil {
		if ctx.Err() != nil {
			return zero, fmt.Errorf("failed to %s: %w", what, ctx.Err())
		}
		return zero, fmt.Errorf("failed to %s: %w", what, c.mapErr(cn, err))
	}
	return res, nil
}

// callOn sends one request on the connection connFor picks for session id
// ("" for none).
func callOn[T any](ctx context.Context, c *Client, id, what, method string, params any) (T, error) {
	cn, err := c.connFor(ctx, id)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("failed to %s: %w", what, err)
	}
	defer c.release(cn)
	return call[T](ctx, c, cn, what, method, params)
}

type sessionIDParams struct {
	SessionID string `json:"sessionId"`
}

// newSessionResult is the part of session/new's result we use; decoding the
// SDK's NewSessionResponse would tie us to its (older) config option schema.
type newSessionResult struct {
	SessionID string `json:"sessionId"`
	Meta      struct {
		WorkingDir string `json:"workingDir"`
	} `json:"_meta"`
}

// StartSession runs session/new on a new connection, which becomes the
// session's own, then set_mode and provider/model config options when asked
// (§3, §4).
func (c *Client) StartSession(ctx context.Context, opts goose.StartOptions) (goose.Session, error) {
	cn, err := c.dial(ctx)
	if err != nil {
		return goose.Session{}, fmt.Errorf("failed to start session: %w", err)
	}
	res, err := call[newSessionResult](ctx, c, cn, "start session", methodSessionNew, acpsdk.NewSessionRequest{
		Cwd:        opts.WorkingDir,
		McpServers: []acpsdk.McpServer{},
	})
	if err == nil && res.SessionID == "" {
		err = errors.New("failed to start session: goose returned no sessionId")
	}
	if err != nil {
		_ = cn.rpc.Close() // nothing runs on it; the call's error is the one to report
		return goose.Session{}, err
	}
	id := res.SessionID
	cwd := res.Meta.WorkingDir
	if cwd == "" {
		cwd = opts.WorkingDir
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = cn.rpc.Close() // Close raced us; the session persists in goose
		return goose.Session{}, fmt.Errorf("failed to start session: %w", ErrClosed)
	}
	c.register(id, cn)
	cn.loaded = true
	c.cwd[id] = cwd
	c.mu.Unlock()
	// Idle from the end of the calls below, which are part of starting it.
	defer func() {
		c.mu.Lock()
		if c.sessions[id] == cn && c.replies[id] == nil {
			c.idleLocked(cn)
		}
		c.mu.Unlock()
	}()

	if opts.Mode != "" {
		if _, err := call[json.RawMessage](ctx, c, cn, "set session mode", methodSessionSetMode,
			acpsdk.SetSessionModeRequest{SessionId: acpsdk.SessionId(id), ModeId: acpsdk.SessionModeId(opts.Mode)}); err != nil {
			return goose.Session{}, err
		}
	}
	// Provider first: the model's allowed values depend on it (§4).
	for _, o := range []struct{ id, value string }{{"provider", opts.Provider}, {"model", opts.Model}} {
		if o.value == "" {
			continue
		}
		req := acpsdk.SetSessionConfigOptionRequest{ValueId: &acpsdk.SetSessionConfigOptionValueId{
			SessionId: acpsdk.SessionId(id),
			ConfigId:  acpsdk.SessionConfigId(o.id),
			Value:     acpsdk.SessionConfigValueId(o.value),
		}}
		if _, err := call[json.RawMessage](ctx, c, cn, "set session "+o.id, methodSetConfigOption, req); err != nil {
			return goose.Session{}, err
		}
	}

	// Besides goose's view of the session, session/info's answer is a
	// barrier: goose sends the setup notifications (usage_update,
	// available_commands_update) after its answer to session/new, and they
	// are read before this answer. Without it a reply started at once could
	// take them for its own (backendtest's PulledReply "stopped mid-stream"
	// sees the setup usage_update first).
	s, err := c.sessionInfo(ctx, id)
	if err != nil {
		var ae *goose.AgentError
		if errors.As(err, &ae) && ae.Code == -32601 {
			// A goose without _goose/unstable/session/info: what we know suffices.
			return goose.Session{ID: id, WorkingDir: cwd}, nil
		}
		return goose.Session{}, err
	}
	return s, nil
}

// ResumeSession loads a persisted session into its connection's agent.
func (c *Client) ResumeSession(ctx context.Context, id string) (goose.Session, error) {
	cn, err := c.sessionConn(ctx, id)
	if err != nil {
		c.mu.Lock()
		c.forgetSessionLocked(id) // ResumeSessionIn's cwd
		c.mu.Unlock()
		return goose.Session{}, fmt.Errorf("failed to resume session: %w", err)
	}
	defer c.release(cn)
	if err := c.ensureLoaded(ctx, cn, id); err != nil {
		return goose.Session{}, err
	}
	return c.sessionInfo(ctx, id)
}

// ResumeSessionIn resumes a session in workingDir (goose.WorkingDirResumer):
// session/load carries it as the cwd, which goose makes the session's
// working directory. A session already loaded on its connection keeps the
// directory it has.
func (c *Client) ResumeSessionIn(ctx context.Context, id, workingDir string) (goose.Session, error) {
	c.mu.Lock()
	c.cwd[id] = workingDir
	c.mu.Unlock()
	return c.ResumeSession(ctx, id)
}

// ensureLoaded runs session/load unless the session is already active on cn
// (§2.1, §2.4). Replies do not need it: goose activates a session on its
// first prompt on a connection, without session/load's history replay, which
// for a long session alone can overflow goose's outbound queue
// (goose-acp-connections.md §2, §4).
func (c *Client) ensureLoaded(ctx context.Context, cn *conn, id string) error {
	c.mu.Lock()
	loaded := cn.loaded
	cwd := c.cwd[id]
	c.mu.Unlock()
	if loaded {
		return nil
	}
	if cwd == "" {
		s, err := c.sessionInfo(ctx, id)
		if err != nil {
			return fmt.Errorf("failed to load session: %w", errors.Unwrap(err))
		}
		cwd = s.WorkingDir
	}
	c.mu.Lock()
	cn.loading[id] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(cn.loading, id)
		c.mu.Unlock()
	}()
	_, err := request[json.RawMessage](ctx, cn.rpc, methodSessionLoad, acpsdk.LoadSessionRequest{
		SessionId:  acpsdk.SessionId(id),
		Cwd:        cwd,
		McpServers: []acpsdk.McpServer{},
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("failed to load session: %w", ctx.Err())
		}
		return fmt.Errorf("failed to load session: %w", c.mapErr(cn, err))
	}
	c.mu.Lock()
	cn.loaded = true
	c.mu.Unlock()
	return c.settleResumedRun(ctx, cn, id)
}

type infoResult struct {
	Session acpsdk.SessionInfo `json:"session"`
}

// sessionInfo gets goose's view of a session from
// _goose/unstable/session/info (§3).
func (c *Client) sessionInfo(ctx context.Context, id string) (goose.Session, error) {
	res, err := callOn[infoResult](ctx, c, id, "get session", methodSessionInfo, sessionIDParams{SessionID: id})
	if err != nil {
		return goose.Session{}, err
	}
	if res.Session.SessionId == "" {
		return goose.Session{}, fmt.Errorf("failed to get session: %w", goose.ErrSessionNotFound)
	}
	return c.toSession(res.Session), nil
}

func (c *Client) toSession(si acpsdk.SessionInfo) goose.Session {
	s := goose.Session{ID: string(si.SessionId), WorkingDir: si.Cwd}
	if si.Title != nil {
		s.Name = *si.Title
	}
	if si.UpdatedAt != nil {
		s.UpdatedAt = parseTime(*si.UpdatedAt)
	}
	if v, ok := si.Meta["createdAt"].(string); ok {
		s.CreatedAt = parseTime(v)
	}
	if v, ok := si.Meta["messageCount"].(float64); ok {
		s.MessageCount = int(v)
	}
	if s.ID != "" && s.WorkingDir != "" {
		c.mu.Lock()
		if c.sessions[s.ID] != nil { // see forgetSessionLocked
			c.cwd[s.ID] = s.WorkingDir
		}
		c.mu.Unlock()
	}
	return s
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// DeleteSession uses session/delete, which goose handles but does not
// advertise (§3). The SDK has no typed call for it.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	if _, err := callOn[json.RawMessage](ctx, c, id, "delete session", methodSessionDelete, sessionIDParams{SessionID: id}); err != nil {
		// goose reports an unknown id as -32603 "Session not found"
		// (manage_sessions.rs on_delete_session maps every storage error to
		// internal_err); ask session/info, which says -32002, rather than
		// match the message.
		var ae *goose.AgentError
		if errors.As(err, &ae) && ae.Code == -32603 {
			if _, ierr := c.sessionInfo(ctx, id); errors.Is(ierr, goose.ErrSessionNotFound) {
				return fmt.Errorf("failed to delete session: %w", goose.ErrSessionNotFound)
			}
		}
		return err
	}
	c.mu.Lock()
	delete(c.usage, id)
	delete(c.cwd, id)
	delete(c.lost, id)
	cn := c.sessions[id]
	if r := c.replies[id]; r != nil && r.cn == cn {
		cn = nil // its reply ends it; the idle timer closes it after
	} else {
		delete(c.sessions, id)
	}
	c.mu.Unlock()
	if cn != nil {
		_ = cn.rpc.Close() // the session is gone; so is its agent
	}
	return nil
}

// Usage returns the last accumulated usage goose reported for the session,
// or backfills it from _goose/unstable/session/export (§3.1).
func (c *Client) Usage(ctx context.Context, id string) (goose.Usage, error) {
	c.mu.Lock()
	u, ok := c.usage[id]
	c.mu.Unlock()
	if ok {
		return u, nil
	}
	res, err := callOn[struct {
		Data string `json:"data"`
	}](ctx, c, id, "export session", methodSessionExport, sessionIDParams{SessionID: id})
	if err != nil {
		return goose.Usage{}, err
	}
	u, err = parseExportUsage([]byte(res.Data))
	if err != nil {
		return goose.Usage{}, fmt.Errorf("failed to read session usage: %w", err)
	}
	c.mu.Lock()
	if _, seen := c.usage[id]; !seen && c.sessions[id] != nil {
		c.usage[id] = u // kept while the session's connection is
	}
	c.mu.Unlock()
	return u, nil
}

// parseExportUsage reads the serialized goose Session: accumulated_usage and
// accumulated_cost (§3.1), or the flat accumulated_*_tokens fields older
// sessions serialize.
func parseExportUsage(data []byte) (goose.Usage, error) {
	var s struct {
		AccumulatedUsage *struct {
			InputTokens  *int64 `json:"input_tokens"`
			OutputTokens *int64 `json:"output_tokens"`
			TotalTokens  *int64 `json:"total_tokens"`
		} `json:"accumulated_usage"`
		AccumulatedCost         *float64 `json:"accumulated_cost"`
		AccumulatedInputTokens  *int64   `json:"accumulated_input_tokens"`
		AccumulatedOutputTokens *int64   `json:"accumulated_output_tokens"`
		AccumulatedTotalTokens  *int64   `json:"accumulated_total_tokens"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return goose.Usage{}, err
	}
	in, out, total := s.AccumulatedInputTokens, s.AccumulatedOutputTokens, s.AccumulatedTotalTokens
	if a := s.AccumulatedUsage; a != nil {
		in, out, total = a.InputTokens, a.OutputTokens, a.TotalTokens
	}
	u := goose.Usage{Cost: s.AccumulatedCost}
	if in != nil {
		u.InputTokens = *in
	}
	if out != nil {
		u.OutputTokens = *out
	}
	if total != nil {
		u.TotalTokens = *total
	}
	return u.Normalized(), nil
}

// route hands a notification to the reply running in its session. It runs on
// the connection's reader and waits while that reply's queue is full, which
// stops this connection being read (wsStream).
func (c *Client) route(cn *conn, f *frame) {
	d, err := f.notification()
	if err != nil {
		method := f.Method
		// An update kind this client does not know (ACP asks clients to
		// ignore those) or a malformed one: skipped, and said so.
		level := slog.LevelWarn
		if method != methodSessionUpdate && method != methodGooseUpdate {
			level = slog.LevelDebug
		}
		c.log.Log(context.Background(), level, "skipped a goose notification", "method", method, "session", cn.session, "err", err)
		return
	}
	c.routeDecoded(cn, d)
}

// routeDecoded routes one decoded notification.
func (c *Client) routeDecoded(cn *conn, d decoded) {
	if d.Custom {
		cn.custom.Store(true)
	}
	if d.Accumulated != nil {
		c.mu.Lock()
		if c.sessions[d.SessionID] != nil { // see forgetSessionLocked
			c.usage[d.SessionID] = *d.Accumulated
		}
		c.mu.Unlock()
	}
	if d.ActiveRun != nil {
		c.mu.Lock()
		if *d.ActiveRun == "" {
			delete(cn.runs, d.SessionID)
		} else {
			cn.runs[d.SessionID] = *d.ActiveRun
		}
		close(c.runsChanged)
		c.runsChanged = make(chan struct{})
		c.mu.Unlock()
	}
	// The connection's own reply: no client-wide lock per event.
	r := cn.reply.Load()
	if r == nil || r.sessionID != d.SessionID || d.Event == nil {
		return
	}
	if d.StableUsage && cn.custom.Load() {
		return
	}
	r.deliver(d, c.cfg.MaxQueuedEvents, cn.rpc.Closing())
}

// acceptPermission turns session/request_permission into an
// *goose.ApprovalRequest; the work it returns blocks until Approve answers it
// (§2.7). It runs on the connection's reader: the tool_call goose sent before
// the request has reached the reply, and a session/load the request came
// during is still in flight.
func (c *Client) acceptPermission(cn *conn, req *params) func(context.Context) (any, *acpsdk.RequestError) {
	cancelled := func(context.Context) (any, *acpsdk.RequestError) { return cancelledOutcome(), nil }
	id, title := req.ToolCall.ToolCallID, req.ToolCall.Title
	options := req.Options
	c.mu.Lock()
	r := c.replies[req.SessionID]
	if r == nil || r.cn != cn {
		// Nobody can answer: refuse (an unanswered request blocks goose
		// forever). One that comes during session/load is goose resuming a
		// turn that waited for an approval when an earlier connection (an
		// adk2goose that restarted) went away: kept for the session's next
		// reply to report.
		if cn.loading[req.SessionID] {
			name := id
			if title != "" {
				name = title
			}
			c.lost[req.SessionID] = append(c.lost[req.SessionID], &goose.ToolResponse{ID: id, Name: name, IsError: true,
				Text: "not run: it was waiting for approval when adk2goose restarted, and goose was told it is denied; ask again to run it"})
		}
		c.mu.Unlock()
		return cancelled
	}
	c.mu.Unlock()
	ch := make(chan goose.Decision, 1)
	if !r.addApproval(id, ch) {
		return cancelled
	}
	r.push(item{ev: &goose.ApprovalRequest{
		ID:        id,
		ToolName:  r.toolName(id, title),
		Arguments: jsonValue(req.ToolCall.RawInput),
		Prompt:    title,
	}})
	return func(ctx context.Context) (any, *acpsdk.RequestError) {
		defer r.removeApproval(id, ch)
		select {
		case d := <-ch:
			return permissionOutcome(d, options), nil
		case <-r.ended:
			// A decision made before the reply ended wins: select picks at
			// random among ready cases, and a denial followed at once by
			// the reply's end (a drain, a timeout) must reach goose as one.
			select {
			case d := <-ch:
				return permissionOutcome(d, options), nil
			default:
			}
			return cancelledOutcome(), nil
		case <-ctx.Done():
			return nil, acpsdk.NewRequestCancelled(nil)
		}
	}
}

func cancelledOutcome() acpsdk.RequestPermissionResponse {
	return acpsdk.RequestPermissionResponse{Outcome: acpsdk.RequestPermissionOutcome{
		Cancelled: &acpsdk.RequestPermissionOutcomeCancelled{Outcome: "cancelled"},
	}}
}

func decisionKind(d goose.Decision) (acpsdk.PermissionOptionKind, bool) {
	switch d {
	case goose.AllowOnce:
		return acpsdk.PermissionOptionKindAllowOnce, true
	case goose.AlwaysAllow:
		return acpsdk.PermissionOptionKindAllowAlways, true
	case goose.DenyOnce:
		return acpsdk.PermissionOptionKindRejectOnce, true
	case goose.AlwaysDeny:
		return acpsdk.PermissionOptionKindRejectAlways, true
	case goose.CancelDecision:
		return "", true
	}
	return "", false
}

// permissionOutcome selects the offered option of the decided kind. A kind
// goose did not offer becomes "cancelled", which goose treats as a refusal
// (§2.7): never grant more than was offered.
func permissionOutcome(d goose.Decision, options []acpsdk.PermissionOption) acpsdk.RequestPermissionResponse {
	kind, _ := decisionKind(d)
	if kind == "" {
		return cancelledOutcome()
	}
	for _, o := range options {
		if o.Kind == kind {
			return acpsdk.RequestPermissionResponse{Outcome: acpsdk.RequestPermissionOutcome{
				Selected: &acpsdk.RequestPermissionOutcomeSelected{Outcome: "selected", OptionId: o.OptionId},
			}}
		}
	}
	return cancelledOutcome()
}

// Approve answers a pending *goose.ApprovalRequest.
func (c *Client) Approve(_ context.Context, sessionID, requestID string, decision goose.Decision) error {
	if _, ok := decisionKind(decision); !ok {
		return fmt.Errorf("failed to approve tool call: unknown decision %q", decision)
	}
	c.mu.Lock()
	r := c.replies[sessionID]
	c.mu.Unlock()
	if r == nil {
		return fmt.Errorf("failed to approve tool call: no reply running in session %q", sessionID)
	}
	ch := r.approval(requestID)
	if ch == nil {
		return fmt.Errorf("failed to approve tool call: no pending approval %q in session %q", requestID, sessionID)
	}
	select {
	case ch <- decision:
		return nil
	default:
		return fmt.Errorf("failed to approve tool call: approval %q already answered", requestID)
	}
}

// Reply sends session/prompt and streams the session's updates until the
// prompt's result (or error) arrives. A ctx already done sends nothing; once
// ctx is done, updates still queued are dropped and the sequence ends with
// ctx's error after session/cancel went out (goose.Backend.Reply's rules).
// The reply is released before its last value is yielded, so the consumer
// may send the session's next prompt at once.
func (c *Client) Reply(ctx context.Context, sessionID string, msg goose.UserMessage) iter.Seq2[goose.Event, error] {
	return func(yield func(goose.Event, error) bool) {
		r, prompt, err := c.sendPrompt(ctx, sessionID, msg)
		if err != nil {
			yield(nil, err)
			return
		}
		// finished: the prompt's result or error arrived; nothing is left
		// to cancel in goose.
		finished, released := false, false
		release := func() {
			if released {
				return
			}
			released = true
			if !finished {
				c.abort(r)
			}
			r.end() // a reader waiting to deliver to us gives up
			if prompt != nil {
				prompt.cancel() // after session/cancel, as goose expects (abort)
			}
			c.endReply(r)
		}
		defer release()
		last := func(ev goose.Event, err error) {
			release()
			yield(ev, err)
		}
		for {
			select {
			case <-r.signal:
			case <-ctx.Done():
			}
			for _, it := range r.take() {
				if ctx.Err() != nil {
					break
				}
				if it.err != nil {
					finished = true
					last(nil, it.err)
					return
				}
				if _, ok := it.ev.(*goose.Finish); ok {
					finished = true
					last(it.ev, nil)
					return
				}
				if !yield(it.ev, nil) {
					return
				}
			}
			if ctx.Err() != nil {
				// No queued update is handed out once ctx is done, only
				// ctx's error, after session/cancel (release).
				last(nil, fmt.Errorf("failed to stream reply: %w", ctx.Err()))
				return
			}
		}
	}
}

// sendPrompt registers the reply on the session's connection and sends the
// prompt.
func (c *Client) sendPrompt(ctx context.Context, sessionID string, msg goose.UserMessage) (*reply, *sentRequest, error) {
	if err := ctx.Err(); err != nil {
		// Nothing reaches goose on a context that is already done.
		return nil, nil, fmt.Errorf("failed to send prompt: %w", err)
	}
	if err := goose.CheckMessageSize(msg.Text, c.cfg.MaxMessageBytes); err != nil {
		// goose would drop the socket on it (goose#10751): refused here,
		// before anything is sent.
		return nil, nil, err
	}
	r, err := c.startReply(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	// Answered on the connection's reader, which queues the reply's ending
	// after the updates before it: no goroutine per reply waits for the
	// answer.
	prompt, err := r.cn.rpc.send(methodSessionPrompt, acpsdk.PromptRequest{
		SessionId: acpsdk.SessionId(r.sessionID),
		Prompt:    []acpsdk.ContentBlock{acpsdk.TextBlock(msg.Text)},
		Meta:      traceMeta(ctx),
	}, func(f *frame, err error) { c.promptAnswered(r, f, err) })
	if err != nil {
		c.promptAnswered(r, nil, err)
	}
	return r, prompt, nil
}

// startReply registers a reply on the session's own connection. goose
// activates the session on that connection with the prompt itself (§2).
func (c *Client) startReply(ctx context.Context, sessionID string) (*reply, error) {
	for {
		cn, err := c.sessionConn(ctx, sessionID)
		if err != nil {
			return nil, fmt.Errorf("failed to send prompt: %w", err)
		}
		r := newReply(sessionID, cn)
		c.mu.Lock()
		if _, busy := c.replies[sessionID]; busy {
			c.releaseLocked(cn)
			c.mu.Unlock()
			return nil, fmt.Errorf("failed to send prompt: a reply is already running in session %q", sessionID)
		}
		if c.sessions[sessionID] != cn {
			// Dropped since we got it: dial again.
			c.releaseLocked(cn)
			c.mu.Unlock()
			continue
		}
		if cn.idle != nil {
			cn.idle.Stop()
		}
		cn.replied = true
		c.replies[sessionID] = r
		for _, tr := range c.lost[sessionID] {
			r.push(item{ev: tr}) // ends a tool call of a turn from before a restart
		}
		delete(c.lost, sessionID)
		cn.reply.Store(r)
		cn.inUse-- // the reply holds it now; endReply starts its idle time
		c.mu.Unlock()
		return r, nil
	}
}

// resumedRunTimeout bounds the wait for a resumed goose run to stop.
const resumedRunTimeout = 30 * time.Second

// settleResumedRun deals with a run goose started on session/load to resume
// a turn stopped at a tool approval (load_session.rs
// start_resumed_state_machine_turn): its approval was refused and kept for
// the next reply to report (handlePermission); goose is told to stop the run,
// and this waits for it to end, since goose refuses a prompt while a run is
// active (§2.4). The wait also outlasts the refusal's own goroutine: the
// request came before the session/load answer, the run's end is a round trip
// through goose after it.
func (c *Client) settleResumedRun(ctx context.Context, cn *conn, id string) error {
	c.mu.Lock()
	run := cn.runs[id]
	c.mu.Unlock()
	// Only a resumed run ("resume_<uuid>", load_session.rs) can be active
	// before our prompt; an ended prompt's run id may still be on its way.
	if !strings.HasPrefix(run, "resume_") {
		return nil
	}
	if err := cn.rpc.sendNotification(ctx, methodSessionCancel, acpsdk.CancelNotification{SessionId: acpsdk.SessionId(id)}); err != nil {
		return fmt.Errorf("failed to stop goose's resumed run: %w", c.mapErr(cn, err))
	}
	timer := time.NewTimer(resumedRunTimeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		run, running := cn.runs[id]
		changed := c.runsChanged
		c.mu.Unlock()
		if !running {
			return nil
		}
		select {
		case <-changed:
		case <-cn.rpc.Done():
			return fmt.Errorf("failed to stop goose's resumed run %s: %w: connection lost", run, goose.ErrUnavailable)
		case <-ctx.Done():
			return fmt.Errorf("failed to stop goose's resumed run %s: %w", run, ctx.Err())
		case <-timer.C:
			return fmt.Errorf("failed to stop goose's resumed run %s: still active after %s", run, resumedRunTimeout)
		}
	}
}

func (c *Client) endReply(r *reply) {
	c.mu.Lock()
	if c.replies[r.sessionID] == r {
		delete(c.replies, r.sessionID)
	}
	r.cn.reply.CompareAndSwap(r, nil)
	if c.sessions[r.sessionID] == r.cn {
		c.idleLocked(r.cn)
	}
	c.mu.Unlock()
	r.end()
}

// abort tells goose to stop a reply the consumer no longer reads.
func (c *Client) abort(r *reply) {
	r.cancelApprovals()
	if r.cn.dead() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.cn.rpc.sendNotification(ctx, methodSessionCancel, acpsdk.CancelNotification{SessionId: acpsdk.SessionId(r.sessionID)}); err != nil {
		c.log.Debug("failed to send session/cancel", "session", r.sessionID, "err", err)
	}
}

// promptAnswered queues the reply's ending: goose's answer to its
// session/prompt, or err (the prompt could not be sent, or its connection
// ended first). It runs on the connection's reader and does not block.
func (c *Client) promptAnswered(r *reply, f *frame, err error) {
	cn := r.cn
	var resp acpsdk.PromptResponse
	if err == nil {
		resp, err = decodeResult[acpsdk.PromptResponse](methodSessionPrompt, f)
	}
	if err != nil {
		mapped := c.mapErr(cn, err)
		if errors.Is(mapped, goose.ErrUnavailable) {
			// What was read off the socket has been routed already.
			r.push(item{err: fmt.Errorf("failed to stream reply: %w: %w", goose.ErrStreamBroken, cn.lostErr())})
			return
		}
		r.push(item{err: fmt.Errorf("failed to stream reply: %w", mapped)})
		return
	}
	// PromptResponse.usage is the last provider call (§3.1); report it only
	// when goose did not already send per-message usage.
	if u := resp.Usage; u != nil && !r.messageUsageSeen() {
		r.push(item{ev: &goose.UsageUpdate{Last: goose.Usage{
			InputTokens:  int64(u.InputTokens),
			OutputTokens: int64(u.OutputTokens),
			TotalTokens:  int64(u.TotalTokens),
		}.Normalized()}})
	}
	r.push(item{ev: &goose.Finish{Reason: string(resp.StopReason)}})
}
