package acp

import (
	"context"
	"runtime"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// BenchmarkACPReply streams replies of 200 text deltas plus usage from the
// in-process fake. allocs/event counts both sides (fake and client share the
// process), so it is an upper bound for the client.
func BenchmarkACPReply(b *testing.B) {
	steps := make([]goosetest.Step, 0, 201)
	for range 200 {
		steps = append(steps, goosetest.Step{Text: "token "})
	}
	steps = append(steps, goosetest.Step{Usage: &goosetest.UsageStep{Input: 100, Output: 200}})
	_, c := newPair(b, goosetest.WithServeScript(goosetest.Fixed(goosetest.Reply{Steps: steps})))
	id := startSession(b, c)
	ctx := context.Background()

	var events int64
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for ev, err := range c.Reply(ctx, id, goose.UserMessage{Text: "go"}) {
			if err != nil {
				b.Fatal(err)
			}
			_ = ev
			events++
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if events == 0 {
		b.Fatal("no events")
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(events), "allocs/event")
}
