// Command dashboardshot records what the Grafana dashboard's sidecar panels
// show, from a real run: it starts bin/adk2goose on the fake goose serve
// with a token budget, sends users' turns (and a few client mistakes) for a
// while, and scrapes the sidecar's /metrics every -interval into -out, one
// file per scrape named by its Unix time in milliseconds. The dashboard's
// queries are then evaluated over those scrapes by Prometheus's engine and
// plotted by test/monitoring/render (make dashboard-picture).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/adk2goose/goose-operator/hack/internal/sidecarproc"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

func main() {
	binary := flag.String("adk2goose", "bin/adk2goose", "the adk2goose binary")
	out := flag.String("out", "", "directory for the scrapes (required)")
	duration := flag.Duration("duration", 4*time.Minute, "how long to send turns")
	interval := flag.Duration("interval", 5*time.Second, "scrape interval")
	users := flag.Int("users", 6, "concurrent users")
	budget := flag.Int("budget-tokens", 14000, "the agent's daily token budget; reached within the run, it shows refusals")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *binary, *out, *duration, *interval, *users, *budget); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, binary, out string, duration, interval time.Duration, users, budgetTokens int) error {
	if out == "" {
		return errors.New("-out is required")
	}
	if err := os.MkdirAll(out, 0o750); err != nil {
		return fmt.Errorf("failed to create %s: %w", out, err)
	}
	// Replies of 20-60 deltas over 1-4 s, paced like a model.
	script := func(string, string) goosetest.Reply {
		return goosetest.PacedDeltas(20+rand.IntN(40), time.Duration(1000+rand.IntN(3000))*time.Millisecond)
	}
	fake := goosetest.NewServe(nil, goosetest.WithServeScript(script))
	defer fake.Close()
	budget := filepath.Join(out, "..", "budget.json")
	if err := os.WriteFile(budget, fmt.Appendf(nil, `{"period":"Day","totalTokens":%d}`, budgetTokens), 0o600); err != nil {
		return fmt.Errorf("failed to write the budget: %w", err)
	}
	sc, err := sidecarproc.Start(ctx, sidecarproc.Options{Binary: binary, Flavor: "serve", GooseURL: fake.URL, GooseSecret: fake.Secret,
		Args: []string{"-budget-file", budget, "-budget-sync-interval", "1s"}})
	if err != nil {
		return err
	}
	defer sc.Stop()

	hc := &http.Client{} // sidecarproc adds the token
	sendCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var wg sync.WaitGroup
	for u := range users {
		wg.Go(func() { user(sendCtx, hc, sc.URL, u) })
	}
	scrapeDone := make(chan error, 1)
	go func() { scrapeDone <- scrape(ctx, sc.URL, out, interval, sendCtx.Done()) }()
	wg.Wait()
	return <-scrapeDone
}

// user creates sessions and takes turns in them until ctx ends, now and
// then making a client's mistake: a run of a session never created (404)
// or a request without the token (401).
func user(ctx context.Context, hc *http.Client, base string, u int) {
	for n := 0; ctx.Err() == nil; n++ {
		id := fmt.Sprintf("u%d-s%d", u, n)
		if err := sidecarproc.CreateSession(ctx, hc, base, id); err != nil {
			continue
		}
		for range 1 + rand.IntN(4) {
			_, _ = sidecarproc.Stream(ctx, hc, base, id, "hello", func() {})
			pause(ctx, time.Duration(500+rand.IntN(2500))*time.Millisecond)
		}
		switch rand.IntN(6) {
		case 0:
			_, _ = sidecarproc.Stream(ctx, hc, base, id+"-missing", "hello", func() {})
		case 1:
			if req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/list-apps", nil); err == nil {
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_ = resp.Body.Close()
				}
			}
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// scrape writes /metrics every interval until done is closed, and once more
// after it.
func scrape(ctx context.Context, base, out string, interval time.Duration, done <-chan struct{}) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := scrapeOnce(ctx, base, out); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return scrapeOnce(ctx, base, out)
		case <-tick.C:
		}
	}
}

func scrapeOnce(ctx context.Context, base, out string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return fmt.Errorf("failed to build the scrape: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+sidecarproc.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("failed to scrape: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("failed to scrape: %d %w", resp.StatusCode, err)
	}
	name := filepath.Join(out, strconv.FormatInt(time.Now().UnixMilli(), 10)+".prom")
	if err := os.WriteFile(name, b, 0o600); err != nil {
		return fmt.Errorf("failed to write a scrape: %w", err)
	}
	return nil
}
