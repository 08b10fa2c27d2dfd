package gooseagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// liveHarness is a live session of runner.RunLive on a fake goose serve
// and the real ACP client, with its events collected on a channel.
type liveHarness struct {
	fake     *goosetest.Serve
	sessions session.Service
	live     agent.LiveSession
	events   chan *session.Event
	// err is the error the sequence ended with (nil: ended cleanly);
	// done closes when the sequence has ended.
	err  error
	done chan struct{}
}

// slowOrEcho answers "slow ..." with a text delta and then a long wait, a
// "tool ..." with a tool that needs approval, and anything else as Echo.
func slowOrEcho(id, text string) goosetest.Reply {
	switch {
	case strings.HasPrefix(text, "slow"):
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "thinking"}, {Delay: time.Minute, Text: "too late"}}}
	case strings.HasPrefix(text, "tool"):
		return goosetest.Reply{Steps: []goosetest.Step{
			{Text: "I will list the files."},
			{Tool: &goosetest.ToolStep{ID: "t1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "a b", NeedsApproval: true}},
			{Text: "Two files."},
		}}
	}
	return goosetest.Echo(id, text)
}

func startLive(t *testing.T, cfg gooseagent.Config) *liveHarness {
	t.Helper()
	h := &liveHarness{
		fake:     goosetest.NewServe(t, goosetest.WithServeScript(slowOrEcho)),
		sessions: session.InMemoryService(),
		events:   make(chan *session.Event, 256),
		done:     make(chan struct{}),
	}
	b, err := acp.New(acp.Config{URL: h.fake.URL, SecretKey: h.fake.Secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	cfg.Name, cfg.Backend, cfg.StartOptions = "goose", b, goose.StartOptions{WorkingDir: "/tmp"}
	a, ctrl, err := gooseagent.NewWithController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctrl.Close(context.Background()) })
	r, err := runner.New(runner.Config{AppName: "app", Agent: a, SessionService: h.sessions})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.sessions.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	live, seq, err := r.RunLive(t.Context(), "u", "s", agent.LiveRunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h.live = live
	go func() {
		defer close(h.done)
		for ev, err := range seq {
			if err != nil {
				h.err = err
				return
			}
			h.events <- ev
		}
	}()
	t.Cleanup(func() {
		_ = live.Close()
		<-h.done
	})
	return h
}

func (h *liveHarness) say(t *testing.T, text string) {
	t.Helper()
	if err := h.live.Send(agent.LiveRequest{Content: genai.NewContentFromText(text, genai.RoleUser)}); err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
}

// next returns the next event.
func (h *liveHarness) next(t *testing.T) *session.Event {
	t.Helper()
	select {
	case ev := <-h.events:
		return ev
	case <-h.done:
		t.Fatalf("the live sequence ended: %v", h.err)
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s")
	}
	return nil
}

// turn reads events up to the turn's final one; it returns the streamed
// text, the other non-partial events and the final event.
func (h *liveHarness) turn(t *testing.T) (streamed string, calls []*session.Event, final *session.Event) {
	t.Helper()
	var b strings.Builder
	for {
		ev := h.next(t)
		switch {
		case ev.Partial:
			b.WriteString(ev.Content.Parts[0].Text)
		case ev.TurnComplete:
			return b.String(), calls, ev
		default:
			calls = append(calls, ev)
		}
	}
}

func TestLiveTurnsOnOneSession(t *testing.T) {
	h := startLive(t, gooseagent.Config{})
	for _, text := range []string{"hello goose", "second", "third"} {
		h.say(t, text)
		streamed, _, final := h.turn(t)
		if want := "echo: " + text; streamed != want || final.ErrorCode != "" {
			t.Fatalf("turn %q: streamed %q, final %+v; want %q", text, streamed, final.LLMResponse, want)
		}
		if final.UsageMetadata == nil || final.UsageMetadata.TotalTokenCount == 0 {
			t.Errorf("turn %q: no usage on the final event", text)
		}
	}
	// The runner stored each message and each final answer, in order.
	got, err := h.sessions.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	var authors []string
	for ev := range got.Session.Events().All() {
		authors = append(authors, ev.Author)
	}
	if strings.Join(authors, ",") != "user,goose,user,goose,user,goose" {
		t.Errorf("history authors = %v", authors)
	}
}

func TestLiveMessageWaitsForTheRunningTurn(t *testing.T) {
	h := startLive(t, gooseagent.Config{})
	h.say(t, "first")
	h.say(t, "second") // sent before the first turn has ended
	for _, want := range []string{"echo: first", "echo: second"} {
		if streamed, _, final := h.turn(t); streamed != want || final.ErrorCode != "" {
			t.Fatalf("streamed %q (%s), want %q", streamed, final.ErrorCode, want)
		}
	}
}

func TestLiveApprovalAnsweredOnTheStream(t *testing.T) {
	h := startLive(t, gooseagent.Config{})
	h.say(t, "tool please")
	_, calls, final := h.turn(t)
	var confID string
	for _, p := range final.Content.Parts {
		if p.FunctionCall != nil && p.FunctionCall.Name == gooseagent.ConfirmationFunctionName {
			confID = p.FunctionCall.ID
		}
	}
	if confID == "" {
		t.Fatalf("no confirmation call; calls %d, final %+v", len(calls), final.Content)
	}
	answer := &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{
		ID: confID, Name: gooseagent.ConfirmationFunctionName, Response: map[string]any{"confirmed": true},
	}}}}
	if err := h.live.Send(agent.LiveRequest{Content: answer}); err != nil {
		t.Fatal(err)
	}
	streamed, calls, final := h.turn(t)
	if streamed != "Two files." || final.ErrorCode != "" {
		t.Fatalf("after the answer: streamed %q, final %s %s", streamed, final.ErrorCode, final.ErrorMessage)
	}
	if len(calls) != 1 || calls[0].Content.Parts[0].FunctionResponse == nil {
		t.Fatalf("want the tool's result, got %d events", len(calls))
	}
	if p := h.fake.Permissions(); len(p) != 1 || p[0].Outcome != "selected" {
		t.Errorf("goose got permissions %+v", p)
	}
}

func TestLiveStopEndsTheTurnAndKeepsTheSession(t *testing.T) {
	h := startLive(t, gooseagent.Config{})
	h.say(t, "slow one")
	if ev := h.next(t); !ev.Partial {
		t.Fatalf("want the first delta, got %+v", ev.LLMResponse)
	}
	if err := h.live.Send(agent.LiveRequest{RealtimeInput: &genai.ActivityStart{}}); err != nil {
		t.Fatal(err)
	}
	_, _, final := h.turn(t)
	if final.ErrorCode != gooseagent.ErrorCodeCancelled || !strings.Contains(final.ErrorMessage, "activityStart") {
		t.Fatalf("stopped turn's final event: %s %q", final.ErrorCode, final.ErrorMessage)
	}
	poll.Until(t, "goose is told to cancel", func() bool { return len(h.fake.Cancels()) == 1 })
	h.say(t, "after the stop")
	if streamed, _, final := h.turn(t); streamed != "echo: after the stop" || final.ErrorCode != "" {
		t.Fatalf("turn after the stop: %q %s %s", streamed, final.ErrorCode, final.ErrorMessage)
	}
}

func TestLiveStopBetweenTurnsDeniesThePendingApproval(t *testing.T) {
	h := startLive(t, gooseagent.Config{})
	h.say(t, "tool please")
	h.turn(t)
	if err := h.live.Send(agent.LiveRequest{RealtimeInput: &genai.ActivityStart{}}); err != nil {
		t.Fatal(err)
	}
	ev := h.next(t)
	if ev.ErrorCode != gooseagent.ErrorCodeCancelled || !strings.Contains(ev.ErrorMessage, "activityStart") {
		t.Fatalf("want the denial, got %s %q", ev.ErrorCode, ev.ErrorMessage)
	}
	poll.Until(t, "goose hears the denial", func() bool { return len(h.fake.Permissions()) == 1 })
}

func TestLiveCloseCancelsGoose(t *testing.T) {
	h := startLive(t, gooseagent.Config{})
	h.say(t, "slow one")
	h.next(t)
	start := time.Now()
	if err := h.live.Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "goose is told to cancel", func() bool { return len(h.fake.Cancels()) == 1 })
	if d := time.Since(start); d > time.Second {
		t.Errorf("goose was cancelled %s after the close, want within 1s", d)
	}
	<-h.done
	if h.err != nil {
		t.Errorf("a closed session ends cleanly, got %v", h.err)
	}
	if err := h.live.Send(agent.LiveRequest{Content: genai.NewContentFromText("late", genai.RoleUser)}); err == nil {
		t.Error("a send after close succeeded")
	}
}

func TestLiveRefusesBlobs(t *testing.T) {
	h := startLive(t, gooseagent.Config{})
	err := h.live.Send(agent.LiveRequest{RealtimeInput: &genai.Blob{MIMEType: "audio/pcm;rate=16000", Data: []byte{1, 2}}})
	if !errors.Is(err, gooseagent.ErrLiveNotText) {
		t.Fatalf("send of a blob: %v", err)
	}
	<-h.done
	if !errors.Is(h.err, gooseagent.ErrLiveNotText) || !strings.Contains(h.err.Error(), "goose takes text") {
		t.Fatalf("sequence ended with %v, want ErrLiveNotText", h.err)
	}
}

func TestLiveBacklogEndsTheSession(t *testing.T) {
	h := startLive(t, gooseagent.Config{})
	h.say(t, "slow one")
	h.next(t) // the turn runs: what follows waits
	for i := range gooseagent.MaxLiveWaiting {
		h.say(t, "waiting "+string(rune('a'+i)))
	}
	err := h.live.Send(agent.LiveRequest{Content: genai.NewContentFromText("one too many", genai.RoleUser)})
	if !errors.Is(err, gooseagent.ErrLiveBacklog) {
		t.Fatalf("send beyond the backlog: %v", err)
	}
	<-h.done
	if !errors.Is(h.err, gooseagent.ErrLiveBacklog) {
		t.Fatalf("sequence ended with %v", h.err)
	}
	poll.Until(t, "goose is told to cancel", func() bool { return len(h.fake.Cancels()) == 1 })
}

type refusal struct{}

func (refusal) Error() string     { return "the budget is spent" }
func (refusal) ErrorCode() string { return "BUDGET_EXHAUSTED" }

func TestLiveAdmitLiveTurn(t *testing.T) {
	refuse := make(chan bool, 2)
	refuse <- true
	refuse <- false
	h := startLive(t, gooseagent.Config{AdmitLiveTurn: func(context.Context, gooseagent.SessionKey) error {
		if <-refuse {
			return refusal{}
		}
		return nil
	}})
	h.say(t, "refused")
	_, _, final := h.turn(t)
	if final.ErrorCode != "BUDGET_EXHAUSTED" || !strings.Contains(final.ErrorMessage, "budget is spent") {
		t.Fatalf("refused turn: %s %q", final.ErrorCode, final.ErrorMessage)
	}
	if n := len(h.fake.Prompts()); n != 0 {
		t.Fatalf("goose got %d prompts for a refused turn", n)
	}
	h.say(t, "admitted")
	if streamed, _, final := h.turn(t); streamed != "echo: admitted" || final.ErrorCode != "" {
		t.Fatalf("admitted turn: %q %s", streamed, final.ErrorCode)
	}
}
