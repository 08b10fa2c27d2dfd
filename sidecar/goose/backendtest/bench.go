package backendtest

import (
	"context"
	"runtime"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// BenchmarkReply streams the same reply (200 text deltas, then one provider
// call's usage) from h's backend through the goose.Backend interface, so the
// figures of different backends compare directly:
//
//	go test ./sidecar/goose/... -run '^$' -bench BenchmarkReply -benchmem -count 3
//
// events/s counts every value the sequence yields. allocs/event is the
// process's allocations per event, so for a backend with an in-process fake
// it includes the fake's work: an upper bound for the client alone.
func BenchmarkReply(b *testing.B, h Harness) {
	h.check(b)
	steps := make([]goosetest.Step, 0, 201)
	for range 200 {
		steps = append(steps, goosetest.Step{Text: "token "})
	}
	steps = append(steps, goosetest.Step{Usage: &goosetest.UsageStep{Input: 1000, Output: 200}})
	be, _ := h.start(b, goosetest.Fixed(goosetest.Reply{Steps: steps}))
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
}
