package acp

import (
	"context"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// Updates goose sent while the consumer was busy wait in the reply's queue:
// the stream is Ready for each of them, and no longer once they are taken
// and goose works on.
func TestReadyForQueuedUpdates(t *testing.T) {
	_, c := newPair(t, goosetest.WithServeScript(goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "a"}, {Text: "b"}, {Text: "c"},
		{Delay: 10 * time.Minute, Text: "z"}, // goose works on until the reply is closed
	}})))
	id := startSession(t, c)
	s := c.OpenReply(context.Background(), id, goose.UserMessage{Text: "hi"}).(goose.ReadyStream)
	defer s.Close()
	if ev, err, ok := s.Next(); !ok || err != nil || ev.(*goose.TextDelta).Text != "a" {
		t.Fatalf("first value %#v, %v, %v", ev, err, ok)
	}
	for _, want := range []string{"b", "c"} {
		eventually(t, "delta "+want+" queued", s.Ready)
		ev, err, ok := s.Next()
		if d, isText := ev.(*goose.TextDelta); !ok || err != nil || !isText || d.Text != want {
			t.Fatalf("Next = %#v, %v, %v; want the delta %q", ev, err, ok, want)
		}
	}
	if s.Ready() {
		t.Fatal("Ready while goose works on")
	}
}
