package gooseagent_test

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/agent/workflowagents/sequentialagent"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// whoAmI answers with the goose session the message reached.
func whoAmI(sid, text string) goosetest.Reply {
	return goosetest.Reply{Steps: []goosetest.Step{{Text: sid + " got " + text}}}
}

// texts runs one turn and returns "author: text" of every final event.
func texts(t *testing.T, r *runner.Runner, sessionID, text string) []string {
	t.Helper()
	var out []string
	for ev, err := range r.Run(t.Context(), "u", sessionID, genai.NewContentFromText(text, genai.RoleUser), agent.RunConfig{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.ErrorMessage != "" {
			t.Fatalf("%s: %s", ev.ErrorCode, ev.ErrorMessage)
		}
		if !ev.Partial && ev.Content != nil && len(ev.Content.Parts) > 0 {
			out = append(out, ev.Author+": "+ev.Content.Parts[0].Text)
		}
	}
	return out
}

func newSession(t *testing.T, svc session.Service, id string) {
	t.Helper()
	if _, err := svc.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: id}); err != nil {
		t.Fatal(err)
	}
}

func newRunner(t *testing.T, root agent.Agent, svc session.Service) *runner.Runner {
	t.Helper()
	r, err := runner.New(runner.Config{AppName: "app", Agent: root, SessionService: svc})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// team is two goose agents on one backend under a sequentialagent.
func team(t *testing.T, b goose.Backend, svc session.Service) *runner.Runner {
	t.Helper()
	var subs []agent.Agent
	for _, name := range []string{"planner", "coder"} {
		a, err := gooseagent.New(gooseagent.Config{Name: name, Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, a)
	}
	root, err := sequentialagent.New(sequentialagent.Config{AgentConfig: agent.Config{Name: "team", SubAgents: subs}})
	if err != nil {
		t.Fatal(err)
	}
	return newRunner(t, root, svc)
}

// TestTwoGooseAgentsUnderSequentialAgent: each agent of a workflow keeps its
// own goose session in the shared ADK session, turn after turn and across a
// restart of both.
func TestTwoGooseAgentsUnderSequentialAgent(t *testing.T) {
	b := newScriptBackend(whoAmI)
	svc := session.InMemoryService()
	newSession(t, svc, "s")
	r := team(t, b, svc)
	for _, text := range []string{"one", "two"} {
		want := []string{"planner: g1 got " + text, "coder: g2 got " + text}
		if got := texts(t, r, "s", text); !slices.Equal(got, want) {
			t.Fatalf("turn %q: %q, want %q", text, got, want)
		}
	}
	// Restarted agents find their goose sessions in the ADK state.
	r = team(t, b, svc)
	if got, want := texts(t, r, "s", "three"), []string{"planner: g1 got three", "coder: g2 got three"}; !slices.Equal(got, want) {
		t.Fatalf("after restart: %q, want %q", got, want)
	}
	if b.next != 2 || !slices.Equal(b.resumed, []string{"g1", "g2"}) {
		t.Fatalf("goose sessions started %d, resumed %v", b.next, b.resumed)
	}
}

// TestUnscopedSessionIDOfOlderVersions: a session stored by a version that
// kept the goose session under the unscoped key goes on in that goose
// session, for the agent that wrote the key only.
func TestUnscopedSessionIDOfOlderVersions(t *testing.T) {
	b := newScriptBackend(whoAmI)
	old, err := b.StartSession(t.Context(), goose.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := session.InMemoryService()
	for _, id := range []string{"s", "t"} {
		newSession(t, svc, id)
		got, err := svc.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: id})
		if err != nil {
			t.Fatal(err)
		}
		ev := session.NewEventWithContext(t.Context(), "old-invocation")
		ev.Author = "goose"
		ev.Content = genai.NewContentFromText("earlier answer", genai.RoleModel)
		ev.Actions.StateDelta = map[string]any{gooseagent.StateKeySessionID: old.ID}
		if err := svc.AppendEvent(t.Context(), got.Session, ev); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(name string) *runner.Runner {
		a, err := gooseagent.New(gooseagent.Config{Name: name, Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		return newRunner(t, a, svc)
	}
	if got := texts(t, mk("goose"), "s", "hi"); !slices.Equal(got, []string{"goose: g1 got hi"}) {
		t.Fatalf("the agent that wrote the key: %q", got)
	}
	got, _ := svc.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	if id, _ := got.Session.State().Get(gooseagent.SessionIDStateKey("goose")); id != "g1" {
		t.Fatalf("scoped key after the turn: %v", id)
	}
	// Another agent in a session whose key the goose agent wrote starts its own.
	if got := texts(t, mk("other"), "t", "hi"); !slices.Equal(got, []string{"other: g2 got hi"}) {
		t.Fatalf("another agent: %q", got)
	}
}

// withController runs a goose agent on b with its controller's session
// service, session "s" created.
func withController(t *testing.T, b goose.Backend) (*runner.Runner, *gooseagent.Controller, session.Service) {
	t.Helper()
	a, control, err := gooseagent.NewWithController(gooseagent.Config{Name: "goose", Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	svc := control.SessionService(session.InMemoryService())
	r := newRunner(t, a, svc)
	newSession(t, svc, "s")
	return r, control, svc
}

// TestDeleteSessionStartsFresh: deleting an ADK session through the
// controller's session service deletes the goose session and forgets it;
// the same id created again talks to a new goose session.
func TestDeleteSessionStartsFresh(t *testing.T) {
	b := newScriptBackend(whoAmI)
	r, control, svc := withController(t, b)
	if got := texts(t, r, "s", "one"); !slices.Equal(got, []string{"goose: g1 got one"}) {
		t.Fatalf("first: %q", got)
	}
	if err := svc.Delete(t.Context(), &session.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if b.exists("g1") {
		t.Fatal("goose session g1 survived the ADK session")
	}
	newSession(t, svc, "s")
	if got := texts(t, r, "s", "two"); !slices.Equal(got, []string{"goose: g2 got two"}) {
		t.Fatalf("re-created session: %q", got)
	}
	// Deleting a session the agent never saw deletes nothing in goose.
	if err := control.DeleteSession(t.Context(), gooseagent.SessionKey{AppName: "app", UserID: "u", SessionID: "nope"}, nil); err != nil {
		t.Fatal(err)
	}
	if !b.exists("g2") {
		t.Fatal("goose session g2 was deleted")
	}
}

// TestDeleteSessionDeniesPendingConfirmation: a goose reply held at a tool
// approval is denied and ended when its ADK session is deleted.
func TestDeleteSessionDeniesPendingConfirmation(t *testing.T) {
	b := newScriptBackend(approvalScript)
	r, control, svc := withController(t, b)
	for _, err := range r.Run(t.Context(), "u", "s", genai.NewContentFromText("delete x", genai.RoleUser), agent.RunConfig{}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	key := gooseagent.SessionKey{AppName: "app", UserID: "u", SessionID: "s"}
	if _, ok := control.PendingConfirmation(key); !ok {
		t.Fatal("no confirmation pending")
	}
	if err := svc.Delete(t.Context(), &session.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := control.PendingConfirmation(key); ok {
		t.Fatal("confirmation still pending")
	}
	if d, closed := b.snapshot(); !slices.Equal(d, []string{"g1/c1=deny_once"}) || closed != 1 {
		t.Fatalf("goose decisions %v, replies ended early %d", d, closed)
	}
}

// TestIdleSessionsForgotten: past Config.IdleSessions the least recently
// used sessions are forgotten; their next turn resumes their goose session.
func TestIdleSessionsForgotten(t *testing.T) {
	b := newScriptBackend(whoAmI)
	a, err := gooseagent.New(gooseagent.Config{Name: "goose", Backend: b, IdleSessions: 2})
	if err != nil {
		t.Fatal(err)
	}
	svc := session.InMemoryService()
	r := newRunner(t, a, svc)
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("s%d", i)
		newSession(t, svc, id)
		texts(t, r, id, "hi")
	}
	if len(b.resumed) != 0 {
		t.Fatalf("resumed %v before any session was forgotten", b.resumed)
	}
	if got := texts(t, r, "s1", "again"); !slices.Equal(got, []string{"goose: g1 got again"}) || !slices.Equal(b.resumed, []string{"g1"}) {
		t.Fatalf("%q, resumed %v", got, b.resumed)
	}
}

// TestAgentCallbacks: callbacks run as for any ADK agent; content from a
// before-callback answers instead of goose.
func TestAgentCallbacks(t *testing.T) {
	b := newScriptBackend(whoAmI)
	var after []string
	a, err := gooseagent.New(gooseagent.Config{
		Name: "goose", Backend: b,
		BeforeAgentCallbacks: []agent.BeforeAgentCallback{func(ctx agent.CallbackContext) (*genai.Content, error) {
			if ctx.UserContent().Parts[0].Text == "secret" {
				return genai.NewContentFromText("not for goose", genai.RoleModel), nil
			}
			return nil, nil
		}},
		AfterAgentCallbacks: []agent.AfterAgentCallback{func(ctx agent.CallbackContext) (*genai.Content, error) {
			after = append(after, ctx.AgentName())
			return nil, nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	svc := session.InMemoryService()
	r := newRunner(t, a, svc)
	newSession(t, svc, "s")
	if got := texts(t, r, "s", "secret"); !slices.Equal(got, []string{"goose: not for goose"}) || b.next != 0 {
		t.Fatalf("%q, goose sessions %d", got, b.next)
	}
	if got := texts(t, r, "s", "hi"); !slices.Equal(got, []string{"goose: g1 got hi"}) || !slices.Equal(after, []string{"goose"}) {
		t.Fatalf("%q, after-callbacks %v", got, after)
	}
}
