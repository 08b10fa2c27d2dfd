package waitgroup_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/sidecar/internal/waitgroup"
)

func TestWait(t *testing.T) {
	defer goleak.VerifyNone(t)
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := waitgroup.Wait(ctx, &wg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with the group busy and ctx ended: %v, want context.Canceled", err)
	}
	close(release)
	if err := waitgroup.Wait(t.Context(), &wg); err != nil {
		t.Fatalf("Wait once the group is done: %v", err)
	}
}
