package goosetest

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// This file is a fake `goose serve`: ACP JSON-RPC over WebSocket on /acp plus
// the health routes. Section numbers (§) refer to
// shared/reference/goose-acp.md, the upstream behaviour each part reproduces.
// The HTTP+SSE flavour of /acp is not implemented; the client under test uses
// the WebSocket transport only.

// ServeOption configures a fake goose serve.
type ServeOption func(*Serve)

// WithServeScript sets how the fake answers prompts (default Echo).
func WithServeScript(s Script) ServeOption { return func(f *Serve) { f.script = s } }

// WithServeSecret sets GOOSE_SERVER__SECRET_KEY (default: random). An empty
// key is --dangerously-unauthenticated: no check at all (§1).
func WithServeSecret(key string) ServeOption { return func(f *Serve) { f.Secret = key } }

// WithServeListener serves on l instead of a new loopback port, as `goose
// serve --host H --port P` does (test/e2e/cmd/goose, the e2e goose image).
func WithServeListener(l net.Listener) ServeOption { return func(f *Serve) { f.listener = l } }

// WithServeExtensions makes the fake start and stop each session's
// extensions as goose does (see ServeExtensions); without it a session has
// none and extensionResults is empty.
func WithServeExtensions(x ServeExtensions) ServeOption { return func(f *Serve) { f.extensions = x } }

// ServeExtensions starts a session's configured extensions when the session
// becomes active (session/new, and session/load after the history replay)
// and stops them when it is deleted, as goose's per-session agent does
// (new_session.rs activate_acp_session, load_session.rs
// prepare_acp_session_agent, manage_sessions.rs). Activate on a session that
// is already active replaces its extensions.
type ServeExtensions interface {
	Activate(sessionID, workingDir string) []ExtensionResult
	Release(sessionID string)
}

// ExtensionResult is one entry of session/new's and session/load's
// _meta.extensionResults (upstream ExtensionLoadResult, agents/agent.rs): a
// failed extension does not fail the session.
type ExtensionResult struct {
	Name    string `json:"name"`
	Success bool   `json:"success"`
	Error   string `json:"error,omitempty"`
}

// ServeVersion is the goose version the fake reports in initialize: the
// release of the operator's default image, whose behaviour it follows.
const ServeVersion = "1.48.0"

// ServeContextLimit is the model context size the fake reports.
const ServeContextLimit = 128000

// ServePrompt is one session/prompt the fake received.
type ServePrompt struct {
	SessionID string
	Text      string
	At        time.Time
	// Traceparent is the W3C trace context the client put in the prompt's
	// _meta, which goose continues its own spans from (MCP SEP-414 keys,
	// goose crates/goose/src/otel/trace_context.rs).
	Traceparent string
}

// ServePermission is the client's answer to one session/request_permission.
type ServePermission struct {
	SessionID  string
	ToolCallID string
	// RequestID is the JSON-RPC id (a UUID string, §2.7).
	RequestID string
	// Outcome is "selected" or "cancelled"; OptionID is set when selected.
	Outcome  string
	OptionID string
	At       time.Time
}

// ServeCancel is one session/cancel notification the fake received.
type ServeCancel struct {
	SessionID string
	At        time.Time
}

// ServeSession is a snapshot of one session in the fake's store.
type ServeSession struct {
	ID, WorkingDir, Title string
	Mode, Provider, Model string
	MessageCount          int
	InputTokens           int64
	OutputTokens          int64
	Cost                  *float64
	// AwaitingApproval: the reply stopped at a tool approval when its
	// connection went; session/load resumes it.
	AwaitingApproval bool
}

// Serve is a fake `goose serve` on a loopback httptest server.
type Serve struct {
	// URL is the base URL (http://127.0.0.1:port); /acp, /status, /health.
	URL string
	// Secret is the key clients must send (X-Secret-Key or ?token=).
	Secret string

	srv        *httptest.Server
	listener   net.Listener
	script     Script
	extensions ServeExtensions
	wg         sync.WaitGroup

	mu          sync.Mutex
	closed      bool
	sessions    map[string]*serveSession
	seq         int
	conns       map[*serveConn]struct{}
	connCount   int
	prompts     []ServePrompt
	perms       []ServePermission
	cancels     []ServeCancel
	loads       []string
	calls       map[string]int
	httpFail    int
	methodFails map[string]acpRpcError
	outQueue    int // see WithServeOutboundQueue
	outDrops    int
}

type serveSession struct {
	id, cwd, title        string
	created, updated      time.Time
	messages              int
	mode, provider, model string
	accIn, accOut         int64
	accCost               float64
	costKnown             bool
	last                  *UsageStep
	history               []serveHistory
	// resume is the rest of a reply whose connection went away while it
	// waited for a tool approval: goose's history then ends in a pending
	// tool confirmation, which session/load resumes.
	resume []Step
}

type serveHistory struct {
	role, messageID, text string
}

// NewServe starts a fake goose serve. With a non-nil t it is closed by
// t.Cleanup.
//
//nolint:thelper // t may be nil (programs without a test pass nil) and only registers Cleanup: nothing is reported through it, so Helper would change nothing.
func NewServe(t testing.TB, opts ...ServeOption) *Serve {
	s := &Serve{
		Secret:      acpRandomHex(16),
		script:      Echo,
		sessions:    make(map[string]*serveSession),
		conns:       make(map[*serveConn]struct{}),
		calls:       make(map[string]int),
		methodFails: make(map[string]acpRpcError),
	}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/status", s.handleHealth)
	mux.HandleFunc("/health", s.handleHealth)
	mux.HandleFunc("/acp", s.handleACP)
	s.srv = newServer(mux, s.listener)
	s.URL = s.srv.URL
	if t != nil {
		t.Cleanup(s.Close)
	}
	return s
}

// Close drops every connection, stops the server and waits for its
// goroutines.
func (s *Serve) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.DropConnections()
	s.srv.Close()
	s.wg.Wait()
}

// DropConnections cuts every open WebSocket without a close frame, as a
// crashed or restarted goose would. goose then aborts each connection's agent
// and its runs; sessions stay in the store (§2.1, §2.5).
func (s *Serve) DropConnections() {
	for _, c := range s.openConns() {
		_ = c.ws.NetConn().Close()
	}
}

// FailHTTP makes /acp and the health routes answer status (e.g. 503 while
// goose restarts behind a proxy); 0 restores normal service. Not an upstream
// behaviour of goose itself, which answers /status 200 whenever it runs.
func (s *Serve) FailHTTP(status int) {
	s.mu.Lock()
	s.httpFail = status
	s.mu.Unlock()
}

// FailMethod makes every request for method answer a JSON-RPC error with
// code and message; code 0 restores it. goose's codes: -32603 internal,
// -32602 invalid params, -32002 not found, -32601 unknown method (§3).
func (s *Serve) FailMethod(method string, code int, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == 0 {
		delete(s.methodFails, method)
		return
	}
	s.methodFails[method] = acpRpcError{Code: code, Message: message}
}

// Prompts returns the prompts received so far.
func (s *Serve) Prompts() []ServePrompt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ServePrompt(nil), s.prompts...)
}

// Permissions returns the permission outcomes received so far.
func (s *Serve) Permissions() []ServePermission {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ServePermission(nil), s.perms...)
}

// CancelRun stops the session's running prompt as a session/cancel from
// another client does in goose, whose run registry is shared by all its
// connections (goose-acp-connections.md §2): the prompt is answered
// stopReason "cancelled" though its own connection asked for nothing. It
// reports whether a prompt was running.
func (s *Serve) CancelRun(sessionID string) bool {
	found := false
	for _, c := range s.openConns() {
		found = c.cancelRun(sessionID) || found
	}
	return found
}

// Cancels returns the session/cancel notifications received so far.
func (s *Serve) Cancels() []ServeCancel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ServeCancel(nil), s.cancels...)
}

// Loads returns the session ids of every session/load received.
func (s *Serve) Loads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.loads...)
}

// Calls returns how many requests or notifications of method arrived.
func (s *Serve) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// Connections returns how many WebSocket connections were accepted in total.
func (s *Serve) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connCount
}

// OpenConnections returns how many WebSocket connections are open now.
func (s *Serve) OpenConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Session returns a snapshot of a session in the store.
func (s *Serve) Session(id string) (ServeSession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok {
		return ServeSession{}, false
	}
	out := ServeSession{
		ID: ss.id, WorkingDir: ss.cwd, Title: ss.title,
		Mode: ss.mode, Provider: ss.provider, Model: ss.model,
		MessageCount: ss.messages, InputTokens: ss.accIn, OutputTokens: ss.accOut,
		AwaitingApproval: ss.resume != nil,
	}
	if ss.costKnown {
		c := ss.accCost
		out.Cost = &c
	}
	return out, true
}

// SessionIDs lists the ids of the sessions in the store, sorted.
func (s *Serve) SessionIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Collect(maps.Keys(s.sessions))
	slices.Sort(ids)
	return ids
}

// SeedSession stores a session as an earlier goose process would have left
// it, with messages user/assistant messages, and returns its id.
func (s *Serve) SeedSession(cwd string, messages int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.newSessionLocked(cwd)
	for i := range messages {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		ss.history = append(ss.history, serveHistory{role: role, messageID: "msg_" + acpRandomUUID(), text: fmt.Sprintf("message %d", i)})
	}
	ss.messages = messages
	if messages > 0 {
		ss.title = "seeded " + ss.id
	}
	return ss.id
}

// newSessionLocked creates a session with a goose-style id YYYYMMDD_N
// (§2.1). Caller holds s.mu.
func (s *Serve) newSessionLocked(cwd string) *serveSession {
	s.seq++
	now := time.Now().UTC()
	ss := &serveSession{
		id:      fmt.Sprintf("%s_%d", now.Format("20060102"), s.seq),
		cwd:     cwd,
		created: now,
		updated: now,
		mode:    "auto", // goose's default mode (§2.7)
	}
	s.sessions[ss.id] = ss
	return ss
}

func (s *Serve) handleHealth(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	fail := s.httpFail
	s.mu.Unlock()
	if fail != 0 {
		w.WriteHeader(fail)
		return
	}
	// /status and /health: 200 "ok", no auth (§1).
	_, _ = w.Write([]byte("ok"))
}

var serveUpgrader = websocket.Upgrader{
	// Origin is checked by hand below, as goose does before upgrading.
	CheckOrigin: func(*http.Request) bool { return true },
}

func (s *Serve) handleACP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	fail, closed := s.httpFail, s.closed
	s.mu.Unlock()
	if fail != 0 {
		w.WriteHeader(fail)
		return
	}
	if closed {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	// Secret via X-Secret-Key or ?token=, constant-time; a mismatch is 401
	// with an empty body (§1).
	if s.Secret != "" {
		got := r.Header.Get("X-Secret-Key")
		if got == "" {
			got = r.URL.Query().Get("token")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.Secret)) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	}
	// An Origin header outside loopback is refused with 403; none is fine (§1).
	if o := r.Header.Get("Origin"); o != "" && !acpLoopbackOrigin(o) {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		// The real server also speaks HTTP+SSE here (§2.2); this fake does not.
		http.Error(w, "fake goose serve speaks WebSocket only", http.StatusNotImplemented)
		return
	}
	h := http.Header{}
	h.Set("acp-connection-id", acpRandomUUID()) // returned on the 101 (§2.5)
	ws, err := serveUpgrader.Upgrade(w, r, h)
	if err != nil {
		return
	}
	c := &serveConn{s: s, ws: ws, pending: make(map[string]*acpPendingPerm), runs: make(map[string]*serveRun), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.connCount++
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	c.startWriter()
	c.serve()
}

func acpLoopbackOrigin(o string) bool {
	if o == "null" || strings.HasPrefix(o, "file://") {
		return true
	}
	u, err := url.Parse(o)
	if err != nil {
		return false
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1":
		return u.Scheme == "http" || u.Scheme == "https"
	}
	return false
}

// JSON-RPC wire shapes.

type acpRpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

type acpRpcIn struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *acpRpcError    `json:"error,omitempty"`
}

type acpRpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *acpRpcError    `json:"error,omitempty"`
}

type acpRpcNotification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

type acpRpcRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      string `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

type acpUpdateParams struct {
	SessionID string `json:"sessionId"`
	Update    any    `json:"update"`
}

// acpMessageChunk is agent_message_chunk / agent_thought_chunk as goose emits
// it: the message id lives in _meta.goose, shared by a message's chunks
// (§2.6).
type acpMessageChunk struct {
	SessionUpdate string         `json:"sessionUpdate"`
	Content       acpTextContent `json:"content"`
	Meta          acpChunkMeta   `json:"_meta"`
}

type acpTextContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type acpChunkMeta struct {
	Goose struct {
		Created   int64  `json:"created"`
		MessageID string `json:"messageId"`
	} `json:"goose"`
}

// serveConn is one WebSocket connection; in goose each has its own agent
// holding the in-memory sessions and runs (§2.1).
type serveConn struct {
	s  *Serve
	ws *websocket.Conn

	wmu      sync.Mutex
	out      chan []byte // goose's outbound queue, see WithServeOutboundQueue
	dropOnce sync.Once

	mu          sync.Mutex
	initialized bool
	custom      bool // client sent _meta.goose.customNotifications: true
	pending     map[string]*acpPendingPerm
	runs        map[string]*serveRun
	done        chan struct{}
}

// acpPendingPerm is a session/request_permission awaiting the client.
type acpPendingPerm struct {
	sessionID, toolCallID, requestID string
	ch                               chan acpPermAnswer // cap 1
}

type acpPermAnswer struct{ outcome, option string }

type serveRun struct {
	reqKey    string // JSON-RPC id of its session/prompt; "" for a resumed run
	runID     string
	resent    *acpPendingPerm // a resumed run's permission request, sent already
	cancel    chan struct{}
	finished  chan struct{}
	once      sync.Once
	cancelReq bool // ended by $/cancel_request rather than session/cancel
}

func (r *serveRun) stop() { r.once.Do(func() { close(r.cancel) }) }

// cancelRun stops the session's prompt running on this connection, if any,
// and reports whether there was one.
func (c *serveConn) cancelRun(sessionID string) bool {
	c.mu.Lock()
	r := c.runs[sessionID]
	c.mu.Unlock()
	if r != nil {
		r.stop()
	}
	return r != nil
}

func (r *serveRun) stopped() bool {
	select {
	case <-r.cancel:
		return true
	default:
		return false
	}
}

func (c *serveConn) serve() {
	defer func() {
		// Socket gone: goose aborts the connection's agent and runs (§2.5).
		close(c.done)
		c.mu.Lock()
		for _, r := range c.runs {
			r.stop()
		}
		c.mu.Unlock()
		_ = c.ws.Close()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	}()
	for {
		typ, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		if typ != websocket.TextMessage {
			continue // binary frames are ignored (§2.5)
		}
		var m acpRpcIn
		if err := json.Unmarshal(data, &m); err != nil {
			// A malformed frame gets -32700 with id null (§2.5).
			c.write(acpRpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &acpRpcError{Code: -32700, Message: "Parse error"}})
			continue
		}
		if m.Method == "" {
			if len(m.ID) > 0 {
				c.deliverResponse(m)
			}
			continue
		}
		c.s.mu.Lock()
		c.s.calls[m.Method]++
		c.s.mu.Unlock()
		if len(m.ID) == 0 {
			c.notification(m)
			continue
		}
		c.request(m)
	}
}

func (c *serveConn) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("goosetest: marshal: %v", err))
	}
	if c.enqueue(b) {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_ = c.ws.WriteMessage(websocket.TextMessage, b)
}

func (c *serveConn) respond(id json.RawMessage, result any) {
	if result == nil {
		result = struct{}{}
	}
	c.write(acpRpcResponse{JSONRPC: "2.0", ID: id, Result: result})
}

func (c *serveConn) fail(id json.RawMessage, code int, msg string, data any) {
	c.write(acpRpcResponse{JSONRPC: "2.0", ID: id, Error: &acpRpcError{Code: code, Message: msg, Data: data}})
}

func (c *serveConn) notFound(id json.RawMessage, sid string) {
	// goose: unknown session → -32002 resource not found (§3).
	c.fail(id, -32002, "Resource not found", map[string]any{"sessionId": sid})
}

func (c *serveConn) sessionUpdate(sid string, update any) {
	c.write(acpRpcNotification{JSONRPC: "2.0", Method: "session/update", Params: acpUpdateParams{SessionID: sid, Update: update}})
}

// gooseUpdate sends _goose/unstable/session/update, only to clients that
// opted in with customNotifications (§2.6, since goose 1.38).
func (c *serveConn) gooseUpdate(sid string, update any) {
	c.mu.Lock()
	custom := c.custom
	c.mu.Unlock()
	if !custom {
		return
	}
	c.write(acpRpcNotification{JSONRPC: "2.0", Method: "_goose/unstable/session/update", Params: acpUpdateParams{SessionID: sid, Update: update}})
}

func (c *serveConn) deliverResponse(m acpRpcIn) {
	var key string
	if json.Unmarshal(m.ID, &key) != nil {
		return
	}
	c.mu.Lock()
	p := c.pending[key]
	delete(c.pending, key)
	c.mu.Unlock()
	if p == nil {
		return
	}
	// cancelled, an error reply or anything unparseable all mean "cancel"
	// to goose (§2.7).
	ans := acpPermAnswer{outcome: "cancelled"}
	if m.Error == nil {
		var r struct {
			Outcome struct {
				Outcome  string `json:"outcome"`
				OptionID string `json:"optionId"`
			} `json:"outcome"`
		}
		if json.Unmarshal(m.Result, &r) == nil && r.Outcome.Outcome == "selected" {
			ans = acpPermAnswer{outcome: "selected", option: r.Outcome.OptionID}
		}
	}
	// Recorded on arrival, even when the run was cancelled meanwhile: the
	// client may answer before or after session/cancel (§2.7).
	c.s.mu.Lock()
	c.s.perms = append(c.s.perms, ServePermission{SessionID: p.sessionID, ToolCallID: p.toolCallID, RequestID: p.requestID, Outcome: ans.outcome, OptionID: ans.option, At: time.Now()})
	c.s.mu.Unlock()
	p.ch <- ans
}

func (c *serveConn) notification(m acpRpcIn) {
	switch m.Method {
	case "session/cancel":
		// session/cancel notification: the active run ends with stopReason
		// cancelled (§2.7).
		var p struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		c.s.mu.Lock()
		c.s.cancels = append(c.s.cancels, ServeCancel{SessionID: p.SessionID, At: time.Now()})
		c.s.mu.Unlock()
		c.cancelRun(p.SessionID)
	case "$/cancel_request":
		// Supported by goose (§3): cancels the request's handler.
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		key := string(p.RequestID)
		c.mu.Lock()
		for _, r := range c.runs {
			if r.reqKey == key {
				r.cancelReq = true
				r.stop()
			}
		}
		c.mu.Unlock()
	}
	// Other notifications are ignored.
}

func (c *serveConn) request(m acpRpcIn) {
	c.mu.Lock()
	initialized := c.initialized
	c.mu.Unlock()
	if !initialized && m.Method != "initialize" {
		// The first frame must be initialize (§2.5).
		c.fail(m.ID, -32600, "Invalid request", map[string]any{"error": "connection not initialized"})
		return
	}
	c.s.mu.Lock()
	inject, failing := c.s.methodFails[m.Method]
	c.s.mu.Unlock()
	if failing {
		c.fail(m.ID, inject.Code, inject.Message, nil)
		return
	}
	switch m.Method {
	case "initialize":
		c.initialize(m)
	case "authenticate":
		c.respond(m.ID, nil) // no-op (§3)
	case "session/new":
		c.newSession(m)
	case "session/load":
		c.loadSession(m)
	case "session/list":
		c.listSessions(m)
	case "session/prompt":
		c.prompt(m)
	case "session/set_mode":
		c.setMode(m)
	case "session/set_config_option":
		c.setConfigOption(m)
	case "session/close":
		c.withSession(m, func(*serveSession) any { return nil })
	case "session/delete":
		// Handled by goose's custom dispatch, not advertised (§3).
		c.deleteSession(m)
	case "_goose/unstable/session/info":
		c.withSession(m, func(ss *serveSession) any { return map[string]any{"session": acpSessionInfo(ss)} })
	case "_goose/unstable/session/export":
		c.withSession(m, func(ss *serveSession) any { return map[string]any{"data": acpExportSession(ss)} })
	default:
		// session/set_model and session/resume included (§3).
		c.fail(m.ID, -32601, "Method not found", map[string]any{"method": m.Method})
	}
}

func (c *serveConn) initialize(m acpRpcIn) {
	var p struct {
		ProtocolVersion    json.RawMessage `json:"protocolVersion"`
		ClientCapabilities struct {
			Meta struct {
				Goose struct {
					CustomNotifications bool `json:"customNotifications"`
				} `json:"goose"`
			} `json:"_meta"`
		} `json:"clientCapabilities"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		c.fail(m.ID, -32602, "Invalid params", map[string]any{"error": err.Error()})
		return
	}
	c.mu.Lock()
	c.initialized = true
	c.custom = p.ClientCapabilities.Meta.Goose.CustomNotifications
	c.mu.Unlock()
	pv := p.ProtocolVersion
	if len(pv) == 0 {
		pv = json.RawMessage("1")
	}
	// Field set of server.rs on_initialize; protocolVersion echoed (§2.6).
	c.respond(m.ID, map[string]any{
		"protocolVersion": pv,
		"agentCapabilities": map[string]any{
			"loadSession":         true,
			"promptCapabilities":  map[string]any{"image": true, "audio": false, "embeddedContext": true},
			"mcpCapabilities":     map[string]any{"http": true, "sse": false},
			"sessionCapabilities": map[string]any{"list": map[string]any{}, "close": map[string]any{}},
		},
		"authMethods": []any{map[string]any{
			"id": "goose-provider", "name": "Configure Provider",
			"description": "Run `goose configure` to set up your AI provider and API key",
		}},
		"agentInfo": map[string]any{"name": "goose", "version": ServeVersion},
	})
}

func acpSessionParams(raw json.RawMessage) string {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(raw, &p)
	return p.SessionID
}

// withSession answers a request about one session, -32002 when unknown.
func (c *serveConn) withSession(m acpRpcIn, f func(*serveSession) any) {
	sid := acpSessionParams(m.Params)
	c.s.mu.Lock()
	ss := c.s.sessions[sid]
	var res any
	if ss != nil {
		res = f(ss)
	}
	c.s.mu.Unlock()
	if ss == nil {
		c.notFound(m.ID, sid)
		return
	}
	c.respond(m.ID, res)
}

func acpModesState(current string) map[string]any {
	return map[string]any{
		"currentModeId": current,
		"availableModes": []any{
			map[string]any{"id": "auto", "name": "auto", "description": "Automatically approve tool calls"},
			map[string]any{"id": "approve", "name": "approve", "description": "Ask before every tool call"},
			map[string]any{"id": "smart_approve", "name": "smart_approve", "description": "Ask only for sensitive tool calls"},
			map[string]any{"id": "chat", "name": "chat", "description": "Chat only, no tool calls"},
		},
	}
}

var serveModes = map[string]bool{"auto": true, "approve": true, "smart_approve": true, "chat": true}

func acpConfigOptions(ss *serveSession) []any {
	provider, model := ss.provider, ss.model
	if provider == "" {
		provider = "openai"
	}
	if model == "" {
		model = "gpt-4o"
	}
	opt := func(id, name, category, current string, values ...string) map[string]any {
		vals := make([]any, 0, len(values))
		for _, v := range values {
			vals = append(vals, map[string]any{"value": v, "name": v})
		}
		o := map[string]any{"id": id, "name": name, "type": "select", "currentValue": current, "options": vals}
		if category != "" {
			o["category"] = category
		}
		return o
	}
	return []any{
		opt("provider", "Provider", "", provider, provider),
		opt("mode", "Mode", "mode", ss.mode, "auto", "approve", "smart_approve", "chat"),
		opt("model", "Model", "model", model, model),
		opt("thinking_effort", "Thinking effort", "thought_level", "medium", "low", "medium", "high"),
	}
}

// setupNotifications are what goose sends at session/new and session/load:
// custom usage_update, stable usage_update, available_commands_update (§2.6).
func (c *serveConn) setupNotifications(ss *serveSession) {
	c.usageUpdates(ss)
	c.sessionUpdate(ss.id, map[string]any{"sessionUpdate": "available_commands_update", "availableCommands": []any{}})
}

// usageUpdates sends the accumulated custom usage_update then the stable one
// (server.rs build_usage_updates, §3.1). Caller must not hold s.mu.
func (c *serveConn) usageUpdates(ss *serveSession) {
	c.s.mu.Lock()
	var used int64
	if ss.last != nil {
		used = ss.last.Input + ss.last.Output
	}
	var cost any // null when unknown
	var stable = map[string]any{"sessionUpdate": "usage_update", "used": used, "size": ServeContextLimit}
	if ss.costKnown {
		cost = ss.accCost
		stable["cost"] = map[string]any{"amount": ss.accCost, "currency": "USD"}
	}
	custom := map[string]any{
		"sessionUpdate": "usage_update", "used": used, "contextLimit": ServeContextLimit,
		"accumulatedInputTokens": ss.accIn, "accumulatedOutputTokens": ss.accOut, "accumulatedCost": cost,
	}
	sid := ss.id
	c.s.mu.Unlock()
	c.gooseUpdate(sid, custom)
	c.sessionUpdate(sid, stable)
}

func (c *serveConn) newSession(m acpRpcIn) {
	var p struct {
		Cwd        string          `json:"cwd"`
		McpServers json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || len(p.McpServers) == 0 {
		// mcpServers is a required field of NewSessionRequest (§3).
		c.fail(m.ID, -32602, "Invalid params", map[string]any{"error": "mcpServers is required"})
		return
	}
	if !c.validCwd(m.ID, p.Cwd) {
		return
	}
	c.s.mu.Lock()
	ss := c.s.newSessionLocked(p.Cwd)
	c.s.mu.Unlock()
	// The extensions start before goose answers (new_session.rs
	// finish_new_session_setup).
	results := c.s.activateExtensions(ss.id, p.Cwd)
	c.s.mu.Lock()
	res := map[string]any{
		"sessionId":     ss.id,
		"modes":         acpModesState(ss.mode),
		"configOptions": acpConfigOptions(ss),
		"_meta":         map[string]any{"extensionResults": results, "workingDir": ss.cwd},
	}
	c.s.mu.Unlock()
	// goose answers first, then sends the setup notifications (dispatch.rs,
	// the NewSessionRequest handler: respond, then
	// send_session_setup_notifications).
	c.respond(m.ID, res)
	c.setupNotifications(ss)
}

// validCwd reproduces upstream validate_absolute_cwd (crates/goose/src/acp/
// server.rs), which session/new and session/load both run: the session's cwd
// must be absolute and exist as a directory in goose's file system, else
// -32602 with the reason as data.
func (c *serveConn) validCwd(id json.RawMessage, cwd string) bool {
	msg := ""
	if !filepath.IsAbs(cwd) {
		msg = "cwd must be an absolute path"
	} else if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		msg = "invalid directory path"
	}
	if msg != "" {
		c.fail(id, -32602, "Invalid params", msg)
		return false
	}
	return true
}

func (c *serveConn) loadSession(m acpRpcIn) {
	var p struct {
		SessionID string `json:"sessionId"`
		Cwd       string `json:"cwd"`
	}
	_ = json.Unmarshal(m.Params, &p)
	sid := p.SessionID
	c.s.mu.Lock()
	ss := c.s.sessions[sid]
	c.s.mu.Unlock()
	if ss == nil {
		c.notFound(m.ID, sid)
		return
	}
	// Upstream looks the session up first, then checks the cwd and makes it
	// the session's working directory (load_session.rs,
	// prepare_session_for_activation).
	if !c.validCwd(m.ID, p.Cwd) {
		return
	}
	c.s.mu.Lock()
	ss = c.s.sessions[sid]
	if ss != nil {
		ss.cwd = p.Cwd
		c.s.loads = append(c.s.loads, sid)
	}
	var history []serveHistory
	var res map[string]any
	if ss != nil {
		history = append(history, ss.history...)
		res = map[string]any{"modes": acpModesState(ss.mode), "configOptions": acpConfigOptions(ss)}
	}
	c.s.mu.Unlock()
	if ss == nil {
		c.notFound(m.ID, sid)
		return
	}
	// Replays the visible history before answering (§3).
	for _, h := range history {
		kind := "agent_message_chunk"
		if h.role == "user" {
			kind = "user_message_chunk"
		}
		ch := acpMessageChunk{SessionUpdate: kind, Content: acpTextContent{Type: "text", Text: h.text}}
		ch.Meta.Goose.MessageID = h.messageID
		c.sessionUpdate(sid, ch)
	}
	// Then the session's agent starts its extensions
	// (prepare_acp_session_agent), whose results are in the answer's _meta.
	res["_meta"] = map[string]any{"extensionResults": c.s.activateExtensions(sid, p.Cwd), "workingDir": p.Cwd}
	// A history ending in a pending tool confirmation resumes that turn
	// before the answer (load_session.rs handle_load_session).
	c.s.mu.Lock()
	resume := ss.resume
	ss.resume = nil
	c.s.mu.Unlock()
	if resume != nil {
		c.resumeRun(ss, resume)
	}
	// The replay is part of the handler; the setup notifications follow
	// the response (dispatch.rs, the LoadSessionRequest handler: respond,
	// then send_session_setup_notifications).
	c.respond(m.ID, res)
	c.setupNotifications(ss)
}

// acpListPageSize is goose's session/list page size (§3).
const acpListPageSize = 50

func (c *serveConn) listSessions(m acpRpcIn) {
	var p struct {
		Cursor *string `json:"cursor"`
	}
	_ = json.Unmarshal(m.Params, &p)
	off := 0
	if p.Cursor != nil {
		n, err := strconv.Atoi(*p.Cursor)
		if err != nil || n < 0 {
			c.fail(m.ID, -32602, "Invalid params", map[string]any{"error": "bad cursor"})
			return
		}
		off = n
	}
	c.s.mu.Lock()
	var all []*serveSession
	for _, ss := range c.s.sessions {
		if ss.messages > 0 { // only sessions with ≥1 message are listed (§3)
			all = append(all, ss)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].updated.Equal(all[j].updated) {
			return all[i].updated.After(all[j].updated)
		}
		return all[i].id > all[j].id
	})
	res := map[string]any{}
	page := []any{}
	for i := off; i < len(all) && i < off+acpListPageSize; i++ {
		page = append(page, acpSessionInfo(all[i]))
	}
	if off+acpListPageSize < len(all) {
		res["nextCursor"] = strconv.Itoa(off + acpListPageSize)
	}
	c.s.mu.Unlock()
	res["sessions"] = page
	c.respond(m.ID, res)
}

func acpRfc3339(t time.Time) string {
	// chrono's to_rfc3339 on a UTC time: "+00:00", not "Z".
	return t.UTC().Format("2006-01-02T15:04:05.999999999-07:00")
}

// acpSessionInfo is a session/list entry, also the session/info payload (§3).
// Caller holds s.mu.
func acpSessionInfo(ss *serveSession) map[string]any {
	meta := map[string]any{
		"messageCount": ss.messages,
		"createdAt":    acpRfc3339(ss.created),
		"userSetName":  false,
		"sessionType":  "acp",
		"hasRecipe":    false,
	}
	if ss.provider != "" {
		meta["providerId"] = ss.provider
	}
	if ss.model != "" {
		meta["modelId"] = ss.model
	}
	info := map[string]any{
		"sessionId": ss.id,
		"cwd":       ss.cwd,
		"updatedAt": acpRfc3339(ss.updated),
		"_meta":     meta,
	}
	if ss.title != "" {
		info["title"] = ss.title
	}
	return info
}

// acpExportSession is the serialized goose Session of
// _goose/unstable/session/export: snake_case usage, accumulated_usage and
// accumulated_cost (§3.1). Caller holds s.mu.
func acpExportSession(ss *serveSession) string {
	var last map[string]any
	if ss.last != nil {
		last = map[string]any{"input_tokens": ss.last.Input, "output_tokens": ss.last.Output, "total_tokens": ss.last.Input + ss.last.Output}
	}
	var cost any
	if ss.costKnown {
		cost = ss.accCost
	}
	conv := make([]any, 0, len(ss.history))
	for _, h := range ss.history {
		conv = append(conv, map[string]any{"id": h.messageID, "role": h.role, "content": []any{map[string]any{"type": "text", "text": h.text}}})
	}
	b, _ := json.Marshal(map[string]any{
		"id":            ss.id,
		"name":          ss.title,
		"working_dir":   ss.cwd,
		"created_at":    acpRfc3339(ss.created),
		"updated_at":    acpRfc3339(ss.updated),
		"message_count": ss.messages,
		"usage":         last,
		"accumulated_usage": map[string]any{
			"input_tokens": ss.accIn, "output_tokens": ss.accOut, "total_tokens": ss.accIn + ss.accOut,
			"cache_read_input_tokens": 0, "cache_write_input_tokens": 0,
		},
		"accumulated_cost": cost,
		"conversation":     conv,
	})
	return string(b)
}

func (c *serveConn) setMode(m acpRpcIn) {
	var p struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if !serveModes[p.ModeID] {
		c.fail(m.ID, -32602, "Invalid params", map[string]any{"error": "unknown mode " + p.ModeID})
		return
	}
	c.s.mu.Lock()
	ss := c.s.sessions[p.SessionID]
	if ss != nil {
		ss.mode = p.ModeID
	}
	c.s.mu.Unlock()
	if ss == nil {
		c.notFound(m.ID, p.SessionID)
		return
	}
	// current_mode_update goes out before the response (§3).
	c.sessionUpdate(p.SessionID, map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": p.ModeID})
	c.respond(m.ID, nil)
}

func (c *serveConn) setConfigOption(m acpRpcIn) {
	var p struct {
		SessionID string `json:"sessionId"`
		ConfigID  string `json:"configId"`
		Value     string `json:"value"`
	}
	_ = json.Unmarshal(m.Params, &p)
	c.s.mu.Lock()
	ss := c.s.sessions[p.SessionID]
	valid := true
	var opts []any
	if ss != nil {
		switch p.ConfigID {
		case "provider":
			ss.provider = p.Value
		case "model":
			ss.model = p.Value
		case "mode":
			valid = serveModes[p.Value]
			if valid {
				ss.mode = p.Value
			}
		case "thinking_effort":
		default:
			valid = false
		}
		opts = acpConfigOptions(ss)
	}
	c.s.mu.Unlock()
	switch {
	case ss == nil:
		c.notFound(m.ID, p.SessionID)
	case !valid:
		c.fail(m.ID, -32602, "Invalid params", map[string]any{"error": "unknown config option " + p.ConfigID})
	default:
		// config_option_update goes out first (§3).
		c.sessionUpdate(p.SessionID, map[string]any{"sessionUpdate": "config_option_update", "configOptions": opts})
		c.respond(m.ID, map[string]any{"configOptions": opts})
	}
}

func (c *serveConn) deleteSession(m acpRpcIn) {
	sid := acpSessionParams(m.Params)
	c.s.mu.Lock()
	_, ok := c.s.sessions[sid]
	delete(c.s.sessions, sid)
	c.s.mu.Unlock()
	if !ok {
		// SessionStorage::delete_session fails with "Session not found" and
		// on_delete_session maps every storage error to internal_err:
		// -32603, not -32002 (manage_sessions.rs, session_manager.rs).
		c.fail(m.ID, -32603, "Internal error", "Session not found")
		return
	}
	if c.s.extensions != nil {
		c.s.extensions.Release(sid)
	}
	c.respond(m.ID, nil)
}

// activateExtensions starts a session's extensions; never nil, as goose
// always sends the list.
func (s *Serve) activateExtensions(sessionID, cwd string) []ExtensionResult {
	if s.extensions == nil {
		return []ExtensionResult{}
	}
	if r := s.extensions.Activate(sessionID, cwd); r != nil {
		return r
	}
	return []ExtensionResult{}
}

func (c *serveConn) prompt(m acpRpcIn) {
	var p struct {
		SessionID string `json:"sessionId"`
		Prompt    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"prompt"`
		Meta struct {
			Traceparent string `json:"traceparent"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		c.fail(m.ID, -32602, "Invalid params", map[string]any{"error": err.Error()})
		return
	}
	var text strings.Builder
	for _, b := range p.Prompt {
		if b.Type == "text" {
			text.WriteString(b.Text)
		}
	}
	c.s.mu.Lock()
	ss := c.s.sessions[p.SessionID]
	if ss != nil {
		c.s.prompts = append(c.s.prompts, ServePrompt{SessionID: p.SessionID, Text: text.String(), At: time.Now(), Traceparent: p.Meta.Traceparent})
	}
	c.s.mu.Unlock()
	if ss == nil {
		c.notFound(m.ID, p.SessionID)
		return
	}
	run := &serveRun{reqKey: string(m.ID), runID: "run_" + acpRandomUUID(), cancel: make(chan struct{}), finished: make(chan struct{})}
	c.mu.Lock()
	prev := c.runs[p.SessionID]
	if prev != nil && !prev.stopped() {
		c.mu.Unlock()
		// Only one run per session (§2.4), a resumed one included.
		c.fail(m.ID, -32602, "Invalid params", "session already has active run `"+prev.runID+"`; use _goose/unstable/session/steer")
		return
	}
	c.runs[p.SessionID] = run
	c.mu.Unlock()
	// Runs go on their own goroutine so this connection keeps reading
	// cancels and permission answers meanwhile.
	c.s.wg.Go(func() {
		defer func() {
			c.release(p.SessionID, run)
			close(run.finished)
		}()
		if prev != nil {
			// A cancelled run is still winding down; goose starts the next
			// one after it.
			<-prev.finished
		}
		c.run(m.ID, run, ss, text.String(), nil)
	})
}

// resumeRun is load_session.rs start_resumed_state_machine_turn: a session
// whose history ends in a pending tool confirmation gets a new active run
// ("resume_..."), announced by session_info_update, and the permission
// request is sent again; the run then goes on with the rest of the reply.
// It has no request of its own, so nothing answers it: its end is the
// activeRunId null update. Called before session/load is answered.
func (c *serveConn) resumeRun(ss *serveSession, steps []Step) {
	run := &serveRun{runID: "resume_" + acpRandomUUID(), cancel: make(chan struct{}), finished: make(chan struct{})}
	c.mu.Lock()
	c.runs[ss.id] = run
	c.mu.Unlock()
	// Both go out before session/load is answered: the run announced, the
	// state machine turn spawned, then the request resent.
	c.activeRun(ss.id, run.runID)
	t := steps[0].Tool
	args := t.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	run.resent = c.sendPermission(ss.id, t, args)
	c.s.wg.Go(func() {
		defer func() {
			c.release(ss.id, run)
			close(run.finished)
		}()
		c.run(nil, run, ss, "", steps)
	})
}

// release forgets a run; done before its response goes out, since goose
// answers session/prompt only once the run is over and a client may send the
// next prompt at once.
func (c *serveConn) release(sid string, run *serveRun) {
	c.mu.Lock()
	if c.runs[sid] == run {
		delete(c.runs, sid)
	}
	c.mu.Unlock()
}

// run plays the Script for one prompt in goose's emission order
// (server.rs on_prompt, §2.6). With resumed steps (id nil) it continues a
// reply instead: its first step is the tool whose approval is asked again.
func (c *serveConn) run(id json.RawMessage, run *serveRun, ss *serveSession, text string, resumed []Step) {
	sid := ss.id
	steps := resumed
	if id != nil {
		steps = c.s.script(ss.id, text).Steps
		c.s.mu.Lock()
		ss.messages++
		ss.updated = time.Now().UTC()
		ss.history = append(ss.history, serveHistory{role: "user", messageID: "msg_" + acpRandomUUID(), text: text})
		if ss.title == "" {
			ss.title = acpTruncate(text, 40)
		}
		c.s.mu.Unlock()
	}

	if id != nil {
		c.activeRun(sid, run.runID)
	}

	var msgID string // the current assistant message: chunks share its id
	var last *UsageStep
	created := time.Now().Unix()
	cancelled := func() {
		c.release(sid, run)
		switch {
		case id == nil:
			c.activeRun(sid, "")
		case run.cancelReq:
			c.fail(id, -32800, "Request cancelled", nil)
		default:
			c.respond(id, map[string]any{"stopReason": "cancelled"})
		}
	}
	chunk := func(kind, t string) {
		c.s.mu.Lock()
		if msgID == "" {
			msgID = "msg_" + acpRandomUUID()
			ss.messages++
			ss.history = append(ss.history, serveHistory{role: "assistant", messageID: msgID})
		}
		if kind == "agent_message_chunk" {
			ss.history[len(ss.history)-1].text += t
		}
		c.s.mu.Unlock()
		ch := acpMessageChunk{SessionUpdate: kind, Content: acpTextContent{Type: "text", Text: t}}
		ch.Meta.Goose.Created = created
		ch.Meta.Goose.MessageID = msgID
		c.sessionUpdate(sid, ch)
	}

	for i, st := range steps {
		if st.Delay > 0 {
			t := time.NewTimer(st.Delay)
			select {
			case <-t.C:
			case <-run.cancel:
				t.Stop()
			}
		}
		select {
		case <-c.done:
			return // connection gone: the agent was aborted, nobody to answer
		case <-run.cancel:
			cancelled()
			return
		default:
		}
		switch {
		case st.Drop:
			// Abrupt disconnect: no close frame, no response.
			_ = c.ws.NetConn().Close()
			return
		case st.DropMidFrame:
			c.cutMidFrame(sid)
			return
		case st.Error != "":
			// Provider/stream errors come back as a JSON-RPC error to
			// session/prompt: -32603 (§2.6).
			c.release(sid, run)
			if id != nil {
				c.fail(id, -32603, st.Error, nil)
			}
			return
		case st.Text != "":
			chunk("agent_message_chunk", st.Text)
		case st.Thinking != "":
			chunk("agent_thought_chunk", st.Thinking)
		case st.Tool != nil:
			if !c.tool(sid, run, st.Tool, resumed != nil && i == 0) {
				select {
				case <-c.done:
					// The connection went while goose waited for the
					// approval: the session keeps the pending confirmation.
					c.s.mu.Lock()
					ss.resume = append([]Step(nil), steps[i:]...)
					c.s.mu.Unlock()
					return
				default:
				}
				cancelled()
				return
			}
			msgID = "" // text after a tool call is a new message
		case st.Notify != nil:
			// MCP progress surfaces as goose's status_message (§3).
			c.gooseUpdate(sid, map[string]any{"sessionUpdate": "status_message", "status": map[string]any{"type": "progress", "message": st.Notify.Message}})
		case st.Usage != nil:
			u := *st.Usage
			last = &u
			c.s.mu.Lock()
			ss.accIn += u.Input
			ss.accOut += u.Output
			if u.Cost != 0 {
				ss.accCost += u.Cost
				ss.costKnown = true
			}
			ss.last = &u
			mid := msgID
			c.s.mu.Unlock()
			if mid == "" {
				mid = "msg_" + acpRandomUUID()
			}
			var cost any
			if u.Cost != 0 {
				cost = u.Cost
			}
			// Per LLM message usage, live (§3.1, goose ≥1.42).
			c.gooseUpdate(sid, map[string]any{"sessionUpdate": "message_usage", "messageId": mid, "usage": map[string]any{
				"inputTokens": u.Input, "outputTokens": u.Output, "totalTokens": u.Input + u.Output,
				"cacheReadTokens": 0, "cacheWriteTokens": 0, "cost": cost, "costSource": "estimated",
				"elapsedMs": 1, "timeToFirstTokenMs": 1, "isCompaction": false,
			}})
			msgID = "" // a provider call ended
		}
	}
	c.s.mu.Lock()
	ss.updated = time.Now().UTC()
	c.s.mu.Unlock()
	c.activeRun(sid, "")
	c.usageUpdates(ss)
	if id == nil {
		c.release(sid, run)
		return
	}
	res := map[string]any{"stopReason": "end_turn"}
	if last != nil {
		// PromptResponse.usage is the last provider call only (§3.1).
		res["usage"] = map[string]any{"totalTokens": last.Input + last.Output, "inputTokens": last.Input, "outputTokens": last.Output}
	}
	c.release(sid, run)
	c.respond(id, res)
}

// activeRun sends session_info_update with _meta.goose.activeRunId: the run
// id when a run starts, null ("") when it ends (server.rs
// send_active_run_update).
func (c *serveConn) activeRun(sid, runID string) {
	var v any
	if runID != "" {
		v = runID
	}
	c.sessionUpdate(sid, map[string]any{"sessionUpdate": "session_info_update", "_meta": map[string]any{"goose": map[string]any{"activeRunId": v}}})
}

// tool plays a tool call: tool_call, optional permission round trip, then
// tool_call_update completed/failed (§2.6, §2.7). false when the run was
// cancelled or the connection dropped while waiting.
func (c *serveConn) tool(sid string, run *serveRun, t *ToolStep, resent bool) bool {
	args := t.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	// tool_call_identity_meta (acp/server.rs): toolName is the name the
	// model called; extensionName is the owning extension from the tool's
	// goose_extension meta, else the prefix before "__". Platform
	// extensions with unprefixed_tools (developer, analyze, summon, skills)
	// name their tools without a prefix: "shell", extension "developer".
	ext := t.Extension
	if prefix, _, ok := strings.Cut(t.Name, "__"); ext == "" && ok {
		ext = prefix
	}
	// status pending and kind other are ACP defaults, omitted by goose (§2.6).
	// A resent approval has its tool_call in the replayed history already.
	if !resent {
		c.sessionUpdate(sid, map[string]any{
			"sessionUpdate": "tool_call", "toolCallId": t.ID, "title": t.Name, "rawInput": args,
			"_meta": map[string]any{"goose": map[string]any{"toolCall": map[string]any{"toolName": t.Name, "extensionName": ext}}},
		})
	}
	result, failed := t.Result, t.IsError
	declined := false
	if t.NeedsApproval {
		// The script stands in for goose's per-tool decision in approve /
		// smart_approve mode.
		outcome, option, ok := c.askPermission(sid, run, t, args)
		if !ok {
			return false
		}
		if outcome != "selected" || !strings.HasPrefix(option, "allow_") {
			// reject_*, cancelled and unknown options all refuse (§2.7).
			result, failed, declined = DeclinedToolResult, false, true
		}
	}
	if t.Run != nil && !declined {
		result, failed = t.Run()
	}
	status := "completed"
	if failed {
		status = "failed"
	}
	c.sessionUpdate(sid, map[string]any{
		"sessionUpdate": "tool_call_update", "toolCallId": t.ID, "status": status,
		"content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": result}}},
		"_meta":   map[string]any{"goose": map[string]any{"toolCall": map[string]any{"toolName": t.Name, "extensionName": ext}}},
	})
	return true
}

// acpPermissionOptions are the four options goose offers, in its order (§2.7).
var acpPermissionOptions = []any{
	map[string]any{"optionId": "allow_always", "name": "allow_always", "kind": "allow_always"},
	map[string]any{"optionId": "allow_once", "name": "allow_once", "kind": "allow_once"},
	map[string]any{"optionId": "reject_once", "name": "reject_once", "kind": "reject_once"},
	map[string]any{"optionId": "reject_always", "name": "reject_always", "kind": "reject_always"},
}

func (c *serveConn) askPermission(sid string, run *serveRun, t *ToolStep, args json.RawMessage) (outcome, option string, ok bool) {
	p := run.resent
	run.resent = nil
	if p == nil {
		p = c.sendPermission(sid, t, args)
	}
	// No timeout: an unanswered request blocks the turn (§2.7).
	select {
	case ans := <-p.ch:
		return ans.outcome, ans.option, true
	case <-run.cancel:
		return "", "", false
	case <-c.done:
		return "", "", false
	}
}

// sendPermission sends session/request_permission and registers the wait
// for its answer.
func (c *serveConn) sendPermission(sid string, t *ToolStep, args json.RawMessage) *acpPendingPerm {
	reqID := acpRandomUUID() // server→client ids are UUID strings (§2.7)
	p := &acpPendingPerm{sessionID: sid, toolCallID: t.ID, requestID: reqID, ch: make(chan acpPermAnswer, 1)}
	c.mu.Lock()
	c.pending[reqID] = p
	c.mu.Unlock()
	c.write(acpRpcRequest{JSONRPC: "2.0", ID: reqID, Method: "session/request_permission", Params: map[string]any{
		"sessionId": sid,
		"toolCall":  map[string]any{"toolCallId": t.ID, "title": t.Name, "kind": "other", "status": "pending", "rawInput": args},
		"options":   acpPermissionOptions,
	}})
	return p
}

func acpTruncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func acpRandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// acpRandomUUID returns a version 4 UUID string.
func acpRandomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
