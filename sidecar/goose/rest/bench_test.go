package rest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sse"
)

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
