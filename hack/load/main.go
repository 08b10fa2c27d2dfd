// Command load runs many concurrent /run_sse streams through the real
// adk2goose binary against the fake `goose serve` (or, -flavor goosed, the
// fake goosed) and prints a table: how
// many completed, errors, how many were open at once, time to first event,
// and the sidecar's RSS, goroutines and CPU before, during and after.
//
//	go run ./hack/load -streams 2000 -runs 10       (or: make load)
//
// The fake keeps goose's 1024-frame outbound queue per connection by default
// (-goose-queue, as goose 1.43 does), so a client that stops reading one
// connection loses it as it would against real goose. Each run uses new
// sessions, opens every stream at once, and waits for the sidecar to settle
// (goroutines back to baseline, after -goose-idle-timeout closed the
// sessions' goose connections) before the next. The exit status is 1 when
// any stream failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adk2goose/goose-operator/hack/internal/sidecarproc"
	"github.com/adk2goose/goose-operator/internal/testing/percentile"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

type config struct {
	binary       string
	flavor       string
	streams      int
	turns        int
	runs         int
	deltas       int
	replyTime    time.Duration
	gooseQueue   int
	idleTimeout  time.Duration
	settle       time.Duration
	sessionConns int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.binary, "adk2goose", "bin/adk2goose", "the adk2goose binary to load")
	flag.StringVar(&cfg.flavor, "flavor", "serve", "the fake goose: serve (ACP) or goosed (REST)")
	flag.IntVar(&cfg.streams, "streams", 2000, "concurrent /run_sse streams per run, each on its own session")
	flag.IntVar(&cfg.turns, "turns", 1, "turns per session, one after the other (TTFE of the first and of the later turns are shown apart)")
	flag.IntVar(&cfg.runs, "runs", 10, "runs")
	flag.IntVar(&cfg.deltas, "deltas", 20, "text deltas per reply")
	flag.DurationVar(&cfg.replyTime, "reply-time", 3*time.Second, "how long goose takes to stream one reply (its deltas evenly spread)")
	flag.IntVar(&cfg.gooseQueue, "goose-queue", goosetest.ServeOutboundCapacity, "the fake's outbound queue per connection (goose's 1024); 0: none, writes block")
	flag.DurationVar(&cfg.idleTimeout, "goose-idle-timeout", 5*time.Second, "passed to adk2goose; 0: not passed (binaries without the flag)")
	flag.DurationVar(&cfg.settle, "settle", 2*time.Minute, "longest wait for the sidecar's goroutines to return to baseline after a run")
	flag.IntVar(&cfg.sessionConns, "create-concurrency", 64, "sessions created at once before each run")
	flag.Parse()
	ok, err := run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) (bool, error) {
	script := func(string, string) goosetest.Reply { return goosetest.PacedDeltas(cfg.deltas, cfg.replyTime) }
	var g fakeGoose
	switch cfg.flavor {
	case "serve":
		opts := []goosetest.ServeOption{goosetest.WithServeScript(script)}
		if cfg.gooseQueue > 0 {
			opts = append(opts, goosetest.WithServeOutboundQueue(cfg.gooseQueue))
		}
		fake := goosetest.NewServe(nil, opts...)
		defer fake.Close()
		g = fakeGoose{url: fake.URL, secret: fake.Secret, summary: func() string {
			return fmt.Sprintf("fake goose serve: %d connections accepted, %d dropped for a full outbound queue", fake.Connections(), fake.OutboundDrops())
		}}
	case "goosed":
		fake := goosetest.NewGoosed(goosetest.GoosedOptions{Script: script})
		defer fake.Close()
		g = fakeGoose{url: fake.URL, secret: fake.SecretKey, summary: func() string { return "fake goosed" }}
	default:
		return false, fmt.Errorf("unknown flavor %q: want serve or goosed", cfg.flavor)
	}

	var extra []string
	if cfg.idleTimeout > 0 && cfg.flavor == "serve" {
		extra = append(extra, "-goose-idle-timeout", cfg.idleTimeout.String())
	}
	sc, err := sidecarproc.Start(ctx, sidecarproc.Options{Binary: cfg.binary, Flavor: cfg.flavor, GooseURL: g.url, GooseSecret: g.secret, Args: extra})
	if err != nil {
		return false, err
	}
	defer sc.Stop()

	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: cfg.streams + 100, MaxIdleConnsPerHost: cfg.streams + 100, IdleConnTimeout: time.Minute,
	}}
	defer hc.CloseIdleConnections()

	base, err := sc.Sample(ctx, hc)
	if err != nil {
		return false, err
	}
	fmt.Printf("adk2goose %s; fake goose %s (outbound queue %d for serve); %d concurrent sessions x %d turns; a reply is %d deltas over %s\n",
		cfg.binary, cfg.flavor, cfg.gooseQueue, cfg.streams, cfg.turns, cfg.deltas, cfg.replyTime)
	fmt.Printf("sidecar at rest: RSS %.0f MiB, %d goroutines\n\n", base.RSSMiB, base.Goroutines)
	fmt.Printf("%4s %9s %7s %9s %10s %10s %12s %9s %13s %15s %12s %16s %9s\n",
		"run", "completed", "errors", "max open", "TTFE p50", "TTFE p99", "later p50", "wall", "peak RSS MiB", "peak goroutines", "CPU s/run", "after: RSS MiB", "goroutines")
	allOK := true
	for r := 1; r <= cfg.runs; r++ {
		res, err := oneRun(ctx, cfg, sc, hc, r)
		if err != nil {
			return false, err
		}
		after, err := sc.Settle(ctx, hc, base.Goroutines, cfg.settle)
		if err != nil {
			return false, err
		}
		later := "-"
		if len(res.ttfeLater) > 0 {
			later = percentile.Of(res.ttfeLater, 50).Round(time.Millisecond).String()
		}
		fmt.Printf("%4d %9d %7d %9d %10s %10s %12s %9s %13.0f %15d %12.1f %16.0f %9d\n",
			r, res.completed, res.errors, res.maxOpen, percentile.Of(res.ttfe, 50).Round(time.Millisecond), percentile.Of(res.ttfe, 99).Round(time.Millisecond),
			later, res.wall.Round(10*time.Millisecond), res.peak.RSSMiB, res.peak.Goroutines, res.cpu.Seconds(), after.RSSMiB, after.Goroutines)
		for _, e := range res.samples {
			fmt.Printf("     error: %s\n", e)
		}
		if res.errors > 0 {
			allOK = false
		}
	}
	fmt.Printf("\n%s\n", g.summary())
	return allOK, nil
}

// fakeGoose is the fake goose server the sidecar talks to.
type fakeGoose struct {
	url, secret string
	summary     func() string
}

type runResult struct {
	completed, errors, maxOpen int
	ttfe, ttfeLater            []time.Duration // first turns', later turns'
	wall, cpu                  time.Duration
	peak                       sidecarproc.Sample
	samples                    []string // the first few error messages
}

func oneRun(ctx context.Context, cfg config, sc *sidecarproc.Sidecar, hc *http.Client, runNo int) (*runResult, error) {
	ids := make([]string, cfg.streams)
	sem := make(chan struct{}, cfg.sessionConns)
	var wg sync.WaitGroup
	var createErr atomic.Pointer[error]
	for i := range ids {
		ids[i] = fmt.Sprintf("run%d-%d-%d", runNo, time.Now().UnixNano(), i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := sidecarproc.CreateSession(ctx, hc, sc.URL, ids[i]); err != nil {
				createErr.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	if p := createErr.Load(); p != nil {
		return nil, fmt.Errorf("failed to create sessions: %w", *p)
	}

	res := &runResult{}
	var mu sync.Mutex
	var open atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	cpu0, err := sc.Sample(ctx, hc)
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(sampled)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
			if s, err := sc.Sample(ctx, hc); err == nil {
				mu.Lock()
				res.peak.RSSMiB = max(res.peak.RSSMiB, s.RSSMiB)
				res.peak.Goroutines = max(res.peak.Goroutines, s.Goroutines)
				mu.Unlock()
			}
		}
	}()
	start := time.Now()
	for _, id := range ids {
		wg.Go(func() {
			for turn := range cfg.turns {
				ttfe, err := stream(ctx, hc, sc.URL, id, cfg.deltas, &open, func() {
					n := int(open.Add(1))
					mu.Lock()
					res.maxOpen = max(res.maxOpen, n)
					mu.Unlock()
				})
				mu.Lock()
				if err != nil {
					res.errors++
					if len(res.samples) < 3 {
						msg := err.Error()
						if len(msg) > 400 {
							msg = msg[:400] + "..."
						}
						res.samples = append(res.samples, msg)
					}
					mu.Unlock()
					return
				}
				res.completed++
				if turn == 0 {
					res.ttfe = append(res.ttfe, ttfe)
				} else {
					res.ttfeLater = append(res.ttfeLater, ttfe)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	close(stopSampling)
	<-sampled
	cpu1, err := sc.Sample(ctx, hc)
	if err != nil {
		return nil, err
	}
	res.cpu = cpu1.CPU - cpu0.CPU
	return res, nil
}

// stream runs one /run_sse and checks it: every delta as a partial event, a
// final event, no error event. The stream counts as open in open from its
// first event to its end.
func stream(ctx context.Context, hc *http.Client, base, id string, deltas int, open *atomic.Int64, opened func()) (time.Duration, error) {
	start := time.Now()
	var ttfe time.Duration
	n, err := sidecarproc.Stream(ctx, hc, base, id, "go", func() {
		if ttfe == 0 {
			ttfe = time.Since(start)
			opened()
		}
	})
	if ttfe != 0 {
		open.Add(-1)
	}
	if err != nil {
		return 0, err
	}
	if n != deltas {
		return 0, fmt.Errorf("session %s: %d of %d deltas", id, n, deltas)
	}
	return ttfe, nil
}
