package goose_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// BenchmarkBackends streams the same reply (200 text deltas, then one
// provider call's usage) from each backend's in-process fake over loopback,
// through the goose.Backend interface, so the sub-benchmarks of one run
// compare directly:
//
//	go test ./sidecar/goose -run '^$' -bench BenchmarkBackends -benchmem -count 3
//
// events/s counts every value the sequence yields. allocs/event is the
// process's allocations per event, so it includes the fake server's work
// (same process): an upper bound for the client alone. The fake goosed
// heartbeats every 50 ms (see backends), negligible next to a reply of a few
// milliseconds.
func BenchmarkBackends(b *testing.B) {
	steps := make([]goosetest.Step, 0, 201)
	for range 200 {
		steps = append(steps, goosetest.Step{Text: "token "})
	}
	steps = append(steps, goosetest.Step{Usage: &goosetest.UsageStep{Input: 1000, Output: 200}})
	script := goosetest.Fixed(goosetest.Reply{Steps: steps})

	for _, bc := range backends() {
		b.Run(bc.name, func(b *testing.B) {
			be, _ := bc.start(b, script)
			id := startSession(b, be)
			ctx := context.Background()
			// One reply first: dial, load and warm the connection pools.
			for _, err := range be.Reply(ctx, id, goose.UserMessage{Text: "warm up"}) {
				if err != nil {
					b.Fatal(err)
				}
			}

			var events, deltas, replies int64
			var ms0, ms1 runtime.MemStats
			b.ReportAllocs()
			runtime.ReadMemStats(&ms0)
			b.ResetTimer()
			for b.Loop() {
				replies++
				for ev, err := range be.Reply(ctx, id, goose.UserMessage{Text: "go"}) {
					if err != nil {
						b.Fatal(err)
					}
					events++
					if _, ok := ev.(*goose.TextDelta); ok {
						deltas++
					}
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			if deltas != 200*replies {
				b.Fatalf("%d text deltas in %d replies, want 200 each", deltas, replies)
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(events), "allocs/event")
		})
	}
}
