package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// stackStartProbe, set, makes the test binary do what the sidecar's main
// does first (startWithStackStart), then print its pid and GODEBUG and exit.
const stackStartProbe = "ADK2GOOSE_TEST_STACK_START_PROBE"

func probeStackStart() {
	startWithStackStart()
	fmt.Printf("pid=%d GODEBUG=%s\n", os.Getpid(), os.Getenv("GODEBUG"))
	os.Exit(0)
}

func TestWithStackStart(t *testing.T) {
	for _, c := range []struct {
		in, want string
		added    bool
	}{
		{"", "adaptivestackstart=0", true},
		{"http2debug=1", "http2debug=1,adaptivestackstart=0", true},
		{"adaptivestackstart=1", "adaptivestackstart=1", false},
		{"gctrace=1, adaptivestackstart=0", "gctrace=1, adaptivestackstart=0", false},
		{"adaptivestackstartx=1", "adaptivestackstartx=1,adaptivestackstart=0", true},
	} {
		if got, added := withStackStart(c.in); got != c.want || added != c.added {
			t.Errorf("withStackStart(%q) = %q, %v; want %q, %v", c.in, got, added, c.want, c.added)
		}
	}
}

// TestStartsWithSmallStacks runs this test binary as the sidecar starts:
// it executes itself again, as the same process, with adaptivestackstart=0
// in GODEBUG, and leaves a GODEBUG that sets it alone.
func TestStartsWithSmallStacks(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no exec: the sidecar keeps the runtime's default")
	}
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") })
	for _, c := range []struct{ godebug, want string }{
		{"", "adaptivestackstart=0"},
		{"GODEBUG=gctrace=0", "gctrace=0,adaptivestackstart=0"},
		{"GODEBUG=adaptivestackstart=1", "adaptivestackstart=1"},
	} {
		cmd := exec.CommandContext(t.Context(), os.Args[0])
		cmd.Env = append(slices.Clone(base), stackStartProbe+"=1")
		if c.godebug != "" {
			cmd.Env = append(cmd.Env, c.godebug)
		}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: %v; stderr:\n%s", c.godebug, err, errOut.String())
		}
		if want := fmt.Sprintf("pid=%d GODEBUG=%s\n", pid, c.want); out.String() != want {
			t.Errorf("started with %q: printed %q, want %q (the same process, with that GODEBUG); stderr:\n%s",
				c.godebug, out.String(), want, errOut.String())
		}
	}
}
