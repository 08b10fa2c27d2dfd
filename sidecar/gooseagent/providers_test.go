package gooseagent_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/platform"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// TestEventsTakeIDAndTimeFromTheCallersProviders: adk-go's id and time
// providers installed on the context a run starts with stamp every event the
// agent makes, partial or final, as they stamp adk-go's own.
func TestEventsTakeIDAndTimeFromTheCallersProviders(t *testing.T) {
	h := newHarness(t, goosetest.Echo)
	var n atomic.Int64
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := platform.WithUUIDProvider(t.Context(), func() string { return fmt.Sprintf("id-%d", n.Add(1)) })
	ctx = platform.WithTimeProvider(ctx, func() time.Time { return at })
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var agentEvents int
	for ev, err := range h.runner.Run(ctx, "u", "s", genai.NewContentFromText("hello", genai.RoleUser), agent.RunConfig{StreamingMode: agent.StreamingModeSSE}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Author != "goose" {
			continue
		}
		agentEvents++
		if len(ev.ID) < 4 || ev.ID[:3] != "id-" || !ev.Timestamp.Equal(at) {
			t.Errorf("event %q at %s (partial %v): not from the providers", ev.ID, ev.Timestamp, ev.Partial)
		}
	}
	if agentEvents != 3 {
		t.Fatalf("%d events from the agent, want 2 partials and the final", agentEvents)
	}
}
