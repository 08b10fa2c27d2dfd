// Command soak sends a seeded schedule of turns through two replicas of the
// real adk2goose binary that peer, each in front of its own fake goose
// serve in a child process, over ADK REST (/run_sse) and A2A, with
// streaming, approvals, cancels and concurrent sessions, and injects
// faults from the same seed: goose killed, stalled or cutting its
// connection mid-frame; a sidecar drained (SIGTERM) or killed (-9) and
// started again; clients that leave mid-stream or read slowly; approvals
// answered twice, late or after a restart; the peer replica stopped. Then
// it checks the invariants (Check) on what the clients saw and what was
// stored, prints the seed, the faults, the outcomes and each violation
// with its session's turns, and ends with `violations: N`.
//
//	go run ./hack/soak -adk2goose bin/adk2goose -turns 10000 [-seed N]   (or: make soak)
//
// The same seed gives the same schedule (the order turns of different
// sessions interleave in, and when faults land among them, vary). The exit
// status is 1 when an invariant is broken.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fake-goose" {
		if err := serveGoose(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "soak: fake-goose:", err)
			os.Exit(2)
		}
		return
	}
	var cfg config
	flag.StringVar(&cfg.binary, "adk2goose", "bin/adk2goose", "the adk2goose binary")
	flag.Uint64Var(&cfg.seed, "seed", 0, "the schedule's seed; 0: a random one (printed)")
	flag.IntVar(&cfg.schedule.Turns, "turns", 10000, "turns")
	flag.IntVar(&cfg.schedule.Sessions, "sessions", 64, "sessions the turns are spread over")
	flag.IntVar(&cfg.schedule.FaultEvery, "fault-every", 100, "mean number of turns between process faults; 0: none")
	flag.IntVar(&cfg.workers, "concurrency", 16, "sessions running a turn at once")
	flag.DurationVar(&cfg.turnDeadline, "turn-deadline", time.Minute, "a turn not ended by then hangs")
	flag.DurationVar(&cfg.settle, "settle", time.Minute, "longest wait after the run for goroutines and goose connections to come back")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (sidecar logs and data, goose state)")
	flag.Parse()
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	n, err := soakMain(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if n > 0 {
		os.Exit(1)
	}
}

// soakMain runs the soak, prints its report and returns how many invariants
// were broken.
func soakMain(ctx context.Context, cfg config) (int, error) {
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	if cfg.workers > cfg.schedule.Sessions {
		cfg.workers = cfg.schedule.Sessions
	}
	logf("seed: %d (replay: make soak SOAK_SEED=%d SOAK_TURNS=%d)", cfg.seed, cfg.seed, cfg.schedule.Turns)
	h, err := runSoak(ctx, cfg, logf)
	if err != nil {
		return 0, err
	}
	counts := NewSchedule(cfg.seed, ScheduleConfig{Turns: cfg.schedule.Turns, Sessions: cfg.schedule.Sessions, Replicas: 2, FaultEvery: cfg.schedule.FaultEvery}).Counts()
	logf("scheduled: %s", formatCounts(counts))
	outcomes := map[string]int{}
	examples := map[string]string{}
	for _, t := range h.Turns {
		outcomes[string(t.Outcome)]++
		if _, ok := examples[string(t.Outcome)]; !ok && t.Outcome != Answered {
			examples[string(t.Outcome)] = fmt.Sprintf("turn %d: %.200s", t.Turn.ID, t.Detail)
		}
	}
	logf("faults injected: %s", formatCounts(h.Injected))
	logf("outcomes: %s", formatCounts(outcomes))
	for _, k := range sortedKeys(examples) {
		logf("  e.g. %s: %s", k, examples[k])
	}
	for _, r := range h.Resources {
		logf("settled: %s %d (before the run %d)", r.What, r.After, r.Baseline)
	}
	logf("SQLite copies checked: %d; agent token total %d (%d samples)", len(h.Integrity), h.AgentTotal, len(h.AgentTotals))
	vs := Check(h)
	shown := map[string]bool{}
	for _, v := range vs {
		logf("VIOLATION (seed %d) %s", cfg.seed, v)
		if v.Session == "" || shown[v.Session] {
			continue
		}
		shown[v.Session] = true
		logf("  session %s, its turns in order:", v.Session)
		for _, t := range SessionTurns(h, v.Session) {
			logf("    turn %d %s/%s client=%q answer=%q reply=%q via r%d: %s %q usage=%v answers=%v %q",
				t.Turn.ID, t.Turn.Kind, t.Turn.Protocol, t.Turn.Client, t.Turn.Answer, t.Turn.Reply, t.Turn.Replica, t.Outcome, t.Detail, t.UsageTotals, t.Answers, t.AnswerDetails)
		}
	}
	logf("violations: %d", len(vs))
	return len(vs), nil
}

func formatCounts(m map[string]int) string {
	out := ""
	for i, k := range sortedKeys(m) {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %d", k, m[k])
	}
	return out
}
