package main

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckTargets(t *testing.T) {
	run := func(ttfe, p99, cpu, mem float64) []figure {
		return []figure{
			{path: "adk2goose", text: "TTFE p50 %s ms over direct", value: ttfe},
			{path: "adk2goose", text: "p99 %s ms over direct's", value: p99},
			{path: "adk2goose", text: "its own CPU/reply x%s adk-only's", value: cpu},
			{path: "adk2goose", text: "memory/stream x%s the proxy's", value: mem},
		}
	}
	var out strings.Builder
	// One run over a limit does not miss it when the median holds.
	if err := checkTargets(&out, [][]figure{run(1, 4, 1.5, 1.2), run(3, 4, 1.5, 1.2), run(0.5, 1, 1.7, 1.9)}); err != nil {
		t.Fatalf("every median within its target: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "first event p50 <= direct's + 2 ms") || !strings.Contains(out.String(), "1.00 [0.50, 3.00]  holds") {
		t.Errorf("the table lacks the first target's median and range:\n%s", out.String())
	}
	for name, runs := range map[string][][]figure{
		"p50":    {run(2.5, 1, 1, 1), run(2.1, 1, 1, 1)},
		"p99":    {run(1, 6, 1, 1)},
		"cpu":    {run(1, 1, 2.51, 1)},
		"memory": {run(1, 1, 1, 2.2)},
	} {
		out.Reset()
		if err := checkTargets(&out, runs); !errors.Is(err, errTargetMissed) || !strings.Contains(out.String(), "MISSED") {
			t.Errorf("%s over its target: %v\n%s", name, err, out.String())
		}
	}
	out.Reset()
	if err := checkTargets(&out, [][]figure{run(1, 1, 1, 1)[:2]}); err == nil || !strings.Contains(err.Error(), "needs every path") {
		t.Errorf("a target no run measured: %v", err)
	}
}
