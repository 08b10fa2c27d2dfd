package gooseagent_test

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/agent/workflowagents/sequentialagent"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// Goose as the root agent of an ADK Go program. The goose server here is
// goosetest's fake `goose serve` (echoing the user); for a real one, point
// acp.Config at `goose serve --host 127.0.0.1 --port 3284` and its
// GOOSE_SERVER__SECRET_KEY. Errors are printed and end the example, so the
// deferred closes still run (a program would return them).
func Example() {
	ctx := context.Background()
	fake := goosetest.NewServe(nil) // nil: no test to attach to; closed below
	defer fake.Close()
	backend, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer backend.Close()

	root, control, err := gooseagent.NewWithController(gooseagent.Config{
		Name:        "goose",
		Description: "Goose, an on-machine AI agent",
		Backend:     backend,
		// Where goose works: an absolute path on goose's machine.
		StartOptions: goose.StartOptions{WorkingDir: "/tmp"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// On shutdown, deny and cancel tool approvals nobody can answer any more.
	defer control.Close(ctx)

	// Deleting an ADK session then deletes its goose session too.
	sessions := control.SessionService(session.InMemoryService())
	r, err := runner.New(runner.Config{AppName: "demo", Agent: root, SessionService: sessions})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := sessions.Create(ctx, &session.CreateRequest{AppName: "demo", UserID: "me", SessionID: "s1"}); err != nil {
		fmt.Println(err)
		return
	}

	for _, text := range []string{"hello goose", "again"} {
		msg := genai.NewContentFromText(text, genai.RoleUser)
		// Partial events carry goose's text deltas as they arrive, one
		// event per delta.
		var streamed strings.Builder
		for ev, err := range r.Run(ctx, "me", "s1", msg, agent.RunConfig{StreamingMode: agent.StreamingModeSSE}) {
			if err != nil {
				fmt.Println(err)
				return
			}
			if ev.ErrorMessage != "" { // goose failed: ErrorCode says how
				fmt.Printf("%s: %s\n", ev.ErrorCode, ev.ErrorMessage)
				return
			}
			if ev.Partial {
				streamed.WriteString(ev.Content.Parts[0].Text)
				continue
			}
			fmt.Printf("streamed: %q\n", streamed.String())
			fmt.Printf("final: %q, tokens %d+%d=%d, %s\n", ev.Content.Parts[0].Text,
				ev.UsageMetadata.PromptTokenCount, ev.UsageMetadata.CandidatesTokenCount,
				ev.UsageMetadata.TotalTokenCount, ev.FinishReason)
		}
	}
	got, err := sessions.Get(ctx, &session.GetRequest{AppName: "demo", UserID: "me", SessionID: "s1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	id, _ := got.Session.State().Get(gooseagent.SessionIDStateKey("goose"))
	fmt.Println("goose sessions started:", fake.Calls("session/new"), "- kept in state:", id != nil)

	if err := sessions.Delete(ctx, &session.DeleteRequest{AppName: "demo", UserID: "me", SessionID: "s1"}); err != nil {
		fmt.Println(err)
		return
	}
	_, stillThere := fake.Session(fmt.Sprint(id))
	fmt.Println("goose session deleted with the ADK session:", !stillThere)
	// Output:
	// streamed: "echo: hello goose"
	// final: "echo: hello goose", tokens 21+11=32, STOP
	// streamed: "echo: again"
	// final: "echo: again", tokens 15+5=20, STOP
	// goose sessions started: 1 - kept in state: true
	// goose session deleted with the ADK session: true
}

// Two goose agents in one agent tree, one after the other in each turn.
// Each keeps its own goose session in the shared ADK session (state keys
// scoped by agent name) and sees only its own conversation in goose. Agent
// callbacks work as for any ADK agent.
func Example_workflow() {
	ctx := context.Background()
	fake := goosetest.NewServe(nil)
	defer fake.Close()
	backend, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer backend.Close()

	announce := func(cctx agent.CallbackContext) (*genai.Content, error) {
		fmt.Println("--", cctx.AgentName(), "starts")
		return nil, nil
	}
	planner, plannerControl, err := gooseagent.NewWithController(gooseagent.Config{
		Name: "planner", Backend: backend, StartOptions: goose.StartOptions{WorkingDir: "/tmp"},
		BeforeAgentCallbacks: []agent.BeforeAgentCallback{announce},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	coder, coderControl, err := gooseagent.NewWithController(gooseagent.Config{
		Name: "coder", Backend: backend, StartOptions: goose.StartOptions{WorkingDir: "/tmp"},
		BeforeAgentCallbacks: []agent.BeforeAgentCallback{announce},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	root, err := sequentialagent.New(sequentialagent.Config{AgentConfig: agent.Config{
		Name: "team", SubAgents: []agent.Agent{planner, coder},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	sessions := coderControl.SessionService(plannerControl.SessionService(session.InMemoryService()))
	r, err := runner.New(runner.Config{AppName: "demo", Agent: root, SessionService: sessions})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := sessions.Create(ctx, &session.CreateRequest{AppName: "demo", UserID: "me", SessionID: "s1"}); err != nil {
		fmt.Println(err)
		return
	}
	for _, text := range []string{"add a flag", "now test it"} {
		for ev, err := range r.Run(ctx, "me", "s1", genai.NewContentFromText(text, genai.RoleUser), agent.RunConfig{}) {
			if err != nil {
				fmt.Println(err)
				return
			}
			if ev.ErrorMessage != "" {
				fmt.Printf("%s: %s\n", ev.ErrorCode, ev.ErrorMessage)
				return
			}
			fmt.Printf("%s: %s\n", ev.Author, ev.Content.Parts[0].Text)
		}
	}
	got, err := sessions.Get(ctx, &session.GetRequest{AppName: "demo", UserID: "me", SessionID: "s1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var keys []string
	for k := range got.Session.State().All() {
		if strings.HasPrefix(k, gooseagent.StateKeySessionID) {
			keys = append(keys, k)
		}
	}
	fmt.Println("goose sessions started:", fake.Calls("session/new"), "- state keys:", len(keys))
	// Output:
	// -- planner starts
	// planner: echo: add a flag
	// -- coder starts
	// coder: echo: add a flag
	// -- planner starts
	// planner: echo: now test it
	// -- coder starts
	// coder: echo: now test it
	// goose sessions started: 2 - state keys: 2
}

// Goose live: one bidirectional stream for a whole conversation, as
// adkrest's /run_live serves it over a WebSocket. Messages go in through
// the live session; events come out of one sequence. A message sent while
// a turn runs waits for it; Send(agent.LiveRequest{RealtimeInput:
// &genai.ActivityStart{}}) stops the running turn; Close ends the stream
// and cancels goose's turn.
func Example_live() {
	ctx := context.Background()
	fake := goosetest.NewServe(nil)
	defer fake.Close()
	backend, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer backend.Close()
	root, control, err := gooseagent.NewWithController(gooseagent.Config{
		Name: "goose", Backend: backend, StartOptions: goose.StartOptions{WorkingDir: "/tmp"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer control.Close(ctx)
	sessions := control.SessionService(session.InMemoryService())
	r, err := runner.New(runner.Config{AppName: "demo", Agent: root, SessionService: sessions})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := sessions.Create(ctx, &session.CreateRequest{AppName: "demo", UserID: "me", SessionID: "s1"}); err != nil {
		fmt.Println(err)
		return
	}

	live, events, err := r.RunLive(ctx, "me", "s1", agent.LiveRunConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Both messages are sent at once: the second waits for the first turn.
	for _, text := range []string{"hello goose", "again"} {
		if err := live.Send(agent.LiveRequest{Content: genai.NewContentFromText(text, genai.RoleUser)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	turns := 0
	var streamed strings.Builder
	for ev, err := range events {
		if err != nil {
			fmt.Println(err)
			return
		}
		if ev.Partial {
			streamed.WriteString(ev.Content.Parts[0].Text)
			continue
		}
		if ev.TurnComplete { // each turn ends with one final event
			fmt.Printf("streamed: %q, final event error code %q\n", streamed.String(), ev.ErrorCode)
			streamed.Reset()
			if turns++; turns == 2 {
				_ = live.Close() // the sequence then ends
			}
		}
	}
	// Output:
	// streamed: "echo: hello goose", final event error code ""
	// streamed: "echo: again", final event error code ""
}
