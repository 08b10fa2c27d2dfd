package goosetest

import (
	"context"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// ReplyDeltas streams b's reply to text in session id, calling onDelta for
// each text delta, and returns the reply's error: how the load tools and
// benchmarks read goose directly, without the sidecar.
func ReplyDeltas(ctx context.Context, b goose.Backend, id, text string, onDelta func()) error {
	for ev, err := range b.Reply(ctx, id, goose.UserMessage{Text: text}) {
		if err != nil {
			return err
		}
		if _, ok := ev.(*goose.TextDelta); ok {
			onDelta()
		}
	}
	return nil
}

// StreamTiming is when one reply stream's text events arrived.
type StreamTiming struct {
	Events int
	// First is the time from the call to the first event; PerEvent the mean
	// time between events after it (0 with fewer than two); Last the time
	// from the call to the last event: when the whole reply had arrived.
	First, PerEvent, Last time.Duration
}

// TimeStream runs stream, which calls onEvent for each text event it
// reads, and times those events from the call: the one measurement the
// stream benchmark and the load tools take of every path.
func TimeStream(stream func(onEvent func()) error) (StreamTiming, error) {
	var t StreamTiming
	start := time.Now()
	var first, last time.Time
	err := stream(func() {
		now := time.Now()
		if t.Events == 0 {
			first = now
		}
		last = now
		t.Events++
	})
	if t.Events > 0 {
		t.First, t.Last = first.Sub(start), last.Sub(start)
	}
	if t.Events > 1 {
		t.PerEvent = last.Sub(first) / time.Duration(t.Events-1)
	}
	return t, err
}
