package server_test

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest/ttfestages"
)

var benchBreakdown = flag.Bool("stream-breakdown", false,
	"BenchmarkStreamPaths: trace the adk2goose path's turns with the sidecar's own OpenTelemetry spans and print "+
		"where its time to first event goes (tracing's cost then shows in that path's figures too)")

// ttfeBreakdown splits the adk2goose path's time to first event into the
// stages the sidecar's spans mark: the request reaching the sidecar (the
// server span), the session load and runner (adk-go's invoke_agent), the
// goose session, goose's first token (goose.prompt to its first_event),
// and the event reaching the client. It needs no hooks in the sidecar: the
// spans are the ones an operator sees with tracing on.
type ttfeBreakdown struct {
	spans  *tracetest.InMemoryExporter
	client ttfestages.Clients
}

// newTTFEBreakdown is nil unless -stream-breakdown is set; a nil one does
// nothing.
func newTTFEBreakdown() *ttfeBreakdown {
	if !*benchBreakdown {
		return nil
	}
	_, exp := tracing()
	return &ttfeBreakdown{spans: exp}
}

// configure turns tracing on in a sidecar's config.
func (bd *ttfeBreakdown) configure(cfg *server.Config) {
	if bd != nil {
		cfg.TracerProvider, _ = tracing()
	}
}

// reset forgets the turns and spans so far.
func (bd *ttfeBreakdown) reset() {
	if bd == nil {
		return
	}
	bd.spans.Reset()
	bd.client.Reset()
}

// sent notes when the client sent a turn of session id; firstEvent when
// its first event arrived.
func (bd *ttfeBreakdown) sent(id string, at time.Time) {
	if bd == nil {
		return
	}
	bd.client.Sent(id, at)
}

func (bd *ttfeBreakdown) firstEvent(id string, at time.Time) {
	if bd == nil {
		return
	}
	bd.client.Received(id, at)
}

// report prints each stage's p50, p90 and p99 over the turns whose marks were
// all found, and the TTFE they add up to.
func (bd *ttfeBreakdown) report(w io.Writer) error {
	if bd == nil {
		return nil
	}
	type marks struct {
		ttfestages.Turn
		session string
	}
	byTrace := map[trace.TraceID]*marks{}
	for _, s := range bd.spans.GetSpans() {
		m := byTrace[s.SpanContext.TraceID()]
		if m == nil {
			m = &marks{}
			byTrace[s.SpanContext.TraceID()] = m
		}
		switch {
		case s.Name == ttfestages.SpanServer:
			m.Server = s.StartTime
		case strings.HasPrefix(s.Name, ttfestages.SpanInvokePrefix):
			m.Invoke = s.StartTime
		case s.Name == gooseagent.SpanPrompt:
			m.Prompt = s.StartTime
			for _, a := range s.Attributes {
				if a.Key == "gen_ai.conversation.id" {
					m.session = a.Value.AsString()
				}
			}
			for _, e := range s.Events {
				if e.Name == "first_event" {
					m.First = e.Time
				}
			}
		}
	}
	var turns []ttfestages.Turn
	for _, m := range byTrace {
		if c, ok := bd.client.Turn(m.session); ok {
			m.Sent, m.Received = c.Sent, c.Received
			turns = append(turns, m.Turn)
		}
	}
	if err := ttfestages.Report(w, "adk2goose time to first event by stage, from the sidecar's spans", turns); err != nil {
		return fmt.Errorf("%w: %d traces, %d client turns", err, len(byTrace), len(bd.client.Sessions()))
	}
	return nil
}

// TestTTFEBreakdownOfOneTurn: one traced turn is found by its session,
// its stages follow each other and add up to its time to first event; a
// client turn the sidecar never traced is left out.
func TestTTFEBreakdownOfOneTurn(t *testing.T) {
	_, exp := tracing()
	bd := &ttfeBreakdown{spans: exp}
	var out strings.Builder
	if err := bd.report(&out); err == nil {
		t.Fatalf("report with no turn: no error, printed %q", out.String())
	}
	i := slices.IndexFunc(flavours, func(f flavour) bool { return f.name == "goosed" })
	sc := startSidecar(t, flavours[i].start(t, goosetest.Echo), t.TempDir(), bd.configure)
	sc.createSession("u", "s1")
	bd.sent("never-sent", time.Now())
	bd.sent("s1", time.Now())
	frames := sc.runSSEWith(runBody("u", "s1", "hello", true), "")
	bd.firstEvent("s1", time.Now()) // after the last event: still after the first
	if len(frames) == 0 {
		t.Fatal("the turn streamed no event")
	}
	if err := bd.report(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "(1 turns)") {
		t.Fatalf("want exactly the traced turn:\n%s", out.String())
	}
	var sum, total time.Duration
	for line := range strings.SplitSeq(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		p50, err := time.ParseDuration(f[len(f)-2])
		if err != nil {
			continue // the header
		}
		if p50 < 0 {
			t.Errorf("negative stage: %s", line)
		}
		if strings.HasPrefix(line, "time to first event") {
			total = p50
		} else {
			sum += p50
		}
	}
	// Each stage is rounded to 10µs.
	if total <= 0 || (sum-total).Abs() > 50*time.Microsecond {
		t.Errorf("stages add up to %s, time to first event %s:\n%s", sum, total, out.String())
	}
}
