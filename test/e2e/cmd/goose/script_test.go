package main

import (
	"strings"
	"testing"
	"time"
)

func TestFileReply(t *testing.T) {
	dir := t.TempDir()
	say := func(dir, in string) string {
		t.Helper()
		r := fileReply(dir, in)
		if r == nil {
			t.Fatalf("%q not recognised", in)
		}
		return r.Steps[0].Text
	}
	if got := say(dir, "write plan.txt my secret plan"); !strings.HasPrefix(got, "wrote plan.txt") {
		t.Fatalf("write: %q", got)
	}
	if got := say(dir, "read plan.txt"); got != "plan.txt: my secret plan" {
		t.Fatalf("read: %q", got)
	}
	if got := say(t.TempDir(), "read plan.txt"); !strings.Contains(got, "no such file") {
		t.Fatalf("read in another directory: %q", got)
	}
	for _, bad := range []string{"write ../x y", "read /etc/passwd", "read .."} {
		if got := say(dir, bad); !strings.HasPrefix(got, "cannot use file") {
			t.Errorf("%q: %q", bad, got)
		}
	}
	for _, other := range []string{"hello", "write", "reading plan.txt"} {
		if fileReply(dir, other) != nil {
			t.Errorf("%q answered as a file request", other)
		}
	}
}

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
