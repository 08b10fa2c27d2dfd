package goose_test

// Contract tests: the same cases run against every goose.Backend through the
// interface only, each against its in-process fake (goosetest), driven by the
// same goosetest.Script. Where the two protocols legitimately differ, the
// table's fields state each backend's documented behaviour and the test
// asserts it; nothing is skipped.

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
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/goose/rest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeObserver is what a test can ask the fake goose about what it received.
type fakeObserver interface {
	// prompts returns the user texts goose received for the session.
	prompts(sessionID string) []string
	// cancels returns how many times goose saw a reply of the session cancelled
	// (ACP session/cancel; goosed: the /reply stream closed before Finish).
	cancels(sessionID string) int
	// approvals returns the tool-approval answers goose received, as Decisions.
	approvals(sessionID string) []goose.Decision
	// accumulated returns the session's token totals as the fake counted them.
	accumulated(sessionID string) goose.Usage
}

// backendCase is one backend and the documented ways it differs from the
// others.
type backendCase struct {
	name string
	// start runs a fake goose answering with script and a Backend talking to
	// it; both are closed by t.Cleanup.
	start func(t testing.TB, script goosetest.Script) (goose.Backend, fakeObserver)
	// wrongSecret returns a Backend for a live fake, configured with a key
	// the fake rejects.
	wrongSecret func(t testing.TB) goose.Backend
	// down returns a Backend for an address nothing listens on.
	down func(t testing.TB, url string) goose.Backend

	// finishReason is the Reason of a normal Finish: the ACP stopReason
	// "end_turn" for goose serve; goosed's Finish.reason, which upstream is
	// always "stop" (goose-rest-api.md §3).
	finishReason string
	// agentErrCode is AgentError.Code: the JSON-RPC code goose serve puts on
	// a failed session/prompt (-32603, goose-acp.md §2.6); 0 for goosed,
	// whose Error event has no code.
	agentErrCode int
	// canList: goosed 1.38–1.41 dropped GET /sessions and DELETE
	// /sessions/{id} (goose-rest-api.md §0), so ListSessions and
	// DeleteSession report goose.ErrUnsupported there.
	canList bool
	// notifDetail: goosed forwards the MCP notification itself (request_id,
	// progress, total; goose-rest-api.md §3 Notification); goose serve only
	// sends a status_message with type and message (goose-acp.md §3).
	notifDetail bool
}

func backends() []backendCase {
	return []backendCase{
		{
			name: "acp",
			start: func(t testing.TB, script goosetest.Script) (goose.Backend, fakeObserver) {
				srv := goosetest.NewServe(t, goosetest.WithServeScript(script))
				c, err := acp.New(acp.Config{URL: srv.URL, SecretKey: srv.Secret})
				if err != nil {
					t.Fatalf("acp.New: %v", err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c, serveObserver{srv}
			},
			wrongSecret: func(t testing.TB) goose.Backend {
				srv := goosetest.NewServe(t)
				c, err := acp.New(acp.Config{URL: srv.URL, SecretKey: "wrong-" + srv.Secret})
				if err != nil {
					t.Fatalf("acp.New: %v", err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			},
			down: func(t testing.TB, url string) goose.Backend {
				c, err := acp.New(acp.Config{URL: url, SecretKey: "k"})
				if err != nil {
					t.Fatalf("acp.New: %v", err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			},
			finishReason: "end_turn",
			agentErrCode: -32603,
			canList:      true,
		},
		goosedCase("goosed-1.37", goosetest.Goosed137, true),
		goosedCase("goosed-1.41", goosetest.Goosed141, false),
	}
}

func goosedCase(name string, version goosetest.GoosedVersion, canList bool) backendCase {
	newClient := func(t testing.TB, url, key string) *rest.Client {
		c, err := rest.New(rest.Config{URL: url, SecretKey: key})
		if err != nil {
			t.Fatalf("rest.New: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return backendCase{
		name: name,
		start: func(t testing.TB, script goosetest.Script) (goose.Backend, fakeObserver) {
			// A short heartbeat interleaves Ping frames with the reply.
			fake := goosetest.NewGoosed(goosetest.GoosedOptions{Script: script, Version: version, PingInterval: 50 * time.Millisecond})
			t.Cleanup(fake.Close)
			return newClient(t, fake.URL, fake.SecretKey), goosedObserver{fake}
		},
		wrongSecret: func(t testing.TB) goose.Backend {
			fake := goosetest.NewGoosed(goosetest.GoosedOptions{Version: version})
			t.Cleanup(fake.Close)
			return newClient(t, fake.URL, "wrong-"+fake.SecretKey)
		},
		down: func(t testing.TB, url string) goose.Backend {
			return newClient(t, url, "k")
		},
		finishReason: "stop",
		agentErrCode: 0,
		canList:      canList,
		notifDetail:  true,
	}
}

type serveObserver struct{ s *goosetest.Serve }

func (o serveObserver) prompts(id string) []string {
	var out []string
	for _, p := range o.s.Prompts() {
		if p.SessionID == id {
			out = append(out, p.Text)
		}
	}
	return out
}

func (o serveObserver) cancels(id string) int {
	n := 0
	for _, c := range o.s.Cancels() {
		if c.SessionID == id {
			n++
		}
	}
	return n
}

func (o serveObserver) approvals(id string) []goose.Decision {
	var out []goose.Decision
	for _, p := range o.s.Permissions() {
		if p.SessionID != id {
			continue
		}
		// goose's option ids (goose-acp.md §2.7) in goose.Decision terms.
		d := map[string]goose.Decision{
			"allow_once": goose.AllowOnce, "allow_always": goose.AlwaysAllow,
			"reject_once": goose.DenyOnce, "reject_always": goose.AlwaysDeny,
		}[p.OptionID]
		if p.Outcome == "cancelled" {
			d = goose.CancelDecision
		}
		out = append(out, d)
	}
	return out
}

func (o serveObserver) accumulated(id string) goose.Usage {
	s, ok := o.s.Session(id)
	if !ok {
		return goose.Usage{}
	}
	return goose.Usage{InputTokens: s.InputTokens, OutputTokens: s.OutputTokens, TotalTokens: s.InputTokens + s.OutputTokens, Cost: s.Cost}
}

type goosedObserver struct{ g *goosetest.Goosed }

func (o goosedObserver) prompts(id string) []string {
	var out []string
	for _, r := range o.g.Requests() {
		if r.Method != http.MethodPost || r.Path != "/reply" {
			continue
		}
		var body struct {
			SessionID   string `json:"session_id"`
			UserMessage struct {
				Content []struct{ Type, Text string }
			} `json:"user_message"`
		}
		if json.Unmarshal(r.Body, &body) != nil || body.SessionID != id {
			continue
		}
		var sb strings.Builder
		for _, c := range body.UserMessage.Content {
			sb.WriteString(c.Text)
		}
		out = append(out, sb.String())
	}
	return out
}

func (o goosedObserver) cancels(id string) int {
	n := 0
	for _, c := range o.g.Cancels() {
		if c.SessionID == id {
			n++
		}
	}
	return n
}

func (o goosedObserver) approvals(id string) []goose.Decision {
	var out []goose.Decision
	for _, c := range o.g.Confirmations() {
		if c.SessionID == id {
			out = append(out, goose.Decision(c.Action))
		}
	}
	return out
}

func (o goosedObserver) accumulated(id string) goose.Usage {
	u, ok := o.g.Usage(id)
	if !ok {
		return goose.Usage{}
	}
	return goose.Usage{InputTokens: u.AccumulatedInput, OutputTokens: u.AccumulatedOutput, TotalTokens: u.AccumulatedTotal, Cost: u.AccumulatedCost}
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

func startSession(t testing.TB, b goose.Backend) string {
	t.Helper()
	s, err := b.StartSession(context.Background(), goose.StartOptions{WorkingDir: "/tmp"})
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	if s.ID == "" {
		t.Fatal("StartSession returned no id")
	}
	return s.ID
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
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

func TestContractEventsInScriptedOrder(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "Hel"},
		{Text: "lo"},
		{Thinking: "the user greets me"},
		{Tool: &goosetest.ToolStep{ID: "toolu_1", Name: "developer__shell", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "a b"}},
		{Notify: &goosetest.NotifyStep{ToolCallID: "toolu_1", Message: "indexing", Progress: 1, Total: 2}},
		{Usage: &goosetest.UsageStep{Input: 100, Output: 20, Cost: 0.5}},
	}})
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b, fake := bc.start(t, script)
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
			if req.ID != "toolu_1" || req.Name != "developer__shell" || !jsonEqual(req.Arguments, []byte(`{"command":"ls"}`)) {
				t.Errorf("tool request %+v (args %s)", req, req.Arguments)
			}
			if resp.ID != "toolu_1" || resp.Name != "developer__shell" || resp.Text != "a b" || resp.IsError {
				t.Errorf("tool response %+v", resp)
			}
			n := evs[5].(*goose.Notification)
			if n.Kind != "progress" || n.Message != "indexing" {
				t.Errorf("notification %+v, want progress %q", n, "indexing")
			}
			if bc.notifDetail {
				if n.ToolCallID != "toolu_1" || n.Progress == nil || *n.Progress != 1 || n.Total == nil || *n.Total != 2 {
					t.Errorf("goosed notification %+v: want request_id toolu_1, progress 1 of 2", n)
				}
			} else if n.ToolCallID != "" || n.Progress != nil || n.Total != nil {
				t.Errorf("goose serve's status_message carries no tool id or progress, got %+v", n)
			}
			if f := evs[6].(*goose.Finish); f.Reason != bc.finishReason {
				t.Errorf("finish reason %q, want %q", f.Reason, bc.finishReason)
			}

			// Usage comes after the notification that preceded its step, and
			// the provider call's figures are reported as Last.
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
			sawLast := false
			for _, u := range us {
				sawLast = sawLast || (u.Last.InputTokens == 100 && u.Last.OutputTokens == 20 && u.Last.TotalTokens == 120)
			}
			if !sawLast {
				t.Errorf("no UsageUpdate reports the call's 100/20 tokens as Last")
			}
			acc := fake.accumulated(id)
			if last := us[len(us)-1]; !last.HasAccumulated || !usageEqual(last.Accumulated, acc) {
				t.Errorf("last usage update accumulated %s (has %v), fake counted %s", fmtUsage(last.Accumulated), last.HasAccumulated, fmtUsage(acc))
			}
			if p := fake.prompts(id); len(p) != 1 || p[0] != "hi" {
				t.Errorf("goose received prompts %q", p)
			}
		})
	}
}

func TestContractEmptyReplyYieldsFinish(t *testing.T) {
	// A reply in which the model says nothing still ends with a Finish.
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b, _ := bc.start(t, goosetest.Fixed(goosetest.Reply{}))
			id := startSession(t, b)
			r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "hi"}))
			if r.err != nil {
				t.Fatal(r.err)
			}
			if got := kinds(r.withoutUsage()); got != "Finish" {
				t.Fatalf("events %s, want a lone Finish", kinds(r.events))
			}
		})
	}
}

func TestContractErrorEndsSequence(t *testing.T) {
	// Every way a reply can fail ends with exactly one error, after which
	// yield is never called again although it keeps returning true (drain
	// checks that); the events that arrived before it are kept.
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Run("agent error", func(t *testing.T) {
				// goose serve: JSON-RPC error -32603 to session/prompt;
				// goosed: an Error event, then Finish.
				b, _ := bc.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
					{Text: "partial"}, {Error: "provider exploded"}, {Text: "never"},
				}}))
				id := startSession(t, b)
				r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "x"}))
				var ae *goose.AgentError
				if !errors.As(r.err, &ae) {
					t.Fatalf("error %v, want *goose.AgentError", r.err)
				}
				if ae.Message != "provider exploded" || ae.Code != bc.agentErrCode {
					t.Errorf("agent error code %d message %q, want %d %q", ae.Code, ae.Message, bc.agentErrCode, "provider exploded")
				}
				if got := kinds(r.withoutUsage()); got != "TextDelta" || r.text() != "partial" {
					t.Errorf("events before the error %s %q", kinds(r.events), r.text())
				}
			})
			t.Run("dropped stream", func(t *testing.T) {
				// goose serve: the WebSocket is cut without a close frame;
				// goosed: the chunked /reply body is truncated.
				b, _ := bc.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
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
				b, fake := bc.start(t, goosetest.Echo)
				r := drain(t, b.Reply(context.Background(), "20200101_99", goose.UserMessage{Text: "x"}))
				if !errors.Is(r.err, goose.ErrSessionNotFound) || len(r.events) != 0 {
					t.Fatalf("events %s, error %v; want goose.ErrSessionNotFound alone", kinds(r.events), r.err)
				}
				if p := fake.prompts("20200101_99"); len(p) > 1 {
					t.Errorf("prompt sent %d times", len(p))
				}
			})
			t.Run("cancelled context", func(t *testing.T) {
				b, _ := bc.start(t, slow)
				id := startSession(t, b)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := drain(t, func(yield func(goose.Event, error) bool) {
					for ev, err := range b.Reply(ctx, id, goose.UserMessage{Text: "x"}) {
						if !yield(ev, err) {
							return
						}
						cancel()
					}
				})
				if !errors.Is(r.err, context.Canceled) || kinds(r.events) != "TextDelta" {
					t.Fatalf("events %s, error %v; want one delta then context.Canceled", kinds(r.events), r.err)
				}
			})
		})
	}
}

func TestContractContextCancel(t *testing.T) {
	// Cancelling ctx ends the stream within 100 ms with an error wrapping
	// ctx.Err(), yields nothing after the cancel, cancels the reply in goose
	// and leaves no goroutine behind.
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Run("mid-stream", func(t *testing.T) {
				ignore := goleak.IgnoreCurrent()
				var b goose.Backend
				var fake fakeObserver
				t.Cleanup(func() {
					// Registered first, so it runs after the fake and the
					// client are closed.
					goleak.VerifyNone(t, ignore)
				})
				b, fake = bc.start(t, slow)
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
				eventually(t, "goose to see the reply cancelled", func() bool { return fake.cancels(id) == 1 })
			})
			t.Run("events already queued", func(t *testing.T) {
				// Many deltas arrive at once, so some are buffered when the
				// consumer cancels: none of them may be yielded after it.
				steps := make([]goosetest.Step, 0, 101)
				for range 100 {
					steps = append(steps, goosetest.Step{Text: "x"})
				}
				steps = append(steps, goosetest.Step{Delay: 10 * time.Second, Text: "late"})
				b, fake := bc.start(t, goosetest.Fixed(goosetest.Reply{Steps: steps}))
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
				eventually(t, "goose to see every reply cancelled", func() bool { return fake.cancels(id) == 5 })
			})
			t.Run("before the call", func(t *testing.T) {
				// An already cancelled ctx sends nothing to goose.
				b, fake := bc.start(t, goosetest.Echo)
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
				time.Sleep(50 * time.Millisecond)
				if p := fake.prompts(id); len(p) != 1 {
					t.Errorf("goose received prompts %q, want only the warm-up", p)
				}
			})
		})
	}
}

func TestContractCancelMidReply(t *testing.T) {
	// Backend.Cancel ends the running reply with Finish{Reason: "cancelled"}
	// (ACP stopReason cancelled; goosed: the client closes /reply, §2.2).
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b, fake := bc.start(t, slow)
			id := startSession(t, b)
			start := time.Now()
			r := drain(t, func(yield func(goose.Event, error) bool) {
				for ev, err := range b.Reply(context.Background(), id, goose.UserMessage{Text: "x"}) {
					if !yield(ev, err) {
						return
					}
					if _, ok := ev.(*goose.TextDelta); ok {
						if err := b.Cancel(context.Background(), id); err != nil {
							t.Errorf("Cancel: %v", err)
						}
					}
				}
			})
			if r.err != nil {
				t.Fatalf("reply: %v", r.err)
			}
			got := r.withoutUsage()
			if kinds(got) != "TextDelta,Finish" || got[1].(*goose.Finish).Reason != "cancelled" {
				t.Fatalf("events %s, want the delta then Finish cancelled", kinds(r.events))
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("cancelled reply took %v: it waited for the stalled step", d)
			}
			eventually(t, "goose to see the cancel", func() bool { return fake.cancels(id) == 1 })
			// Cancel without a running reply is harmless.
			if err := b.Cancel(context.Background(), id); err != nil {
				t.Errorf("Cancel when idle: %v", err)
			}
		})
	}
}

func TestContractApproval(t *testing.T) {
	for _, bc := range backends() {
		for _, tc := range []struct {
			decision goose.Decision
			result   string
		}{
			{goose.AllowOnce, "removed"},
			// A denial makes goose record its DECLINED_RESPONSE as the tool
			// result (upstream agents/tool_execution.rs).
			{goose.DenyOnce, "The user has declined to run this tool."},
		} {
			t.Run(bc.name+"/"+string(tc.decision), func(t *testing.T) {
				script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
					{Tool: &goosetest.ToolStep{ID: "toolu_9", Name: "developer__shell", Arguments: json.RawMessage(`{"command":"rm -rf build"}`), Result: "removed", NeedsApproval: true}},
					{Text: "done"},
				}})
				b, fake := bc.start(t, script)
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
						if a := fake.approvals(id); len(a) != 0 {
							t.Errorf("goose had answers %v before Approve", a)
						}
						if ar.ID != "toolu_9" || ar.ToolName != "developer__shell" || !jsonEqual(ar.Arguments, []byte(`{"command":"rm -rf build"}`)) {
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
				if res := evs[2].(*goose.ToolResponse); res.ID != "toolu_9" || !strings.HasPrefix(res.Text, tc.result) {
					t.Errorf("tool result %q, want %q", res.Text, tc.result)
				}
				if f := evs[4].(*goose.Finish); f.Reason != bc.finishReason {
					t.Errorf("finish %q", f.Reason)
				}
				if a := fake.approvals(id); len(a) != 1 || a[0] != tc.decision {
					t.Errorf("goose received %v, want [%s]", a, tc.decision)
				}
			})
		}
	}
}

func TestContractConcurrentReplies(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b, fake := bc.start(t, goosetest.Echo)
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
					if got, want := fake.prompts(id), []string{text}; fmt.Sprint(got) != fmt.Sprint(want) {
						errs <- fmt.Errorf("session %s: goose received %q", id, got)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestContractTokenTotals(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "a"},
		{Usage: &goosetest.UsageStep{Input: 100, Output: 10, Cost: 0.25}},
		{Text: "b"},
		{Usage: &goosetest.UsageStep{Input: 200, Output: 20, Cost: 0.25}},
	}})
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b, fake := bc.start(t, script)
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
				acc := fake.accumulated(id)
				want := goose.Usage{InputTokens: 300 * int64(turn), OutputTokens: 30 * int64(turn), TotalTokens: 330 * int64(turn)}
				if acc.InputTokens != want.InputTokens || acc.TotalTokens != want.TotalTokens || acc.Cost == nil || *acc.Cost != 0.5*float64(turn) {
					t.Fatalf("turn %d: the fake counted %s, test expects %s cost %v", turn, fmtUsage(acc), fmtUsage(want), 0.5*float64(turn))
				}
				last := us[len(us)-1]
				if !last.HasAccumulated || !usageEqual(last.Accumulated, acc) {
					t.Errorf("turn %d: last UsageUpdate accumulated %s (has %v), fake counted %s", turn, fmtUsage(last.Accumulated), last.HasAccumulated, fmtUsage(acc))
				}
				u, err := b.Usage(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if !usageEqual(u, acc) {
					t.Errorf("turn %d: Backend.Usage %s, fake counted %s", turn, fmtUsage(u), fmtUsage(acc))
				}
			}
		})
	}
}

func TestContractSessions(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b, _ := bc.start(t, goosetest.Echo)
			ctx := context.Background()
			if err := b.Health(ctx); err != nil {
				t.Fatalf("Health: %v", err)
			}
			id := startSession(t, b)
			if r := drain(t, b.Reply(ctx, id, goose.UserMessage{Text: "hello"})); r.err != nil {
				t.Fatal(r.err)
			}
			s, err := b.GetSession(ctx, id)
			if err != nil || s.ID != id || s.WorkingDir != "/tmp" || s.MessageCount < 2 {
				t.Fatalf("GetSession = %+v, %v; want the session with both messages", s, err)
			}
			if s, err := b.ResumeSession(ctx, id); err != nil || s.ID != id {
				t.Fatalf("ResumeSession = %+v, %v", s, err)
			}
			list, err := b.ListSessions(ctx)
			switch {
			case !bc.canList:
				if !errors.Is(err, goose.ErrUnsupported) {
					t.Errorf("ListSessions = %v, %v; want goose.ErrUnsupported", list, err)
				}
			case err != nil:
				t.Errorf("ListSessions: %v", err)
			default:
				found := false
				for _, ls := range list {
					found = found || ls.ID == id
				}
				if !found {
					t.Errorf("ListSessions %+v lacks %s", list, id)
				}
			}
			err = b.DeleteSession(ctx, id)
			if !bc.canList {
				if !errors.Is(err, goose.ErrUnsupported) {
					t.Errorf("DeleteSession = %v, want goose.ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DeleteSession: %v", err)
			}
			if _, err := b.GetSession(ctx, id); !errors.Is(err, goose.ErrSessionNotFound) {
				t.Errorf("GetSession after delete = %v, want goose.ErrSessionNotFound", err)
			}
		})
	}
}

func TestContractSessionNotFound(t *testing.T) {
	const unknown = "20200101_99"
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b, _ := bc.start(t, goosetest.Echo)
			ctx := context.Background()
			if _, err := b.GetSession(ctx, unknown); !errors.Is(err, goose.ErrSessionNotFound) {
				t.Errorf("GetSession = %v", err)
			}
			if _, err := b.ResumeSession(ctx, unknown); !errors.Is(err, goose.ErrSessionNotFound) {
				t.Errorf("ResumeSession = %v", err)
			}
			if _, err := b.Usage(ctx, unknown); !errors.Is(err, goose.ErrSessionNotFound) {
				t.Errorf("Usage = %v", err)
			}
			r := drain(t, b.Reply(ctx, unknown, goose.UserMessage{Text: "x"}))
			if !errors.Is(r.err, goose.ErrSessionNotFound) {
				t.Errorf("Reply = %v", r.err)
			}
			err := b.DeleteSession(ctx, unknown)
			if want := map[bool]error{true: goose.ErrSessionNotFound, false: goose.ErrUnsupported}[bc.canList]; !errors.Is(err, want) {
				t.Errorf("DeleteSession = %v, want %v", err, want)
			}
		})
	}
}

func TestContractUnauthorized(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.wrongSecret(t)
			ctx := context.Background()
			// The health routes need no key upstream (both references §1).
			if err := b.Health(ctx); err != nil {
				t.Errorf("Health = %v, want nil", err)
			}
			if _, err := b.StartSession(ctx, goose.StartOptions{WorkingDir: "/tmp"}); !errors.Is(err, goose.ErrUnauthorized) {
				t.Errorf("StartSession = %v", err)
			}
			if _, err := b.GetSession(ctx, "20200101_1"); !errors.Is(err, goose.ErrUnauthorized) {
				t.Errorf("GetSession = %v", err)
			}
			r := drain(t, b.Reply(ctx, "20200101_1", goose.UserMessage{Text: "x"}))
			if !errors.Is(r.err, goose.ErrUnauthorized) || len(r.events) != 0 {
				t.Errorf("Reply = %s, %v", kinds(r.events), r.err)
			}
		})
	}
}

func TestContractServerDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // the port now refuses connections
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b := bc.down(t, url)
			ctx := context.Background()
			if err := b.Health(ctx); !errors.Is(err, goose.ErrUnavailable) {
				t.Errorf("Health = %v", err)
			}
			if _, err := b.StartSession(ctx, goose.StartOptions{WorkingDir: "/tmp"}); !errors.Is(err, goose.ErrUnavailable) {
				t.Errorf("StartSession = %v", err)
			}
			if _, err := b.GetSession(ctx, "20200101_1"); !errors.Is(err, goose.ErrUnavailable) {
				t.Errorf("GetSession = %v", err)
			}
			r := drain(t, b.Reply(ctx, "20200101_1", goose.UserMessage{Text: "x"}))
			if !errors.Is(r.err, goose.ErrUnavailable) || len(r.events) != 0 {
				t.Errorf("Reply = %s, %v", kinds(r.events), r.err)
			}
		})
	}
}

func TestContractCloseEndsReplies(t *testing.T) {
	// Close ends an in-flight reply with an error wrapping
	// goose.ErrStreamBroken after the events that arrived, like any other
	// stream that stops before goose finished it; later replies fail at once.
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			b, _ := bc.start(t, slow)
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
		})
	}
}

// recorder is a testing.TB that records failures instead of reporting them.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func TestDrainCatchesBrokenSequences(t *testing.T) {
	// drain is the contract's checker; make sure it flags what it must.
	boom := errors.New("boom")
	for name, seq := range map[string]iter.Seq2[goose.Event, error]{
		"nothing yielded": func(func(goose.Event, error) bool) {},
		"value after the error": func(yield func(goose.Event, error) bool) {
			if yield(nil, boom) {
				yield(&goose.TextDelta{Text: "late"}, nil)
			}
		},
		"value after Finish": func(yield func(goose.Event, error) bool) {
			if yield(&goose.Finish{Reason: "stop"}, nil) {
				yield(nil, boom)
			}
		},
		"neither event nor error": func(yield func(goose.Event, error) bool) { yield(nil, nil) },
		"event with an error":     func(yield func(goose.Event, error) bool) { yield(&goose.Finish{}, boom) },
	} {
		rec := &recorder{TB: t}
		drain(rec, seq)
		if len(rec.failures) == 0 {
			t.Errorf("%s: drain found nothing wrong", name)
		}
	}
	rec := &recorder{TB: t}
	drain(rec, func(yield func(goose.Event, error) bool) {
		if yield(&goose.TextDelta{Text: "a"}, nil) {
			yield(&goose.Finish{Reason: "stop"}, nil)
		}
	})
	if len(rec.failures) != 0 {
		t.Errorf("a well-formed sequence was flagged: %v", rec.failures)
	}
}
