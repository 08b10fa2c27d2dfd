package main

import (
	"flag"
	"fmt"
	"iter"
	"strings"
	"time"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/model"
	"google.golang.org/adk/server/adkrest"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/hack/internal/sidecarproc"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// serveADKOnly runs adk-go's own REST server (the one adk2goose serves) with
// its in-memory session service and an agent that makes the fake goose's
// reply itself: -deltas partial text events spread over -reply-time, then
// the whole text as the final event, as adk2goose's agent sends them. With
// no goose, no translation and no session store behind it, it is what any
// server of ADK's REST API costs for the same reply: the floor under the
// adk2goose path.
func serveADKOnly(args []string) error {
	fs := flag.NewFlagSet("adk-only", flag.ContinueOnError)
	deltas := fs.Int("deltas", 100, "text events per reply")
	replyTime := fs.Duration("reply-time", 0, "how long one reply takes, its events evenly spread")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := agent.New(agent.Config{
		Name:        sidecarproc.AppName,
		Description: "the fake goose's reply, made in process",
		Run: func(ic agent.InvocationContext) iter.Seq2[*session.Event, error] {
			return reply(ic, *deltas, *replyTime)
		},
	})
	if err != nil {
		return fmt.Errorf("failed to make the agent: %w", err)
	}
	rest, err := adkrest.NewServer(adkrest.ServerConfig{
		SessionService: session.InMemoryService(),
		AgentLoader:    agent.NewSingleLoader(root),
		// adkrest's write deadline for a /run_sse response is now plus this
		// (zero fails every write): as long as adk2goose's default.
		SSEWriteTimeout: 10 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("failed to make the ADK REST server: %w", err)
	}
	return serveRole(rest, func(u string) childInfo { return childInfo{URL: u} })
}

// reply yields what the fake goose sends for the user's text, as
// adk2goose's events: goosetest.PacedDeltas' deltas one partial event each,
// then the final event with all of them. holdText gets one delta and then
// nothing until the request ends.
func reply(ic agent.InvocationContext, deltas int, replyTime time.Duration) iter.Seq2[*session.Event, error] {
	return func(yield func(*session.Event, error) bool) {
		event := func(text string, partial bool) *session.Event {
			ev := session.NewEventWithContext(ic, ic.InvocationID())
			ev.Author, ev.Branch = ic.Agent().Name(), ic.Branch()
			ev.LLMResponse = model.LLMResponse{Content: genai.NewContentFromText(text, genai.RoleModel), Partial: partial, TurnComplete: !partial}
			return ev
		}
		if userText(ic) == holdText {
			if yield(event("first", true), nil) {
				<-ic.Done()
			}
			return
		}
		var all strings.Builder
		timer := time.NewTimer(replyTime) // reset before each delta's wait
		defer timer.Stop()
		for _, step := range goosetest.PacedDeltas(deltas, replyTime).Steps {
			if step.Text == "" {
				continue // the usage step
			}
			if step.Delay > 0 {
				timer.Reset(step.Delay)
				select {
				case <-timer.C:
				case <-ic.Done():
					yield(nil, fmt.Errorf("failed to stream reply: %w", ic.Err()))
					return
				}
			}
			all.WriteString(step.Text)
			if !yield(event(step.Text, true), nil) {
				return
			}
		}
		yield(event(all.String(), false), nil)
	}
}

// userText is the text of the turn's user message.
func userText(ic agent.InvocationContext) string {
	var b strings.Builder
	if c := ic.UserContent(); c != nil {
		for _, p := range c.Parts {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
