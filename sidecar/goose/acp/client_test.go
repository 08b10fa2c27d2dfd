package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newPair(t testing.TB, opts ...goosetest.ServeOption) (*goosetest.Serve, *Client) {
	t.Helper()
	srv := goosetest.NewServe(t, opts...)
	c, err := New(Config{URL: srv.URL, SecretKey: srv.Secret})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

func startSession(t testing.TB, c *Client) string {
	t.Helper()
	s, err := c.StartSession(context.Background(), goose.StartOptions{WorkingDir: "/tmp"})
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	return s.ID
}

// collect drains a reply, returning its events and final error.
func collect(seq iter.Seq2[goose.Event, error]) ([]goose.Event, error) {
	var evs []goose.Event
	for ev, err := range seq {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func kinds(evs []goose.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%T", ev)
	}
	return out
}

func TestStartSessionIDFormatAndOptions(t *testing.T) {
	srv, c := newPair(t)
	s, err := c.StartSession(context.Background(), goose.StartOptions{
		WorkingDir: "/tmp", Provider: "anthropic", Model: "claude-x", Mode: "approve",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\d{8}_\d+$`).MatchString(s.ID) {
		t.Errorf("session id %q is not goose's YYYYMMDD_N", s.ID)
	}
	if s.WorkingDir != "/tmp" {
		t.Errorf("WorkingDir = %q", s.WorkingDir)
	}
	got, ok := srv.Session(s.ID)
	if !ok {
		t.Fatal("fake has no such session")
	}
	if got.Mode != "approve" || got.Provider != "anthropic" || got.Model != "claude-x" {
		t.Errorf("fake session = %+v, want mode approve, provider anthropic, model claude-x", got)
	}
	if n := srv.Calls("session/set_config_option"); n != 2 {
		t.Errorf("set_config_option calls = %d, want 2", n)
	}
}

func TestReplyText(t *testing.T) {
	srv, c := newPair(t)
	id := startSession(t, c)
	evs, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "hello world"}))
	if err != nil {
		t.Fatal(err)
	}
	// Echo: two deltas, one usage step; then goose's accumulated usage and
	// the finish. The stable usage_update is folded away.
	want := []string{"*goose.TextDelta", "*goose.TextDelta", "*goose.UsageUpdate", "*goose.UsageUpdate", "*goose.Finish"}
	if fmt.Sprint(kinds(evs)) != fmt.Sprint(want) {
		t.Fatalf("events = %v, want %v", kinds(evs), want)
	}
	d1, d2 := evs[0].(*goose.TextDelta), evs[1].(*goose.TextDelta)
	if d1.Text+d2.Text != "echo: hello world" {
		t.Errorf("text = %q", d1.Text+d2.Text)
	}
	if d1.MessageID == "" || d1.MessageID != d2.MessageID {
		t.Errorf("message ids %q, %q: want one shared id", d1.MessageID, d2.MessageID)
	}
	last := evs[2].(*goose.UsageUpdate)
	if last.HasAccumulated || last.Last.InputTokens != 21 || last.Last.OutputTokens != 11 {
		t.Errorf("per-message usage = %+v", last)
	}
	acc := evs[3].(*goose.UsageUpdate)
	if !acc.HasAccumulated || acc.Accumulated.TotalTokens != 32 || acc.ContextLimit != goosetest.ServeContextLimit {
		t.Errorf("accumulated usage = %+v", acc)
	}
	if f := evs[4].(*goose.Finish); f.Reason != "end_turn" {
		t.Errorf("finish = %q", f.Reason)
	}
	if p := srv.Prompts(); len(p) != 1 || p[0].Text != "hello world" || p[0].SessionID != id {
		t.Errorf("fake saw prompts %+v", p)
	}
}

func TestReplyThinkingToolsNotifications(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Thinking: "let me look"},
		{Text: "Looking."},
		{Tool: &goosetest.ToolStep{ID: "toolu_1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "a b c"}},
		{Notify: &goosetest.NotifyStep{Message: "indexing"}},
		{Tool: &goosetest.ToolStep{ID: "toolu_2", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"false"}`), Result: "exit 1", IsError: true}},
		{Text: "Three files."},
	}})
	_, c := newPair(t, goosetest.WithServeScript(script))
	id := startSession(t, c)
	evs, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "ls"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"*goose.ThinkingDelta", "*goose.TextDelta", "*goose.ToolRequest", "*goose.ToolResponse",
		"*goose.Notification", "*goose.ToolRequest", "*goose.ToolResponse", "*goose.TextDelta", "*goose.UsageUpdate", "*goose.Finish"}
	if fmt.Sprint(kinds(evs)) != fmt.Sprint(want) {
		t.Fatalf("events = %v, want %v", kinds(evs), want)
	}
	th, t1, t2 := evs[0].(*goose.ThinkingDelta), evs[1].(*goose.TextDelta), evs[7].(*goose.TextDelta)
	if th.MessageID != t1.MessageID || t1.MessageID == t2.MessageID {
		t.Errorf("message ids thinking=%q text1=%q text2=%q: want first two shared, third new", th.MessageID, t1.MessageID, t2.MessageID)
	}
	req := evs[2].(*goose.ToolRequest)
	if req.ID != "toolu_1" || req.Name != "shell" || string(req.Arguments) != `{"command":"ls"}` {
		t.Errorf("tool request = %+v", req)
	}
	res := evs[3].(*goose.ToolResponse)
	if res.ID != "toolu_1" || res.Name != "shell" || res.Text != "a b c" || res.IsError {
		t.Errorf("tool response = %+v", res)
	}
	if n := evs[4].(*goose.Notification); n.Kind != "progress" || n.Message != "indexing" {
		t.Errorf("notification = %+v", n)
	}
	if res2 := evs[6].(*goose.ToolResponse); !res2.IsError || res2.Text != "exit 1" {
		t.Errorf("failed tool response = %+v", res2)
	}
}

func TestApproval(t *testing.T) {
	cases := []struct {
		decision          goose.Decision
		outcome, optionID string
		allowed           bool
	}{
		{goose.AllowOnce, "selected", "allow_once", true},
		{goose.AlwaysAllow, "selected", "allow_always", true},
		{goose.DenyOnce, "selected", "reject_once", false},
		{goose.AlwaysDeny, "selected", "reject_always", false},
		{goose.CancelDecision, "cancelled", "", false},
	}
	for _, tc := range cases {
		t.Run(string(tc.decision), func(t *testing.T) {
			script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
				{Tool: &goosetest.ToolStep{ID: "toolu_9", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm -rf build"}`), Result: "removed", NeedsApproval: true}},
				{Text: "done"},
			}})
			srv, c := newPair(t, goosetest.WithServeScript(script))
			id := startSession(t, c)
			ctx := context.Background()
			var evs []goose.Event
			for ev, err := range c.Reply(ctx, id, goose.UserMessage{Text: "clean"}) {
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, ev)
				if ar, ok := ev.(*goose.ApprovalRequest); ok {
					if len(srv.Permissions()) != 0 {
						t.Fatal("goose got an answer before Approve")
					}
					if ar.ID != "toolu_9" || ar.ToolName != "shell" || string(ar.Arguments) != `{"command":"rm -rf build"}` {
						t.Errorf("approval request = %+v", ar)
					}
					if err := c.Approve(ctx, id, ar.ID, tc.decision); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := []string{"*goose.ToolRequest", "*goose.ApprovalRequest", "*goose.ToolResponse", "*goose.TextDelta", "*goose.UsageUpdate", "*goose.Finish"}
			if fmt.Sprint(kinds(evs)) != fmt.Sprint(want) {
				t.Fatalf("events = %v, want %v", kinds(evs), want)
			}
			perms := srv.Permissions()
			if len(perms) != 1 || perms[0].Outcome != tc.outcome || perms[0].OptionID != tc.optionID || perms[0].ToolCallID != "toolu_9" {
				t.Fatalf("goose saw %+v, want outcome %s option %q", perms, tc.outcome, tc.optionID)
			}
			res := evs[2].(*goose.ToolResponse)
			if tc.allowed != (res.Text == "removed") {
				t.Errorf("tool result %q with decision %s", res.Text, tc.decision)
			}
			if err := c.Approve(ctx, id, "toolu_9", goose.AllowOnce); err == nil {
				t.Error("Approve after the reply ended should fail")
			}
		})
	}
}

func TestApproveRejectsUnknownDecision(t *testing.T) {
	_, c := newPair(t)
	if err := c.Approve(context.Background(), "x", "y", "maybe"); err == nil {
		t.Fatal("want error for unknown decision")
	}
}

func TestUsageAccumulatesAndExportFallback(t *testing.T) {
	cost := 0.25
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "a"},
		{Usage: &goosetest.UsageStep{Input: 100, Output: 10, Cost: cost}},
		{Text: "b"},
		{Usage: &goosetest.UsageStep{Input: 200, Output: 20, Cost: cost}},
	}})
	srv, c := newPair(t, goosetest.WithServeScript(script))
	id := startSession(t, c)
	ctx := context.Background()
	for range 2 {
		if _, err := collect(c.Reply(ctx, id, goose.UserMessage{Text: "go"})); err != nil {
			t.Fatal(err)
		}
	}
	u, err := c.Usage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if u.InputTokens != 600 || u.OutputTokens != 60 || u.TotalTokens != 660 || u.Cost == nil || *u.Cost != 1.0 {
		t.Errorf("usage = %+v (cost %v), want 600/60/660 cost 1.0", u, u.Cost)
	}
	if n := srv.Calls("_goose/unstable/session/export"); n != 0 {
		t.Errorf("export called %d times although goose reported totals", n)
	}

	// A new client never saw the notifications: it backfills from export.
	c2, err := New(Config{URL: srv.URL, SecretKey: srv.Secret})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	u2, err := c2.Usage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if u2.InputTokens != 600 || u2.OutputTokens != 60 || u2.TotalTokens != 660 || u2.Cost == nil || *u2.Cost != 1.0 {
		t.Errorf("exported usage = %+v", u2)
	}
	if n := srv.Calls("_goose/unstable/session/export"); n != 1 {
		t.Errorf("export calls = %d, want 1", n)
	}
}

func TestAgentErrorMidStream(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "partial"},
		{Error: "provider exploded"},
		{Text: "never"},
	}})
	_, c := newPair(t, goosetest.WithServeScript(script))
	id := startSession(t, c)
	evs, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "x"}))
	if len(evs) != 1 || evs[0].(*goose.TextDelta).Text != "partial" {
		t.Fatalf("events before error = %v", kinds(evs))
	}
	var ae *goose.AgentError
	if !errors.As(err, &ae) || ae.Code != -32603 || ae.Message != "provider exploded" {
		t.Fatalf("err = %v, want AgentError -32603", err)
	}
}

func TestDroppedConnectionThenReconnect(t *testing.T) {
	var mu sync.Mutex
	drop := true
	script := func(_, text string) goosetest.Reply {
		mu.Lock()
		defer mu.Unlock()
		if drop {
			drop = false
			return goosetest.Reply{Steps: []goosetest.Step{{Text: "before"}, {Drop: true}}}
		}
		return goosetest.Echo("", text)
	}
	srv, c := newPair(t, goosetest.WithServeScript(script))
	id := startSession(t, c)
	evs, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "one"}))
	if len(evs) != 1 || evs[0].(*goose.TextDelta).Text != "before" {
		t.Fatalf("events before drop = %v", kinds(evs))
	}
	if !errors.Is(err, goose.ErrStreamBroken) {
		t.Fatalf("err = %v, want ErrStreamBroken", err)
	}
	evs, err = collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "two"}))
	if err != nil {
		t.Fatalf("reply after reconnect: %v", err)
	}
	if _, ok := evs[len(evs)-1].(*goose.Finish); !ok {
		t.Fatalf("events after reconnect = %v", kinds(evs))
	}
	if n := srv.Connections(); n != 2 {
		t.Errorf("connections = %d, want 2", n)
	}
	// The prompt activates the session on the new connection; no
	// session/load and its history replay (goose-acp-connections.md §2).
	if l := srv.Loads(); len(l) != 0 {
		t.Errorf("session/load calls = %v, want none", l)
	}
}

func TestDropConnectionsBetweenReplies(t *testing.T) {
	srv, c := newPair(t)
	id := startSession(t, c)
	srv.DropConnections()
	poll.Until(t, "client to notice the drop", func() bool { return c.openConns() == 0 })
	if _, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "again"})); err != nil {
		t.Fatal(err)
	}
	if srv.Connections() != 2 || len(srv.Loads()) != 0 {
		t.Errorf("connections=%d loads=%v", srv.Connections(), srv.Loads())
	}
}

func slowScript(string, string) goosetest.Reply {
	return goosetest.Reply{Steps: []goosetest.Step{
		{Text: "first"},
		{Delay: 10 * time.Second, Text: "late"},
	}}
}

func TestBreakingOutOfReplyCancelsInGoose(t *testing.T) {
	srv, c := newPair(t, goosetest.WithServeScript(slowScript))
	id := startSession(t, c)
	for range c.Reply(context.Background(), id, goose.UserMessage{Text: "x"}) {
		break
	}
	poll.Until(t, "goose to see session/cancel", func() bool { return len(srv.Cancels()) == 1 })
	// The session is usable again: goose ended the cancelled run.
	for ev, err := range c.Reply(context.Background(), id, goose.UserMessage{Text: "y"}) {
		if err != nil {
			t.Fatalf("reply after break: %v", err)
		}
		if d, ok := ev.(*goose.TextDelta); !ok || d.Text != "first" {
			t.Fatalf("first event after break = %#v", ev)
		}
		break
	}
}

func TestCancelWhileApprovalPendingAnswersCancelled(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Tool: &goosetest.ToolStep{ID: "toolu_5", Name: "shell", Extension: "developer", NeedsApproval: true, Result: "x"}},
	}})
	srv, c := newPair(t, goosetest.WithServeScript(script))
	id := startSession(t, c)
	for ev, err := range c.Reply(context.Background(), id, goose.UserMessage{Text: "x"}) {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*goose.ApprovalRequest); ok {
			break // the consumer walks away without answering
		}
	}
	poll.Until(t, "goose to get a cancelled outcome", func() bool {
		p := srv.Permissions()
		return len(p) == 1 && p[0].Outcome == "cancelled"
	})
}

func TestUnauthorized(t *testing.T) {
	srv := goosetest.NewServe(t)
	c, err := New(Config{URL: srv.URL, SecretKey: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.StartSession(context.Background(), goose.StartOptions{WorkingDir: "/tmp"})
	if !errors.Is(err, goose.ErrUnauthorized) {
		t.Fatalf("err = %v, want ErrUnauthorized", err)
	}
	if srv.Connections() != 0 {
		t.Errorf("connections = %d", srv.Connections())
	}
}

func TestUnavailable(t *testing.T) {
	srv := goosetest.NewServe(t)
	c, err := New(Config{URL: srv.URL, SecretKey: srv.Secret})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	srv.FailHTTP(503)
	if err := c.Health(ctx); !errors.Is(err, goose.ErrUnavailable) {
		t.Errorf("Health on 503 = %v", err)
	}
	if _, err := c.StartSession(ctx, goose.StartOptions{WorkingDir: "/tmp"}); !errors.Is(err, goose.ErrUnavailable) {
		t.Errorf("StartSession on 503 = %v", err)
	}
	srv.FailHTTP(0)
	srv.Close()
	if err := c.Health(ctx); !errors.Is(err, goose.ErrUnavailable) {
		t.Errorf("Health on a closed port = %v", err)
	}
	if _, err := c.StartSession(ctx, goose.StartOptions{WorkingDir: "/tmp"}); !errors.Is(err, goose.ErrUnavailable) {
		t.Errorf("StartSession on a closed port = %v", err)
	}
}

func TestResumeSessionLoads(t *testing.T) {
	srv, c := newPair(t)
	id := srv.SeedSession("/tmp", 4)
	s, err := c.ResumeSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != id || s.MessageCount != 4 {
		t.Errorf("session = %+v", s)
	}
	if l := srv.Loads(); len(l) != 1 || l[0] != id {
		t.Errorf("loads = %v", l)
	}
	// The replayed history must not leak into the next reply.
	evs, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "hi"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if d, ok := ev.(*goose.TextDelta); ok && d.Text == "message 1" {
			t.Fatal("history replay reached the reply")
		}
	}
	if len(srv.Loads()) != 1 {
		t.Errorf("loaded again: %v", srv.Loads())
	}
}

func TestConcurrentReplies(t *testing.T) {
	srv, c := newPair(t)
	const n = 100
	ids := make([]string, n)
	for i := range ids {
		ids[i] = startSession(t, c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, id := range ids {
		wg.Go(func() {
			text := fmt.Sprintf("message number %d", i)
			evs, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: text}))
			if err != nil {
				errs <- err
				return
			}
			var got string
			for _, ev := range evs {
				if d, ok := ev.(*goose.TextDelta); ok {
					got += d.Text
				}
			}
			if got != "echo: "+text {
				errs <- fmt.Errorf("session %s got %q", id, got)
				return
			}
			if _, ok := evs[len(evs)-1].(*goose.Finish); !ok {
				errs <- fmt.Errorf("session %s did not finish", id)
			}
			u, err := c.Usage(context.Background(), id)
			if err != nil || u.InputTokens != int64(10+len(text)) {
				errs <- fmt.Errorf("session %s usage %+v: %w", id, u, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if srv.Connections() != n {
		t.Errorf("connections = %d, want one per session (%d)", srv.Connections(), n)
	}
}

func TestSecondReplyOnBusySessionFails(t *testing.T) {
	_, c := newPair(t, goosetest.WithServeScript(slowScript))
	id := startSession(t, c)
	for range c.Reply(context.Background(), id, goose.UserMessage{Text: "x"}) {
		if _, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "y"})); err == nil {
			t.Error("second concurrent reply on one session should fail")
		}
		break
	}
}

func TestCloseEndsInFlightReply(t *testing.T) {
	_, c := newPair(t, goosetest.WithServeScript(slowScript))
	id := startSession(t, c)
	var gotErr error
	for _, err := range c.Reply(context.Background(), id, goose.UserMessage{Text: "x"}) {
		if err != nil {
			gotErr = err
			break
		}
		go c.Close()
	}
	if !errors.Is(gotErr, goose.ErrStreamBroken) {
		t.Fatalf("err = %v, want ErrStreamBroken", gotErr)
	}
	if _, err := c.ResumeSession(context.Background(), id); !errors.Is(err, ErrClosed) {
		t.Errorf("call after Close = %v", err)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:3284", "ftp://x/"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
	c, err := New(Config{URL: "ws://127.0.0.1:3284/acp"})
	if err != nil {
		t.Fatal(err)
	}
	if c.wsURL != "ws://127.0.0.1:3284/acp" || c.httpURL != "http://127.0.0.1:3284" {
		t.Errorf("urls %q %q", c.wsURL, c.httpURL)
	}
}

// An open reply holds no goroutine of the client's waiting for goose's
// answer to its prompt: the session's connection reader queues the ending.
// With replies open on several sessions (each read by iter.Pull2, whose own
// goroutine is the consumer's), the client runs one goroutine per session
// connection and nothing more.
func TestOpenRepliesHoldOnlyTheirConnectionsReaders(t *testing.T) {
	const open = 12
	_, c := newPair(t, goosetest.WithServeScript(func(string, string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "first"}, {Delay: time.Hour, Text: "never"}}}
	}))
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for range open {
		next, stop := iter.Pull2(c.Reply(context.Background(), startSession(t, c), goose.UserMessage{Text: "go"}))
		stops = append(stops, stop)
		ev, err, ok := next()
		if _, text := ev.(*goose.TextDelta); !ok || err != nil || !text {
			t.Fatalf("first value %T, %v, %v: want the first delta", ev, err, ok)
		}
	}
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var ours, readers int
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "sidecar/goose/acp.") || strings.Contains(g, "testing.") || strings.Contains(g, "created by iter.Pull2") { // the tests' own
			continue
		}
		ours++
		if strings.Contains(g, "acp.(*wsConn).read(") {
			readers++
		}
	}
	// The session connections' readers, and the control connection's.
	if readers < open || ours != readers {
		t.Errorf("%d of the client's goroutines with %d replies open, %d of them connection readers:\n%s", ours, open, readers, buf)
	}
}
