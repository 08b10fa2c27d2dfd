package sample

import (
	"testing"
	"time"
)

// TestMergeBudget: each pod reports the agent's usage as it knows it; the
// agent's is the freshest period's largest figure, never a sum.
func TestMergeBudget(t *testing.T) {
	day := func(d int, total int64, exhausted bool) *Budget {
		b := &Budget{PeriodStart: time.Date(2026, 11, d, 0, 0, 0, 0, time.UTC), Exhausted: exhausted}
		b.Used.Total, b.Used.Input = total, total/2
		return b
	}
	var agent *Budget
	for _, pod := range []*Budget{day(23, 70, false), nil, day(22, 500, true), day(23, 90, true), day(23, 80, false)} {
		agent = mergeBudget(agent, pod)
	}
	if agent.Used.Total != 90 || agent.Used.Input != 45 || !agent.Exhausted || agent.PeriodStart.Day() != 23 {
		t.Fatalf("merged %+v", agent)
	}
	// A pod already in the next period replaces the old period's figures.
	agent = mergeBudget(agent, day(24, 5, false))
	if agent.Used.Total != 5 || agent.Exhausted {
		t.Fatalf("after the rollover %+v", agent)
	}
}
