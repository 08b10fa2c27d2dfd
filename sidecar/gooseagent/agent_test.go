package gooseagent_test

import (
	"context"
	"encoding/json"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/adk/agent"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type memStore struct {
	mu   sync.Mutex
	recs []gooseagent.UsageRecord
}

func (s *memStore) RecordUsage(_ context.Context, r gooseagent.UsageRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
	return nil
}

type harness struct {
	backend  *scriptBackend
	store    *memStore
	sessions session.Service
	runner   *runner.Runner
}

func newHarness(t *testing.T, script goosetest.Script) *harness {
	t.Helper()
	b := newScriptBackend(script)
	return newHarnessOn(t, b, b)
}

// newHarnessOn runs the agent on agentBackend, which plays b's sessions.
func newHarnessOn(t *testing.T, b *scriptBackend, agentBackend goose.Backend) *harness {
	t.Helper()
	h := &harness{backend: b, store: &memStore{}, sessions: session.InMemoryService()}
	a, err := gooseagent.New(gooseagent.Config{Name: "goose", Backend: agentBackend, Store: h.store})
	if err != nil {
		t.Fatal(err)
	}
	h.runner, err = runner.New(runner.Config{AppName: "app", Agent: a, SessionService: h.sessions})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.sessions.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) run(t *testing.T, text string, mode agent.StreamingMode) []*session.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []*session.Event
	for ev, err := range h.runner.Run(ctx, "u", "s", genai.NewContentFromText(text, genai.RoleUser), agent.RunConfig{StreamingMode: mode}) {
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

func TestTextStreamingAndAggregate(t *testing.T) {
	h := newHarness(t, goosetest.Echo)
	evs := h.run(t, "hello", agent.StreamingModeSSE)
	if len(evs) != 3 {
		t.Fatalf("want 2 partials + final, got %d: %s", len(evs), dump(evs))
	}
	if !evs[0].Partial || evs[0].Content.Parts[0].Text != "echo: he" || !evs[1].Partial || evs[1].Content.Parts[0].Text != "llo" {
		t.Fatalf("partials wrong: %s", dump(evs))
	}
	fin := evs[2]
	if fin.Partial || !fin.TurnComplete || fin.Content.Parts[0].Text != "echo: hello" || fin.Author != "goose" {
		t.Fatalf("final wrong: %s", dump(evs[2:]))
	}
	if fin.FinishReason != genai.FinishReasonStop {
		t.Errorf("finish reason %q", fin.FinishReason)
	}
	u := fin.UsageMetadata
	if u == nil || u.PromptTokenCount != 15 || u.CandidatesTokenCount != 5 || u.TotalTokenCount != 20 {
		t.Fatalf("usage %+v", u)
	}
	if fin.Actions.StateDelta[gooseagent.SessionIDStateKey("goose")] != "g1" {
		t.Errorf("state delta %v", fin.Actions.StateDelta)
	}

	// Second turn: same goose session, totals accumulate, state persisted.
	evs = h.run(t, "abcd", agent.StreamingModeNone)
	if len(evs) != 1 || evs[0].Partial {
		t.Fatalf("non-streaming turn must yield only the aggregate: %s", dump(evs))
	}
	got, err := h.sessions.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := got.Session.State().Get(gooseagent.SessionIDStateKey("goose")); id != "g1" {
		t.Errorf("session id in state = %v", id)
	}
	usage, _ := got.Session.State().Get(gooseagent.UsageStateKey("goose"))
	if m, _ := usage.(map[string]any); m["totalTokens"] != int64(20+18) {
		t.Errorf("accumulated usage in state = %v", usage)
	}
	if n := got.Session.Events().Len(); n != 4 { // 2 user + 2 finals; partials are not persisted
		t.Errorf("persisted %d events", n)
	}
	if len(h.store.recs) != 2 || h.store.recs[1].Totals.TotalTokens != 38 || h.store.recs[1].Turn.TotalTokens != 18 || h.store.recs[1].Agent != "goose" {
		t.Errorf("store records %+v", h.store.recs)
	}
}

func TestToolsThinkingProgress(t *testing.T) {
	h := newHarness(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Thinking: "let me look"},
		{Text: "Checking."},
		{Notify: &goosetest.NotifyStep{ToolCallID: "c1", Message: "listing", Progress: 1, Total: 2}},
		{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "a b"}},
		{Text: "Two files."},
		{Usage: &goosetest.UsageStep{Input: 3, Output: 4}},
	}}))
	evs := h.run(t, "ls", agent.StreamingModeSSE)
	var calls, resps, thoughts, progress int
	for _, ev := range evs {
		for _, p := range ev.Content.Parts {
			switch {
			case p.FunctionCall != nil:
				calls++
				if ev.Partial || p.FunctionCall.Name != "shell" || p.FunctionCall.Args["command"] != "ls" || p.FunctionCall.ID != "c1" {
					t.Errorf("bad call %s", dump([]*session.Event{ev}))
				}
				if ev.Content.Parts[0].Text != "let me look" || !ev.Content.Parts[0].Thought || ev.Content.Parts[1].Text != "Checking." {
					t.Errorf("preceding text not folded into the call event: %s", dump([]*session.Event{ev}))
				}
			case p.FunctionResponse != nil:
				resps++
				if p.FunctionResponse.Response["output"] != "a b" || ev.Author != "goose" || ev.Content.Role != genai.RoleUser {
					t.Errorf("bad response %s", dump([]*session.Event{ev}))
				}
			case p.Thought && ev.Partial && strings.HasPrefix(p.Text, "[progress 1/2]"):
				progress++
			case p.Thought && ev.Partial:
				thoughts++
			}
		}
	}
	if calls != 1 || resps != 1 || thoughts != 1 || progress != 1 {
		t.Fatalf("calls=%d resps=%d thoughts=%d progress=%d\n%s", calls, resps, thoughts, progress, dump(evs))
	}
	fin := evs[len(evs)-1]
	if fin.Content.Parts[0].Text != "Two files." || fin.UsageMetadata.TotalTokenCount != 7 || !fin.TurnComplete {
		t.Fatalf("final %s", dump([]*session.Event{fin}))
	}
}

func TestGooseErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		steps []goosetest.Step
		code  string
		text  string
	}{
		"agent error":  {steps: []goosetest.Step{{Text: "partial "}, {Error: "provider exploded"}}, code: gooseagent.ErrorCodeAgent, text: "partial "},
		"stream drops": {steps: []goosetest.Step{{Drop: true}}, code: gooseagent.ErrorCodeStreamBroken},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, goosetest.Fixed(goosetest.Reply{Steps: tc.steps}))
			evs := h.run(t, "x", agent.StreamingModeNone)
			fin := evs[len(evs)-1]
			if fin.ErrorCode != tc.code || fin.ErrorMessage == "" || fin.Partial || fin.UsageMetadata == nil || fin.FinishReason != genai.FinishReasonOther {
				t.Fatalf("got %s", dump(evs))
			}
			if tc.text != "" && fin.Content.Parts[0].Text != tc.text {
				t.Errorf("text before the error lost: %s", dump(evs))
			}
		})
	}
	t.Run("goose down", func(t *testing.T) {
		h := newHarness(t, goosetest.Echo)
		h.backend.down = true
		evs := h.run(t, "x", agent.StreamingModeSSE)
		if len(evs) != 1 || evs[0].ErrorCode != gooseagent.ErrorCodeUnavailable {
			t.Fatalf("got %s", dump(evs))
		}
	})
	t.Run("no text", func(t *testing.T) {
		h := newHarness(t, goosetest.Echo)
		var evs []*session.Event
		// Only a thought: nothing goose can take. (A function response is
		// read as a tool confirmation answer; see confirm_test.go.)
		msg := &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{Text: "hmm", Thought: true}}}
		for ev, err := range h.runner.Run(t.Context(), "u", "s", msg, agent.RunConfig{}) {
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		if len(evs) != 1 || evs[0].ErrorCode != gooseagent.ErrorCodeBadRequest {
			t.Fatalf("got %s", dump(evs))
		}
	})
}

// finishedAs ends every reply of its backend with reason instead of the
// backend's own.
type finishedAs struct {
	goose.Backend
	reason string
}

func (b finishedAs) Reply(ctx context.Context, sessionID string, msg goose.UserMessage) iter.Seq2[goose.Event, error] {
	return func(yield func(goose.Event, error) bool) {
		for ev, err := range b.Backend.Reply(ctx, sessionID, msg) {
			if _, ok := ev.(*goose.Finish); ok {
				ev = &goose.Finish{Reason: b.reason}
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

// A reply goose ended "cancelled" that the turn did not cancel (another
// client of the goose session did) is no answer: the turn ends with an
// error, keeping the text goose sent before.
func TestGooseCancelledTheTurn(t *testing.T) {
	b := newScriptBackend(goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "half an "}}}))
	for reason, code := range map[string]string{"cancelled": gooseagent.ErrorCodeCancelled, "end_turn": ""} {
		t.Run(reason, func(t *testing.T) {
			h := newHarnessOn(t, b, finishedAs{b, reason})
			evs := h.run(t, "x", agent.StreamingModeSSE)
			fin := evs[len(evs)-1]
			if fin.Partial || fin.ErrorCode != code || fin.Content == nil || fin.Content.Parts[0].Text != "half an " {
				t.Fatalf("got %s", dump(evs))
			}
			if code != "" && (!strings.Contains(fin.ErrorMessage, "another client") || fin.FinishReason != genai.FinishReasonOther) {
				t.Errorf("the error does not say why: %s", dump(evs))
			}
		})
	}
}

func TestResumeAfterRestartAndLostSession(t *testing.T) {
	h := newHarness(t, goosetest.Echo)
	h.run(t, "one", agent.StreamingModeNone)
	// A new agent over the same session service acts like a restarted sidecar.
	a, err := gooseagent.New(gooseagent.Config{Name: "goose", Backend: h.backend})
	if err != nil {
		t.Fatal(err)
	}
	h.runner, _ = runner.New(runner.Config{AppName: "app", Agent: a, SessionService: h.sessions})
	h.run(t, "two", agent.StreamingModeNone)
	if len(h.backend.resumed) != 1 || h.backend.resumed[0] != "g1" {
		t.Fatalf("resumed %v", h.backend.resumed)
	}
	// goose lost the session: the agent starts a fresh one instead of failing.
	_ = h.backend.DeleteSession(t.Context(), "g1")
	a, _ = gooseagent.New(gooseagent.Config{Name: "goose", Backend: h.backend})
	h.runner, _ = runner.New(runner.Config{AppName: "app", Agent: a, SessionService: h.sessions})
	evs := h.run(t, "three", agent.StreamingModeNone)
	if evs[0].ErrorCode != "" || evs[0].Actions.StateDelta[gooseagent.SessionIDStateKey("goose")] != "g2" {
		t.Fatalf("got %s", dump(evs))
	}
}

func TestClientGoneCancelsReply(t *testing.T) {
	h := newHarness(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "a"}, {Delay: time.Hour, Text: "never"},
	}}))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range h.runner.Run(ctx, "u", "s", genai.NewContentFromText("x", genai.RoleUser), agent.RunConfig{StreamingMode: agent.StreamingModeSSE}) {
			if err == nil && ev.Partial {
				cancel()
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not end after the client went away")
	}
	cancel()
}

func TestConfigValidation(t *testing.T) {
	if _, err := gooseagent.New(gooseagent.Config{Name: "x"}); err == nil {
		t.Error("missing backend accepted")
	}
	if _, err := gooseagent.New(gooseagent.Config{Backend: newScriptBackend(goosetest.Echo)}); err == nil {
		t.Error("missing name accepted")
	}
	var _ goose.Backend = newScriptBackend(goosetest.Echo)
}

func dump(evs []*session.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		j, _ := json.Marshal(ev)
		b.Write(j)
		b.WriteString("\n")
	}
	return b.String()
}
