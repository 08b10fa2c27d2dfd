package backendtest

import (
	"context"
	"iter"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// pulledReply reads replies with iter.Pull2, event by event, as a consumer
// that pauses a reply across requests does: the values are a range's, the
// message is sent by the first next, and stop cancels the reply in goose.
func pulledReply(t *testing.T, h Harness) {
	t.Run("to the end", func(t *testing.T) {
		b, _ := h.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "Hel"}, {Text: "lo"}}}))
		id := startSession(t, b)
		next, stop := iter.Pull2(b.Reply(context.Background(), id, goose.UserMessage{Text: "hi"}))
		defer stop()
		var evs []goose.Event
		for {
			ev, err, ok := next()
			if !ok {
				break
			}
			if err != nil {
				t.Fatalf("reply: %v (after %s)", err, kinds(evs))
			}
			if _, usage := ev.(*goose.UsageUpdate); !usage {
				evs = append(evs, ev)
			}
		}
		if got := kinds(evs); got != "TextDelta,TextDelta,Finish" {
			t.Fatalf("events %s, want TextDelta,TextDelta,Finish", got)
		}
		if ev, err, ok := next(); ok {
			t.Fatalf("next after the end = %v, %v, true; want ok false", ev, err)
		}
	})
	t.Run("stopped before next sends nothing", func(t *testing.T) {
		b, fake := h.start(t, goosetest.Echo)
		id := startSession(t, b)
		next, stop := iter.Pull2(b.Reply(context.Background(), id, goose.UserMessage{Text: "never sent"}))
		stop()
		if ev, err, ok := next(); ok {
			t.Fatalf("next after stop = %v, %v, true; want ok false", ev, err)
		}
		if r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "sent"})); r.err != nil {
			t.Fatalf("the next reply: %v", r.err)
		}
		if got := fake.Prompts(id); !slices.Equal(got, []string{"sent"}) {
			t.Fatalf("goose received %q, want only the reply that was read", got)
		}
	})
	t.Run("stopped mid-stream", func(t *testing.T) {
		ignore := goleak.IgnoreCurrent()
		t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
		b, fake := h.start(t, slow)
		id := startSession(t, b)
		next, stop := iter.Pull2(b.Reply(context.Background(), id, goose.UserMessage{Text: "x"}))
		ev, err, ok := next()
		if _, delta := ev.(*goose.TextDelta); !ok || err != nil || !delta {
			t.Fatalf("first value %T, %v, %v; want the script's delta", ev, err, ok)
		}
		stop()
		if ev, err, ok := next(); ok {
			t.Fatalf("next after stop = %v, %v, true; want ok false", ev, err)
		}
		poll.Until(t, "goose to see the reply cancelled", func() bool { return fake.Cancels(id) == 1 })
	})
}
