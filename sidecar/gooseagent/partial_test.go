package gooseagent_test

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"testing"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// listBackend answers every message with the same values, in order.
// Sessions are the scriptBackend's.
type listBackend struct {
	*scriptBackend
	values []arrival
}

// arrival is one value of a reply: an event or the stream's error.
type arrival struct {
	ev  goose.Event
	err error
}

func (b listBackend) Reply(context.Context, string, goose.UserMessage) iter.Seq2[goose.Event, error] {
	return func(yield func(goose.Event, error) bool) {
		for _, a := range b.values {
			if !yield(a.ev, a.err) {
				return
			}
		}
	}
}

func runList(t *testing.T, values ...arrival) []*session.Event {
	t.Helper()
	b := listBackend{scriptBackend: newScriptBackend(goosetest.Echo), values: values}
	return newHarnessOn(t, b.scriptBackend, b).run(t, "go", agent.StreamingModeSSE)
}

// describe renders each event as kind:text, one per line.
func describe(evs []*session.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		kind := "final"
		if ev.Partial {
			kind = "partial"
		}
		for _, p := range ev.Content.Parts {
			switch {
			case p.FunctionCall != nil:
				fmt.Fprintf(&b, "%s call %s|", kind, p.FunctionCall.Name)
			case p.Thought:
				fmt.Fprintf(&b, "%s thought %q|", kind, p.Text)
			default:
				fmt.Fprintf(&b, "%s %q|", kind, p.Text)
			}
		}
		if ev.ErrorCode != "" {
			fmt.Fprintf(&b, "%s error %s|", kind, ev.ErrorCode)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func text(s string) arrival        { return arrival{ev: &goose.TextDelta{Text: s}} }
func thinking(s string) arrival    { return arrival{ev: &goose.ThinkingDelta{Text: s}} }
func event(ev goose.Event) arrival { return arrival{ev: ev} }

// Each delta goes out as one partial event, thinking and text alike; the
// order is kept and the final event holds the aggregate.
func TestEachDeltaIsOnePartialEvent(t *testing.T) {
	evs := runList(t,
		text("a"), text("b"), thinking("x"), thinking("y"), text("c"),
		event(&goose.ToolRequest{ID: "1", Name: "shell"}),
		text("d"), event(&goose.Finish{Reason: "stop"}),
	)
	want := `partial "a"|
partial "b"|
partial thought "x"|
partial thought "y"|
partial "c"|
final thought "xy"|final "abc"|final call shell|
partial "d"|
final "d"|
`
	if got := describe(evs); got != want {
		t.Fatalf("events:\n%s\nwant:\n%s", got, want)
	}
}

// A stream error right after deltas ends the turn after them, with the
// text streamed so far.
func TestDeltasBeforeAnError(t *testing.T) {
	evs := runList(t,
		text("a"), text("b"), arrival{err: fmt.Errorf("failed to read reply: %w", goose.ErrStreamBroken)},
	)
	want := `partial "a"|
partial "b"|
final "ab"|final error ` + gooseagent.ErrorCodeStreamBroken + `|
`
	if got := describe(evs); got != want {
		t.Fatalf("events:\n%s\nwant:\n%s", got, want)
	}
}
