// Package poll is how tests wait for a condition that another goroutine,
// process or controller makes true: they poll it until it holds, never
// sleep a fixed time and hope.
package poll

import (
	"errors"
	"testing"
	"time"
)

// Timeout is how long Until and UntilNil wait: generous, because the
// machine running the tests may be loaded; a condition that holds returns
// at once.
const Timeout = time.Minute

// maxInterval bounds the pause between two calls of a condition.
const maxInterval = 100 * time.Millisecond

var errNotYet = errors.New("not yet")

// Until calls cond until it returns true, and fails t with what when it has
// not within Timeout.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// UntilNil calls cond until it returns nil, and fails t with what and
// cond's last error when it has not within Timeout.
func UntilNil(t testing.TB, what string, cond func() error) {
	t.Helper()
	Within(t, Timeout, what, cond)
}

// Within is UntilNil with its own timeout, for waits longer than Timeout
// (a cluster's pods starting).
func Within(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if errors.Is(err, errNotYet) {
				t.Fatalf("timed out after %s waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
}
