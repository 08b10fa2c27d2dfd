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
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// approvalScript: text, a tool that needs approval, text after it.
var approvalScript = goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
	{Text: "Let me delete it."},
	{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "ok", NeedsApproval: true}},
	{Text: "Done."},
	{Usage: &goosetest.UsageStep{Input: 5, Output: 2}},
}})

func newConfirmHarness(t *testing.T, script goosetest.Script, timeout time.Duration) (*harness, *gooseagent.Controller) {
	t.Helper()
	h := &harness{backend: newScriptBackend(script), store: &memStore{}, sessions: session.InMemoryService()}
	a, ctrl, err := gooseagent.NewWithController(gooseagent.Config{
		Name: "goose", Backend: h.backend, Store: h.store, SessionService: h.sessions, ConfirmationTimeout: timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctrl.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	h.runner, err = runner.New(runner.Config{AppName: "app", Agent: a, SessionService: h.sessions})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.sessions.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	return h, ctrl
}

func (h *harness) runContent(t *testing.T, c *genai.Content) []*session.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []*session.Event
	for ev, err := range h.runner.Run(ctx, "u", "s", c, agent.RunConfig{StreamingMode: agent.StreamingModeSSE}) {
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

func answer(id string, resp map[string]any) *genai.Content {
	return &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{
		ID: id, Name: gooseagent.ConfirmationFunctionName, Response: resp,
	}}}}
}

// confirmationOf checks the turn ended with a well-formed confirmation call
// and returns its id.
func confirmationOf(t *testing.T, evs []*session.Event) string {
	t.Helper()
	last := evs[len(evs)-1]
	if last.Partial || len(last.LongRunningToolIDs) != 1 || last.Content == nil {
		t.Fatalf("turn did not end with a long-running call: %s", dump(evs))
	}
	fc := last.Content.Parts[len(last.Content.Parts)-1].FunctionCall
	if fc == nil || fc.Name != "adk_request_confirmation" || fc.ID != last.LongRunningToolIDs[0] || !strings.HasPrefix(fc.ID, "adk-") {
		t.Fatalf("bad confirmation call: %s", dump(evs[len(evs)-1:]))
	}
	orig, _ := fc.Args["originalFunctionCall"].(map[string]any)
	conf, _ := fc.Args["toolConfirmation"].(map[string]any)
	if orig["id"] != "c1" || orig["name"] != "shell" || orig["args"].(map[string]any)["command"] != "rm x" {
		t.Fatalf("originalFunctionCall: %v", orig)
	}
	// Words for the person asked; what programs need stays in the payload.
	// developer's tools are unprefixed (platform_extensions/mod.rs), so the name
	// alone does not say which extension: just "shell".
	const hint = "goose wants to use shell:\n  command: rm x\nReply yes to allow it this once, or no to refuse."
	if conf["confirmed"] != false || conf["hint"] != hint {
		t.Fatalf("toolConfirmation hint %q, want %q", conf["hint"], hint)
	}
	payload, _ := conf["payload"].(map[string]any)
	if payload["gooseSessionId"] != "g1" || jpathT(payload, "answers", "allow", "confirmed") != true || jpathT(payload, "answers", "deny", "confirmed") != false {
		t.Fatalf("toolConfirmation payload: %v", payload)
	}
	return fc.ID
}

func TestConfirmationAnswered(t *testing.T) {
	for name, tc := range map[string]struct {
		resp     map[string]any
		decision string
		result   string
	}{
		"approve":         {map[string]any{"confirmed": true}, "allow_once", "ok"},
		"deny":            {map[string]any{"confirmed": false, "payload": nil}, "deny_once", goosetest.DeclinedToolResult},
		"web ui approve":  {map[string]any{"response": `{"confirmed":true}`}, "allow_once", "ok"},
		"web ui word no":  {map[string]any{"response": "No"}, "deny_once", goosetest.DeclinedToolResult},
		"string approval": {map[string]any{"confirmed": "true"}, "allow_once", "ok"},
	} {
		t.Run(name, func(t *testing.T) {
			h, ctrl := newConfirmHarness(t, approvalScript, time.Minute)
			evs := h.run(t, "delete x", agent.StreamingModeSSE)
			id := confirmationOf(t, evs)
			if got, ok := ctrl.PendingConfirmation(gooseagent.SessionKey{AppName: "app", UserID: "u", SessionID: "s"}); !ok || got != id {
				t.Fatalf("pending %q %v, want %q", got, ok, id)
			}
			evs = h.runContent(t, answer(id, tc.resp))
			var resp *genai.FunctionResponse
			for _, ev := range evs {
				for _, p := range ev.Content.Parts {
					if p.FunctionResponse != nil {
						resp = p.FunctionResponse
					}
				}
			}
			if resp == nil || resp.ID != "c1" || resp.Response["output"] != tc.result {
				t.Fatalf("tool result: %s", dump(evs))
			}
			fin := evs[len(evs)-1]
			if fin.Content.Parts[0].Text != "Done." || !fin.TurnComplete || fin.ErrorCode != "" || fin.UsageMetadata.TotalTokenCount != 7 {
				t.Fatalf("final: %s", dump(evs))
			}
			if dec, closed := h.backend.snapshot(); len(dec) != 1 || dec[0] != "g1/c1="+tc.decision || closed != 0 {
				t.Fatalf("backend saw %v, %d closed replies", dec, closed)
			}
			// The history holds the exchange in order.
			got, err := h.sessions.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for ev := range got.Session.Events().All() {
				kinds = append(kinds, kind(ev))
			}
			want := "user:text model:text+call:shell model:call:adk_request_confirmation user:response:adk_request_confirmation goose:response:shell model:text"
			if strings.Join(kinds, " ") != want {
				t.Fatalf("history\n got %s\nwant %s", strings.Join(kinds, " "), want)
			}
			if len(h.store.recs) != 1 || h.store.recs[0].Totals.TotalTokens != 7 {
				t.Fatalf("usage records %+v", h.store.recs)
			}
			// Answering again is stale.
			evs = h.runContent(t, answer(id, tc.resp))
			if e := evs[len(evs)-1]; e.ErrorCode != gooseagent.ErrorCodeConfirmationNotPending || !strings.Contains(e.ErrorMessage, "no longer pending") {
				t.Fatalf("second answer: %s", dump(evs))
			}
		})
	}
}

func kind(ev *session.Event) string {
	var parts []string
	for _, p := range ev.Content.Parts {
		switch {
		case p.FunctionCall != nil:
			parts = append(parts, "call:"+p.FunctionCall.Name)
		case p.FunctionResponse != nil:
			parts = append(parts, "response:"+p.FunctionResponse.Name)
		case p.Text != "":
			parts = append(parts, "text")
		}
	}
	who := ev.Content.Role
	if ev.Author == "goose" && ev.Content.Role == genai.RoleUser {
		who = "goose"
	}
	return who + ":" + strings.Join(parts, "+")
}

func TestConfirmationBadAnswers(t *testing.T) {
	h, _ := newConfirmHarness(t, approvalScript, time.Minute)
	id := confirmationOf(t, h.run(t, "delete x", agent.StreamingModeNone))

	evs := h.runContent(t, answer("adk-unknown", map[string]any{"confirmed": true}))
	if e := evs[len(evs)-1]; e.ErrorCode != gooseagent.ErrorCodeConfirmationNotPending || !strings.Contains(e.ErrorMessage, id) {
		t.Fatalf("unknown id: %s", dump(evs))
	}
	evs = h.runContent(t, answer(id, map[string]any{"response": "maybe"}))
	if e := evs[len(evs)-1]; e.ErrorCode != gooseagent.ErrorCodeBadRequest {
		t.Fatalf("bad payload: %s", dump(evs))
	}
	// Neither answer touched goose; the confirmation is still pending.
	if dec, _ := h.backend.snapshot(); len(dec) != 0 {
		t.Fatalf("goose was answered: %v", dec)
	}
	evs = h.runContent(t, answer(id, map[string]any{"confirmed": true}))
	if fin := evs[len(evs)-1]; fin.Content.Parts[0].Text != "Done." {
		t.Fatalf("valid answer after bad ones: %s", dump(evs))
	}
}

func TestConfirmationTimeout(t *testing.T) {
	h, ctrl := newConfirmHarness(t, approvalScript, 150*time.Millisecond)
	key := gooseagent.SessionKey{AppName: "app", UserID: "u", SessionID: "s"}
	id := confirmationOf(t, h.run(t, "delete x", agent.StreamingModeSSE))
	poll.Until(t, "deny and cancel after the timeout", func() bool {
		dec, closed := h.backend.snapshot()
		return len(dec) == 1 && closed == 1
	})
	if dec, _ := h.backend.snapshot(); dec[0] != "g1/c1=deny_once" {
		t.Fatalf("decision %v", dec)
	}
	if _, ok := ctrl.PendingConfirmation(key); ok {
		t.Fatal("still pending after timeout")
	}
	err := ctrl.CheckConfirmation(key, id)
	var ce *gooseagent.ConfirmationError
	if !asConfirmationError(err, &ce) || !ce.Stale || !strings.Contains(ce.Reason, "timed out") {
		t.Fatalf("check after timeout: %v", err)
	}
	// The history says why.
	got, _ := h.sessions.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	last := got.Session.Events().At(got.Session.Events().Len() - 1)
	if last.ErrorCode != gooseagent.ErrorCodeConfirmationTimeout || !strings.Contains(last.ErrorMessage, "timed out") || last.Author != "goose" {
		t.Fatalf("recorded event: %s", dump([]*session.Event{last}))
	}
	// A late answer is stale; a new message works normally.
	evs := h.runContent(t, answer(id, map[string]any{"confirmed": true}))
	if e := evs[len(evs)-1]; e.ErrorCode != gooseagent.ErrorCodeConfirmationNotPending {
		t.Fatalf("late answer: %s", dump(evs))
	}
}

// TestConfirmationEndedWhileGooseIsTold: from the moment the timeout takes
// a confirmation, an answer is told it timed out, also while goose is still
// being told of the denial (an answer used to hear, in that window, that
// the session had forgotten the confirmation).
func TestConfirmationEndedWhileGooseIsTold(t *testing.T) {
	h, ctrl := newConfirmHarness(t, approvalScript, 100*time.Millisecond)
	key := gooseagent.SessionKey{AppName: "app", UserID: "u", SessionID: "s"}
	ids, checked := make(chan string, 1), make(chan error, 1)
	h.backend.approving = func() { checked <- ctrl.CheckConfirmation(key, <-ids) }
	ids <- confirmationOf(t, h.run(t, "delete x", agent.StreamingModeSSE))
	var err error
	select {
	case err = <-checked:
	case <-time.After(10 * time.Second):
		t.Fatal("goose was not told of the denial")
	}
	var ce *gooseagent.ConfirmationError
	if !asConfirmationError(err, &ce) || !ce.Stale || !strings.Contains(ce.Reason, "timed out") {
		t.Fatalf("check while goose is told: %v", err)
	}
}

func asConfirmationError(err error, target **gooseagent.ConfirmationError) bool {
	return errors.As(err, target)
}

func TestConfirmationSupersededAndClose(t *testing.T) {
	h, ctrl := newConfirmHarness(t, approvalScript, time.Minute)
	confirmationOf(t, h.run(t, "delete x", agent.StreamingModeSSE))
	// A new message while waiting: the old tool call is denied and its reply
	// cancelled, then the new prompt runs (and asks again).
	evs := h.run(t, "never mind", agent.StreamingModeSSE)
	if dec, closed := h.backend.snapshot(); len(dec) != 1 || dec[0] != "g1/c1=deny_once" || closed != 1 {
		t.Fatalf("after superseding: %v %d", dec, closed)
	}
	note := false
	for _, ev := range evs {
		if !ev.Partial && ev.Content != nil && len(ev.Content.Parts) > 0 && strings.Contains(ev.Content.Parts[0].Text, "superseded") && ev.ErrorCode == "" {
			note = true
		}
	}
	if !note {
		t.Fatalf("no superseded note: %s", dump(evs))
	}
	confirmationOf(t, evs)

	// Shutdown denies and cancels what is pending, and holds nothing new.
	if err := ctrl.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if dec, closed := h.backend.snapshot(); len(dec) != 2 || dec[1] != "g1/c1=deny_once" || closed != 2 {
		t.Fatalf("after close: %v %d", dec, closed)
	}
	evs = h.run(t, "again", agent.StreamingModeSSE)
	if e := evs[len(evs)-1]; e.ErrorCode != gooseagent.ErrorCodeUnavailable || len(e.LongRunningToolIDs) != 0 {
		t.Fatalf("approval after close: %s", dump(evs))
	}
	if _, closed := h.backend.snapshot(); closed != 3 {
		t.Fatalf("reply not closed after close: %d", closed)
	}
}

// jpathT digs into nested maps.
func jpathT(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
