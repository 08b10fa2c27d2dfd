package goosetest

import (
	"errors"
	"testing"
	"time"
)

// TestTimeStream: the first event is timed from the call, the gaps after it
// are averaged, and the stream's error comes back with what was counted.
func TestTimeStream(t *testing.T) {
	boom := errors.New("boom")
	tm, err := TimeStream(func(onEvent func()) error {
		time.Sleep(20 * time.Millisecond)
		onEvent()
		time.Sleep(20 * time.Millisecond)
		onEvent()
		onEvent()
		return boom
	})
	if !errors.Is(err, boom) || tm.Events != 3 {
		t.Fatalf("got %+v, %v; want 3 events and the stream's error", tm, err)
	}
	if tm.First < 20*time.Millisecond || tm.PerEvent < 10*time.Millisecond {
		t.Errorf("first %s, per event %s: want first ≥ 20ms and per event ≥ 10ms (20ms, then ~0, averaged)", tm.First, tm.PerEvent)
	}
	if tm.Last < tm.First+20*time.Millisecond {
		t.Errorf("last %s: want at least 20ms after the first (%s)", tm.Last, tm.First)
	}
	if tm, _ := TimeStream(func(func()) error { return nil }); tm != (StreamTiming{}) {
		t.Errorf("no events: %+v, want zero", tm)
	}
}
