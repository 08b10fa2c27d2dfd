package goosetest

import (
	"context"

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
