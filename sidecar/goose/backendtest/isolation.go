package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// Fault isolation: a fault in one session's traffic ends that session's turn
// at most, with a clear error, while three other sessions, mid-reply, keep
// streaming to the end (goosetest.RunBystanders).

func hugeUserMessageIsRefused(t *testing.T, h Harness) {
	b, obs := h.start(t, goosetest.WithBystanders(func(text string) goosetest.Reply { return goosetest.Echo("", text) }))
	victim := startSession(t, b)
	goosetest.RunBystanders(t, b, func() {
		// 11 MiB: under what /run_sse accepts, over what goose can take and
		// send back (goose.DefaultMaxMessageBytes).
		r := drain(t, b.Reply(context.Background(), victim, goose.UserMessage{Text: strings.Repeat("x", 11<<20)}))
		if len(r.events) != 0 || !errors.Is(r.err, goose.ErrMessageTooLarge) {
			t.Errorf("events %s, error %v; want only ErrMessageTooLarge", kinds(r.events), r.err)
		}
	})
	if p := obs.Prompts(victim); len(p) != 0 {
		t.Errorf("goose received %d prompts in the victim session; the refused one must not reach it", len(p))
	}
	if r := drain(t, b.Reply(context.Background(), victim, goose.UserMessage{Text: "small"})); r.err != nil {
		t.Errorf("the next reply in the session: %v", r.err)
	}
}

// oversizedEventEndsOnlyItsReply: an event over the client's read limit
// ends its reply, and only it.
func oversizedEventEndsOnlyItsReply(t *testing.T, h Harness) {
	// 17 MiB: over both clients' default 16 MiB read limit.
	b, _ := h.start(t, goosetest.WithBystanders(func(string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "ok"}, {Text: strings.Repeat("y", 17<<20)}, {Text: "never"}}}
	}))
	victim := startSession(t, b)
	goosetest.RunBystanders(t, b, func() {
		r := drain(t, b.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}))
		if kinds(r.events) != "TextDelta" || !errors.Is(r.err, goose.ErrStreamBroken) || !errors.Is(r.err, goose.ErrMessageTooLarge) {
			t.Errorf("events %s, error %v; want the first delta, then ErrStreamBroken and ErrMessageTooLarge", kinds(r.events), r.err)
		}
	})
}

// notificationFloodDeliversEverything: a flood of events in one reply, well
// over the 1024 messages goose's and acp-go-sdk's queues hold, reaches its
// reader whole, in order.
func notificationFloodDeliversEverything(t *testing.T, h Harness) {
	const flood = 5000
	b, _ := h.start(t, goosetest.WithBystanders(func(string) goosetest.Reply { return goosetest.Deltas(flood, "f") }))
	victim := startSession(t, b)
	goosetest.RunBystanders(t, b, func() {
		r := drain(t, b.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}))
		if r.err != nil {
			t.Fatalf("flood: %v", r.err)
		}
		n := 0
		for _, ev := range r.events {
			if d, ok := ev.(*goose.TextDelta); ok {
				if d.Text != fmt.Sprintf("f%d ", n) {
					t.Fatalf("delta %d = %q: lost or reordered", n, d.Text)
				}
				n++
			}
		}
		if n != flood {
			t.Errorf("%d of %d deltas", n, flood)
		}
	})
}

// slowReaderHoldsOnlyItsReply: a reader that stops reading holds back only
// its own reply; when it reads again it gets every event.
func slowReaderHoldsOnlyItsReply(t *testing.T, h Harness) {
	const n = 5000
	b, _ := h.start(t, goosetest.WithBystanders(func(string) goosetest.Reply { return goosetest.Deltas(n, "s") }))
	victim := startSession(t, b)
	reading, resume := make(chan struct{}), make(chan struct{})
	got := make(chan result, 1)
	go func() {
		first := true
		got <- drain(t, func(yield func(goose.Event, error) bool) {
			for ev, err := range b.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}) {
				if first {
					first = false
					close(reading)
					<-resume
				}
				if !yield(ev, err) {
					return
				}
			}
		})
	}()
	<-reading
	goosetest.RunBystanders(t, b, func() {})
	close(resume)
	r := <-got
	deltas := 0
	for _, ev := range r.events {
		if _, ok := ev.(*goose.TextDelta); ok {
			deltas++
		}
	}
	if r.err != nil || deltas != n {
		t.Errorf("slow reader: %d of %d deltas, err %v", deltas, n, r.err)
	}
}
