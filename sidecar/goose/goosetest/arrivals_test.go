package goosetest

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClosedLoopArrivals: every reply runs once, never more than
// Concurrency at a time, and the loop fills up to Concurrency.
func TestClosedLoopArrivals(t *testing.T) {
	const n, c = 20, 3
	var (
		mu            sync.Mutex
		running, most int
		full          = make(chan struct{})
		filled        bool
		ran           [n]atomic.Int64
	)
	seen := Arrivals{Concurrency: c}.Run(n, func(i int) {
		mu.Lock()
		running++
		most = max(most, running)
		if running == c && !filled {
			close(full)
			filled = true
		}
		mu.Unlock()
		<-full // the first round waits until the loop is full
		ran[i].Add(1)
		mu.Lock()
		running--
		mu.Unlock()
	})
	for i := range ran {
		if got := ran[i].Load(); got != 1 {
			t.Errorf("reply %d ran %d times", i, got)
		}
	}
	if most != c {
		t.Errorf("at most %d in flight, want %d", most, c)
	}
	if seen.Max > c-1 {
		t.Errorf("a reply started with %d others in flight, over concurrency %d", seen.Max, c)
	}
}

// TestPoissonArrivalsDoNotWaitForReplies: an open loop starts every reply
// on its schedule, however many are in flight. Here no reply returns
// before all have started, which a closed loop could never finish.
func TestPoissonArrivalsDoNotWaitForReplies(t *testing.T) {
	const n = 50
	var started atomic.Int64
	all := make(chan struct{})
	seen := Arrivals{Concurrency: 1, Rate: 1e6}.Run(n, func(int) {
		if started.Add(1) == n {
			close(all)
		}
		<-all
	})
	if seen.Max != n-1 || seen.Mean != float64(n-1)/2 {
		t.Errorf("in flight as each started: %+v, want max %d and mean %v", seen, n-1, float64(n-1)/2)
	}
}

// TestPoissonGaps: the schedule is the same on every call (each path sees
// the same one), and its gaps average 1/rate.
func TestPoissonGaps(t *testing.T) {
	a := Arrivals{Rate: 25}
	g1, g2 := a.gaps(), a.gaps()
	var sum time.Duration
	const n = 20000
	for i := range n {
		d1, d2 := g1(), g2()
		if d1 != d2 {
			t.Fatalf("gap %d: %s and %s from the same seed", i, d1, d2)
		}
		if d1 < 0 {
			t.Fatalf("gap %d: %s", i, d1)
		}
		sum += d1
	}
	mean := sum.Seconds() / n
	if math.Abs(mean-1/a.Rate) > 0.03/a.Rate {
		t.Errorf("mean gap %.4fs, want %.4fs ± 3%%", mean, 1/a.Rate)
	}
}

func TestParseArrivals(t *testing.T) {
	a, err := ParseArrivals("poisson", 50, 2*time.Second)
	if err != nil || a.Rate != 25 || a.Concurrency != 50 {
		t.Errorf("poisson, 50, 2s: %+v, %v; want 25 replies/s", a, err)
	}
	if a, err := ParseArrivals("together", 50, 0); err != nil || a.Rate != 0 || a.Concurrency != 50 {
		t.Errorf("together, 50: %+v, %v", a, err)
	}
	if a, err := ParseArrivals("poisson:300", 50, 0); err != nil || a.Rate != 300 || a.String() != "poisson arrivals, 300.0 replies/s" {
		t.Errorf("poisson:300: %+v (%s), %v; want 300 replies/s whatever the pace", a, a, err)
	}
	for _, bad := range []struct {
		name      string
		c         int
		replyTime time.Duration
		want      string
	}{
		{"poisson", 50, 0, "need a reply time"},
		{"bursty", 50, time.Second, `"bursty"`},
		{"together", 0, 0, "concurrency 0"},
		{"poisson:", 50, 0, "above 0"},
		{"poisson:-3", 50, 0, "above 0"},
		{"poisson:NaN", 50, 0, "above 0"},
		{"poisson:+Inf", 50, 0, "above 0"},
	} {
		if _, err := ParseArrivals(bad.name, bad.c, bad.replyTime); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s, %d, %s: %v, want an error naming %s", bad.name, bad.c, bad.replyTime, err, bad.want)
		}
	}
}
