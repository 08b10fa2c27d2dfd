// Package acp is the goose.Backend for `goose serve`: ACP (JSON-RPC) over one
// long-lived WebSocket on /acp, with github.com/coder/acp-go-sdk doing the
// JSON-RPC and the types. The wire is described in
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
}

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("goose ACP client closed")

// Client is a goose.Backend over ACP. One WebSocket connection serves every
// session; it is dialled on first use and redialled after it drops.
type Client struct {
	cfg     Config
	httpURL string // base for /status
	wsURL   string
	header  http.Header
	dialer  *websocket.Dialer
	httpc   *http.Client
	log     *slog.Logger

	dialMu sync.Mutex // one dial at a time

	mu      sync.Mutex
	closed  bool
	cur     *conn
	replies map[string]*reply      // by session id
	usage   map[string]goose.Usage // last accumulated usage seen, by session id
	cwd     map[string]string      // working dirs, needed by session/load
	// runsChanged is closed (and replaced) whenever a conn's runs change.
	runsChanged chan struct{}
	// lost are, by session, tool calls whose approval goose asked again on
	// session/load (a turn resumed from before an adk2goose restart),
	// refused because nobody holds their confirmation any more; the
	// session's next reply reports them.
	lost map[string][]*goose.ToolResponse

	wg sync.WaitGroup // connection watchers
}

var _ goose.Backend = (*Client)(nil)

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
	c := &Client{
		cfg:     cfg,
		httpURL: strings.TrimSuffix(hu.String(), "/"),
		wsURL:   wu.String(),
		header:  http.Header{},
		dialer: &websocket.Dialer{
			HandshakeTimeout: cfg.DialTimeout,
			// No Origin header is sent, which goose's Origin policy allows (§1).
		},
		httpc:   cfg.HTTPClient,
		log:     cfg.Logger,
		replies: make(map[string]*reply),
		usage:   make(map[string]goose.Usage),
		cwd:     make(map[string]string),
		lost:    make(map[string][]*goose.ToolResponse),

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
// connection gets its own agent instance, §2.1).
type conn struct {
	c      *Client
	stream *wsStream
	rpc    *acpsdk.Connection

	// notifDone counts handled ordered notifications; waiters are woken by
	// closing waitCh (see wsStream.notifRead).
	waitMu    sync.Mutex
	notifDone uint64
	waitCh    chan struct{}

	// custom is set once goose sent a _goose/... notification, i.e. it
	// honoured customNotifications; the stable usage_update is then redundant.
	custom atomic.Bool

	loaded map[string]bool // sessions active in this connection's agent; c.mu
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

func (cn *conn) notificationHandled() {
	cn.waitMu.Lock()
	cn.notifDone++
	if cn.waitCh != nil {
		close(cn.waitCh)
		cn.waitCh = nil
	}
	cn.waitMu.Unlock()
}

// waitHandled waits until target notifications have been handled. The
// timeout is a guard only: counts could disagree on a frame the SDK drops
// for a reason the transport cannot see.
func (cn *conn) waitHandled(ctx context.Context, target uint64) {
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	for {
		cn.waitMu.Lock()
		if cn.notifDone >= target {
			cn.waitMu.Unlock()
			return
		}
		if cn.waitCh == nil {
			cn.waitCh = make(chan struct{})
		}
		ch := cn.waitCh
		cn.waitMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		}
	}
}

// handle is the SDK's inbound MethodHandler for this connection.
// Notifications arrive here one at a time in wire order; requests each on
// their own goroutine.
func (cn *conn) handle(ctx context.Context, method string, params json.RawMessage) (any, *acpsdk.RequestError) {
	switch method {
	case methodSessionUpdate, methodGooseUpdate:
		cn.c.route(cn, method, params)
		cn.notificationHandled()
		return nil, nil
	case methodRequestPermission:
		return cn.c.handlePermission(ctx, cn, params)
	}
	// We advertise no fs/terminal capabilities, so goose sends nothing else
	// that needs an answer (§5).
	return nil, acpsdk.NewMethodNotFound(method)
}

// connect returns the live connection, dialling and initializing a new one
// when there is none.
func (c *Client) connect(ctx context.Context) (*conn, error) {
	if cn, err := c.current(); cn != nil || err != nil {
		return cn, err
	}
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	if cn, err := c.current(); cn != nil || err != nil {
		return cn, err
	}

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

	stream := newWSStream(ws)
	cn := &conn{c: c, stream: stream, loaded: make(map[string]bool), runs: make(map[string]string), loading: make(map[string]bool)}
	cn.rpc = acpsdk.NewConnection(cn.handle, stream, stream)
	cn.rpc.SetLogger(c.log)
	// The stream holds reads until the logger is set: the SDK's reader would
	// otherwise race with SetLogger on an early disconnect.
	stream.start()

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
	if _, err := acpsdk.SendRequest[json.RawMessage](cn.rpc, dctx, methodInitialize, init); err != nil {
		_ = stream.Close() // the connection failed already; its error is the one to report
		<-cn.rpc.Done()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("failed to initialize ACP connection: %w", ctx.Err())
		}
		return nil, fmt.Errorf("failed to initialize ACP connection: %w", c.mapErr(cn, err))
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = stream.Close() // the connection failed already; its error is the one to report
		<-cn.rpc.Done()
		return nil, fmt.Errorf("failed to connect to goose: %w", ErrClosed)
	}
	c.cur = cn
	c.wg.Add(1)
	c.mu.Unlock()
	go c.watch(cn)
	return cn, nil
}

func (c *Client) current() (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.cur != nil && !c.cur.dead() {
		return c.cur, nil
	}
	return nil, nil
}

// watch forgets a connection once it is gone, so the next call redials.
// In-flight replies learn of the drop from their own session/prompt call.
func (c *Client) watch(cn *conn) {
	defer c.wg.Done()
	<-cn.rpc.Done()
	_ = cn.stream.Close() // already gone: nothing to report
	c.mu.Lock()
	if c.cur == cn {
		c.cur = nil
	}
	c.mu.Unlock()
}

// Close closes the connection; in-flight replies end with an error wrapping
// goose.ErrStreamBroken. Sessions persist in goose.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	cn := c.cur
	c.mu.Unlock()
	if cn != nil {
		_ = cn.stream.Close() // replies learn of it through their own calls
	}
	c.wg.Wait()
	return nil
}

// mapErr turns an SDK/JSON-RPC error into the goose error vocabulary.
func (c *Client) mapErr(cn *conn, err error) error {
	var re *acpsdk.RequestError
	if !errors.As(err, &re) {
		return err
	}
	if re.Code == -32603 && isLocalError(re) {
		// The SDK reports a lost peer or a failed write as a local -32603;
		// give the reader a moment to notice a broken socket.
		select {
		case <-cn.rpc.Done():
		case <-time.After(100 * time.Millisecond):
		}
		if cn.dead() {
			return fmt.Errorf("%w: connection lost", goose.ErrUnavailable)
		}
	}
	switch re.Code {
	case -32002: // resource not found (§3)
		return fmt.Errorf("%w: %s", goose.ErrSessionNotFound, errDetail(re))
	case -32800:
		return fmt.Errorf("%w: %s", context.Canceled, errDetail(re))
	}
	return &goose.AgentError{Code: re.Code, Message: errDetail(re)}
}

// isLocalError recognises the errors acp-go-sdk makes up itself (never sent
// by goose): Data is {"error": "<text>"} as built by NewInternalError.
func isLocalError(re *acpsdk.RequestError) bool {
	m, ok := re.Data.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	_, ok = m["error"].(string)
	return ok
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

// call sends one request on the live connection.
func call[T any](ctx context.Context, c *Client, what, method string, params any) (T, *conn, error) {
	var zero T
	cn, err := c.connect(ctx)
	if err != nil {
		return zero, nil, fmt.Errorf("failed to %s: %w", what, err)
	}
	res, err := acpsdk.SendRequest[T](cn.rpc, ctx, method, params)
	if err != nil {
		if ctx.Err() != nil {
			return zero, cn, fmt.Errorf("failed to %s: %w", what, ctx.Err())
		}
		return zero, cn, fmt.Errorf("failed to %s: %w", what, c.mapErr(cn, err))
	}
	return res, cn, nil
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

// StartSession runs session/new, then set_mode and provider/model config
// options when asked (§3, §4).
func (c *Client) StartSession(ctx context.Context, opts goose.StartOptions) (goose.Session, error) {
	res, cn, err := call[newSessionResult](ctx, c, "start session", methodSessionNew, acpsdk.NewSessionRequest{
		Cwd:        opts.WorkingDir,
		McpServers: []acpsdk.McpServer{},
	})
	if err != nil {
		return goose.Session{}, err
	}
	id := res.SessionID
	if id == "" {
		return goose.Session{}, errors.New("failed to start session: goose returned no sessionId")
	}
	cwd := res.Meta.WorkingDir
	if cwd == "" {
		cwd = opts.WorkingDir
	}
	c.mu.Lock()
	cn.loaded[id] = true
	c.cwd[id] = cwd
	c.mu.Unlock()

	if opts.Mode != "" {
		if _, _, err := call[json.RawMessage](ctx, c, "set session mode", methodSessionSetMode,
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
		if _, _, err := call[json.RawMessage](ctx, c, "set session "+o.id, methodSetConfigOption, req); err != nil {
			return goose.Session{}, err
		}
	}

	s, err := c.GetSession(ctx, id)
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

// ResumeSession loads a persisted session into this connection's agent.
func (c *Client) ResumeSession(ctx context.Context, id string) (goose.Session, error) {
	cn, err := c.connect(ctx)
	if err != nil {
		return goose.Session{}, fmt.Errorf("failed to resume session: %w", err)
	}
	if err := c.ensureLoaded(ctx, cn, id); err != nil {
		return goose.Session{}, err
	}
	return c.GetSession(ctx, id)
}

// ensureLoaded runs session/load unless the session is already active on cn.
// After a reconnect goose's new agent for the connection has no sessions in
// memory (§2.1, §2.4).
func (c *Client) ensureLoaded(ctx context.Context, cn *conn, id string) error {
	c.mu.Lock()
	loaded := cn.loaded[id]
	cwd := c.cwd[id]
	c.mu.Unlock()
	if loaded {
		return nil
	}
	if cwd == "" {
		s, err := c.GetSession(ctx, id)
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
	_, err := acpsdk.SendRequest[json.RawMessage](cn.rpc, ctx, methodSessionLoad, acpsdk.LoadSessionRequest{
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
	cn.loaded[id] = true
	c.mu.Unlock()
	return c.settleResumedRun(ctx, cn, id)
}

type infoResult struct {
	Session acpsdk.SessionInfo `json:"session"`
}

// GetSession uses _goose/unstable/session/info (§3).
func (c *Client) GetSession(ctx context.Context, id string) (goose.Session, error) {
	res, _, err := call[infoResult](ctx, c, "get session", methodSessionInfo, sessionIDParams{SessionID: id})
	if err != nil {
		return goose.Session{}, err
	}
	if res.Session.SessionId == "" {
		return goose.Session{}, fmt.Errorf("failed to get session: %w", goose.ErrSessionNotFound)
	}
	return c.toSession(res.Session), nil
}

// maxListPages stops a misbehaving server from paging us forever (50 per
// page upstream, §3: 50 000 sessions).
const maxListPages = 1000

// ListSessions pages session/list until there is no nextCursor (§3.1).
func (c *Client) ListSessions(ctx context.Context) ([]goose.Session, error) {
	var out []goose.Session
	var cursor *string
	for range maxListPages {
		res, _, err := call[acpsdk.ListSessionsResponse](ctx, c, "list sessions", methodSessionList,
			acpsdk.ListSessionsRequest{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, si := range res.Sessions {
			out = append(out, c.toSession(si))
		}
		if res.NextCursor == nil || *res.NextCursor == "" {
			return out, nil
		}
		if cursor != nil && *cursor == *res.NextCursor {
			return nil, errors.New("failed to list sessions: goose repeated a cursor")
		}
		cursor = res.NextCursor
	}
	return nil, errors.New("failed to list sessions: too many pages")
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
		c.cwd[s.ID] = s.WorkingDir
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
	if _, _, err := call[json.RawMessage](ctx, c, "delete session", methodSessionDelete, sessionIDParams{SessionID: id}); err != nil {
		// goose reports an unknown id as -32603 "Session not found"
		// (manage_sessions.rs on_delete_session maps every storage error to
		// internal_err); ask session/info, which says -32002, rather than
		// match the message.
		var ae *goose.AgentError
		if errors.As(err, &ae) && ae.Code == -32603 {
			if _, ierr := c.GetSession(ctx, id); errors.Is(ierr, goose.ErrSessionNotFound) {
				return fmt.Errorf("failed to delete session: %w", goose.ErrSessionNotFound)
			}
		}
		return err
	}
	c.mu.Lock()
	delete(c.usage, id)
	delete(c.cwd, id)
	delete(c.lost, id)
	if c.cur != nil {
		delete(c.cur.loaded, id)
	}
	c.mu.Unlock()
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
	res, _, err := call[struct {
		Data string `json:"data"`
	}](ctx, c, "export session", methodSessionExport, sessionIDParams{SessionID: id})
	if err != nil {
		return goose.Usage{}, err
	}
	u, err = parseExportUsage([]byte(res.Data))
	if err != nil {
		return goose.Usage{}, fmt.Errorf("failed to read session usage: %w", err)
	}
	c.mu.Lock()
	if _, seen := c.usage[id]; !seen {
		c.usage[id] = u
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
	} else {
		u.TotalTokens = u.InputTokens + u.OutputTokens
	}
	return u, nil
}

// route hands a notification to the reply running in its session.
func (c *Client) route(cn *conn, method string, params json.RawMessage) {
	d, err := decodeNotification(method, params)
	if err != nil {
		c.log.Debug("ignoring goose notification", "method", method, "err", err)
		return
	}
	if d.Custom {
		cn.custom.Store(true)
	}
	c.mu.Lock()
	if d.Accumulated != nil {
		c.usage[d.SessionID] = *d.Accumulated
	}
	if d.ActiveRun != nil {
		if *d.ActiveRun == "" {
			delete(cn.runs, d.SessionID)
		} else {
			cn.runs[d.SessionID] = *d.ActiveRun
		}
		close(c.runsChanged)
		c.runsChanged = make(chan struct{})
	}
	r := c.replies[d.SessionID]
	c.mu.Unlock()
	if tr, ok := d.Event.(*goose.ToolRequest); ok && r != nil && r.cn == cn && !r.armed.Load() {
		r.noteTool(tr.ID, tr.Name) // the session/load replay: names a lost approval
	}
	if r == nil || r.cn != cn || !r.armed.Load() || d.Event == nil {
		return
	}
	if d.StableUsage && cn.custom.Load() {
		return
	}
	r.deliver(d)
}

// handlePermission turns session/request_permission into an
// *goose.ApprovalRequest and blocks until Approve answers it (§2.7).
func (c *Client) handlePermission(ctx context.Context, cn *conn, params json.RawMessage) (any, *acpsdk.RequestError) {
	var req acpsdk.RequestPermissionRequest
	if err := json.Unmarshal(params, &req); err != nil {
		return nil, acpsdk.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	// goose sent the tool_call before this request; let it reach the reply
	// first so events stay in wire order.
	cn.waitHandled(ctx, cn.stream.notifRead.Load())

	c.mu.Lock()
	r := c.replies[string(req.SessionId)]
	c.mu.Unlock()
	if r == nil || r.cn != cn || !r.armed.Load() {
		// Nobody can answer: refuse (an unanswered request blocks goose
		// forever). One that comes during session/load is goose resuming a
		// turn that waited for an approval when an earlier connection (an
		// adk2goose that restarted) went away: kept for the session's next
		// reply to report.
		id := string(req.ToolCall.ToolCallId)
		name := ""
		if req.ToolCall.Title != nil {
			name = *req.ToolCall.Title
		}
		if r != nil && r.cn == cn {
			name = r.toolName(id, name)
		}
		c.mu.Lock()
		if cn.loading[string(req.SessionId)] {
			c.lost[string(req.SessionId)] = append(c.lost[string(req.SessionId)], &goose.ToolResponse{ID: id, Name: name, IsError: true,
				Text: "not run: it was waiting for approval when adk2goose restarted, and goose was told it is denied; ask again to run it"})
		}
		c.mu.Unlock()
		return cancelledOutcome(), nil
	}
	id := string(req.ToolCall.ToolCallId)
	ch := make(chan goose.Decision, 1)
	if !r.addApproval(id, ch) {
		return cancelledOutcome(), nil
	}
	defer r.removeApproval(id, ch)
	title := ""
	if req.ToolCall.Title != nil {
		title = *req.ToolCall.Title
	}
	r.push(item{ev: &goose.ApprovalRequest{
		ID:        id,
		ToolName:  r.toolName(id, title),
		Arguments: rawJSON(req.ToolCall.RawInput),
		Prompt:    title,
	}})
	select {
	case d := <-ch:
		return permissionOutcome(d, req.Options), nil
	case <-r.ended:
		return cancelledOutcome(), nil
	case <-ctx.Done():
		return nil, acpsdk.NewRequestCancelled(nil)
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

// Cancel sends session/cancel (a notification, §2.7) and answers any pending
// permission request "cancelled" so goose is not left waiting on it.
func (c *Client) Cancel(ctx context.Context, sessionID string) error {
	c.mu.Lock()
	r := c.replies[sessionID]
	cn := c.cur
	c.mu.Unlock()
	if r != nil {
		r.cancelApprovals()
		cn = r.cn
	}
	if cn == nil || cn.dead() {
		// goose aborts a closed connection's agent and its runs (§2.5).
		return nil
	}
	if err := cn.rpc.SendNotification(ctx, methodSessionCancel, acpsdk.CancelNotification{SessionId: acpsdk.SessionId(sessionID)}); err != nil {
		return fmt.Errorf("failed to cancel reply: %w", c.mapErr(cn, err))
	}
	return nil
}

// Reply sends session/prompt and streams the session's updates until the
// prompt's result (or error) arrives. A ctx already done sends nothing; once
// ctx is done, updates still queued are dropped and the sequence ends with
// ctx's error after session/cancel went out (goose.Backend.Reply's rules).
func (c *Client) Reply(ctx context.Context, sessionID string, msg goose.UserMessage) iter.Seq2[goose.Event, error] {
	return func(yield func(goose.Event, error) bool) {
		if err := ctx.Err(); err != nil {
			// Nothing reaches goose on a context that is already done.
			yield(nil, fmt.Errorf("failed to send prompt: %w", err))
			return
		}
		r, err := c.startReply(ctx, sessionID)
		if err != nil {
			yield(nil, err)
			return
		}
		defer c.endReply(r)

		// The prompt call must outlive ctx long enough for session/cancel to
		// go out first; it is cancelled right after (below).
		pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.runPrompt(pctx, r, msg)
		}()
		finished := false
		defer func() {
			if !finished {
				c.abort(r)
			}
			pcancel()
			<-done
		}()

		// stopped ends the sequence once ctx is done: no queued event is
		// yielded after that, only ctx's error (the contract of
		// goose.Backend.Reply).
		stopped := func() bool {
			if ctx.Err() == nil {
				return false
			}
			c.abort(r)
			finished = true
			yield(nil, fmt.Errorf("failed to stream reply: %w", ctx.Err()))
			return true
		}
		for {
			select {
			case <-r.signal:
			case <-ctx.Done():
			}
			if stopped() {
				return
			}
			for _, it := range r.take() {
				if stopped() {
					return
				}
				if it.err != nil {
					finished = true
					yield(nil, it.err)
					return
				}
				if _, ok := it.ev.(*goose.Finish); ok {
					finished = true
					yield(it.ev, nil)
					return
				}
				if !yield(it.ev, nil) {
					return
				}
			}
		}
	}
}

func (c *Client) startReply(ctx context.Context, sessionID string) (*reply, error) {
	cn, err := c.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to send prompt: %w", err)
	}
	r := newReply(sessionID, cn)
	c.mu.Lock()
	if _, busy := c.replies[sessionID]; busy {
		c.mu.Unlock()
		return nil, fmt.Errorf("failed to send prompt: a reply is already running in session %q", sessionID)
	}
	c.replies[sessionID] = r
	c.mu.Unlock()
	// Registered but not armed: a session/load history replay is not routed.
	if err := c.ensureLoaded(ctx, cn, sessionID); err != nil {
		c.endReply(r)
		return nil, err
	}
	c.mu.Lock()
	lost := c.lost[sessionID]
	delete(c.lost, sessionID)
	c.mu.Unlock()
	for _, tr := range lost {
		r.push(item{ev: tr}) // ends a tool call of a turn from before a restart
	}
	r.armed.Store(true)
	return r, nil
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
	if err := cn.rpc.SendNotification(ctx, methodSessionCancel, acpsdk.CancelNotification{SessionId: acpsdk.SessionId(id)}); err != nil {
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
	c.mu.Unlock()
	close(r.ended)
}

// abort tells goose to stop a reply the consumer no longer reads.
func (c *Client) abort(r *reply) {
	r.cancelApprovals()
	if r.cn.dead() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.cn.rpc.SendNotification(ctx, methodSessionCancel, acpsdk.CancelNotification{SessionId: acpsdk.SessionId(r.sessionID)}); err != nil {
		c.log.Debug("failed to send session/cancel", "session", r.sessionID, "err", err)
	}
}

// runPrompt performs session/prompt and pushes the reply's ending.
func (c *Client) runPrompt(ctx context.Context, r *reply, msg goose.UserMessage) {
	cn := r.cn
	resp, err := acpsdk.SendRequest[acpsdk.PromptResponse](cn.rpc, ctx, methodSessionPrompt, acpsdk.PromptRequest{
		SessionId: acpsdk.SessionId(r.sessionID),
		Prompt:    []acpsdk.ContentBlock{acpsdk.TextBlock(msg.Text)},
	})
	if err != nil {
		if ctx.Err() != nil {
			return // the iterator has gone; nobody reads the queue
		}
		mapped := c.mapErr(cn, err)
		if errors.Is(mapped, goose.ErrUnavailable) {
			// Deliver what was already read off the socket, then the break.
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			cn.waitHandled(dctx, cn.stream.notifRead.Load())
			cancel()
			r.push(item{err: fmt.Errorf("failed to stream reply: %w: connection lost", goose.ErrStreamBroken)})
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
		}}})
	}
	r.push(item{ev: &goose.Finish{Reason: string(resp.StopReason)}})
}
