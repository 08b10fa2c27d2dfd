package goosetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Arrivals is how a throughput phase of the stream benchmark and the load
// tools starts its replies.
type Arrivals struct {
	// Concurrency: with Rate 0, at most this many replies run at once, and
	// each starts as soon as one ends (a closed loop). Its first round starts
	// in one instant; with paced replies, which all take about as long,
	// every later round does too. So each round is a burst of Concurrency
	// requests in the same millisecond, and the replies' deltas stay in step.
	Concurrency int
	// Rate, when above 0, starts replies at random times (a Poisson process),
	// this many per second on average, however many are in flight: users who
	// do not wait for each other. The times are seeded, so every path
	// measured sees the same schedule. Concurrency is then the mean in flight
	// the rate was chosen for, or 0 when the rate was given.
	Rate float64
}

// ParseArrivals reads the arrivals flag of the benchmark and the load
// tools: "together" (a closed loop at concurrency); "poisson" (random
// arrivals at the rate that keeps concurrency replies of replyTime in flight
// on average, which needs paced replies); or "poisson:R" (R replies a second,
// at any pace: below what a path can serve, it shows the time to first event
// at that load, which a closed loop at saturation cannot).
func ParseArrivals(name string, concurrency int, replyTime time.Duration) (Arrivals, error) {
	if concurrency < 1 {
		return Arrivals{}, fmt.Errorf("concurrency %d: want at least 1", concurrency)
	}
	if rate, ok := strings.CutPrefix(name, "poisson:"); ok {
		r, err := strconv.ParseFloat(rate, 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			return Arrivals{}, fmt.Errorf("arrivals %q: want poisson:R with R, replies a second, above 0", name)
		}
		return Arrivals{Rate: r}, nil
	}
	switch name {
	case "together":
		return Arrivals{Concurrency: concurrency}, nil
	case "poisson":
		if replyTime <= 0 {
			return Arrivals{}, fmt.Errorf("poisson arrivals need a reply time (or a rate, poisson:R): the rate that keeps %d replies in flight is %d per reply time", concurrency, concurrency)
		}
		return Arrivals{Concurrency: concurrency, Rate: float64(concurrency) / replyTime.Seconds()}, nil
	}
	return Arrivals{}, fmt.Errorf("arrivals %q: want together, poisson or poisson:<replies a second>", name)
}

// String names the arrivals for a table's header.
func (a Arrivals) String() string {
	switch {
	case a.Rate > 0 && a.Concurrency > 0:
		return fmt.Sprintf("poisson arrivals, %.1f replies/s (%d in flight on average)", a.Rate, a.Concurrency)
	case a.Rate > 0:
		return fmt.Sprintf("poisson arrivals, %.1f replies/s", a.Rate)
	}
	return fmt.Sprintf("closed loop at concurrency %d, each round arriving together", a.Concurrency)
}

// InFlight is how many replies were in flight as each reply started,
// itself not counted.
type InFlight struct {
	Mean float64
	Max  int
}

func (f InFlight) String() string { return fmt.Sprintf("%.1f, %d", f.Mean, f.Max) }

// Run calls run(i) for each i in [0, n), each on its own goroutine, starting
// them as a says, and returns when all have returned.
func (a Arrivals) Run(n int, run func(i int)) InFlight {
	var (
		inFlight atomic.Int64
		wg       sync.WaitGroup
		sem      chan struct{}
		seen     InFlight
		sum      int
	)
	if a.Rate <= 0 {
		sem = make(chan struct{}, max(1, a.Concurrency))
	}
	gaps := a.gaps()
	next := time.Now()
	for i := range n {
		if sem != nil {
			sem <- struct{}{}
		} else {
			next = next.Add(gaps())
			time.Sleep(time.Until(next))
		}
		now := int(inFlight.Add(1) - 1)
		sum += now
		seen.Max = max(seen.Max, now)
		wg.Go(func() {
			defer func() {
				inFlight.Add(-1)
				if sem != nil {
					<-sem
				}
			}()
			run(i)
		})
	}
	wg.Wait()
	if n > 0 {
		seen.Mean = float64(sum) / float64(n)
	}
	return seen
}

// gaps returns the times between Poisson arrivals, one per call, from a
// fixed seed.
func (a Arrivals) gaps() func() time.Duration {
	rng := rand.New(rand.NewPCG(1, 2))
	return func() time.Duration {
		return time.Duration(rng.ExpFloat64() / a.Rate * float64(time.Second))
	}
}
