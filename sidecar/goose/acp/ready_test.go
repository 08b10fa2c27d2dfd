package acp

import (
	"context"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// Next takes every update queued so far as one batch; the stream is Ready
// for the rest of that batch, not for updates queued after it was taken.
func TestReadyForTheTakenBatch(t *testing.T) {
	r := newReply("s1", nil)
	s := &replyStream{ctx: context.Background(), sessionID: "s1", r: r} // prompt sent
	queue := func(texts ...string) {
		for _, text := range texts {
			r.push(item{ev: &goose.TextDelta{Text: text}})
		}
	}
	next := func(want string) {
		t.Helper()
		ev, err, ok := s.Next()
		if d, isText := ev.(*goose.TextDelta); !ok || err != nil || !isText || d.Text != want {
			t.Fatalf("Next = %#v, %v, %v; want the delta %q", ev, err, ok, want)
		}
	}
	ready := func(want bool, why string) {
		t.Helper()
		if s.Ready() != want {
			t.Fatalf("Ready = %v %s", !want, why)
		}
	}
	queue("a")
	next("a")
	ready(false, "with the taken batch handed out")
	queue("b", "c")
	ready(false, "for updates queued after the batch was taken")
	next("b") // takes b and c
	ready(true, "with c taken and not handed out")
	next("c")
	ready(false, "with nothing taken")
	r.push(item{ev: &goose.Finish{Reason: "end_turn"}})
	if ev, err, ok := s.Next(); !ok || err != nil || ev == nil {
		t.Fatalf("Next = %v, %v, %v; want the Finish", ev, err, ok)
	}
	ready(true, "after the Finish, where Next returns at once")
}
