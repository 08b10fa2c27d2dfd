package ttfestages_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest/ttfestages"
)

var t0 = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)

func at(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }

// TestReportSplitsEachTurn: each stage is the gap between two marks, the
// total is the client's wait, and a turn missing a mark is left out.
func TestReportSplitsEachTurn(t *testing.T) {
	turns := []ttfestages.Turn{
		{Sent: at(0), Server: at(100), Invoke: at(300), Prompt: at(340), First: at(1340), Received: at(1500)},
		{Sent: at(0), Server: at(100), Invoke: at(300), Prompt: at(340), First: at(1340)}, // never received
	}
	var out strings.Builder
	if err := ttfestages.Report(&out, "by stage", turns); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		ttfestages.Stages[0]:  "100µs",
		ttfestages.Stages[1]:  "200µs",
		ttfestages.Stages[2]:  "40µs",
		ttfestages.Stages[3]:  "1ms",
		ttfestages.Stages[4]:  "160µs",
		"time to first event": "1.5ms",
	}
	if !strings.Contains(out.String(), "by stage (1 turns):") {
		t.Errorf("want the one complete turn counted:\n%s", out.String())
	}
	for name, p50 := range want {
		line := lineOf(out.String(), name)
		if f := strings.Fields(strings.TrimPrefix(line, name)); len(f) != 3 || f[0] != p50 {
			t.Errorf("%s: %q, want p50 %s", name, line, p50)
		}
	}
}

func lineOf(s, prefix string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

func TestReportWithoutACompleteTurn(t *testing.T) {
	var out strings.Builder
	err := ttfestages.Report(&out, "by stage", []ttfestages.Turn{{Sent: at(0)}})
	if !errors.Is(err, ttfestages.ErrNoTurn) || out.Len() != 0 {
		t.Fatalf("err %v, printed %q; want ErrNoTurn and nothing printed", err, out.String())
	}
}

// TestFromDebugSpans: the marks are the spans' starts, the first of each
// kind when a session ran more than one turn, and the first event is the
// turn's start plus the prompt span's time to first event.
func TestFromDebugSpans(t *testing.T) {
	ns := func(us int) int64 { return at(us).UnixNano() }
	spans := []ttfestages.DebugSpan{
		{Name: gooseagent.SpanPrompt, StartTime: ns(5340), Attributes: map[string]string{gooseagent.AttrTimeToFirstEventMS: "9"}}, // a later turn
		{Name: ttfestages.SpanServer, StartTime: ns(100)},
		{Name: "invoke_agent goose", StartTime: ns(300)},
		{Name: gooseagent.SpanSession, StartTime: ns(310)},
		{Name: gooseagent.SpanPrompt, StartTime: ns(340), Attributes: map[string]string{gooseagent.AttrTimeToFirstEventMS: "1.04"}},
		{Name: ttfestages.SpanServer, StartTime: ns(5100)},
		{Name: "invoke_agent goose", StartTime: ns(5300)},
	}
	got, err := ttfestages.FromDebugSpans(spans)
	if err != nil {
		t.Fatal(err)
	}
	want := ttfestages.Turn{Server: at(100), Invoke: at(300), Prompt: at(340), First: at(1340)}
	if !got.Server.Equal(want.Server) || !got.Invoke.Equal(want.Invoke) || !got.Prompt.Equal(want.Prompt) || !got.First.Equal(want.First) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestFromDebugSpansRefusesAnIncompleteTurn(t *testing.T) {
	prompt := ttfestages.DebugSpan{Name: gooseagent.SpanPrompt, StartTime: 3, Attributes: map[string]string{gooseagent.AttrTimeToFirstEventMS: "1"}}
	server := ttfestages.DebugSpan{Name: ttfestages.SpanServer, StartTime: 1}
	invoke := ttfestages.DebugSpan{Name: "invoke_agent goose", StartTime: 2}
	noFirst := ttfestages.DebugSpan{Name: gooseagent.SpanPrompt, StartTime: 3} // the turn never had an event
	for name, spans := range map[string][]ttfestages.DebugSpan{
		"no server span": {invoke, prompt},
		"no agent span":  {server, prompt},
		"no prompt span": {server, invoke},
		"no first event": {server, invoke, noFirst},
		"no spans":       nil,
	} {
		got, err := ttfestages.FromDebugSpans(spans)
		if err == nil {
			t.Errorf("%s: %+v, want an error", name, got)
		}
		// A prompt span without its time to first event is the sidecar's
		// fault, not the trace view's.
		if incomplete := errors.Is(err, ttfestages.ErrIncompleteTurn); incomplete == (name == "no first event") {
			t.Errorf("%s: %v; want ErrIncompleteTurn only for a missing span", name, err)
		}
	}
}

// Clients keep each session's send and its first read only: a later read,
// or a read of a session never sent, changes nothing; a new send replaces
// the session's turn, and Reset forgets them all.
func TestClientsKeepTheFirstRead(t *testing.T) {
	var c ttfestages.Clients
	c.Received("never-sent", at(1))
	c.Sent("s2", at(10))
	c.Sent("s1", at(0))
	c.Received("s1", at(5))
	c.Received("s1", at(9))
	if got, ok := c.Turn("s1"); !ok || !got.Sent.Equal(at(0)) || !got.Received.Equal(at(5)) {
		t.Errorf("s1: %+v, %v; want sent at 0, received at 5", got, ok)
	}
	if got, ok := c.Turn("s2"); !ok || !got.Received.IsZero() {
		t.Errorf("s2: %+v, %v; want sent and not received", got, ok)
	}
	if _, ok := c.Turn("never-sent"); ok {
		t.Error("a read of a session never sent was noted")
	}
	if got := c.Sessions(); !slices.Equal(got, []string{"s1", "s2"}) {
		t.Errorf("sessions %v, want [s1 s2]", got)
	}
	c.Sent("s1", at(20))
	if got, _ := c.Turn("s1"); !got.Sent.Equal(at(20)) || !got.Received.IsZero() {
		t.Errorf("s1 sent again: %+v, want a new turn", got)
	}
	c.Reset()
	if got := c.Sessions(); len(got) != 0 {
		t.Errorf("after Reset: %v", got)
	}
}
