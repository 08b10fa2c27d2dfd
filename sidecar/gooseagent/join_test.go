package gooseagent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// batchedBackend answers every message with the same reply, whose events
// reach the agent in batches: the events of one batch have arrived
// together (its stream is Ready between them); the next batch arrives only
// when the agent waits for it. Sessions are the scriptBackend's.
type batchedBackend struct {
	*scriptBackend
	batches [][]arrival
}

// arrival is one value of a reply: an event or the stream's error.
type arrival struct {
	ev  goose.Event
	err error
}

func (b batchedBackend) OpenReply(context.Context, string, goose.UserMessage) goose.ReplyStream {
	return &batchedStream{batches: b.batches}
}

type batchedStream struct {
	batches [][]arrival
	batch   int // batches[batch][next] is the next event
	next    int
}

func (s *batchedStream) Next() (goose.Event, error, bool) {
	for s.batch < len(s.batches) && s.next == len(s.batches[s.batch]) {
		s.batch, s.next = s.batch+1, 0
	}
	if s.batch == len(s.batches) {
		return nil, nil, false
	}
	a := s.batches[s.batch][s.next]
	s.next++
	return a.ev, a.err, true
}

func (s *batchedStream) Ready() bool {
	return s.batch < len(s.batches) && s.next < len(s.batches[s.batch])
}
func (s *batchedStream) Close() { s.batch = len(s.batches) }

func runBatched(t *testing.T, batches ...[]arrival) []*session.Event {
	t.Helper()
	b := batchedBackend{scriptBackend: newScriptBackend(goosetest.Echo), batches: batches}
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

// Deltas that reached the agent together go out as one partial event; a
// delta that came alone goes out alone; nothing else is joined, and the
// order and the aggregate are kept.
func TestDeltasThatArrivedTogetherGoOutAsOneEvent(t *testing.T) {
	evs := runBatched(t,
		[]arrival{text("a"), text("b"), text("c")},
		[]arrival{text("d")},
		[]arrival{thinking("x"), thinking("y"), text("e"), text("f"), event(&goose.ToolRequest{ID: "1", Name: "shell"}), text("g")},
		[]arrival{text("h"), event(&goose.Finish{Reason: "stop"})},
	)
	want := `partial "abc"|
partial "d"|
partial thought "xy"|
partial "ef"|
final thought "xy"|final "abcdef"|final call shell|
partial "g"|
partial "h"|
final "gh"|
`
	if got := describe(evs); got != want {
		t.Fatalf("events:\n%s\nwant:\n%s", got, want)
	}
}

// A stream error that arrived right after deltas ends the turn after them,
// with the text streamed so far.
func TestDeltasBeforeAnErrorThatArrivedWithThem(t *testing.T) {
	evs := runBatched(t,
		[]arrival{text("a"), text("b"), {err: fmt.Errorf("failed to read reply: %w", goose.ErrStreamBroken)}},
	)
	want := `partial "ab"|
final "ab"|final error ` + gooseagent.ErrorCodeStreamBroken + `|
`
	if got := describe(evs); got != want {
		t.Fatalf("events:\n%s\nwant:\n%s", got, want)
	}
}

// Joined text is bounded: a large burst goes out in events of at most
// about 16 KiB, all of it, in order.
func TestJoinedDeltasAreBounded(t *testing.T) {
	const n, size = 5000, 10
	burst := make([]arrival, 0, n+1)
	var all strings.Builder
	for i := range n {
		s := fmt.Sprintf("%09d ", i)
		all.WriteString(s)
		burst = append(burst, text(s))
	}
	evs := runBatched(t, append(burst, event(&goose.Finish{Reason: "stop"})))
	var streamed strings.Builder
	partials := 0
	for _, ev := range evs {
		if !ev.Partial {
			continue
		}
		partials++
		got := ev.Content.Parts[0].Text
		if len(got) > 16<<10+size {
			t.Errorf("partial event %d holds %d bytes", partials, len(got))
		}
		streamed.WriteString(got)
	}
	if streamed.String() != all.String() {
		t.Fatalf("streamed %d of %d bytes, or out of order", streamed.Len(), all.Len())
	}
	if minEvents := n * size / (16<<10 + size); partials < minEvents || partials > minEvents+1 {
		t.Errorf("%d partial events for %d bytes", partials, n*size)
	}
	if final := evs[len(evs)-1]; final.Partial || final.Content.Parts[0].Text != all.String() {
		t.Errorf("final event does not hold the whole text")
	}
}
