// Package ttfestages splits adk2goose's time to first event into the
// stages its own OpenTelemetry spans mark, as an operator sees them with
// tracing on: BenchmarkStreamPaths reads the spans in process,
// hack/streampaths reads them from the sidecar's /debug/trace (the ADK web
// UI's trace view), each server in its own process.
package ttfestages

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/percentile"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// The names of the spans the marks come from, besides gooseagent's: the
// sidecar's server span of a run and adk-go's agent span.
const (
	SpanServer       = "POST /run_sse"
	SpanInvokePrefix = "invoke_agent "
)

// Turn is the marks of one turn, in order.
type Turn struct {
	Sent     time.Time // the client sent the request
	Server   time.Time // the sidecar's server span started
	Invoke   time.Time // adk-go's invoke_agent span started
	Prompt   time.Time // the goose.prompt span started
	First    time.Time // the turn yielded its first event
	Received time.Time // the client read the first event
}

// Stages name the intervals between a Turn's marks, in order.
var Stages = []string{
	"request reaches the sidecar (client write, HTTP, auth)",
	"body, run decoding, session load, runner",
	"goose session (found or started)",
	"goose's first token (request to goose, its answer back)",
	"event reaches the client (encode, write, client read)",
}

func (t Turn) marks() []time.Time {
	return []time.Time{t.Sent, t.Server, t.Invoke, t.Prompt, t.First, t.Received}
}

// complete: every mark was found.
func (t Turn) complete() bool {
	for _, m := range t.marks() {
		if m.IsZero() {
			return false
		}
	}
	return true
}

// Clients are a client's marks of the turns it sent, by ADK session id,
// for pairing with the sidecar's. The zero value is ready; it is safe for
// concurrent use.
type Clients struct {
	mu    sync.Mutex
	turns map[string]*Turn
}

// Sent notes that a turn of session id was sent at, replacing what was
// noted of the session before.
func (c *Clients) Sent(id string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.turns == nil {
		c.turns = map[string]*Turn{}
	}
	c.turns[id] = &Turn{Sent: at}
}

// Received notes that the first event of session id's turn was read at;
// a later event, or a session never sent, changes nothing.
func (c *Clients) Received(id string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.turns[id]; t != nil && t.Received.IsZero() {
		t.Received = at
	}
}

// Turn returns the client's marks (Sent, Received) of session id's turn.
func (c *Clients) Turn(id string) (Turn, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.turns[id]
	if t == nil {
		return Turn{}, false
	}
	return *t, true
}

// Sessions returns the sessions noted, sorted.
func (c *Clients) Sessions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.turns))
	for id := range c.turns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Reset forgets every turn.
func (c *Clients) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.turns)
}

// ErrNoTurn is Report's error when no turn had all its marks.
var ErrNoTurn = errors.New("no turn had all its marks")

// Report prints each stage's p50, p90 and p99 over the turns with all
// their marks, and the time to first event they add up to.
func Report(w io.Writer, title string, turns []Turn) error {
	stages := make([][]time.Duration, len(Stages))
	var total []time.Duration
	for _, t := range turns {
		if !t.complete() {
			continue
		}
		at := t.marks()
		for i := range stages {
			stages[i] = append(stages[i], at[i+1].Sub(at[i]))
		}
		total = append(total, t.Received.Sub(t.Sent))
	}
	if len(total) == 0 {
		return fmt.Errorf("%w (of %d)", ErrNoTurn, len(turns))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s (%d turns):\n", title, len(total))
	fmt.Fprintf(&b, "%-58s %10s %10s %10s\n", "stage", "p50", "p90", "p99")
	row := func(name string, ds []time.Duration) {
		fmt.Fprintf(&b, "%-58s %10s %10s %10s\n", name, percentile.Of(ds, 50).Round(10*time.Microsecond),
			percentile.Of(ds, 90).Round(10*time.Microsecond), percentile.Of(ds, 99).Round(10*time.Microsecond))
	}
	for i, name := range Stages {
		row(name, stages[i])
	}
	row("time to first event", total)
	_, err := io.WriteString(w, b.String())
	return err
}

// DebugSpan is a span as the sidecar's /debug/trace/session/{id} returns
// it (adkrest's DebugSpan): the fields the marks need.
type DebugSpan struct {
	Name       string            `json:"name"`
	StartTime  int64             `json:"start_time"` // Unix nanoseconds
	Attributes map[string]string `json:"attributes"`
}

// ErrIncompleteTurn is FromDebugSpans' error when a span of the turn is
// missing: the turn never reached goose, or the trace view no longer keeps
// all of its trace (it keeps the newest turns').
var ErrIncompleteTurn = errors.New("the turn's spans are not all there")

// FromDebugSpans fills the sidecar's marks of a session's first turn from
// its spans. The span view has no span events, so the first event is the
// turn's start plus the prompt span's time to first event; the turn starts
// as its invoke_agent span does (adk-go calls the agent as it opens it).
func FromDebugSpans(spans []DebugSpan) (Turn, error) {
	var t Turn
	var firstMS string
	earliest := func(m *time.Time, s DebugSpan) bool {
		at := time.Unix(0, s.StartTime)
		if !m.IsZero() && !at.Before(*m) {
			return false
		}
		*m = at
		return true
	}
	for _, s := range spans {
		switch {
		case s.Name == SpanServer:
			earliest(&t.Server, s)
		case strings.HasPrefix(s.Name, SpanInvokePrefix):
			earliest(&t.Invoke, s)
		case s.Name == gooseagent.SpanPrompt:
			if earliest(&t.Prompt, s) {
				firstMS = s.Attributes[gooseagent.AttrTimeToFirstEventMS]
			}
		}
	}
	if t.Server.IsZero() || t.Invoke.IsZero() || t.Prompt.IsZero() {
		return t, fmt.Errorf("%w: %q, %q and %q among %d spans", ErrIncompleteTurn, SpanServer, SpanInvokePrefix+"*", gooseagent.SpanPrompt, len(spans))
	}
	ms, err := strconv.ParseFloat(firstMS, 64)
	if err != nil {
		return t, fmt.Errorf("failed to read %s of the prompt span: %w", gooseagent.AttrTimeToFirstEventMS, err)
	}
	t.First = t.Invoke.Add(time.Duration(ms * float64(time.Millisecond)))
	return t, nil
}
