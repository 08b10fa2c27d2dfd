package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// sleeps records the waits the client asked for instead of sleeping.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return nil
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

type harness struct {
	fake   *goosetest.Goosed
	client *Client
	sleeps *sleeps
}

func newHarness(t testing.TB, opts goosetest.GoosedOptions) *harness {
	t.Helper()
	if opts.PingInterval == 0 {
		opts.PingInterval = 20 * time.Millisecond // many pings in short tests
	}
	fake := goosetest.NewGoosed(opts)
	sl := &sleeps{}
	c, err := New(Config{URL: fake.URL, SecretKey: fake.SecretKey, Retry: RetryPolicy{Sleep: sl.sleep}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		fake.Close()
	})
	return &harness{fake: fake, client: c, sleeps: sl}
}

func (h *harness) start(t testing.TB) string {
	t.Helper()
	s, err := h.client.StartSession(context.Background(), goose.StartOptions{WorkingDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func collect(seq func(func(goose.Event, error) bool)) ([]goose.Event, error) {
	var evs []goose.Event
	for ev, err := range seq {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func kinds(evs []goose.Event) string {
	var parts []string
	for _, e := range evs {
		parts = append(parts, strings.TrimPrefix(fmt.Sprintf("%T", e), "*goose."))
	}
	return strings.Join(parts, ",")
}

func TestReplyEventKinds(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Thinking: "let me think"},
		{Text: "Hel"},
		{Text: "lo"},
		{Tool: &goosetest.ToolStep{ID: "call_1", Name: "shell", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "README.md"}},
		{Notify: &goosetest.NotifyStep{ToolCallID: "call_1", Message: "half", Progress: 1, Total: 2}},
		{Notify: &goosetest.NotifyStep{ToolCallID: "call_1", Message: "log line"}},
		{Usage: &goosetest.UsageStep{Input: 100, Output: 20, Cost: 0.5}},
		{Text: "done"},
	}})
	h := newHarness(t, goosetest.GoosedOptions{Script: script})
	id := h.start(t)
	evs, err := collect(h.client.Reply(context.Background(), id, goose.UserMessage{Text: "hi"}))
	if err != nil {
		t.Fatal(err)
	}
	want := "ThinkingDelta,TextDelta,TextDelta,ToolRequest,ToolResponse,Notification,Notification,UsageUpdate,TextDelta,Finish"
	if got := kinds(evs); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	th, t1, t2 := evs[0].(*goose.ThinkingDelta), evs[1].(*goose.TextDelta), evs[2].(*goose.TextDelta)
	if th.Text != "let me think" || t1.Text != "Hel" || t2.Text != "lo" || t1.MessageID == "" || t1.MessageID != t2.MessageID || th.MessageID != t1.MessageID {
		t.Errorf("deltas %+v %+v %+v: want shared message id", th, t1, t2)
	}
	tr := evs[3].(*goose.ToolRequest)
	if tr.ID != "call_1" || tr.Name != "shell" || string(tr.Arguments) != `{"command":"ls"}` {
		t.Errorf("tool request %+v", tr)
	}
	if resp := evs[4].(*goose.ToolResponse); resp.ID != "call_1" || resp.Name != "shell" || resp.Text != "README.md" || resp.IsError {
		t.Errorf("tool response %+v", resp)
	}
	if n := evs[5].(*goose.Notification); n.Kind != "progress" || n.ToolCallID != "call_1" || n.Message != "half" || *n.Progress != 1 || *n.Total != 2 {
		t.Errorf("progress %+v", n)
	}
	if n := evs[6].(*goose.Notification); n.Kind != "message" || n.Message != "log line" {
		t.Errorf("log notification %+v", n)
	}
	u := evs[7].(*goose.UsageUpdate)
	if !u.HasAccumulated || u.Last.InputTokens != 100 || u.Last.OutputTokens != 20 || u.Accumulated.TotalTokens != 120 || u.Accumulated.Cost == nil || *u.Accumulated.Cost != 0.5 {
		t.Errorf("usage %+v", u)
	}
	if t3 := evs[8].(*goose.TextDelta); t3.MessageID == t1.MessageID {
		t.Errorf("text after a tool call reused message id %q", t3.MessageID)
	}
	if f := evs[9].(*goose.Finish); f.Reason != "stop" {
		t.Errorf("finish %+v", f)
	}

	// A second turn accumulates; the client's Usage matches the fake's.
	if _, err := collect(h.client.Reply(context.Background(), id, goose.UserMessage{Text: "again"})); err != nil {
		t.Fatal(err)
	}
	fu, _ := h.fake.Usage(id)
	cu, err := h.client.Usage(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if fu.AccumulatedTotal != 240 || cu.TotalTokens != fu.AccumulatedTotal || cu.InputTokens != 200 || cu.OutputTokens != 40 || cu.Cost == nil || *cu.Cost != 1.0 {
		t.Errorf("client usage %+v, fake %+v", cu, fu)
	}
	s, err := h.client.ResumeSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != id || s.Name != "New Chat" || s.WorkingDir != "/workspace" || s.MessageCount == 0 || s.Usage.TotalTokens != 240 {
		t.Errorf("session %+v", s)
	}
}

func TestReplyWireRequest(t *testing.T) {
	h := newHarness(t, goosetest.GoosedOptions{})
	id := h.start(t)
	if _, err := collect(h.client.Reply(context.Background(), id, goose.UserMessage{Text: "hello"})); err != nil {
		t.Fatal(err)
	}
	var sawReply bool
	for _, r := range h.fake.Requests() {
		if r.Header.Get("X-Secret-Key") != h.fake.SecretKey {
			t.Errorf("%s %s without the secret key", r.Method, r.Path)
		}
		if r.Path != "/reply" {
			continue
		}
		sawReply = true
		var body struct {
			SessionID   string `json:"session_id"`
			UserMessage struct {
				Role     string `json:"role"`
				Created  int64  `json:"created"`
				Content  []map[string]string
				Metadata map[string]bool
			} `json:"user_message"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		m := body.UserMessage
		if body.SessionID != id || m.Role != "user" || m.Created < time.Now().Add(-time.Minute).Unix() ||
			len(m.Content) != 1 || m.Content[0]["type"] != "text" || m.Content[0]["text"] != "hello" ||
			!m.Metadata["userVisible"] || !m.Metadata["agentVisible"] {
			t.Errorf("reply body %s", r.Body)
		}
	}
	if !sawReply {
		t.Fatal("no /reply request")
	}
}

func TestStartSessionFlow(t *testing.T) {
	h := newHarness(t, goosetest.GoosedOptions{})
	s, err := h.client.StartSession(context.Background(), goose.StartOptions{WorkingDir: "/w", Provider: "anthropic", Model: "claude", Mode: "approve"})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range h.fake.Requests() {
		paths = append(paths, r.Path)
		switch r.Path {
		case "/agent/resume":
			if !strings.Contains(string(r.Body), `"load_model_and_extensions":true`) || !strings.Contains(string(r.Body), s.ID) {
				t.Errorf("resume body %s", r.Body)
			}
		case "/agent/update_provider":
			if want := fmt.Sprintf(`{"provider":"anthropic","session_id":%q,"model":"claude"}`, s.ID); string(r.Body) != want {
				t.Errorf("update_provider body %s, want %s", r.Body, want)
			}
		case "/agent/update_session":
			if !strings.Contains(string(r.Body), `"goose_mode":"approve"`) {
				t.Errorf("update_session body %s", r.Body)
			}
		}
	}
	if got := strings.Join(paths, " "); got != "/agent/start /agent/resume /agent/update_provider /agent/update_session" {
		t.Errorf("calls %s", got)
	}
	if _, err := h.client.StartSession(context.Background(), goose.StartOptions{WorkingDir: "/w", Mode: "bogus"}); err == nil {
		t.Error("invalid mode accepted")
	}
}

func TestApproval(t *testing.T) {
	for _, tc := range []struct {
		decision goose.Decision
		wantText string
	}{
		{goose.AllowOnce, "ran it"},
		{goose.AlwaysAllow, "ran it"},
		{goose.DenyOnce, "The user has declined to run this tool"},
		{goose.AlwaysDeny, "The user has declined to run this tool"},
		{goose.CancelDecision, "The user has declined to run this tool"},
	} {
		t.Run(string(tc.decision), func(t *testing.T) {
			script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
				{Tool: &goosetest.ToolStep{ID: "call_9", Name: "shell", Arguments: json.RawMessage(`{"command":"rm"}`), Result: "ran it", NeedsApproval: true}},
			}})
			h := newHarness(t, goosetest.GoosedOptions{Script: script})
			id := h.start(t)
			var resp *goose.ToolResponse
			var sawApproval bool
			for ev, err := range h.client.Reply(context.Background(), id, goose.UserMessage{Text: "go"}) {
				if err != nil {
					t.Fatal(err)
				}
				switch e := ev.(type) {
				case *goose.ApprovalRequest:
					sawApproval = true
					if e.ID != "call_9" || e.ToolName != "shell" || string(e.Arguments) != `{"command":"rm"}` {
						t.Errorf("approval %+v", e)
					}
					if err := h.client.Approve(context.Background(), id, e.ID, tc.decision); err != nil {
						t.Fatal(err)
					}
				case *goose.ToolResponse:
					resp = e
				}
			}
			if !sawApproval || resp == nil || !strings.HasPrefix(resp.Text, tc.wantText) {
				t.Fatalf("approval seen %v, response %+v", sawApproval, resp)
			}
			c := h.fake.Confirmations()
			if len(c) != 1 || c[0].Action != string(tc.decision) || c[0].ID != "call_9" || c[0].SessionID != id {
				t.Errorf("confirmations %+v", c)
			}
		})
	}
	h := newHarness(t, goosetest.GoosedOptions{})
	if err := h.client.Approve(context.Background(), "s", "x", "maybe"); err == nil {
		t.Error("unknown decision accepted")
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name       string
		failures   []goosetest.GoosedFailure
		call       func(*harness, string) error
		wantErr    error // nil: success
		wantSleeps []time.Duration
		wantHTTP   int
	}{
		{name: "412 retried once", failures: []goosetest.GoosedFailure{{Status: 412, Path: "/reply"}},
			call: replyCall, wantSleeps: []time.Duration{time.Second}},
		{name: "424 retried once", failures: []goosetest.GoosedFailure{{Status: 424, Path: "/reply"}},
			call: replyCall, wantSleeps: []time.Duration{time.Second}},
		{name: "412 twice is not ready", failures: []goosetest.GoosedFailure{{Status: 412, Path: "/reply"}, {Status: 412, Path: "/reply"}},
			call: replyCall, wantErr: goose.ErrNotReady, wantSleeps: []time.Duration{time.Second}},
		{name: "429 backs off 1 2 4", failures: rep(3, goosetest.GoosedFailure{Status: 429, Path: "/reply"}),
			call: replyCall, wantSleeps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{name: "429 four times gives up", failures: rep(4, goosetest.GoosedFailure{Status: 429, Path: "/reply"}),
			call: replyCall, wantErr: goose.ErrRateLimited, wantSleeps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{name: "429 honours Retry-After", failures: []goosetest.GoosedFailure{{Status: 429, RetryAfter: "3", Path: "/sessions/ID"}},
			call: usageCall, wantSleeps: []time.Duration{3 * time.Second}},
		{name: "429 Retry-After too long", failures: []goosetest.GoosedFailure{{Status: 429, RetryAfter: "3600", Path: "/sessions/ID"}},
			call: usageCall, wantErr: goose.ErrRateLimited},
		{name: "401 unauthorized", failures: []goosetest.GoosedFailure{{Status: 401, Path: "/reply"}},
			call: replyCall, wantErr: goose.ErrUnauthorized, wantHTTP: 401},
		{name: "404 not found", failures: []goosetest.GoosedFailure{{Status: 404, Path: "/sessions/ID"}},
			call: usageCall, wantErr: goose.ErrSessionNotFound, wantHTTP: 404},
		{name: "500 is an HTTPError with the body", failures: []goosetest.GoosedFailure{{Status: 500, Body: "boom", Path: "/reply"}},
			call: replyCall, wantHTTP: 500},
		{name: "503 unavailable, not retried", failures: []goosetest.GoosedFailure{{Status: 503, Path: "/agent/resume"}},
			call: func(h *harness, id string) error {
				_, err := h.client.ResumeSession(context.Background(), id)
				return err
			},
			wantErr: goose.ErrUnavailable, wantHTTP: 503},
		{name: "412 on approve retried", failures: []goosetest.GoosedFailure{{Status: 412, Path: "/action-required/tool-confirmation"}},
			call: func(h *harness, id string) error {
				return h.client.Approve(context.Background(), id, "call_x", goose.AllowOnce)
			}, wantSleeps: []time.Duration{time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, goosetest.GoosedOptions{})
			id := h.start(t)
			for _, f := range tt.failures {
				f.Path = strings.ReplaceAll(f.Path, "ID", id)
				h.fake.FailNext(1, f)
			}
			err := tt.call(h, id)
			if tt.wantErr == nil && tt.wantHTTP == 0 {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
			} else {
				if err == nil {
					t.Fatal("no error")
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error %v, want %v", err, tt.wantErr)
				}
				var he *goose.HTTPError
				if tt.wantHTTP != 0 && (!errors.As(err, &he) || he.StatusCode != tt.wantHTTP) {
					t.Errorf("error %v, want HTTPError %d", err, tt.wantHTTP)
				}
				if tt.wantHTTP == 500 && (he == nil || he.Body != "boom") {
					t.Errorf("500 body lost: %v", err)
				}
				if !strings.HasPrefix(err.Error(), "failed to ") {
					t.Errorf("error not wrapped with its operation: %v", err)
				}
			}
			if got := h.sleeps.got(); fmt.Sprint(got) != fmt.Sprint(tt.wantSleeps) && (len(got) != 0 || len(tt.wantSleeps) != 0) {
				t.Errorf("sleeps %v, want %v", got, tt.wantSleeps)
			}
		})
	}
}

func replyCall(h *harness, id string) error {
	evs, err := collect(h.client.Reply(context.Background(), id, goose.UserMessage{Text: "once"}))
	if err == nil {
		// The refused attempts must not have reached the agent: the user
		// message is in the conversation exactly once.
		s, gerr := h.client.ResumeSession(context.Background(), id)
		if gerr != nil {
			return gerr
		}
		if s.MessageCount != 2 || len(evs) == 0 {
			return fmt.Errorf("message count %d after one reply (%d events)", s.MessageCount, len(evs))
		}
	}
	return err
}

// usageCall reads the session (GET /sessions/{id}).
func usageCall(h *harness, id string) error {
	_, err := h.client.Usage(context.Background(), id)
	return err
}

func rep(n int, f goosetest.GoosedFailure) []goosetest.GoosedFailure {
	out := make([]goosetest.GoosedFailure, n)
	for i := range out {
		out[i] = f
	}
	return out
}

func TestAgentError(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "trying"}, {Usage: &goosetest.UsageStep{Input: 5, Output: 1}}, {Error: "provider exploded"},
	}})
	h := newHarness(t, goosetest.GoosedOptions{Script: script})
	id := h.start(t)
	evs, err := collect(h.client.Reply(context.Background(), id, goose.UserMessage{Text: "x"}))
	var ae *goose.AgentError
	if !errors.As(err, &ae) || ae.Message != "provider exploded" {
		t.Fatalf("error %v, want AgentError", err)
	}
	// The final token state comes from the Finish after the Error.
	if got := kinds(evs); got != "TextDelta,UsageUpdate" || evs[1].(*goose.UsageUpdate).Accumulated.TotalTokens != 6 {
		t.Errorf("events %s", got)
	}
}

func TestProviderNotSet(t *testing.T) {
	h := newHarness(t, goosetest.GoosedOptions{})
	// /agent/start alone, skipping /agent/resume, as a careless client would.
	req, _ := http.NewRequest(http.MethodPost, h.fake.URL+"/agent/start", strings.NewReader(`{"working_dir":"/"}`))
	req.Header.Set("X-Secret-Key", h.fake.SecretKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	_, err = collect(h.client.Reply(context.Background(), s.ID, goose.UserMessage{Text: "x"}))
	var ae *goose.AgentError
	if !errors.As(err, &ae) || ae.Message != "Provider not set" {
		t.Fatalf("error %v, want AgentError Provider not set", err)
	}
	// ResumeSession makes it usable.
	if _, err := h.client.ResumeSession(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := collect(h.client.Reply(context.Background(), s.ID, goose.UserMessage{Text: "x"})); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.ResumeSession(context.Background(), "nope"); !errors.Is(err, goose.ErrSessionNotFound) {
		t.Errorf("resume unknown: %v", err)
	}
}

func slowScript() goosetest.Script {
	return goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "first"}, {Delay: time.Hour, Text: "never"}}})
}

func TestCloseEndsStreams(t *testing.T) {
	h := newHarness(t, goosetest.GoosedOptions{Script: slowScript()})
	id := h.start(t)
	var err error
	for ev, e := range h.client.Reply(context.Background(), id, goose.UserMessage{Text: "x"}) {
		if e != nil {
			err = e
			break
		}
		if _, ok := ev.(*goose.TextDelta); ok {
			_ = h.client.Close()
		}
	}
	if !errors.Is(err, errClientClosed) {
		t.Fatalf("error %v, want client closed", err)
	}
	if _, err := collect(h.client.Reply(context.Background(), id, goose.UserMessage{Text: "x"})); !errors.Is(err, errClientClosed) {
		t.Errorf("reply after close: %v", err)
	}
}

func TestVersion141(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "hi"}, {Usage: &goosetest.UsageStep{Input: 30, Output: 7, Cost: 0.25}}, {Text: "again"},
	}})
	h := newHarness(t, goosetest.GoosedOptions{Version: goosetest.Goosed141, Script: script})
	ctx := context.Background()
	id := h.start(t)
	evs, err := collect(h.client.Reply(ctx, id, goose.UserMessage{Text: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	// MessageUsage (last call, with cost) then the token_state change.
	if got := kinds(evs); got != "TextDelta,UsageUpdate,UsageUpdate,TextDelta,Finish" {
		t.Fatalf("events %s", got)
	}
	mu, ts := evs[1].(*goose.UsageUpdate), evs[2].(*goose.UsageUpdate)
	if mu.HasAccumulated || mu.Last.TotalTokens != 37 || mu.Last.Cost == nil || *mu.Last.Cost != 0.25 {
		t.Errorf("MessageUsage update %+v", mu)
	}
	if !ts.HasAccumulated || ts.Accumulated.InputTokens != 30 || ts.Accumulated.TotalTokens != 37 {
		t.Errorf("token state update %+v", ts)
	}
	u, err := h.client.Usage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if u.InputTokens != 30 || u.OutputTokens != 7 || u.TotalTokens != 37 || u.Cost == nil || *u.Cost != 0.25 {
		t.Errorf("usage from accumulated_usage %+v", u)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:3000", "ftp://x", "http://"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2026, 6, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"0": 0, "7": 7 * time.Second, now.Add(5 * time.Second).Format(http.TimeFormat): 5 * time.Second,
	} {
		if got, ok := retryAfter(in, now); !ok || got != want {
			t.Errorf("retryAfter(%q) = %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "soon", "-1"} {
		if _, ok := retryAfter(in, now); ok {
			t.Errorf("retryAfter(%q) accepted", in)
		}
	}
}
