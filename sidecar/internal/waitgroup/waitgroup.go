// Package waitgroup waits for a sync.WaitGroup no longer than a context
// allows, which sync.WaitGroup.Wait cannot.
package waitgroup

import (
	"context"
	"sync"
)

// Wait waits until wg's count is zero or ctx ends, and returns ctx's error
// in the second case. The goroutine that waits for wg then stays until wg's
// count reaches zero.
func Wait(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
