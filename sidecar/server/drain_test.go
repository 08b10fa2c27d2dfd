package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/peering"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// heldTurn is a script whose "slow" turn streams a first delta, then runs a
// tool that returns only when release is called, then finishes; other
// texts are echoed.
type heldTurn struct {
	once sync.Once
	ch   chan struct{}
}

// newHeldTurn's release must be deferred by the test: the fake goose's
// cleanup waits for the tool, so a cleanup registered before it would run
// too late.
func newHeldTurn() *heldTurn { return &heldTurn{ch: make(chan struct{})} }

func (h *heldTurn) release() { h.once.Do(func() { close(h.ch) }) }

func (h *heldTurn) script(sessionID, text string) goosetest.Reply {
	if text != "slow" {
		return goosetest.Echo(sessionID, text)
	}
	return goosetest.Reply{Steps: []goosetest.Step{
		{Text: "started "},
		{Tool: &goosetest.ToolStep{ID: "call-wait", Name: "developer__wait", Arguments: json.RawMessage(`{}`),
			Run: func() (string, bool) { <-h.ch; return "waited", false }}},
		{Text: "finished"},
		{Usage: &goosetest.UsageStep{Input: 12, Output: 3}},
	}}
}

// openSSE posts body to /run_sse and hands out its frames as they arrive;
// the channel is closed when the stream ends.
func (s *sidecar) openSSE(body any) <-chan sseFrame {
	s.t.Helper()
	j, err := json.Marshal(body)
	if err != nil {
		s.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), http.MethodPost, s.URL+"/run_sse", bytes.NewReader(j))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", testToken)
	resp, err := s.httpc().Do(req)
	if err != nil {
		s.t.Fatalf("run_sse: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		s.t.Fatalf("run_sse: %d", resp.StatusCode)
	}
	frames := make(chan sseFrame, 64)
	go func() {
		defer close(frames)
		defer resp.Body.Close()
		_ = scanSSE(resp.Body, func(f sseFrame, err error) {
			if err != nil { // streamedText reports it
				f = sseFrame{Event: "undecodable", Data: map[string]any{"error": err.Error()}}
			}
			frames <- f
		})
	}()
	return frames
}

// streamedText joins a stream's partial text deltas and notes its error
// frames, reading until it ends.
func streamedText(frames <-chan sseFrame) (text string, errs []string) {
	for f := range frames {
		if f.Event == "error" || f.Data["error"] != nil || f.Data["errorMessage"] != nil {
			errs = append(errs, fmtFrame(f))
			continue
		}
		text += partialText(f)
	}
	return text, errs
}

// partialText is a partial event's text delta; empty for other frames.
func partialText(f sseFrame) string {
	if f.Data["partial"] != true {
		return ""
	}
	s, _ := jpath(f.Data, "content", "parts", 0, "text").(string)
	return s
}

func fmtFrame(f sseFrame) string {
	b, _ := json.Marshal(f.Data)
	return f.Event + " " + string(b)
}

// waitForText reads frames until their partial text contains want.
func waitForText(t *testing.T, frames <-chan sseFrame, want string) {
	t.Helper()
	text := ""
	for f := range frames {
		if text += partialText(f); strings.Contains(text, want) {
			return
		}
	}
	t.Fatalf("the stream ended before %q (got %q)", want, text)
}

// TestDrainLetsTheRunningTurnFinish: Drain (asked for by goose's preStop
// hook before goose stops) takes the pod out of service and refuses new
// turns with a JSON 503, but returns only once the turn already running
// has streamed and stored its whole answer.
func TestDrainLetsTheRunningTurnFinish(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			held := newHeldTurn()
			defer held.release()
			sc := startSidecar(t, fl.start(t, held.script), t.TempDir())
			sc.createSession("u", "running")
			sc.createSession("u", "later")
			if code, body := sc.do(http.MethodGet, "/readyz", nil); code != http.StatusOK {
				t.Fatalf("readyz before the drain: %d %s", code, body)
			}

			frames := sc.openSSE(runBody("u", "running", "slow", true))
			waitForText(t, frames, "started")
			drained := make(chan error, 1)
			go func() { drained <- sc.srv.Drain(t.Context()) }()

			poll.Until(t, "readyz reports the drain", func() bool {
				code, _ := sc.do(http.MethodGet, "/readyz", nil)
				return code == http.StatusServiceUnavailable
			})
			_, body := sc.do(http.MethodGet, "/readyz", nil)
			if !strings.Contains(string(body), `"draining"`) {
				t.Errorf("readyz while draining: %s", body)
			}
			// A new turn, on another session or the running one, is refused
			// before anything reaches goose.
			for _, id := range []string{"later", "running"} {
				resp, body := sc.exchange(http.MethodPost, "/run_sse", runBody("u", id, "hello", true),
					map[string]string{"X-API-Key": testToken})
				var e struct{ Error, Code string }
				if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil ||
					e.Code != "DRAINING" || !strings.Contains(e.Error, "draining") || resp.Header.Get("Retry-After") == "" {
					t.Errorf("a new turn on %q while draining: %d %s (Retry-After %q), want 503 DRAINING with Retry-After",
						id, resp.StatusCode, body, resp.Header.Get("Retry-After"))
				}
			}
			// A2A: the message gets a JSON-RPC error naming the drain; no task starts.
			code, body := sc.do(http.MethodPost, server.A2APathV03, map[string]any{
				"jsonrpc": "2.0", "id": 1, "method": "message/send",
				"params": map[string]any{"message": map[string]any{
					"kind": "message", "messageId": "m-drain", "role": "user", "contextId": "a2a-later",
					"parts": []any{map[string]any{"kind": "text", "text": "hello"}},
				}},
			})
			if code != http.StatusOK || !strings.Contains(string(body), "draining") {
				t.Errorf("A2A message/send while draining: %d %s, want its failure to name the drain", code, body)
			}
			select {
			case err := <-drained:
				t.Fatalf("Drain returned while a turn was running: %v", err)
			default:
			}

			held.release()
			text, errs := streamedText(frames)
			if len(errs) > 0 || !strings.Contains(text, "finished") {
				t.Errorf("the running turn streamed %q with errors %v, want its whole answer", text, errs)
			}
			if err := <-drained; err != nil {
				t.Fatalf("Drain: %v", err)
			}
			// Drain returned after the answer was stored.
			h := sc.turnTexts("u", "running")
			last := h[len(h)-1]
			if h[0] != [2]string{"user", "slow"} || last[0] != appName || !strings.Contains(last[1], "finished") {
				t.Errorf("the running session's history is %v, want the message and its whole answer", h)
			}
			if h := sc.turnTexts("u", "later"); len(h) != 0 {
				t.Errorf("the refused turn left %v in its session", h)
			}
		})
	}
}

// TestDrainTimeoutEndsTheRunningTurn: when the drain's time is up, a turn
// still running ends with an error frame naming the shutdown, rather than
// being cut when goose stops.
func TestDrainTimeoutEndsTheRunningTurn(t *testing.T) {
	held := newHeldTurn()
	defer held.release()
	g := goosetest.NewServe(t, goosetest.WithServeScript(held.script))
	sc := startSidecar(t, serveClient(t, g), t.TempDir())
	sc.createSession("u", "running")
	frames := sc.openSSE(runBody("u", "running", "slow", true))
	waitForText(t, frames, "started")

	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no time left
	if err := sc.srv.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	text, errs := streamedText(frames)
	if len(errs) == 0 || !strings.Contains(strings.Join(errs, " "), server.ErrDraining.Error()) {
		t.Errorf("the turn ended with %q and errors %v, want an error frame naming the shutdown", text, errs)
	}
	if strings.Contains(text, "finished") {
		t.Errorf("the turn finished (%q) though the drain had no time", text)
	}
}

// TestDrainDeletesUnusedEarlySessions: the goose session started when an
// ADK session was created (StartGooseOnCreate) but used by no turn is
// deleted from goose as the sidecar drains, while goose still runs: only
// this process knew it (no ADK state names it), so after the restart it
// would stay in goose for good. A session a turn used stays.
func TestDrainDeletesUnusedEarlySessions(t *testing.T) {
	f := goosetest.NewServe(t)
	c, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sc := startSidecar(t, c, t.TempDir())
	sc.createSession("u", "used")
	sc.createSession("u", "unused")
	if got := sc.say("u", "used", "hello"); got == "" {
		t.Fatal("the turn answered nothing")
	}
	state, _ := sc.history("u", "used")
	usedID, _ := jpath(state, "state", gooseagent.SessionIDStateKey(appName)).(string)
	poll.Until(t, "both early goose sessions started", func() bool { return len(f.SessionIDs()) == 2 })

	if err := sc.srv.Drain(t.Context()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if got := f.SessionIDs(); !slices.Equal(got, []string{usedID}) {
		t.Errorf("goose sessions after the drain: %v, want only %q, the one the used session's state names", got, usedID)
	}
	if n := f.Calls("session/delete"); n != 1 {
		t.Errorf("session/delete calls: %d, want 1", n)
	}
}

// TestDrainTimeoutEndsForwardedStreams: streams a pod relays to the pod
// that serves their session, still open when the relaying pod's drain
// times out, end with the drain's error frame in their own wire, not a cut
// connection: an error event on /run_sse (httputil.ReverseProxy aborts a
// relayed stream whose context ends with a panic that dropped the
// connection) and a JSON-RPC error an a2a client decodes on A2A. A forward
// still waiting for its answer gets a 502 naming the shutdown, with no
// Retry-After: the owner has the message and may still run it, so a client
// sending it again would have it answered twice (make soak, seeds 5 and
// 3405991518479366399).
func TestDrainTimeoutEndsForwardedStreams(t *testing.T) {
	held := newHeldTurn()
	defer held.release()
	rs := startReplicaSet(t, func(_ int, cfg *server.Config) {
		cfg.Backend = serveClient(t, goosetest.NewServe(t, goosetest.WithServeScript(held.script)))
		cfg.PublicBaseURL = "" // each pod's A2A card names the pod itself
	})
	owner, relay := rs.pods[0], rs.pods[1]
	here := map[string]string{"Authorization": "Bearer " + testToken, peering.HopHeader: "1"}
	owner.createSessionHere("u", "rest")
	owner.createSessionHere("u", "busy")
	if code, body := owner.doWith(http.MethodPost, server.A2APathV03, map[string]any{
		"jsonrpc": "2.0", "id": 1, "method": "message/send",
		"params": map[string]any{"message": map[string]any{
			"kind": "message", "messageId": "m-first", "role": "user", "contextId": "a2a-ctx",
			"parts": []any{map[string]any{"kind": "text", "text": "hello"}},
		}},
	}, here); code != http.StatusOK || strings.Contains(string(body), `"error"`) {
		t.Fatalf("the A2A context's first message, on the owner: %d %s", code, body)
	}

	// Through the relay: a /run_sse stream and an A2A stream, both held
	// by goose after their first delta...
	frames := relay.openSSE(runBody("u", "rest", "slow", true))
	waitForText(t, frames, "started")
	c := a2aRaw(t, relay.URL)
	a2aStarted := make(chan struct{})
	a2aEnd := make(chan error, 1)
	go func() {
		msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("slow"))
		msg.ContextID = "a2a-ctx"
		started := false
		for ev, err := range c.SendStreamingMessage(t.Context(), &a2a.SendMessageRequest{Message: msg}) {
			if err != nil {
				a2aEnd <- err
				return
			}
			if _, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok && !started {
				started = true
				close(a2aStarted)
			}
		}
		a2aEnd <- errors.New("the A2A stream ended with no error")
	}()
	select {
	case <-a2aStarted:
	case err := <-a2aEnd:
		t.Fatalf("the relayed A2A stream ended before its first output: %v", err)
	}
	// ... and a run waiting on the owner for the turn of a busy session.
	busy := owner.openSSE(runBody("u", "busy", "slow", true))
	waitForText(t, busy, "started")
	type answer struct {
		code       int
		retryAfter string
		body       string
	}
	waiting := make(chan answer, 1)
	go func() {
		j, _ := json.Marshal(runBody("u", "busy", "hello", true))
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, relay.URL+"/run_sse", bytes.NewReader(j))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", testToken)
		resp, err := httpClient.Do(req)
		if err != nil {
			waiting <- answer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		waiting <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
	}()
	poll.Until(t, "the relay to forward the three requests", func() bool {
		n, err := strconv.Atoi(rs.metric(t, 1, `adk2goose_peer_lookups_total{outcome="forwarded"}`))
		return err == nil && n >= 3
	})

	relay.stop() // its drain times out on the streams it relays

	if _, errs := streamedText(frames); !strings.Contains(strings.Join(errs, " "), server.ErrDraining.Error()) {
		t.Errorf("the relayed /run_sse stream ended with errors %v, want an error frame naming the shutdown", errs)
	}
	var rpcErr *a2a.Error
	if err := <-a2aEnd; !errors.As(err, &rpcErr) || !strings.Contains(err.Error(), server.ErrDraining.Error()) {
		t.Errorf("the relayed A2A stream ended with %v, want a JSON-RPC error naming the shutdown", err)
	}
	a := <-waiting
	if a.code != http.StatusBadGateway || a.retryAfter != "" || !strings.Contains(a.body, server.ErrDraining.Error()) {
		t.Errorf("the forward waiting for the owner: %d (Retry-After %q) %s, want a 502 naming the shutdown and no Retry-After", a.code, a.retryAfter, a.body)
	}
}
