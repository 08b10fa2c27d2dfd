package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestMain lets the test binary be the fake goose child, as the soak
// binary is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "fake-goose" {
		if err := serveGoose(os.Args[2:]); err != nil {
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A short soak: 200 turns of a fixed seed, with a process fault every 25
// turns or so, through the real binary.
func TestShortSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("builds adk2goose and runs it for about half a minute")
	}
	bin := filepath.Join(t.TempDir(), "adk2goose")
	// make build's flags, so that its cached packages serve.
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "../../cmd/adk2goose")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := config{
		binary: bin, seed: 2, workers: 8, turnDeadline: time.Minute, settle: time.Minute,
		schedule: ScheduleConfig{Turns: 200, Sessions: 24, FaultEvery: 25},
	}
	h, err := runSoak(ctx, cfg, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Turns) != cfg.schedule.Turns {
		t.Fatalf("%d turns recorded of %d", len(h.Turns), cfg.schedule.Turns)
	}
	answered := 0
	for _, tr := range h.Turns {
		if tr.Outcome == Answered {
			answered++
		}
	}
	if answered < cfg.schedule.Turns/2 || len(h.Injected) == 0 || len(h.Integrity) == 0 {
		t.Fatalf("%d turns answered, faults injected %v, %d SQLite checks: the soak did not run", answered, h.Injected, len(h.Integrity))
	}
	for _, v := range Check(h) {
		t.Errorf("seed %d: %s", cfg.seed, v)
		for _, tr := range SessionTurns(h, v.Session) {
			t.Logf("  turn %d %s: %s %q", tr.Turn.ID, tr.Turn.Kind, tr.Outcome, tr.Detail)
		}
	}
}
