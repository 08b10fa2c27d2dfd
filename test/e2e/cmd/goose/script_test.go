package main

import (
	"strings"
	"testing"
	"time"
)

func TestSlowReply(t *testing.T) {
	r := slowReply("slow 3")
	if r == nil {
		t.Fatal("slow 3 not recognised")
	}
	var text strings.Builder
	var paced time.Duration
	for _, s := range r.Steps {
		text.WriteString(s.Text)
		paced += s.Delay
	}
	if text.String() != "tick 1 tick 2 tick 3 slow done" || paced != 3*time.Second || r.Steps[len(r.Steps)-1].Usage == nil {
		t.Errorf("slow 3: %q over %s", text.String(), paced)
	}
	for _, bad := range []string{"slow", "slow x", "slow 0", "slow 301", "slowly 3", "hello"} {
		if slowReply(bad) != nil {
			t.Errorf("%q answered slowly", bad)
		}
	}
}
