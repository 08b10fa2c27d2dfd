package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestTracesGoOverOTLPOnlyWhenTheEnvironmentSaysSo: with
// OTEL_EXPORTER_OTLP_ENDPOINT the spans reach the collector (OTLP/HTTP,
// POST /v1/traces, with OTEL_EXPORTER_OTLP_HEADERS); without it nothing is
// sent.
func TestTracesGoOverOTLPOnlyWhenTheEnvironmentSaysSo(t *testing.T) {
	var posts, authed atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
			if r.Header.Get("X-Api-Key") == "k" {
				authed.Add(1)
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	export := func() {
		tp, shutdown, err := setupTracing(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, span := tp.Tracer("test").Start(context.Background(), "turn")
		span.End()
		if err := shutdown(context.Background()); err != nil { // flushes the batch
			t.Fatal(err)
		}
	}
	export()
	if n := posts.Load(); n != 0 {
		t.Fatalf("%d exports without an OTLP endpoint", n)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=k")
	export()
	if posts.Load() != 1 || authed.Load() != 1 {
		t.Fatalf("collector got %d exports (%d with the header), want 1", posts.Load(), authed.Load())
	}
}
