package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain runs the roles this binary is started in by the tool (the test
// binary is os.Executable here).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		if role, ok := roles[os.Args[1]]; ok {
			if err := role(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

// A small run through every path with the real adk2goose binary, on each
// fake goose: every stream completes (with every text event and a final
// event, adk-only's too) and the table has each path and the ratios.
func TestRunMeasuresEveryPath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds adk2goose and starts processes")
	}
	bin := filepath.Join(t.TempDir(), "adk2goose")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/adk2goose/goose-operator/cmd/adk2goose").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out strings.Builder
	cfg := config{binary: bin, replies: 6, deltas: 5, concurrency: 3, held: 4, runs: 1, paths: "direct,proxy,adk2goose,adk-only", arrivals: "together"}
	for _, flavor := range []string{"serve", "goosed"} {
		out.Reset()
		cfg.flavor = flavor
		if err := run(t.Context(), cfg, &out); err != nil {
			t.Fatalf("%s: %v\n%s", flavor, err, out.String())
		}
		for _, want := range []string{"fake goose " + flavor + ";", "closed loop at concurrency 3", "\ndirect ", "\nproxy ", "\nadk2goose ", "\nadk-only ", "last p50",
			"adk2goose: TTFE p50 ", "proxy:     TTFE p50 ", "ms over direct", "its own CPU/reply x", "adk-only:  TTFE p50 ", "adk2goose's own; with the proxy's, x", " its own (the floor under adk2goose's)\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", flavor, want, out.String())
			}
		}
		// The last column is the process in the middle's own CPU per reply,
		// part of every process's before it (/proc counts in 10 ms ticks:
		// this short a run can show none).
		for line := range strings.SplitSeq(out.String(), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch middle := f[len(f)-1]; f[0] {
			case "direct":
				if middle != "-" {
					t.Errorf("%s: direct has a process in the middle: %q", flavor, line)
				}
			case "proxy", "adk2goose", "adk-only":
				own, err1 := strconv.ParseFloat(middle, 64)
				all, err2 := strconv.ParseFloat(f[len(f)-2], 64)
				if err1 != nil || err2 != nil || own < 0 || own > all {
					t.Errorf("%s: the process in the middle's CPU per reply is not part of every process's: %q", flavor, line)
				}
			}
		}
	}
	// -breakdown splits adk2goose's time to first event by the stages its
	// spans mark, for every turn of the throughput phase.
	out.Reset()
	staged := cfg
	staged.flavor, staged.paths, staged.breakdown = "serve", "adk2goose", true
	if err := run(t.Context(), staged, &out); err != nil {
		t.Fatalf("-breakdown: %v\n%s", err, out.String())
	}
	for _, want := range []string{"time to first event by stage", "(6 turns):", "\ngoose's first token", "\ntime to first event "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-breakdown: output lacks %q:\n%s", want, out.String())
		}
	}
	// The sidecar keeps the newest turns' traces only: the others are
	// counted, not failed. One turn at a time, so that exactly the last two
	// are whole: adk-go's store evicts by trace and re-adds a trace whose
	// span ends after its eviction, so turns running together can leave
	// fewer whole traces than it keeps.
	out.Reset()
	t.Setenv("ADK2GOOSE_DEBUG_TRACES", "2")
	staged.concurrency = 1
	if err := run(t.Context(), staged, &out); err != nil {
		t.Fatalf("-breakdown, 2 traces kept: %v\n%s", err, out.String())
	}
	if want := "(4 older turns' traces no longer all kept) (2 turns):"; !strings.Contains(out.String(), want) {
		t.Errorf("-breakdown, 2 traces kept: output lacks %q:\n%s", want, out.String())
	}
	cfg.flavor = "bogus"
	if err := run(t.Context(), cfg, &out); err == nil || !strings.Contains(err.Error(), "want serve or goosed") {
		t.Errorf("an unknown flavor: %v", err)
	}
	cfg.flavor = "serve"

	// Random arrivals need paced replies, and report what was in flight.
	cfg.arrivals = "poisson"
	if err := run(t.Context(), cfg, &out); err == nil || !strings.Contains(err.Error(), "need a reply time") {
		t.Errorf("poisson arrivals without a reply time: %v", err)
	}
	// With two runs, the ratios' median and range over them follow.
	out.Reset()
	cfg.replyTime, cfg.runs = 100*time.Millisecond, 2
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"poisson arrivals, 30.0 replies/s", "\nadk2goose ", "in flight as each reply started (mean, max): direct ",
		"\nrun 2\n", "\nover the 2 runs, median [lowest, highest]:\nadk2goose: TTFE p50 ", "\nadk-only:  TTFE p50 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The summary over runs gives each ratio's median (of an even number of
// runs, the mean of the middle two) and its range, in the runs' order.
func TestSummaryIsTheMedianOverRuns(t *testing.T) {
	run := func(added, p99, events float64) []figure {
		return []figure{
			{path: "adk2goose", text: "TTFE p50 %s ms over direct", verb: "%+.2f", value: added},
			{path: "adk2goose", text: "p99 x%s direct's", verb: "%.1f", value: p99},
			{path: "proxy", text: "events/s x%s direct's", verb: "%.2f", value: events},
		}
	}
	var out strings.Builder
	printFigures(&out, run(0.92, 3.8, 1))
	if want := "adk2goose: TTFE p50 +0.92 ms over direct; p99 x3.8 direct's\nproxy:     events/s x1.00 direct's\n"; out.String() != want {
		t.Errorf("one run's figures:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	printSummary(&out, [][]figure{run(1.25, 2, 0.9), run(0.89, 4, 1.1), run(0.92, 3, 1)})
	want := "\nover the 3 runs, median [lowest, highest]:\n" +
		"adk2goose: TTFE p50 +0.92 [+0.89, +1.25] ms over direct; p99 x3.0 [2.0, 4.0] direct's\n" +
		"proxy:     events/s x1.00 [0.90, 1.10] direct's\n"
	if out.String() != want {
		t.Errorf("three runs:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	printSummary(&out, [][]figure{nil, nil}) // runs of one path: nothing compares
	if out.Len() != 0 {
		t.Errorf("runs without figures: %q", out.String())
	}
	printSummary(&out, [][]figure{run(1, 2, 1), run(1.5, 3, 1)})
	if want := "adk2goose: TTFE p50 +1.25 [+1.00, +1.50] ms over direct"; !strings.Contains(out.String(), want) {
		t.Errorf("two runs:\n%s\nwant a line with %q", out.String(), want)
	}
}

// The CPU of the process in the middle is its own: a process that sleeps
// beside one that computes has used next to none.
func TestCPUSeparatesTheProcessInTheMiddle(t *testing.T) {
	sleeper := exec.CommandContext(t.Context(), "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	m := &measurer{pids: []int{os.Getpid(), sleeper.Process.Pid}}
	total0, _, err := m.cpu(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// Compute until this process has used 50 ms more, as /proc counts it.
	for {
		total, _, err := m.cpu(sleeper.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if total-total0 >= 50*time.Millisecond {
			break
		}
		for i := range 1_000_000 {
			computed ^= i
		}
	}
	total, middle, err := m.cpu(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if middle >= 20*time.Millisecond || total < 50*time.Millisecond {
		t.Fatalf("every process %s, the sleeper %s", total, middle)
	}
}

// computed keeps the loop above from being optimised away.
var computed int
