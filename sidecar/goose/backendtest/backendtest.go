// Package backendtest is the contract every goose.Backend keeps, as a suite
// each implementation runs in its own tests: the ACP client against the fake
// goose serve, the REST client against the fake goosed, an in-process backend
// against its script player. The cases go through the goose.Backend
// interface only and drive the goose behind it with the same
// goosetest.Script. Where protocols legitimately differ, Harness states the
// backend's documented behaviour and the cases assert it; nothing is skipped.
package backendtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// Observer is what a case can ask the goose behind a backend about what it
// received.
type Observer interface {
	// Prompts returns the user texts goose received for the session.
	Prompts(sessionID string) []string
	// Cancels returns how many replies of the session goose saw cancelled
	// (ACP session/cancel; goosed: the /reply stream closed before Finish).
	Cancels(sessionID string) int
	// Approvals returns the tool-approval answers goose received, as Decisions.
	Approvals(sessionID string) []goose.Decision
	// Accumulated returns the session's token totals as goose counted them.
	Accumulated(sessionID string) goose.Usage
}

// Harness is one backend under test and the documented ways it differs from
// the others. Exactly one of Start and Remote is set.
type Harness struct {
	// Start returns an in-process Backend whose goose answers every user
	// message with script, and an Observer of that goose; t.Cleanup releases
	// both.
	Start func(t testing.TB, script goosetest.Script) (goose.Backend, Observer)
	// Remote is a backend that reaches goose over the network. It also runs
	// the cases only a network has: a rejected key, nothing listening, an
	// event over the client's read limit.
	Remote *Remote

	// FinishReason is the Reason of a normal Finish: the ACP stopReason
	// "end_turn" for goose serve; goosed's Finish.reason, which upstream is
	// always "stop" (goose-rest-api.md §3).
	FinishReason string
	// AgentErrorCode is AgentError.Code: the JSON-RPC code goose serve puts
	// on a failed session/prompt (-32603, goose-acp.md §2.6); 0 for goosed,
	// whose Error event has no code.
	AgentErrorCode int
	// CanDelete is false where goose cannot delete sessions: goosed 1.38–1.41
	// dropped DELETE /sessions/{id} (goose-rest-api.md §0), so DeleteSession
	// reports goose.ErrUnsupported there.
	CanDelete bool
	// NotificationDetail: goosed forwards the MCP notification itself
	// (request_id, progress, total; goose-rest-api.md §3 Notification); goose
	// serve only sends a status_message with type and message (goose-acp.md §3).
	NotificationDetail bool
}

// Remote is a backend that talks to a goose server.
type Remote struct {
	// Serve starts a goose server answering every user message with script;
	// it returns the server's URL, its secret key and an Observer of it.
	// t.Cleanup stops the server.
	Serve func(t testing.TB, script goosetest.Script) (url, key string, obs Observer)
	// Connect returns a Backend for the goose server at url that sends key.
	Connect func(url, key string) (goose.Backend, error)
}

// connect returns a Backend for url that t.Cleanup closes.
func (rm *Remote) connect(t testing.TB, url, key string) goose.Backend {
	t.Helper()
	b, err := rm.Connect(url, key)
	if err != nil {
		t.Fatalf("failed to create a backend for %s: %v", url, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// start returns h's backend for a goose playing script, and its observer.
func (h Harness) start(t testing.TB, script goosetest.Script) (goose.Backend, Observer) {
	t.Helper()
	if h.Remote == nil {
		return h.Start(t, script)
	}
	url, key, obs := h.Remote.Serve(t, script)
	return h.Remote.connect(t, url, key), obs
}

func (h Harness) check(t testing.TB) {
	if (h.Start == nil) == (h.Remote == nil) {
		t.Fatal("backendtest.Harness needs exactly one of Start and Remote")
	}
}

// Run runs every case of the contract against h's backend.
func Run(t *testing.T, h Harness) {
	t.Helper()
	h.check(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T, Harness)
	}{
		{"EventsInScriptedOrder", eventsInScriptedOrder},
		{"EmptyReplyYieldsFinish", emptyReplyYieldsFinish},
		{"ErrorEndsSequence", errorEndsSequence},
		{"ContextCancel", contextCancel},
		{"Approval", approval},
		{"ConcurrentReplies", concurrentReplies},
		{"TokenTotals", tokenTotals},
		{"Sessions", sessions},
		{"SessionNotFound", sessionNotFound},
		{"CloseEndsReplies", closeEndsReplies},
		{"HugeUserMessageIsRefused", hugeUserMessageIsRefused},
		{"NotificationFloodDeliversEverything", notificationFloodDeliversEverything},
		{"SlowReaderHoldsOnlyItsReply", slowReaderHoldsOnlyItsReply},
		{"PulledReply", pulledReply},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
	if h.Remote != nil {
		t.Run("Unauthorized", func(t *testing.T) { unauthorized(t, h.Remote) })
		t.Run("ServerDown", func(t *testing.T) { serverDown(t, h.Remote) })
		t.Run("OversizedEventEndsOnlyItsReply", func(t *testing.T) { oversizedEventEndsOnlyItsReply(t, h) })
	}
}

// result is everything one Reply sequence produced.
type result struct {
	events []goose.Event
	err    error
}

// drain consumes seq the way a careless consumer would, never stopping
// early, and checks the sequence's own contract on the way: at least one
// value; never (nil, nil) nor an event with an error; nothing after the
// first error (yield is not called again although it keeps returning true);
// nothing after a *Finish.
func drain(t testing.TB, seq iter.Seq2[goose.Event, error]) result {
	t.Helper()
	var r result
	values, afterEnd := 0, 0
	ended := false
	seq(func(ev goose.Event, err error) bool {
		values++
		if ended {
			afterEnd++
			return true
		}
		switch {
		case err != nil && ev != nil:
			t.Errorf("value %d: event %T together with error %v", values, ev, err)
		case err == nil && ev == nil:
			t.Errorf("value %d: neither event nor error", values)
		}
		if err != nil {
			r.err, ended = err, true
			return true
		}
		r.events = append(r.events, ev)
		if _, ok := ev.(*goose.Finish); ok {
			ended = true
		}
		return true
	})
	if values == 0 {
		t.Errorf("reply yielded neither an event nor an error")
	}
	if afterEnd > 0 {
		t.Errorf("yield called %d more times after the sequence's last value (%v)", afterEnd, r.end())
	}
	return r
}

func (r result) end() any {
	if r.err != nil {
		return r.err
	}
	if len(r.events) == 0 {
		return nil
	}
	return r.events[len(r.events)-1]
}

// withoutUsage drops UsageUpdates, whose number and placement follow each
// protocol's own usage reporting (checked separately).
func (r result) withoutUsage() []goose.Event {
	var out []goose.Event
	for _, ev := range r.events {
		if _, ok := ev.(*goose.UsageUpdate); !ok {
			out = append(out, ev)
		}
	}
	return out
}

func (r result) usage() []*goose.UsageUpdate {
	var out []*goose.UsageUpdate
	for _, ev := range r.events {
		if u, ok := ev.(*goose.UsageUpdate); ok {
			out = append(out, u)
		}
	}
	return out
}

func (r result) text() string {
	var sb strings.Builder
	for _, ev := range r.events {
		if d, ok := ev.(*goose.TextDelta); ok {
			sb.WriteString(d.Text)
		}
	}
	return sb.String()
}

func kinds(evs []goose.Event) string {
	parts := make([]string, len(evs))
	for i, ev := range evs {
		parts[i] = strings.TrimPrefix(fmt.Sprintf("%T", ev), "*goose.")
	}
	return strings.Join(parts, ",")
}

// workingDir is the directory sessions start in: one that exists, which
// goose checks (server.rs validate_absolute_cwd).
const workingDir = "/tmp"

func startSession(t testing.TB, b goose.Backend) string {
	t.Helper()
	s, err := b.StartSession(context.Background(), goose.StartOptions{WorkingDir: workingDir})
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	if s.ID == "" {
		t.Fatal("StartSession returned no id")
	}
	if s.WorkingDir != workingDir {
		t.Fatalf("StartSession returned working dir %q, want %q", s.WorkingDir, workingDir)
	}
	return s.ID
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func usageEqual(a, b goose.Usage) bool {
	if a.InputTokens != b.InputTokens || a.OutputTokens != b.OutputTokens || a.TotalTokens != b.TotalTokens {
		return false
	}
	if a.Cost == nil || b.Cost == nil {
		return a.Cost == nil && b.Cost == nil
	}
	return *a.Cost == *b.Cost
}

func fmtUsage(u goose.Usage) string {
	c := "nil"
	if u.Cost != nil {
		c = fmt.Sprint(*u.Cost)
	}
	return fmt.Sprintf("{in %d out %d total %d cost %s}", u.InputTokens, u.OutputTokens, u.TotalTokens, c)
}

// slow answers one delta, then stalls: a reply that is still running when
// the test acts on it.
var slow = goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
	{Text: "first"},
	{Delay: 10 * time.Second, Text: "late"},
}})

func eventsInScriptedOrder(t *testing.T, h Harness) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "Hel"},
		{Text: "lo"},
		{Thinking: "the user greets me"},
		{Tool: &goosetest.ToolStep{ID: "toolu_1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "a b"}},
		{Notify: &goosetest.NotifyStep{ToolCallID: "toolu_1", Message: "indexing", Progress: 1, Total: 2}},
		{Usage: &goosetest.UsageStep{Input: 100, Output: 20, Cost: 0.5}},
	}})
	b, fake := h.start(t, script)
	id := startSession(t, b)
	r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "hi"}))
	if r.err != nil {
		t.Fatalf("reply: %v (after %s)", r.err, kinds(r.events))
	}
	evs := r.withoutUsage()
	const want = "TextDelta,TextDelta,ThinkingDelta,ToolRequest,ToolResponse,Notification,Finish"
	if got := kinds(evs); got != want {
		t.Fatalf("events %s (with usage: %s), want %s", got, kinds(r.events), want)
	}
	d1, d2, th := evs[0].(*goose.TextDelta), evs[1].(*goose.TextDelta), evs[2].(*goose.ThinkingDelta)
	if d1.Text != "Hel" || d2.Text != "lo" || th.Text != "the user greets me" {
		t.Errorf("deltas %q %q, thinking %q", d1.Text, d2.Text, th.Text)
	}
	// Consecutive chunks of one provider message share its id.
	if d1.MessageID == "" || d2.MessageID != d1.MessageID || th.MessageID != d1.MessageID {
		t.Errorf("message ids %q %q %q, want one shared id", d1.MessageID, d2.MessageID, th.MessageID)
	}
	req, resp := evs[3].(*goose.ToolRequest), evs[4].(*goose.ToolResponse)
	if req.ID != "toolu_1" || req.Name != "shell" || !jsonEqual(req.Arguments, []byte(`{"command":"ls"}`)) {
		t.Errorf("tool request %+v (args %s)", req, req.Arguments)
	}
	if resp.ID != "toolu_1" || resp.Name != "shell" || resp.Text != "a b" || resp.IsError {
		t.Errorf("tool response %+v", resp)
	}
	n := evs[5].(*goose.Notification)
	if n.Kind != "progress" || n.Message != "indexing" {
		t.Errorf("notification %+v, want progress %q", n, "indexing")
	}
	if h.NotificationDetail {
		if n.ToolCallID != "toolu_1" || n.Progress == nil || *n.Progress != 1 || n.Total == nil || *n.Total != 2 {
			t.Errorf("notification %+v: want request_id toolu_1, progress 1 of 2", n)
		}
	} else if n.ToolCallID != "" || n.Progress != nil || n.Total != nil {
		t.Errorf("a status_message carries no tool id or progress, got %+v", n)
	}
	if f := evs[6].(*goose.Finish); f.Reason != h.FinishReason {
		t.Errorf("finish reason %q, want %q", f.Reason, h.FinishReason)
	}

	// Usage comes after the notification that preceded its step, and the
	// provider call's figures are reported as Last.
	notifAt, firstUsage := -1, -1
	for i, ev := range r.events {
		switch ev.(type) {
		case *goose.Notification:
			notifAt = i
		case *goose.UsageUpdate:
			if firstUsage < 0 {
				firstUsage = i
			}
		}
	}
	if firstUsage < notifAt {
		t.Errorf("usage before the notification: %s", kinds(r.events))
	}
	us := r.usage()
	if len(us) == 0 {
		t.Fatalf("no UsageUpdate in %s", kinds(r.events))
	}
	sawLast := false
	for _, u := range us {
		sawLast = sawLast || (u.Last.InputTokens == 100 && u.Last.OutputTokens == 20 && u.Last.TotalTokens == 120)
	}
	if !sawLast {
		t.Errorf("no UsageUpdate reports the call's 100/20 tokens as Last")
	}
	acc := fake.Accumulated(id)
	if last := us[len(us)-1]; !last.HasAccumulated || !usageEqual(last.Accumulated, acc) {
		t.Errorf("last usage update accumulated %s (has %v), goose counted %s", fmtUsage(last.Accumulated), last.HasAccumulated, fmtUsage(acc))
	}
	if p := fake.Prompts(id); len(p) != 1 || p[0] != "hi" {
		t.Errorf("goose received prompts %q", p)
	}
}

// emptyReplyYieldsFinish: a reply in which the model says nothing still ends
// with a Finish.
func emptyReplyYieldsFinish(t *testing.T, h Harness) {
	b, _ := h.start(t, goosetest.Fixed(goosetest.Reply{}))
	id := startSession(t, b)
	r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "hi"}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := kinds(r.withoutUsage()); got != "Finish" {
		t.Fatalf("events %s, want a lone Finish", kinds(r.events))
	}
}

// errorEndsSequence: every way a reply can fail ends with exactly one
// error, after which yield is never called again although it keeps
// returning true (drain checks that); the events that arrived before it are
// kept. A cancelled context is contextCancel's.
func errorEndsSequence(t *testing.T, h Harness) {
	t.Run("agent error", func(t *testing.T) {
		// goose serve: JSON-RPC error -32603 to session/prompt; goosed: an
		// Error event, then Finish.
		b, _ := h.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
			{Text: "partial"}, {Error: "provider exploded"}, {Text: "never"},
		}}))
		id := startSession(t, b)
		r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "x"}))
		var ae *goose.AgentError
		if !errors.As(r.err, &ae) {
			t.Fatalf("error %v, want *goose.AgentError", r.err)
		}
		if ae.Message != "provider exploded" || ae.Code != h.AgentErrorCode {
			t.Errorf("agent error code %d message %q, want %d %q", ae.Code, ae.Message, h.AgentErrorCode, "provider exploded")
		}
		if got := kinds(r.withoutUsage()); got != "TextDelta" || r.text() != "partial" {
			t.Errorf("events before the error %s %q", kinds(r.events), r.text())
		}
	})
	t.Run("dropped stream", func(t *testing.T) {
		// goose serve: the WebSocket is cut without a close frame; goosed:
		// the chunked /reply body is truncated.
		b, _ := h.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
			{Text: "partial"}, {Drop: true},
		}}))
		id := startSession(t, b)
		r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "x"}))
		if !errors.Is(r.err, goose.ErrStreamBroken) {
			t.Fatalf("error %v, want goose.ErrStreamBroken", r.err)
		}
		if got := kinds(r.events); got != "TextDelta" || r.text() != "partial" {
			t.Errorf("events before the drop %s %q, want the one delta that arrived", got, r.text())
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		b, fake := h.start(t, goosetest.Echo)
		r := drain(t, b.Reply(context.Background(), unknownSession, goose.UserMessage{Text: "x"}))
		if !errors.Is(r.err, goose.ErrSessionNotFound) || len(r.events) != 0 {
			t.Fatalf("events %s, error %v; want goose.ErrSessionNotFound alone", kinds(r.events), r.err)
		}
		if p := fake.Prompts(unknownSession); len(p) > 1 {
			t.Errorf("prompt sent %d times", len(p))
		}
	})
}

// contextCancel: cancelling ctx ends the stream within 100 ms with an error
// wrapping ctx.Err(), yields nothing after the cancel, cancels the reply in
// goose and leaves no goroutine behind.
func contextCancel(t *testing.T, h Harness) {
	t.Run("mid-stream", func(t *testing.T) {
		ignore := goleak.IgnoreCurrent()
		t.Cleanup(func() {
			// Registered first, so it runs after the backend and its goose
			// are closed.
			goleak.VerifyNone(t, ignore)
		})
		b, fake := h.start(t, slow)
		id := startSession(t, b)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var cancelledAt time.Time
		var after []goose.Event
		var end error
		for ev, err := range b.Reply(ctx, id, goose.UserMessage{Text: "x"}) {
			if err != nil {
				end = err
				break
			}
			if !cancelledAt.IsZero() {
				after = append(after, ev)
				continue
			}
			if _, ok := ev.(*goose.TextDelta); !ok {
				t.Fatalf("first event %T, want the script's delta", ev)
			}
			cancelledAt = time.Now()
			cancel()
		}
		elapsed := time.Since(cancelledAt)
		if cancelledAt.IsZero() {
			t.Fatalf("no event before the error %v", end)
		}
		if !errors.Is(end, context.Canceled) || len(after) != 0 {
			t.Fatalf("after cancel: events %s, error %v; want only an error wrapping context.Canceled", kinds(after), end)
		}
		if elapsed > 100*time.Millisecond {
			t.Errorf("stream ended %v after the cancel, want ≤ 100ms", elapsed)
		}
		poll.Until(t, "goose to see the reply cancelled", func() bool { return fake.Cancels(id) == 1 })
	})
	t.Run("events already queued", func(t *testing.T) {
		// Many deltas arrive at once, so some are buffered when the consumer
		// cancels: none of them may be yielded after it.
		steps := make([]goosetest.Step, 0, 101)
		for range 100 {
			steps = append(steps, goosetest.Step{Text: "x"})
		}
		steps = append(steps, goosetest.Step{Delay: 10 * time.Second, Text: "late"})
		b, fake := h.start(t, goosetest.Fixed(goosetest.Reply{Steps: steps}))
		id := startSession(t, b)
		for range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			seen, after := 0, 0
			var end error
			for _, err := range b.Reply(ctx, id, goose.UserMessage{Text: "x"}) {
				if err != nil {
					end = err
					break
				}
				if ctx.Err() != nil {
					after++
					continue
				}
				if seen++; seen == 20 {
					time.Sleep(5 * time.Millisecond) // let more deltas queue up
					cancel()
				}
			}
			cancel()
			if after != 0 || !errors.Is(end, context.Canceled) {
				t.Fatalf("%d events after the cancel, then error %v; want none, then context.Canceled", after, end)
			}
		}
		poll.Until(t, "goose to see every reply cancelled", func() bool { return fake.Cancels(id) == 5 })
	})
	t.Run("before the call", func(t *testing.T) {
		// An already cancelled ctx sends nothing to goose.
		b, fake := h.start(t, goosetest.Echo)
		id := startSession(t, b)
		// Warm the connection so nothing is left to dial.
		if r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "warm up"})); r.err != nil {
			t.Fatal(r.err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := drain(t, b.Reply(ctx, id, goose.UserMessage{Text: "too late"}))
		if !errors.Is(r.err, context.Canceled) || len(r.events) != 0 {
			t.Fatalf("events %s, error %v; want only an error wrapping context.Canceled", kinds(r.events), r.err)
		}
		// Anything sent would have reached goose before a reply to a later
		// prompt on the same session did.
		if r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "next"})); r.err != nil {
			t.Fatal(r.err)
		}
		if p := fake.Prompts(id); len(p) != 2 || p[0] != "warm up" || p[1] != "next" {
			t.Errorf("goose received prompts %q, want only the warm-up and the next", p)
		}
	})
}

func approval(t *testing.T, h Harness) {
	for _, tc := range []struct {
		decision goose.Decision
		result   string
		runs     int32
	}{
		{goose.AllowOnce, "removed", 1},
		// A denial makes goose record its declined response as the tool
		// result (upstream agents/tool_execution.rs); the tool never runs.
		{goose.DenyOnce, goosetest.DeclinedToolResult, 0},
	} {
		t.Run(string(tc.decision), func(t *testing.T) {
			var runs atomic.Int32
			script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
				{Tool: &goosetest.ToolStep{ID: "toolu_9", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm -rf build"}`), NeedsApproval: true,
					Run: func() (string, bool) { runs.Add(1); return "removed", false }}},
				{Text: "done"},
			}})
			b, fake := h.start(t, script)
			id := startSession(t, b)
			ctx := context.Background()
			r := drain(t, func(yield func(goose.Event, error) bool) {
				for ev, err := range b.Reply(ctx, id, goose.UserMessage{Text: "clean up"}) {
					if !yield(ev, err) {
						return
					}
					ar, ok := ev.(*goose.ApprovalRequest)
					if !ok {
						continue
					}
					// goose blocks on the request until it is answered.
					time.Sleep(20 * time.Millisecond)
					if a := fake.Approvals(id); len(a) != 0 {
						t.Errorf("goose had answers %v before Approve", a)
					}
					if ar.ID != "toolu_9" || ar.ToolName != "shell" || !jsonEqual(ar.Arguments, []byte(`{"command":"rm -rf build"}`)) {
						t.Errorf("approval request %+v (args %s)", ar, ar.Arguments)
					}
					if err := b.Approve(ctx, id, ar.ID, tc.decision); err != nil {
						t.Errorf("Approve: %v", err)
					}
				}
			})
			if r.err != nil {
				t.Fatalf("reply: %v", r.err)
			}
			evs := r.withoutUsage()
			if got := kinds(evs); got != "ToolRequest,ApprovalRequest,ToolResponse,TextDelta,Finish" {
				t.Fatalf("events %s", got)
			}
			if res := evs[2].(*goose.ToolResponse); res.ID != "toolu_9" || res.Text != tc.result {
				t.Errorf("tool result %q, want %q", res.Text, tc.result)
			}
			if f := evs[4].(*goose.Finish); f.Reason != h.FinishReason {
				t.Errorf("finish %q", f.Reason)
			}
			if a := fake.Approvals(id); len(a) != 1 || a[0] != tc.decision {
				t.Errorf("goose received %v, want [%s]", a, tc.decision)
			}
			if n := runs.Load(); n != tc.runs {
				t.Errorf("the tool ran %d times, want %d", n, tc.runs)
			}
		})
	}
}

func concurrentReplies(t *testing.T, h Harness) {
	b, fake := h.start(t, goosetest.Echo)
	const n = 100
	ids := make([]string, n)
	for i := range ids {
		ids[i] = startSession(t, b)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, id := range ids {
		wg.Go(func() {
			text := fmt.Sprintf("message number %d", i)
			var r result
			for ev, err := range b.Reply(context.Background(), id, goose.UserMessage{Text: text}) {
				if err != nil {
					r.err = err
					break
				}
				r.events = append(r.events, ev)
			}
			switch {
			case r.err != nil:
				errs <- fmt.Errorf("session %s: %w", id, r.err)
			case r.text() != "echo: "+text:
				errs <- fmt.Errorf("session %s: text %q, want %q", id, r.text(), "echo: "+text)
			case kinds(r.events[len(r.events)-1:]) != "Finish":
				errs <- fmt.Errorf("session %s: events %s, want a Finish last", id, kinds(r.events))
			}
			if got, want := fake.Prompts(id), []string{text}; fmt.Sprint(got) != fmt.Sprint(want) {
				errs <- fmt.Errorf("session %s: goose received %q", id, got)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// tokenTotals: the last UsageUpdate of a reply and Backend.Usage report the
// session totals goose counted, across turns.
func tokenTotals(t *testing.T, h Harness) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "a"},
		{Usage: &goosetest.UsageStep{Input: 100, Output: 10, Cost: 0.25}},
		{Text: "b"},
		{Usage: &goosetest.UsageStep{Input: 200, Output: 20, Cost: 0.25}},
	}})
	b, fake := h.start(t, script)
	id := startSession(t, b)
	ctx := context.Background()
	for turn := 1; turn <= 2; turn++ {
		r := drain(t, b.Reply(ctx, id, goose.UserMessage{Text: "go"}))
		if r.err != nil {
			t.Fatal(r.err)
		}
		us := r.usage()
		for _, call := range [][2]int64{{100, 10}, {200, 20}} {
			found := false
			for _, u := range us {
				found = found || (u.Last.InputTokens == call[0] && u.Last.OutputTokens == call[1] && u.Last.TotalTokens == call[0]+call[1])
			}
			if !found {
				t.Errorf("turn %d: no UsageUpdate reports the call's %d/%d tokens as Last", turn, call[0], call[1])
			}
		}
		acc := fake.Accumulated(id)
		want := goose.Usage{InputTokens: 300 * int64(turn), OutputTokens: 30 * int64(turn), TotalTokens: 330 * int64(turn)}
		if acc.InputTokens != want.InputTokens || acc.TotalTokens != want.TotalTokens || acc.Cost == nil || *acc.Cost != 0.5*float64(turn) {
			t.Fatalf("turn %d: goose counted %s, the script makes %s cost %v", turn, fmtUsage(acc), fmtUsage(want), 0.5*float64(turn))
		}
		last := us[len(us)-1]
		if !last.HasAccumulated || !usageEqual(last.Accumulated, acc) {
			t.Errorf("turn %d: last UsageUpdate accumulated %s (has %v), goose counted %s", turn, fmtUsage(last.Accumulated), last.HasAccumulated, fmtUsage(acc))
		}
		u, err := b.Usage(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !usageEqual(u, acc) {
			t.Errorf("turn %d: Backend.Usage %s, goose counted %s", turn, fmtUsage(u), fmtUsage(acc))
		}
	}
}

// sessions: a started session can be resumed with its history, and deleted
// where goose can delete.
func sessions(t *testing.T, h Harness) {
	b, _ := h.start(t, goosetest.Echo)
	ctx := context.Background()
	if err := b.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	id := startSession(t, b)
	if r := drain(t, b.Reply(ctx, id, goose.UserMessage{Text: "hello"})); r.err != nil {
		t.Fatal(r.err)
	}
	s, err := b.ResumeSession(ctx, id)
	if err != nil || s.ID != id || s.WorkingDir != workingDir || s.MessageCount < 2 {
		t.Fatalf("ResumeSession = %+v, %v; want the session in %s with both messages", s, err, workingDir)
	}
	if r := drain(t, b.Reply(ctx, id, goose.UserMessage{Text: "again"})); r.err != nil || r.text() != "echo: again" {
		t.Fatalf("reply after resume: %q, %v", r.text(), r.err)
	}
	err = b.DeleteSession(ctx, id)
	if !h.CanDelete {
		if !errors.Is(err, goose.ErrUnsupported) {
			t.Errorf("DeleteSession = %v, want goose.ErrUnsupported", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if _, err := b.ResumeSession(ctx, id); !errors.Is(err, goose.ErrSessionNotFound) {
		t.Errorf("ResumeSession after delete = %v, want goose.ErrSessionNotFound", err)
	}
}

// unknownSession is an id goose never issued, in goose's own format.
const unknownSession = "20200101_99"

func sessionNotFound(t *testing.T, h Harness) {
	b, _ := h.start(t, goosetest.Echo)
	ctx := context.Background()
	if _, err := b.ResumeSession(ctx, unknownSession); !errors.Is(err, goose.ErrSessionNotFound) {
		t.Errorf("ResumeSession = %v", err)
	}
	if _, err := b.Usage(ctx, unknownSession); !errors.Is(err, goose.ErrSessionNotFound) {
		t.Errorf("Usage = %v", err)
	}
	r := drain(t, b.Reply(ctx, unknownSession, goose.UserMessage{Text: "x"}))
	if !errors.Is(r.err, goose.ErrSessionNotFound) {
		t.Errorf("Reply = %v", r.err)
	}
	err := b.DeleteSession(ctx, unknownSession)
	if want := map[bool]error{true: goose.ErrSessionNotFound, false: goose.ErrUnsupported}[h.CanDelete]; !errors.Is(err, want) {
		t.Errorf("DeleteSession = %v, want %v", err, want)
	}
}

// closeEndsReplies: Close ends an in-flight reply with an error wrapping
// goose.ErrStreamBroken after the events that arrived, like any other stream
// that stops before goose finished it; later replies fail at once.
func closeEndsReplies(t *testing.T, h Harness) {
	b, _ := h.start(t, slow)
	id := startSession(t, b)
	r := drain(t, func(yield func(goose.Event, error) bool) {
		for ev, err := range b.Reply(context.Background(), id, goose.UserMessage{Text: "x"}) {
			if !yield(ev, err) {
				return
			}
			if _, ok := ev.(*goose.TextDelta); ok {
				if err := b.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
		}
	})
	if !errors.Is(r.err, goose.ErrStreamBroken) || kinds(r.events) != "TextDelta" {
		t.Fatalf("events %s, error %v; want the delta, then goose.ErrStreamBroken", kinds(r.events), r.err)
	}
	r = drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "y"}))
	if r.err == nil || len(r.events) != 0 {
		t.Errorf("reply after Close: events %s, error %v; want an error alone", kinds(r.events), r.err)
	}
}

func unauthorized(t *testing.T, rm *Remote) {
	url, key, _ := rm.Serve(t, goosetest.Echo)
	b := rm.connect(t, url, "wrong-"+key)
	ctx := context.Background()
	// The health routes need no key upstream (both references §1).
	if err := b.Health(ctx); err != nil {
		t.Errorf("Health = %v, want nil", err)
	}
	if _, err := b.StartSession(ctx, goose.StartOptions{WorkingDir: workingDir}); !errors.Is(err, goose.ErrUnauthorized) {
		t.Errorf("StartSession = %v", err)
	}
	if _, err := b.ResumeSession(ctx, "20200101_1"); !errors.Is(err, goose.ErrUnauthorized) {
		t.Errorf("ResumeSession = %v", err)
	}
	r := drain(t, b.Reply(ctx, "20200101_1", goose.UserMessage{Text: "x"}))
	if !errors.Is(r.err, goose.ErrUnauthorized) || len(r.events) != 0 {
		t.Errorf("Reply = %s, %v", kinds(r.events), r.err)
	}
}

func serverDown(t *testing.T, rm *Remote) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // the port now refuses connections
	b := rm.connect(t, url, "k")
	ctx := context.Background()
	if err := b.Health(ctx); !errors.Is(err, goose.ErrUnavailable) {
		t.Errorf("Health = %v", err)
	}
	if _, err := b.StartSession(ctx, goose.StartOptions{WorkingDir: workingDir}); !errors.Is(err, goose.ErrUnavailable) {
		t.Errorf("StartSession = %v", err)
	}
	if _, err := b.ResumeSession(ctx, "20200101_1"); !errors.Is(err, goose.ErrUnavailable) {
		t.Errorf("ResumeSession = %v", err)
	}
	r := drain(t, b.Reply(ctx, "20200101_1", goose.UserMessage{Text: "x"}))
	if !errors.Is(r.err, goose.ErrUnavailable) || len(r.events) != 0 {
		t.Errorf("Reply = %s, %v", kinds(r.events), r.err)
	}
}
