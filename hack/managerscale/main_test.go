package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

func TestSplitCommandLine(t *testing.T) {
	env, argv := splitCommandLine("GOMEMLIMIT=576MiB AUTOMEMLIMIT=off bin/manager --kube-api-qps=1000 --x=a=b")
	if !slices.Equal(env, []string{"GOMEMLIMIT=576MiB", "AUTOMEMLIMIT=off"}) ||
		!slices.Equal(argv, []string{"bin/manager", "--kube-api-qps=1000", "--x=a=b"}) {
		t.Fatalf("env %q, argv %q", env, argv)
	}
	if env, argv := splitCommandLine("bin/manager"); len(env) != 0 || !slices.Equal(argv, []string{"bin/manager"}) {
		t.Fatalf("env %q, argv %q", env, argv)
	}
}

func TestPlayedWritesAreNotTheManagers(t *testing.T) {
	r := requests{playedStatusWrites: 5, "APPLY statefulsets": 2, "GET secrets": 1, "WATCH pods": 3}
	if r.writes() != 2 || r.reads() != 1 {
		t.Fatalf("writes %v, reads %v", r.writes(), r.reads())
	}
}

// The bare run on a real control plane: every StatefulSet gets the status
// the tool plays, once, and the agents converge.
func TestBareRunRollsOutEveryStatefulSet(t *testing.T) {
	testenv.RequireAssets(t)
	const agents = 4
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	f, err := measure(ctx, "bare", options{agents: agents, timeout: 4 * time.Minute, parked: 50, statsInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.cold[playedStatusWrites]; got < agents {
		t.Fatalf("%v StatefulSet status writes for %d agents: %v", got, agents, f.cold)
	}
	if f.cold["APPLY statefulsets"] != agents || f.cold.writes() < 2*agents {
		t.Fatalf("the bare client's requests: %v", f.cold)
	}
}
