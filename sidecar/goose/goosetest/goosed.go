package goosetest

// Fake goosed: the REST + SSE server of goose 1.37 ([R] in
// shared/reference/goose-rest-api.md), with a 1.41 mode ([F]). Section
// numbers in comments (§n) refer to that document.

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// GoosedVersion selects which goosed wire the fake reproduces.
type GoosedVersion string

const (
	// Goosed137 is goose 1.37, the last release with the full session API.
	Goosed137 GoosedVersion = "1.37"
	// Goosed141 is goose 1.41, the last goosed: no GET /sessions nor DELETE
	// /sessions/{id} (§0), TokenState cache fields (§3), MessageUsage events
	// (§3) and Session usage objects (§4).
	Goosed141 GoosedVersion = "1.41"
)

// GoosedOptions configures NewGoosed. Zero values select the defaults.
type GoosedOptions struct {
	// SecretKey is the expected X-Secret-Key. Default "test-secret".
	SecretKey string
	// Script answers each user message. Default Echo.
	Script Script
	// Version is the wire to reproduce. Default Goosed137.
	Version GoosedVersion
	// PingInterval is the /reply heartbeat period. Default 500 ms (§3).
	PingInterval time.Duration
	// DefaultProvider and DefaultModel stand for GOOSE_PROVIDER and
	// GOOSE_MODEL, which /agent/resume falls back to (§2.1). Defaults
	// "openai" and "gpt-4o".
	DefaultProvider, DefaultModel string
	// Listener, when set, is served instead of a new loopback port, as
	// goosed's GOOSE_HOST and GOOSE_PORT choose (the e2e goose image).
	Listener net.Listener
}

// GoosedRequest is one request the fake received.
type GoosedRequest struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	At     time.Time
}

// GoosedConfirmation is one /action-required/tool-confirmation received.
type GoosedConfirmation struct {
	SessionID, ID, Action string
	At                    time.Time
}

// GoosedCancel records a /reply stream the client closed before Finish.
type GoosedCancel struct {
	SessionID string
	At        time.Time
}

// GoosedFailure is an injected HTTP answer, see FailNext.
type GoosedFailure struct {
	// Status is the status code to answer, e.g. 401, 404, 412, 424, 429,
	// 500 or 503.
	Status int
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter string
	// Body is the answer's body (text/plain).
	Body string
	// Method and Path restrict the failure to matching requests; empty
	// matches any. Path is the exact URL path.
	Method, Path string
}

// GoosedUsage is a session's token counts as the fake reported them.
type GoosedUsage struct {
	Input, Output, Total                int64
	AccumulatedInput, AccumulatedOutput int64
	AccumulatedTotal                    int64
	AccumulatedCost                     *float64
}

// Goosed is a fake goosed on a loopback httptest server.
type Goosed struct {
	// URL is the base URL, e.g. http://127.0.0.1:PORT.
	URL string
	// SecretKey is the X-Secret-Key the fake expects.
	SecretKey string

	opts   GoosedOptions
	srv    *httptest.Server
	msgSeq atomic.Int64

	mu            sync.Mutex
	sessions      map[string]*goosedSession
	daySeq        map[string]int
	requests      []GoosedRequest
	confirmations []GoosedConfirmation
	cancels       []GoosedCancel
	failures      []GoosedFailure
	// waiters are tool calls blocked on a confirmation, by session+id;
	// early holds confirmations that arrived before the call waited.
	waiters map[string]chan string
	early   map[string]string
	changed chan struct{} // closed and replaced on every observable change
}

type goosedSession struct {
	id, workingDir, name  string
	created, updated      time.Time
	provider, model, mode string
	agentReady            bool // /agent/resume(load) or /agent/update_provider seen
	usage                 GoosedUsage
	usageSeen             bool
	conversation          []json.RawMessage
	streamed              *streamedMessage // the last of conversation while goose streams it
	inflight              map[*struct{}]context.CancelFunc
	lastMessageAt         time.Time
}

// NewGoosed starts a fake goosed. Close it when done.
func NewGoosed(opts GoosedOptions) *Goosed {
	if opts.SecretKey == "" {
		opts.SecretKey = "test-secret"
	}
	if opts.Script == nil {
		opts.Script = Echo
	}
	if opts.Version == "" {
		opts.Version = Goosed137
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 500 * time.Millisecond
	}
	if opts.DefaultProvider == "" {
		opts.DefaultProvider = "openai"
	}
	if opts.DefaultModel == "" {
		opts.DefaultModel = "gpt-4o"
	}
	g := &Goosed{
		SecretKey: opts.SecretKey,
		opts:      opts,
		sessions:  make(map[string]*goosedSession),
		daySeq:    make(map[string]int),
		waiters:   make(map[string]chan string),
		early:     make(map[string]string),
		changed:   make(chan struct{}),
	}
	g.srv = newServer(g.handler(), opts.Listener)
	g.URL = g.srv.URL
	return g
}

// Close stops the server; it waits for running handlers.
func (g *Goosed) Close() {
	g.srv.CloseClientConnections()
	g.srv.Close()
}

// FailNext makes the next n requests matching f answer f.Status instead of
// being served.
func (g *Goosed) FailNext(n int, f GoosedFailure) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for range n {
		g.failures = append(g.failures, f)
	}
}

// Requests returns the requests received so far, in order.
func (g *Goosed) Requests() []GoosedRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.requests)
}

// Confirmations returns the tool confirmations received so far.
func (g *Goosed) Confirmations() []GoosedConfirmation {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.confirmations)
}

// Cancels returns the /reply streams closed by the client before Finish.
func (g *Goosed) Cancels() []GoosedCancel {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.cancels)
}

// WaitCancels waits until at least n cancels were seen, or ctx ends.
func (g *Goosed) WaitCancels(ctx context.Context, n int) ([]GoosedCancel, error) {
	for {
		g.mu.Lock()
		got, ch := slices.Clone(g.cancels), g.changed
		g.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return got, fmt.Errorf("failed to wait for %d cancels (saw %d): %w", n, len(got), ctx.Err())
		}
	}
}

// Usage returns the token counts the fake reported for a session.
func (g *Goosed) Usage(sessionID string) (GoosedUsage, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[sessionID]
	if !ok {
		return GoosedUsage{}, false
	}
	u := s.usage
	if u.AccumulatedCost != nil {
		c := *u.AccumulatedCost
		u.AccumulatedCost = &c
	}
	return u, true
}

// notifyLocked wakes WaitCancels; g.mu must be held.
func (g *Goosed) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// maxBody is goosed's request body limit (§2.2: 50 MiB).
const goosedMaxBody = 50 << 20

func (g *Goosed) handler() http.Handler {
	mux := http.NewServeMux()
	// §2.4: health probe, text/plain "ok", no auth.
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	})
	mux.HandleFunc("POST /agent/start", g.startAgent)
	mux.HandleFunc("POST /agent/resume", g.resumeAgent)
	mux.HandleFunc("POST /agent/update_provider", g.updateProvider)
	mux.HandleFunc("POST /agent/update_session", g.updateSession)
	mux.HandleFunc("POST /reply", g.reply)
	mux.HandleFunc("POST /action-required/tool-confirmation", g.confirm)
	mux.HandleFunc("GET /sessions/{session_id}", g.getSession)
	if g.opts.Version == Goosed137 {
		// §0/§2.3: listing and deletion were removed after 1.37. Without
		// these routes Go's mux answers 404 for /sessions and 405 for
		// DELETE /sessions/{id}, as axum does for a missing route/method.
		mux.HandleFunc("GET /sessions", g.listSessions)
		mux.HandleFunc("DELETE /sessions/{session_id}", g.deleteSession)
	}

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, goosedMaxBody+1))
		if err != nil {
			http.Error(w, "failed to read body", http.StatusBadRequest)
			return
		}
		g.mu.Lock()
		g.requests = append(g.requests, GoosedRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now()})
		var fail *GoosedFailure
		for i, f := range g.failures {
			if (f.Method == "" || f.Method == r.Method) && (f.Path == "" || f.Path == r.URL.Path) {
				fail = &f
				g.failures = slices.Delete(g.failures, i, i+1)
				break
			}
		}
		g.mu.Unlock()
		if fail != nil {
			if fail.RetryAfter != "" {
				w.Header().Set("Retry-After", fail.RetryAfter)
			}
			if fail.Body != "" {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			}
			w.WriteHeader(fail.Status)
			_, _ = io.WriteString(w, fail.Body)
			return
		}
		if len(body) > goosedMaxBody {
			// §2.2: axum's body limit.
			http.Error(w, "length limit exceeded", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		// §1 "Secret and auth": check_token skips these exact paths and
		// answers 401 with an empty body otherwise. Whether the 404
		// fallback is behind auth upstream is unverified (§8); here it is.
		if r.URL.Path != "/status" && r.URL.Path != "/features" {
			key := r.Header.Get("X-Secret-Key")
			if subtle.ConstantTimeCompare([]byte(key), []byte(g.opts.SecretKey)) != 1 {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// decodeJSON reproduces axum's Json extractor rejections (§2 conventions):
// 415 without application/json, 400 for bad syntax, 422 for a wrong shape
// (check reports the missing required fields serde would reject).
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, check func() error) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/json" {
		http.Error(w, "Expected request with `Content-Type: application/json`", http.StatusUnsupportedMediaType)
		return false
	}
	body, _ := io.ReadAll(r.Body)
	if !json.Valid(body) {
		http.Error(w, "Failed to parse the request body as JSON", http.StatusBadRequest)
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		http.Error(w, "Failed to deserialize the JSON body into the target type: "+err.Error(), http.StatusUnprocessableEntity)
		return false
	}
	if check != nil {
		if err := check(); err != nil {
			http.Error(w, "Failed to deserialize the JSON body into the target type: "+err.Error(), http.StatusUnprocessableEntity)
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errorResponse is ErrorResponse (§2 conventions): {"message": "..."}.
func errorResponse(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg})
}

func missing(field string) error { return fmt.Errorf("missing field `%s`", field) }

// startAgent reproduces POST /agent/start (§2.1): a new session named
// "New Chat" with id YYYYMMDD_N, no conversation.
func (g *Goosed) startAgent(w http.ResponseWriter, r *http.Request) {
	var req struct {
		WorkingDir *string `json:"working_dir"`
	}
	if !decodeJSON(w, r, &req, func() error {
		if req.WorkingDir == nil {
			return missing("working_dir")
		}
		return nil
	}) {
		return
	}
	now := time.Now().UTC().Truncate(time.Second)
	g.mu.Lock()
	day := now.Format("20060102")
	g.daySeq[day]++
	s := &goosedSession{
		id:         fmt.Sprintf("%s_%d", day, g.daySeq[day]),
		workingDir: *req.WorkingDir,
		name:       "New Chat",
		created:    now,
		updated:    now,
		mode:       "auto", // §5: the code default of GOOSE_MODE
		inflight:   make(map[*struct{}]context.CancelFunc),
	}
	g.sessions[s.id] = s
	body := g.sessionJSONLocked(s, false)
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, body)
}

// resumeAgent reproduces POST /agent/resume (§2.1): 404 {"message"} for an
// unknown session (the spec says 400); with load_model_and_extensions the
// provider comes from the session or GOOSE_PROVIDER/GOOSE_MODEL.
func (g *Goosed) resumeAgent(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SessionID *string `json:"session_id"`
		Load      *bool   `json:"load_model_and_extensions"`
	}
	if !decodeJSON(w, r, &req, func() error {
		if req.SessionID == nil {
			return missing("session_id")
		}
		if req.Load == nil {
			return missing("load_model_and_extensions")
		}
		return nil
	}) {
		return
	}
	g.mu.Lock()
	s, ok := g.sessions[*req.SessionID]
	if !ok {
		g.mu.Unlock()
		errorResponse(w, http.StatusNotFound, "Session not found: "+*req.SessionID)
		return
	}
	if *req.Load {
		if s.provider == "" {
			s.provider, s.model = g.opts.DefaultProvider, g.opts.DefaultModel
		}
		s.agentReady = true
	} else if s.provider != "" {
		// §2.5 exception: a session with provider_name restores its provider.
		s.agentReady = true
	}
	body := map[string]any{"session": g.sessionJSONLocked(s, true), "extension_results": []any{}}
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, body)
}

// updateProvider reproduces POST /agent/update_provider (§2.1): 200 empty,
// plain-text errors; a missing model falls back to GOOSE_MODEL.
func (g *Goosed) updateProvider(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Provider  *string `json:"provider"`
		SessionID *string `json:"session_id"`
		Model     *string `json:"model"`
	}
	if !decodeJSON(w, r, &req, func() error {
		if req.Provider == nil {
			return missing("provider")
		}
		if req.SessionID == nil {
			return missing("session_id")
		}
		return nil
	}) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[*req.SessionID]
	if !ok {
		http.Error(w, "Session not found", http.StatusNotFound)
		return
	}
	s.provider, s.model = *req.Provider, g.opts.DefaultModel
	if req.Model != nil && *req.Model != "" {
		s.model = *req.Model
	}
	s.agentReady = true
	w.WriteHeader(http.StatusOK)
}

// updateSession reproduces POST /agent/update_session (§2.1): 400 text for
// an invalid goose_mode.
func (g *Goosed) updateSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SessionID *string `json:"session_id"`
		GooseMode *string `json:"goose_mode"`
	}
	if !decodeJSON(w, r, &req, func() error {
		if req.SessionID == nil {
			return missing("session_id")
		}
		return nil
	}) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[*req.SessionID]
	if !ok {
		http.Error(w, "Session not found", http.StatusNotFound)
		return
	}
	if req.GooseMode != nil {
		switch *req.GooseMode {
		case "auto", "approve", "smart_approve", "chat":
			s.mode = *req.GooseMode
		default:
			http.Error(w, "Invalid goose_mode: "+*req.GooseMode, http.StatusBadRequest)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// getSession reproduces GET /sessions/{id} (§2.3): the Session with its
// conversation; 404 with an empty body when unknown.
func (g *Goosed) getSession(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	s, ok := g.sessions[r.PathValue("session_id")]
	var body map[string]any
	if ok {
		body = g.sessionJSONLocked(s, true)
	}
	g.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// listSessions reproduces GET /sessions (1.37 only, §2.3): {"sessions":
// [...]} by updated_at desc, conversation null.
func (g *Goosed) listSessions(w http.ResponseWriter, _ *http.Request) {
	g.mu.Lock()
	list := make([]*goosedSession, 0, len(g.sessions))
	for _, s := range g.sessions {
		list = append(list, s)
	}
	slices.SortFunc(list, func(a, b *goosedSession) int {
		if c := b.updated.Compare(a.updated); c != 0 {
			return c
		}
		return -compareStrings(a.id, b.id)
	})
	out := make([]map[string]any, 0, len(list))
	for _, s := range list {
		out = append(out, g.sessionJSONLocked(s, false))
	}
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
}

func compareStrings(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// deleteSession reproduces DELETE /sessions/{id} (1.37 only, §2.3): 200
// empty, 404 empty; in-flight requests of the session are cancelled.
func (g *Goosed) deleteSession(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	s, ok := g.sessions[r.PathValue("session_id")]
	if ok {
		delete(g.sessions, s.id)
		for _, cancel := range s.inflight {
			cancel()
		}
	}
	g.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// confirm reproduces POST /action-required/tool-confirmation (§2.2):
// camelCase body, action one of the Permission values, 200 {}. It unblocks
// the tool call waiting for this id.
func (g *Goosed) confirm(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID        *string `json:"id"`
		Action    *string `json:"action"`
		SessionID *string `json:"sessionId"`
	}
	if !decodeJSON(w, r, &req, func() error {
		switch {
		case req.ID == nil:
			return missing("id")
		case req.Action == nil:
			return missing("action")
		case req.SessionID == nil:
			return missing("sessionId")
		}
		switch *req.Action {
		case "always_allow", "allow_once", "cancel", "deny_once", "always_deny":
			return nil
		}
		return fmt.Errorf("unknown variant `%s`", *req.Action)
	}) {
		return
	}
	g.mu.Lock()
	g.confirmations = append(g.confirmations, GoosedConfirmation{SessionID: *req.SessionID, ID: *req.ID, Action: *req.Action, At: time.Now()})
	key := *req.SessionID + "\x00" + *req.ID
	if ch, ok := g.waiters[key]; ok {
		delete(g.waiters, key)
		ch <- *req.Action // buffered
	} else {
		g.early[key] = *req.Action
	}
	g.notifyLocked()
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{})
}

// sessionJSONLocked renders the Session object (§4): snake_case, every
// field present (None is null). 1.41 replaces the flat token fields with
// usage objects and adds last_message_at, parent_session_id and
// last_message_snippet.
func (g *Goosed) sessionJSONLocked(s *goosedSession, withConversation bool) map[string]any {
	var conversation any
	if withConversation {
		conv := append([]json.RawMessage{}, s.conversation...)
		if s.streamed != nil {
			conv[len(conv)-1] = s.streamed.render()
		}
		conversation = conv
	}
	var provider, modelConfig any
	if s.provider != "" {
		provider = s.provider
		modelConfig = map[string]any{"model_name": s.model, "toolshim": false}
	}
	m := map[string]any{
		"id":            s.id,
		"working_dir":   s.workingDir,
		"name":          s.name,
		"user_set_name": false,
		"session_type":  "user",
		"created_at":    s.created.Format(time.RFC3339),
		"updated_at":    s.updated.Format(time.RFC3339),
		"extension_data": map[string]any{"enabled_extensions.v0": map[string]any{"extensions": []any{map[string]any{
			"type": "platform", "name": "developer", "description": "Developer tools", "display_name": "Developer", "bundled": true, "available_tools": []any{},
		}}}},
		"accumulated_cost":   floatOrNil(s.usage.AccumulatedCost),
		"schedule_id":        nil,
		"recipe":             nil,
		"user_recipe_values": nil,
		"conversation":       conversation,
		"message_count":      len(s.conversation),
		"provider_name":      provider,
		"model_config":       modelConfig,
		"goose_mode":         s.mode,
		"archived_at":        nil,
		"project_id":         nil,
	}
	u := s.usage
	if g.opts.Version == Goosed141 {
		var last, acc any
		if s.usageSeen {
			last = map[string]any{"input_tokens": u.Input, "output_tokens": u.Output, "total_tokens": u.Total, "cache_read_input_tokens": 0, "cache_write_input_tokens": 0}
			acc = map[string]any{"input_tokens": u.AccumulatedInput, "output_tokens": u.AccumulatedOutput, "total_tokens": u.AccumulatedTotal, "cache_read_input_tokens": 0, "cache_write_input_tokens": 0}
		} else {
			last, acc = map[string]any{}, map[string]any{}
		}
		m["usage"], m["accumulated_usage"] = last, acc
		var lastAt any
		if !s.lastMessageAt.IsZero() {
			lastAt = s.lastMessageAt.Format(time.RFC3339)
		}
		m["last_message_at"], m["parent_session_id"], m["last_message_snippet"] = lastAt, nil, nil
		return m
	}
	for k, v := range map[string]int64{
		"input_tokens": u.Input, "output_tokens": u.Output, "total_tokens": u.Total,
		"accumulated_input_tokens": u.AccumulatedInput, "accumulated_output_tokens": u.AccumulatedOutput, "accumulated_total_tokens": u.AccumulatedTotal,
	} {
		if s.usageSeen {
			m[k] = v
		} else {
			m[k] = nil // a new session's counters are NULL in the DB (§4 example)
		}
	}
	return m
}

func floatOrNil(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// tokenStateLocked renders TokenState (§3, camelCase); 1.41 adds the cache
// fields (from 1.39 on).
func (g *Goosed) tokenStateLocked(s *goosedSession) map[string]any {
	u := s.usage
	ts := map[string]any{
		"inputTokens": u.Input, "outputTokens": u.Output, "totalTokens": u.Total,
		"accumulatedInputTokens": u.AccumulatedInput, "accumulatedOutputTokens": u.AccumulatedOutput,
		"accumulatedTotalTokens": u.AccumulatedTotal, "accumulatedCost": floatOrNil(u.AccumulatedCost),
	}
	if g.opts.Version == Goosed141 {
		ts["cacheReadTokens"], ts["cacheWriteTokens"] = 0, 0
		ts["accumulatedCacheReadTokens"], ts["accumulatedCacheWriteTokens"] = 0, 0
	}
	return ts
}

// goosedFrame is one SSE payload, or a request to cut the connection.
type goosedFrame struct {
	data []byte
	drop bool
	// final marks the Finish frame, after which the stream closes.
	final bool
}

func sseData(v any) []byte {
	b, _ := json.Marshal(v)
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, '\n', '\n')
}

// reply reproduces the legacy POST /reply (§2.2, §3): always 200
// text/event-stream; `data: <one-line JSON>` frames; a Ping first and every
// PingInterval; Error then Finish for agent errors; Error alone for early
// setup failures; the agent is cancelled when the client closes the stream.
func (g *Goosed) reply(w http.ResponseWriter, r *http.Request) {
	var req struct {
		UserMessage *struct {
			Role     *string           `json:"role"`
			Created  *int64            `json:"created"`
			Content  []json.RawMessage `json:"content"`
			Metadata *struct {
				UserVisible  *bool `json:"userVisible"`
				AgentVisible *bool `json:"agentVisible"`
			} `json:"metadata"`
		} `json:"user_message"`
		SessionID *string `json:"session_id"`
	}
	if !decodeJSON(w, r, &req, func() error {
		m := req.UserMessage
		switch {
		case m == nil:
			return missing("user_message")
		case req.SessionID == nil:
			return missing("session_id")
		case m.Role == nil:
			return missing("role")
		case m.Created == nil:
			return missing("created")
		case m.Content == nil:
			return missing("content")
		case m.Metadata == nil:
			return missing("metadata")
		case m.Metadata.UserVisible == nil:
			return missing("userVisible") // §3: required when deserializing
		case m.Metadata.AgentVisible == nil:
			return missing("agentVisible")
		}
		return nil
	}) {
		return
	}
	var userText strings.Builder
	for _, c := range req.UserMessage.Content {
		var t struct{ Type, Text string }
		if json.Unmarshal(c, &t) == nil && t.Type == "text" {
			userText.WriteString(t.Text)
		}
	}
	sessionID := *req.SessionID

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	write := func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	token := new(struct{})
	g.mu.Lock()
	s, ok := g.sessions[sessionID]
	var early string
	switch {
	case !ok:
		early = "Failed to get session: Session not found: " + sessionID
	case !s.agentReady:
		// §2.5: a new session whose agent never got a provider.
		early = "Provider not set"
	default:
		s.inflight[token] = cancel
		userMsg, _ := json.Marshal(req.UserMessage)
		s.endStreamed()
		s.conversation = append(s.conversation, userMsg)
		s.updated = time.Now().UTC().Truncate(time.Second)
		s.lastMessageAt = s.updated
	}
	g.mu.Unlock()
	if early != "" {
		// §3: early setup failures send only Error, then close.
		_ = write(sseData(map[string]any{"type": "Error", "error": early}))
		return
	}
	defer func() {
		g.mu.Lock()
		delete(s.inflight, token)
		g.mu.Unlock()
	}()

	frames := make(chan goosedFrame)
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		defer close(frames)
		g.play(ctx, s, g.opts.Script(sessionID, userText.String()), frames)
	}()
	// No goroutine outlives the request: stop and wait for the producer.
	defer func() { cancel(); <-producerDone }()

	ping := sseData(map[string]string{"type": "Ping"})
	ticker := time.NewTicker(g.opts.PingInterval)
	defer ticker.Stop()
	clientGone := func() {
		g.mu.Lock()
		g.cancels = append(g.cancels, GoosedCancel{SessionID: sessionID, At: time.Now()})
		g.notifyLocked()
		g.mu.Unlock()
	}
	finished := false // the Finish frame was written
	// §3: the heartbeat's first tick fires immediately.
	if write(ping) != nil {
		clientGone()
		return
	}
	for {
		select {
		case <-r.Context().Done():
			// The client closed the stream: goosed's failed send cancels the
			// agent (§2.2); the deferred cancel does the same here.
			clientGone()
			return
		case <-ctx.Done():
			// ctx derives from the request's: tell a client close from a
			// session deletion.
			if r.Context().Err() != nil {
				clientGone()
			}
			return
		case <-ticker.C:
			if write(ping) != nil {
				clientGone()
				return
			}
		case f, ok := <-frames:
			if !ok {
				// The producer is done: Finish was sent and the stream
				// closes (§3), or it stopped because the client went away
				// (its ctx derives from the request's) and this select
				// happened to pick the closed channel first.
				if !finished && r.Context().Err() != nil {
					clientGone()
				}
				return
			}
			finished = finished || f.final
			if f.drop {
				// Abort the connection mid-response (after the part of an
				// event it carries); the client sees a truncated chunked body.
				_ = write(f.data)
				panic(http.ErrAbortHandler)
			}
			if write(f.data) != nil {
				clientGone()
				return
			}
		}
	}
}

// play runs a scripted reply, sending frames until Finish.
func (g *Goosed) play(ctx context.Context, s *goosedSession, reply Reply, frames chan<- goosedFrame) {
	send := func(f goosedFrame) bool {
		select {
		case frames <- f:
			return true
		case <-ctx.Done():
			return false
		}
	}
	msgID := ""
	newID := func() string {
		if msgID == "" {
			msgID = "chatcmpl-" + strconv.FormatInt(g.msgSeq.Add(1), 10)
		}
		return msgID
	}
	// message renders a Message event and records it in the conversation,
	// merging streamed deltas that share an id as goose stores them.
	message := func(id *string, role string, agentVisible bool, content ...any) []byte {
		msg := map[string]any{
			"id": nil, "role": role, "created": time.Now().Unix(), "content": content,
			"metadata": map[string]any{"userVisible": true, "agentVisible": agentVisible},
		}
		if id != nil {
			msg["id"] = *id
		}
		raw, _ := json.Marshal(msg)
		g.mu.Lock()
		defer g.mu.Unlock()
		if agentVisible {
			if id != nil && s.streamed != nil && s.streamed.msg["id"] == *id {
				s.streamed.merge(content)
			} else {
				s.endStreamed()
				s.conversation = append(s.conversation, raw)
				if id != nil {
					s.streamed = newStreamedMessage(msg)
				}
			}
		}
		return sseData(map[string]any{"type": "Message", "message": json.RawMessage(raw), "token_state": g.tokenStateLocked(s)})
	}
	finish := func() []byte {
		g.mu.Lock()
		defer g.mu.Unlock()
		return sseData(map[string]any{"type": "Finish", "reason": "stop", "token_state": g.tokenStateLocked(s)})
	}

	for _, st := range reply.Steps {
		if st.Delay > 0 {
			t := time.NewTimer(st.Delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		switch {
		case st.Drop:
			send(goosedFrame{drop: true})
			return
		case st.DropMidFrame:
			id := newID()
			ev := message(&id, "assistant", true, map[string]any{"type": "text", "text": "cut"})
			send(goosedFrame{data: ev[:len(ev)/2], drop: true})
			return
		case st.Error != "":
			// §3: an agent error is sent as Error, then Finish still follows.
			if send(goosedFrame{data: sseData(map[string]any{"type": "Error", "error": st.Error})}) {
				send(goosedFrame{data: finish(), final: true})
			}
			return
		case st.Text != "":
			id := newID()
			if !send(goosedFrame{data: message(&id, "assistant", true, map[string]any{"type": "text", "text": st.Text})}) {
				return
			}
		case st.Thinking != "":
			id := newID()
			if !send(goosedFrame{data: message(&id, "assistant", true, map[string]any{"type": "thinking", "thinking": st.Thinking, "signature": ""})}) {
				return
			}
		case st.Tool != nil:
			if !g.playTool(ctx, s, st.Tool, newID(), message, send) {
				return
			}
			msgID = "" // the next provider call is a new message
		case st.Notify != nil:
			n := st.Notify
			var m map[string]any
			if n.Progress != 0 || n.Total != 0 {
				params := map[string]any{"progressToken": n.ToolCallID, "progress": n.Progress}
				if n.Total != 0 {
					params["total"] = n.Total
				}
				if n.Message != "" {
					params["message"] = n.Message
				}
				m = map[string]any{"method": "notifications/progress", "params": params}
			} else {
				m = map[string]any{"method": "notifications/message", "params": map[string]any{"level": "info", "logger": "goosetest", "data": n.Message}}
			}
			// §3 Notification: request_id is the MCP tool call's id.
			if !send(goosedFrame{data: sseData(map[string]any{"type": "Notification", "request_id": n.ToolCallID, "message": m})}) {
				return
			}
		case st.Usage != nil:
			u := st.Usage
			g.mu.Lock()
			s.usageSeen = true
			s.usage.Input, s.usage.Output, s.usage.Total = u.Input, u.Output, u.Input+u.Output
			s.usage.AccumulatedInput += u.Input
			s.usage.AccumulatedOutput += u.Output
			s.usage.AccumulatedTotal += u.Input + u.Output
			if u.Cost != 0 {
				c := u.Cost
				if s.usage.AccumulatedCost != nil {
					c += *s.usage.AccumulatedCost
				}
				s.usage.AccumulatedCost = &c
			}
			g.mu.Unlock()
			if g.opts.Version == Goosed141 {
				// §3 MessageUsage ([F] only): the provider call's usage,
				// sent after its Message.
				usage := map[string]any{"inputTokens": u.Input, "outputTokens": u.Output, "totalTokens": u.Input + u.Output}
				if u.Cost != 0 {
					usage["cost"] = u.Cost
				}
				var mid any
				if msgID != "" {
					mid = msgID
				}
				if !send(goosedFrame{data: sseData(map[string]any{"type": "MessageUsage", "message_id": mid, "usage": usage})}) {
					return
				}
			}
			// Otherwise (1.37) usage shows only in the token_state of the
			// following events (§3: "no separate usage payload").
			msgID = ""
		}
	}
	send(goosedFrame{data: finish(), final: true})
}

// playTool emits a tool call: the toolRequest (in the current assistant
// message), an actionRequired confirmation that blocks until answered when
// NeedsApproval (§3 "Approve or smart_approve mode"), then the toolResponse
// as a user-role message with a msg_ id (§3 streaming semantics).
func (g *Goosed) playTool(ctx context.Context, s *goosedSession, t *ToolStep, id string,
	message func(*string, string, bool, ...any) []byte, send func(goosedFrame) bool) bool {
	args := t.Arguments
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	req := map[string]any{"type": "toolRequest", "id": t.ID, "toolCall": map[string]any{
		"status": "success", "value": map[string]any{"name": t.Name, "arguments": args},
	}}
	if !send(goosedFrame{data: message(&id, "assistant", true, req)}) {
		return false
	}
	result, isError := t.Result, t.IsError
	declined := false
	if t.NeedsApproval {
		key := s.id + "\x00" + t.ID
		ch := make(chan string, 1)
		g.mu.Lock()
		if a, ok := g.early[key]; ok {
			delete(g.early, key)
			ch <- a
		} else {
			g.waiters[key] = ch
		}
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			if g.waiters[key] == ch {
				delete(g.waiters, key)
			}
			g.mu.Unlock()
		}()
		ar := map[string]any{"type": "actionRequired", "data": map[string]any{
			"actionType": "toolConfirmation", "id": t.ID, "toolName": t.Name, "arguments": args, "prompt": nil,
		}}
		// The confirmation message has a null id and is not agent-visible.
		if !send(goosedFrame{data: message(nil, "assistant", false, ar)}) {
			return false
		}
		var action string
		select {
		case action = <-ch:
		case <-ctx.Done():
			return false
		}
		if action != "allow_once" && action != "always_allow" {
			result, isError, declined = DeclinedToolResult, false, true
		}
	}
	if t.Run != nil && !declined {
		result, isError = t.Run()
	}
	respID := fmt.Sprintf("msg_%d", g.msgSeq.Add(1))
	resp := map[string]any{"type": "toolResponse", "id": t.ID, "toolResult": map[string]any{
		"status": "success", "value": map[string]any{"content": []any{map[string]any{"type": "text", "text": result}}, "isError": isError},
	}}
	return send(goosedFrame{data: message(&respID, "user", true, resp)})
}

// streamedMessage is the message goose is streaming, as it stores it:
// deltas with the message's id merge into it, text into its last text item,
// other items appended. It is kept as values, rendered into the
// conversation once the next message starts (endStreamed) or when the
// conversation is read, so a reply of n deltas costs O(n), not a decode and
// an encode of the whole message per delta.
type streamedMessage struct {
	msg   map[string]any // id, role, created, metadata; content is items
	items []any
	text  strings.Builder // the last item's text, when it is a text item
}

func newStreamedMessage(msg map[string]any) *streamedMessage {
	content, _ := msg["content"].([]any)
	m := &streamedMessage{msg: msg}
	m.merge(content)
	return m
}

func (m *streamedMessage) merge(content []any) {
	for _, c := range content {
		cm, _ := c.(map[string]any)
		if cm["type"] == "text" && m.lastIsText() {
			fmt.Fprint(&m.text, cm["text"])
			continue
		}
		m.closeText()
		m.items = append(m.items, c)
		if cm["type"] == "text" {
			fmt.Fprint(&m.text, cm["text"])
		}
	}
}

func (m *streamedMessage) lastIsText() bool {
	if len(m.items) == 0 {
		return false
	}
	last, ok := m.items[len(m.items)-1].(map[string]any)
	return ok && last["type"] == "text"
}

// textItem is the last item, a text item, with the text gathered so far
// (a copy: the delta that started it, already sent, is not changed).
func (m *streamedMessage) textItem() map[string]any {
	last := maps.Clone(m.items[len(m.items)-1].(map[string]any))
	last["text"] = m.text.String()
	return last
}

// closeText writes the text gathered so far into the last item.
func (m *streamedMessage) closeText() {
	if m.lastIsText() {
		m.items[len(m.items)-1] = m.textItem()
		m.text.Reset()
	}
}

func (m *streamedMessage) render() json.RawMessage {
	items := slices.Clone(m.items)
	if m.lastIsText() {
		items[len(items)-1] = m.textItem()
	}
	msg := maps.Clone(m.msg)
	msg["content"] = items
	out, _ := json.Marshal(msg)
	return out
}

// endStreamed renders the message goose was streaming into the
// conversation; a message that follows is not merged into it.
func (s *goosedSession) endStreamed() {
	if s.streamed != nil {
		s.conversation[len(s.conversation)-1] = s.streamed.render()
		s.streamed = nil
	}
}
