package retry_test

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/adk2goose/goose-operator/controllers/internal/retry"
)

// TestRetryDelayIsCapped: however often an agent's reconcile fails, the next
// try is at most MaxDelay away, and the first retries stay quick.
func TestRetryDelayIsCapped(t *testing.T) {
	l := retry.Limiter()
	item := reconcile.Request{}
	item.Name = "agent"
	var last time.Duration
	for i := range 40 {
		d := l.When(item)
		if i == 0 && d > 10*time.Millisecond {
			t.Errorf("first retry after %s, want at most 10ms", d)
		}
		if d > retry.MaxDelay {
			t.Fatalf("retry %d after %s, want at most %s", i+1, d, retry.MaxDelay)
		}
		last = d
	}
	if last != retry.MaxDelay {
		t.Errorf("retry delay settles at %s, want %s", last, retry.MaxDelay)
	}
	l.Forget(item)
	if d := l.When(item); d > 10*time.Millisecond {
		t.Errorf("after Forget, retry after %s, want the backoff to start again", d)
	}
}
