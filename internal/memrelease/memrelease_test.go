package memrelease

import (
	"context"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const mib = 1 << 20

// TestLook walks the releaser through a sidecar's life: it releases at the
// first idle look after turns, once, and only when the heap has grown by
// MinGrowth since the last release.
func TestLook(t *testing.T) {
	var (
		started  uint64
		running  int64
		heap     uint64
		afterRel uint64 // what a release leaves
		released int
	)
	r := releaser{cfg: Config{
		MinGrowth: 64 * mib,
		Activity:  func() (uint64, int64) { return started, running },
		heap:      func() uint64 { return heap },
		release:   func() { released++; heap = afterRel },
	}}
	steps := []struct {
		name              string
		started           uint64
		running           int64
		heap, afterRel    uint64
		wantReleasedSoFar int
	}{
		{"at rest from the start: nothing ran", 0, 0, 200 * mib, 0, 0},
		{"a turn runs", 1, 1, 300 * mib, 0, 0},
		{"it ended, but within this period", 1, 0, 300 * mib, 0, 0},
		{"a whole period without turns", 1, 0, 300 * mib, 40 * mib, 1},
		{"still idle: released already", 1, 0, 300 * mib, 40 * mib, 1},
		{"turns again", 4, 0, 90 * mib, 0, 1},
		{"idle, the heap over MinGrowth but not that much over what the last release left", 4, 0, 90 * mib, 0, 1},
		{"turns again", 6, 0, 110 * mib, 50 * mib, 1},
		{"idle, the heap grown by MinGrowth and more", 6, 0, 110 * mib, 50 * mib, 2},
		{"a turn runs", 8, 1, 200 * mib, 0, 2},
		{"it ended within this period", 8, 0, 200 * mib, 0, 2},
		{"idle", 8, 0, 200 * mib, 60 * mib, 3},
	}
	for _, s := range steps {
		started, running, heap, afterRel = s.started, s.running, s.heap, s.afterRel
		r.look()
		if released != s.wantReleasedSoFar {
			t.Fatalf("%s: %d releases so far, want %d", s.name, released, s.wantReleasedSoFar)
		}
	}
}

var sink [][]byte

// TestRunReturnsTheHeap: with the runtime's own heap and release, an idle
// look after a burst's garbage gives it back to the system.
func TestRunReturnsTheHeap(t *testing.T) {
	defer goleak.VerifyNone(t)
	for range 128 {
		sink = append(sink, make([]byte, mib))
	}
	var looks int
	released := make(chan [2]uint64, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{
			Every:     time.Millisecond,
			MinGrowth: 64 * mib,
			Activity: func() (uint64, int64) {
				looks++
				if looks == 1 {
					return 1, 1 // the burst's turn is running
				}
				sink = nil // the burst ended: its memory is garbage now
				return 1, 0
			},
			OnRelease: func(before, after uint64) { released <- [2]uint64{before, after} },
		})
	}()
	var got [2]uint64
	select {
	case got = <-released:
	case <-time.After(time.Minute):
		t.Fatal("no release within a minute of idle looks")
	}
	cancel()
	<-done
	before, after := got[0], got[1]
	if before < 128*mib || before-after < 100*mib {
		t.Errorf("heap %d MiB before the release and %d MiB after; want 128 MiB or more before and at least 100 MiB returned",
			before/mib, after/mib)
	}
	runtime.KeepAlive(sink)
}
