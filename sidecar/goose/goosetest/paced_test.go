package goosetest

import (
	"testing"
	"time"
)

func TestPacedDeltasSpreadsTheDeltas(t *testing.T) {
	r := PacedDeltas(3, 2*time.Second)
	if len(r.Steps) != 4 {
		t.Fatalf("%d steps, want 3 deltas and a usage step", len(r.Steps))
	}
	for i, want := range []time.Duration{0, time.Second, time.Second} {
		if st := r.Steps[i]; st.Delay != want || st.Text == "" {
			t.Errorf("step %d = %+v, want a delta after %s", i, st, want)
		}
	}
	if u := r.Steps[3].Usage; u == nil || u.Output != 3 {
		t.Errorf("last step %+v, want usage with 3 output tokens", r.Steps[3])
	}
	if r := PacedDeltas(2, 0); r.Steps[1].Delay != 0 {
		t.Errorf("unpaced reply waits %s", r.Steps[1].Delay)
	}
}
