package backendtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// beforeWaitPrecedesAWait: once a reply has yielded every event that has
// arrived and goose is still working, the backend calls goose.BeforeWait on
// the reply's context before it waits (a consumer batching its output sends
// it then).
func beforeWaitPrecedesAWait(t *testing.T, h Harness) {
	b, _ := h.start(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "a"},
		{Delay: 10 * time.Minute, Text: "b"}, // goose keeps working until the reply is cancelled
	}}))
	id := startSession(t, b)
	var calls atomic.Int64
	ctx, cancel := context.WithCancel(goose.WithWaitHook(context.Background(), func() { calls.Add(1) }))
	defer cancel()
	atA := make(chan int64, 1) // the calls made before "a" was yielded
	done := make(chan result, 1)
	go func() {
		var r result
		for ev, err := range b.Reply(ctx, id, goose.UserMessage{Text: "go"}) {
			if err != nil {
				r.err = err
				break
			}
			r.events = append(r.events, ev)
			if d, ok := ev.(*goose.TextDelta); ok && d.Text == "a" {
				atA <- calls.Load()
			}
		}
		done <- r
	}()
	var before int64
	select {
	case before = <-atA:
	case r := <-done:
		t.Fatalf("the reply ended before its first delta: %s, %v", kinds(r.events), r.err)
	}
	eventually(t, "a BeforeWait call after the last event that arrived", func() bool { return calls.Load() > before })
	cancel()
	if r := <-done; r.err == nil {
		t.Fatalf("cancelled reply ended without an error: %s", kinds(r.events))
	}
}
