package gooseagent_test

import (
	"context"
	"fmt"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// Goose as the root agent of an in-process ADK program. In production the
// Backend is an ACP or REST client (sidecar/goose/acp, sidecar/goose/rest);
// here an in-memory backend plays goosetest.Echo.
func Example() {
	ctx := context.Background()
	backend := newScriptBackend(goosetest.Echo)

	root, err := gooseagent.New(gooseagent.Config{
		Name:        "goose",
		Description: "Goose, an on-machine AI agent",
		Backend:     backend,
	})
	if err != nil {
		panic(err)
	}
	sessions := session.InMemoryService()
	r, err := runner.New(runner.Config{AppName: "demo", Agent: root, SessionService: sessions})
	if err != nil {
		panic(err)
	}
	if _, err := sessions.Create(ctx, &session.CreateRequest{AppName: "demo", UserID: "me", SessionID: "s1"}); err != nil {
		panic(err)
	}

	msg := genai.NewContentFromText("hello goose", genai.RoleUser)
	for ev, err := range r.Run(ctx, "me", "s1", msg, agent.RunConfig{StreamingMode: agent.StreamingModeSSE}) {
		if err != nil {
			panic(err)
		}
		if ev.Partial {
			fmt.Printf("partial: %q\n", ev.Content.Parts[0].Text)
			continue
		}
		fmt.Printf("final: %q, tokens %d+%d=%d, %s\n", ev.Content.Parts[0].Text,
			ev.UsageMetadata.PromptTokenCount, ev.UsageMetadata.CandidatesTokenCount,
			ev.UsageMetadata.TotalTokenCount, ev.FinishReason)
		fmt.Println("goose session:", ev.Actions.StateDelta[gooseagent.StateKeySessionID])
	}
	// Output:
	// partial: "echo: hello"
	// partial: " goose"
	// final: "echo: hello goose", tokens 21+11=32, STOP
	// goose session: g1
}
