package goose_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// same compares usages by value, costs included (nil is not 0).
func same(a, b goose.Usage) bool {
	if a.InputTokens != b.InputTokens || a.OutputTokens != b.OutputTokens || a.TotalTokens != b.TotalTokens {
		return false
	}
	if (a.Cost == nil) != (b.Cost == nil) {
		return false
	}
	return a.Cost == nil || math.Abs(*a.Cost-*b.Cost) < 1e-9
}

func show(u goose.Usage) string {
	c := "nil"
	if u.Cost != nil {
		c = fmt.Sprint(*u.Cost)
	}
	return fmt.Sprintf("{in %d out %d total %d cost %s}", u.InputTokens, u.OutputTokens, u.TotalTokens, c)
}

func TestUsageTotal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		u     goose.Usage
		total int64
		split bool
	}{
		{"empty", goose.Usage{}, 0, false},
		{"goose's total wins", goose.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 20}, 20, true},
		{"no total: input plus output", goose.Usage{InputTokens: 10, OutputTokens: 5}, 15, true},
		{"input only", goose.Usage{InputTokens: 7}, 7, true},
		{"output only", goose.Usage{OutputTokens: 3}, 3, true},
		{"total only (stable usage_update)", goose.Usage{TotalTokens: 2398}, 2398, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.u.Total(); got != tc.total {
				t.Errorf("Total() = %d, want %d", got, tc.total)
			}
			if got := tc.u.HasSplit(); got != tc.split {
				t.Errorf("HasSplit() = %v, want %v", got, tc.split)
			}
			n := tc.u.Normalized()
			want := tc.u
			want.TotalTokens = tc.total
			if !same(n, want) {
				t.Errorf("Normalized() = %s, want %s", show(n), show(want))
			}
		})
	}
}

func TestUsageAdd(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b goose.Usage
		want goose.Usage
	}{
		{"zeros", goose.Usage{}, goose.Usage{}, goose.Usage{}},
		{"totals derived on both sides",
			goose.Usage{InputTokens: 10, OutputTokens: 2}, goose.Usage{InputTokens: 5, OutputTokens: 1},
			goose.Usage{InputTokens: 15, OutputTokens: 3, TotalTokens: 18}},
		{"goose's total kept on one side",
			goose.Usage{InputTokens: 10, OutputTokens: 2, TotalTokens: 20}, goose.Usage{InputTokens: 5, OutputTokens: 1},
			goose.Usage{InputTokens: 15, OutputTokens: 3, TotalTokens: 26}},
		{"total-only figure adds to the total alone",
			goose.Usage{InputTokens: 10, OutputTokens: 2}, goose.Usage{TotalTokens: 100},
			goose.Usage{InputTokens: 10, OutputTokens: 2, TotalTokens: 112}},
		{"no cost on either side stays unknown",
			goose.Usage{InputTokens: 1}, goose.Usage{OutputTokens: 1},
			goose.Usage{InputTokens: 1, OutputTokens: 1, TotalTokens: 2}},
		{"one known cost makes the sum's known",
			goose.Usage{InputTokens: 1}, goose.Usage{OutputTokens: 1, Cost: new(0.25)},
			goose.Usage{InputTokens: 1, OutputTokens: 1, TotalTokens: 2, Cost: new(0.25)}},
		{"costs add",
			goose.Usage{Cost: new(0.5)}, goose.Usage{Cost: new(0.25)},
			goose.Usage{Cost: new(0.75)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Add(tc.b); !same(got, tc.want) {
				t.Errorf("%s.Add(%s) = %s, want %s", show(tc.a), show(tc.b), show(got), show(tc.want))
			}
			if got := tc.b.Add(tc.a); !same(got, tc.want) {
				t.Errorf("%s.Add(%s) = %s, want %s (not commutative)", show(tc.b), show(tc.a), show(got), show(tc.want))
			}
		})
	}
}

func TestUsageSince(t *testing.T) {
	for _, tc := range []struct {
		name      string
		acc, prev goose.Usage
		want      goose.Usage
	}{
		{"from nothing", goose.Usage{InputTokens: 10, OutputTokens: 2, TotalTokens: 12}, goose.Usage{},
			goose.Usage{InputTokens: 10, OutputTokens: 2, TotalTokens: 12}},
		{"growth",
			goose.Usage{InputTokens: 30, OutputTokens: 7, TotalTokens: 37}, goose.Usage{InputTokens: 10, OutputTokens: 2, TotalTokens: 12},
			goose.Usage{InputTokens: 20, OutputTokens: 5, TotalTokens: 25}},
		{"totals derived on both ends",
			goose.Usage{InputTokens: 30, OutputTokens: 7}, goose.Usage{InputTokens: 10, OutputTokens: 2},
			goose.Usage{InputTokens: 20, OutputTokens: 5, TotalTokens: 25}},
		{"prev ahead of goose: no growth, never negative",
			goose.Usage{InputTokens: 5, OutputTokens: 1}, goose.Usage{InputTokens: 10, OutputTokens: 2, TotalTokens: 12},
			goose.Usage{}},
		{"unknown cost stays unknown", goose.Usage{InputTokens: 3}, goose.Usage{InputTokens: 1, Cost: new(1.0)},
			goose.Usage{InputTokens: 2, TotalTokens: 2}},
		{"cost grows from an unknown one", goose.Usage{Cost: new(0.5)}, goose.Usage{},
			goose.Usage{Cost: new(0.5)}},
		{"cost growth", goose.Usage{Cost: new(1.5)}, goose.Usage{Cost: new(1.0)},
			goose.Usage{Cost: new(0.5)}},
		{"cost that went back is 0", goose.Usage{Cost: new(1.0)}, goose.Usage{Cost: new(1.5)},
			goose.Usage{Cost: new(0.0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.acc.Since(tc.prev); !same(got, tc.want) {
				t.Errorf("%s.Since(%s) = %s, want %s", show(tc.acc), show(tc.prev), show(got), show(tc.want))
			}
		})
	}
}

// FuzzUsageArithmetic checks the laws the agent relies on: a turn's growth
// of goose's totals (Since) equals the sum of what it reported (Add), and
// no result is negative.
func FuzzUsageArithmetic(f *testing.F) {
	f.Add(int64(10), int64(2), int64(0), int64(5), int64(1), int64(0), 0.0, -1.0)
	f.Add(int64(10), int64(2), int64(20), int64(0), int64(0), int64(2398), 0.5, 0.25)
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), -1.0, -1.0)
	f.Fuzz(func(t *testing.T, ai, ao, at, bi, bo, bt int64, ac, bc float64) {
		// Token counts are never negative and far from overflowing.
		const limit = 1 << 40
		clip := func(n int64) int64 { return max(0, n) % limit }
		costOrNil := func(c float64) *float64 {
			if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
				return nil
			}
			c = math.Mod(c, 1e6)
			return &c
		}
		a := goose.Usage{InputTokens: clip(ai), OutputTokens: clip(ao), TotalTokens: clip(at), Cost: costOrNil(ac)}
		b := goose.Usage{InputTokens: clip(bi), OutputTokens: clip(bo), TotalTokens: clip(bt), Cost: costOrNil(bc)}

		sum := a.Add(b)
		if sum.TotalTokens != a.Total()+b.Total() || sum.Total() != sum.TotalTokens {
			t.Fatalf("%s.Add(%s) = %s: total is not the sum of the totals", show(a), show(b), show(sum))
		}
		if !same(sum, b.Add(a)) {
			t.Fatalf("Add is not commutative for %s, %s", show(a), show(b))
		}
		if n := a.Normalized(); n.Total() != a.Total() || !same(n.Normalized(), n) {
			t.Fatalf("Normalized(%s) = %s: changes the total or is not idempotent", show(a), show(n))
		}

		grown := sum.Since(a)
		want := b.Normalized()
		if grown.InputTokens != want.InputTokens || grown.OutputTokens != want.OutputTokens || grown.Total() != want.Total() {
			t.Fatalf("%s.Since(%s) = %s, want the tokens of %s", show(sum), show(a), show(grown), show(want))
		}
		if (grown.Cost == nil) != (sum.Cost == nil) || (grown.Cost != nil && math.Abs(*grown.Cost-costOf(b)) > 1e-6) {
			t.Fatalf("%s.Since(%s) cost = %s, want that of %s", show(sum), show(a), show(grown), show(b))
		}

		for _, d := range []goose.Usage{a.Since(b), b.Since(a)} {
			if d.InputTokens < 0 || d.OutputTokens < 0 || d.TotalTokens < 0 || (d.Cost != nil && *d.Cost < 0) {
				t.Fatalf("Since gave a negative count: %s (a %s, b %s)", show(d), show(a), show(b))
			}
		}
	})
}

func costOf(u goose.Usage) float64 {
	if u.Cost == nil {
		return 0
	}
	return *u.Cost
}
