package poll

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure and ends its
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on its own goroutine and returns the failure
// f reported, empty when none.
func run(t *testing.T, f func(testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.failure
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int64
	failure := run(t, func(tb testing.TB) {
		Until(tb, "the third call", func() bool { return calls.Add(1) == 3 })
	})
	if failure != "" || calls.Load() != 3 {
		t.Fatalf("failure %q after %d calls; want none after 3", failure, calls.Load())
	}
}

func TestWithinFailsWithWhatAndTheLastError(t *testing.T) {
	start := time.Now()
	failure := run(t, func(tb testing.TB) {
		Within(tb, 50*time.Millisecond, "the pods", func() error { return errors.New("0 of 2 ready") })
	})
	if !strings.Contains(failure, "waiting for the pods: 0 of 2 ready") {
		t.Fatalf("failure %q; want it to name what and the last error", failure)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before its timeout", waited)
	}
	failure = run(t, func(tb testing.TB) {
		Within(tb, time.Millisecond, "a flag", func() error { return errNotYet })
	})
	if want := "timed out after 1ms waiting for a flag"; failure != want {
		t.Fatalf("failure %q; want %q", failure, want)
	}
}
