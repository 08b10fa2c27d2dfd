package rest

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sse"
)

// BenchmarkRESTReply streams a 200-delta reply from the fake goosed over
// loopback and reports client-side events/s and allocations per event.
func BenchmarkRESTReply(b *testing.B) {
	steps := make([]goosetest.Step, 0, 201)
	for range 200 {
		steps = append(steps, goosetest.Step{Text: "token "})
	}
	steps = append(steps, goosetest.Step{Usage: &goosetest.UsageStep{Input: 1000, Output: 200}})
	h := newHarness(b, goosetest.GoosedOptions{Script: goosetest.Fixed(goosetest.Reply{Steps: steps}), PingInterval: 500 * time.Millisecond})
	id := h.start(b)
	ctx := context.Background()
	var events int
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	for b.Loop() {
		for ev, err := range h.client.Reply(ctx, id, goose.UserMessage{Text: "go"}) {
			if err != nil {
				b.Fatal(err)
			}
			_ = ev
			events++
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms1)
	if events == 0 {
		b.Fatal("no events")
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	// Mallocs counts the fake server too (same process): an upper bound.
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(events), "allocs/event")
}

// BenchmarkRESTDecode isolates the client's per-event cost (SSE parsing and
// MessageEvent decoding) from net/http and the fake server.
func BenchmarkRESTDecode(b *testing.B) {
	frame := `data: {"type":"Message","message":{"id":"chatcmpl-1","role":"assistant","created":1780411215,"content":[{"type":"text","text":"token "}],"metadata":{"userVisible":true,"agentVisible":true}},"token_state":` + ts0 + "}\n\n"
	in := []byte(strings.Repeat(frame, 1000))
	events := 0
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		r := sse.NewReader(bytes.NewReader(in), 0)
		var d decoder
		var buf []goose.Event
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			buf, _, _ = d.feed(ev.Data, buf[:0])
			events += len(buf)
		}
	}
	b.ReportMetric(float64(events)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(float64(testing.AllocsPerRun(1, func() {
		r := sse.NewReader(bytes.NewReader(in), 0)
		var d decoder
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			_, _, _ = d.feed(ev.Data, nil)
		}
	}))/1000, "allocs/event")
}
