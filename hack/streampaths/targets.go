package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
)

// A bindingTarget is a floor adk2goose must stay above on the workload users
// run (replies paced like a model): a figure's median over the runs must not
// exceed max. They bind the sidecar's design: a mechanism that makes none of
// them pass has no place in it.
type bindingTarget struct {
	path, text string // the figure, as ratios names it
	max        float64
	what       string
}

// The CPU target is the one issue 41 settled on: its first 1.8x sat below
// the floor of the work adk2goose must do (docs/development.md).
var bindingTargets = []bindingTarget{
	{"adk2goose", "TTFE p50 %s ms over direct", 2, "first event p50 <= direct's + 2 ms"},
	{"adk2goose", "p99 %s ms over direct's", 5, "first event p99 <= direct's p99 + 5 ms"},
	{"adk2goose", "its own CPU/reply x%s adk-only's", 2.5, "own CPU per reply <= 2.5x adk-only's"},
	{"adk2goose", "memory/stream x%s the proxy's", 2, "memory per open stream <= 2x the proxy's"},
}

// errTargetMissed: at least one binding target's median is over its max.
var errTargetMissed = errors.New("a binding target was missed")

// checkTargets prints each binding target with its median and range over
// the runs and whether it holds.
func checkTargets(out io.Writer, runs [][]figure) error {
	fmt.Fprintf(out, "\nbinding targets, median [lowest, highest] over %d runs:\n", len(runs))
	var missed error
	for _, t := range bindingTargets {
		var vs []float64
		for _, figs := range runs {
			for _, f := range figs {
				if f.path == t.path && f.text == t.text {
					vs = append(vs, f.value)
				}
			}
		}
		if len(vs) == 0 {
			return fmt.Errorf("failed to check %q: no run measured it (it needs every path)", t.what)
		}
		slices.Sort(vs)
		verdict := "holds"
		if median(vs) > t.max {
			verdict, missed = "MISSED", errTargetMissed
		}
		fmt.Fprintf(out, "  %-44s %8.2f [%.2f, %.2f]  %s\n", t.what, median(vs), vs[0], vs[len(vs)-1], verdict)
	}
	return missed
}
