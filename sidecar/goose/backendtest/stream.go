package backendtest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// replyStream reads replies with goose.OpenReply, event by event, as a
// consumer that pauses a reply across requests does: natively where the
// backend is a goose.ReplyOpener, through iter.Pull2 otherwise. The values
// are Reply's; what is added is Close's promises.
func replyStream(t *testing.T, h Harness) {
	t.Run("to the end", func(t *testing.T) {
		b, _ := h.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "Hel"}, {Text: "lo"}}}))
		id := startSession(t, b)
		s := goose.OpenReply(context.Background(), b, id, goose.UserMessage{Text: "hi"})
		defer s.Close()
		var evs []goose.Event
		for {
			ev, err, ok := s.Next()
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
		if ev, err, ok := s.Next(); ok {
			t.Fatalf("Next after the end = %v, %v, true; want ok false", ev, err)
		}
		s.Close()
		s.Close()
	})
	t.Run("ready only when the next value has arrived", func(t *testing.T) {
		b, _ := h.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
			{Text: "a"}, {Text: "b"}, {Text: "c"},
			{Delay: 10 * time.Minute, Text: "z"}, // goose works on until the reply is closed
		}}))
		id := startSession(t, b)
		s := goose.OpenReply(context.Background(), b, id, goose.UserMessage{Text: "hi"})
		defer s.Close()
		rs, ok := s.(goose.ReadyStream)
		if !ok {
			t.Skipf("%T cannot tell whether its next value has arrived", s)
		}
		if rs.Ready() {
			t.Fatal("Ready before the message was sent")
		}
		var text strings.Builder
		for text.String() != "abc" {
			ev, err, ok := rs.Next()
			if !ok || err != nil {
				t.Fatalf("reply ended after %q: %v", text.String(), err)
			}
			if d, isText := ev.(*goose.TextDelta); isText {
				text.WriteString(d.Text)
			}
		}
		// Nothing more arrives while goose works: Next would wait.
		if rs.Ready() {
			t.Fatal("Ready while goose is still working")
		}
		rs.Close()
		if !rs.Ready() {
			t.Fatal("not Ready after Close, although Next returns at once")
		}
	})
	t.Run("closed before Next sends nothing", func(t *testing.T) {
		b, fake := h.start(t, goosetest.Echo)
		id := startSession(t, b)
		s := goose.OpenReply(context.Background(), b, id, goose.UserMessage{Text: "never sent"})
		s.Close()
		if ev, err, ok := s.Next(); ok {
			t.Fatalf("Next after Close = %v, %v, true; want ok false", ev, err)
		}
		if r := drain(t, b.Reply(context.Background(), id, goose.UserMessage{Text: "sent"})); r.err != nil {
			t.Fatalf("the next reply: %v", r.err)
		}
		if got := fake.Prompts(id); !slices.Equal(got, []string{"sent"}) {
			t.Fatalf("goose received %q, want only the reply that was read", got)
		}
	})
	t.Run("closed mid-stream", func(t *testing.T) {
		ignore := goleak.IgnoreCurrent()
		t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
		b, fake := h.start(t, slow)
		id := startSession(t, b)
		s := goose.OpenReply(context.Background(), b, id, goose.UserMessage{Text: "x"})
		ev, err, ok := s.Next()
		if _, delta := ev.(*goose.TextDelta); !ok || err != nil || !delta {
			t.Fatalf("first value %T, %v, %v; want the script's delta", ev, err, ok)
		}
		s.Close()
		if ev, err, ok := s.Next(); ok {
			t.Fatalf("Next after Close = %v, %v, true; want ok false", ev, err)
		}
		eventually(t, "goose to see the reply cancelled", func() bool { return fake.Cancels(id) == 1 })
	})
}
