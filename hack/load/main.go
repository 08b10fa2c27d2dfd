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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adk2goose/goose-operator/internal/percentile"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

const (
	appName = "load"
	token   = "load-test-token"
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
	gap := cfg.replyTime / time.Duration(max(cfg.deltas-1, 1))
	script := func(string, string) goosetest.Reply {
		steps := make([]goosetest.Step, 0, cfg.deltas+1)
		for i := range cfg.deltas {
			step := goosetest.Step{Text: fmt.Sprintf("token%03d ", i)}
			if i > 0 {
				step.Delay = gap
			}
			steps = append(steps, step)
		}
		return goosetest.Reply{Steps: append(steps, goosetest.Step{Usage: &goosetest.UsageStep{Input: 10, Output: int64(cfg.deltas)}})}
	}
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

	sc, err := startSidecar(ctx, cfg, g)
	if err != nil {
		return false, err
	}
	defer sc.stop()

	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: cfg.streams + 100, MaxIdleConnsPerHost: cfg.streams + 100, IdleConnTimeout: time.Minute,
	}}
	defer hc.CloseIdleConnections()

	base, err := sc.sample(ctx, hc)
	if err != nil {
		return false, err
	}
	fmt.Printf("adk2goose %s; fake goose %s (outbound queue %d for serve); %d concurrent sessions x %d turns; a reply is %d deltas over %s\n",
		cfg.binary, cfg.flavor, cfg.gooseQueue, cfg.streams, cfg.turns, cfg.deltas, cfg.replyTime)
	fmt.Printf("sidecar at rest: RSS %.0f MiB, %d goroutines\n\n", base.rssMiB, base.goroutines)
	fmt.Printf("%4s %9s %7s %9s %10s %10s %12s %9s %13s %15s %12s %16s %9s\n",
		"run", "completed", "errors", "max open", "TTFE p50", "TTFE p99", "later p50", "wall", "peak RSS MiB", "peak goroutines", "CPU s/run", "after: RSS MiB", "goroutines")
	allOK := true
	for r := 1; r <= cfg.runs; r++ {
		res, err := oneRun(ctx, cfg, sc, hc, r)
		if err != nil {
			return false, err
		}
		after, err := sc.settle(ctx, hc, base.goroutines, cfg.settle)
		if err != nil {
			return false, err
		}
		later := "-"
		if len(res.ttfeLater) > 0 {
			later = percentile.Of(res.ttfeLater, 50).Round(time.Millisecond).String()
		}
		fmt.Printf("%4d %9d %7d %9d %10s %10s %12s %9s %13.0f %15d %12.1f %16.0f %9d\n",
			r, res.completed, res.errors, res.maxOpen, percentile.Of(res.ttfe, 50).Round(time.Millisecond), percentile.Of(res.ttfe, 99).Round(time.Millisecond),
			later, res.wall.Round(10*time.Millisecond), res.peak.rssMiB, res.peak.goroutines, res.cpu.Seconds(), after.rssMiB, after.goroutines)
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

type sidecar struct {
	url  string
	cmd  *exec.Cmd
	dir  string
	logf *os.File
	done chan error
}

// fakeGoose is the fake goose server the sidecar talks to.
type fakeGoose struct {
	url, secret string
	summary     func() string
}

func startSidecar(ctx context.Context, cfg config, fake fakeGoose) (*sidecar, error) {
	dir, err := os.MkdirTemp("", "adk2goose-load-")
	if err != nil {
		return nil, err
	}
	for name, v := range map[string]string{"token": token, "goose-secret": fake.secret} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			return nil, err
		}
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close() // the sidecar binds it next; loopback ports are not reused that fast
	args := []string{
		"-listen", addr, "-app-name", appName, "-data-dir", filepath.Join(dir, "data"),
		"-goose-url", fake.url, "-goose-flavor", cfg.flavor, "-goose-secret-file", filepath.Join(dir, "goose-secret"),
		"-auth-token-file", filepath.Join(dir, "token"), "-log-level", "warn", "-log-format", "text",
		"-goose-working-dir", filepath.Join(dir, "workspace"), // session directories go below it, removed with dir
	}
	if cfg.idleTimeout > 0 && cfg.flavor == "serve" {
		args = append(args, "-goose-idle-timeout", cfg.idleTimeout.String())
	}
	logf, err := os.Create(filepath.Join(dir, "adk2goose.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, cfg.binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", cfg.binary, err)
	}
	sc := &sidecar{url: "http://" + addr, cmd: cmd, dir: dir, logf: logf, done: make(chan error, 1)}
	go func() { sc.done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.url+"/healthz", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return sc, nil
			}
		}
		select {
		case err := <-sc.done:
			return nil, fmt.Errorf("adk2goose exited (log: %s): %w", logf.Name(), err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			sc.stop()
			return nil, errors.New("adk2goose did not become healthy")
		}
	}
}

func (sc *sidecar) stop() {
	_ = sc.cmd.Process.Signal(os.Interrupt)
	var exit error
	select {
	case exit = <-sc.done:
	case <-time.After(30 * time.Second):
		_ = sc.cmd.Process.Kill()
		exit = <-sc.done
	}
	if exit != nil {
		fmt.Printf("adk2goose did not exit cleanly: %v\n", exit)
	}
	// The log is kept only when it says something.
	if fi, err := sc.logf.Stat(); err == nil && fi.Size() > 0 {
		fmt.Printf("adk2goose log (warnings and errors): %s\n", sc.logf.Name())
		_ = sc.logf.Close()
		_ = os.RemoveAll(filepath.Join(sc.dir, "data"))
		return
	}
	_ = sc.logf.Close()
	_ = os.RemoveAll(sc.dir)
}

type sample struct {
	rssMiB     float64
	goroutines int
	cpu        time.Duration
}

// sample reads the sidecar's RSS and CPU from /proc and its goroutine count
// from its own /metrics (go_goroutines).
func (sc *sidecar) sample(ctx context.Context, hc *http.Client) (sample, error) {
	var s sample
	pid := sc.cmd.Process.Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("failed to read the sidecar's RSS (Linux /proc): %w", err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			s.rssMiB = kb / 1024
		}
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command's closing parenthesis; utime and stime
		// are the 14th and 15th fields, in clock ticks (100 per second).
		if i := bytes.LastIndexByte(stat, ')'); i > 0 {
			f := strings.Fields(string(stat[i+1:]))
			if len(f) > 13 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				k, _ := strconv.ParseInt(f[12], 10, 64)
				s.cpu = time.Duration(u+k) * 10 * time.Millisecond
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.url+"/metrics", nil)
	if err != nil {
		return s, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return s, fmt.Errorf("failed to read metrics: %w", err)
	}
	defer resp.Body.Close()
	sc2 := bufio.NewScanner(resp.Body)
	for sc2.Scan() {
		if rest, ok := strings.CutPrefix(sc2.Text(), "go_goroutines "); ok {
			f, _ := strconv.ParseFloat(rest, 64)
			s.goroutines = int(f)
		}
	}
	return s, sc2.Err()
}

// settle waits until the sidecar's goroutines are back to at most baseline
// (plus a few for pooled keep-alive connections), or limit passes, and
// returns the last sample.
func (sc *sidecar) settle(ctx context.Context, hc *http.Client, baseline int, limit time.Duration) (sample, error) {
	hc.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	for {
		s, err := sc.sample(ctx, hc)
		if err != nil || s.goroutines <= baseline+10 || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

type runResult struct {
	completed, errors, maxOpen int
	ttfe, ttfeLater            []time.Duration // first turns', later turns'
	wall, cpu                  time.Duration
	peak                       sample
	samples                    []string // the first few error messages
}

func oneRun(ctx context.Context, cfg config, sc *sidecar, hc *http.Client, runNo int) (*runResult, error) {
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
			if err := post(ctx, hc, sc.url+"/apps/"+appName+"/users/u/sessions/"+ids[i], nil, nil); err != nil {
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
	cpu0, err := sc.sample(ctx, hc)
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
			if s, err := sc.sample(ctx, hc); err == nil {
				mu.Lock()
				res.peak.rssMiB = max(res.peak.rssMiB, s.rssMiB)
				res.peak.goroutines = max(res.peak.goroutines, s.goroutines)
				mu.Unlock()
			}
		}
	}()
	start := time.Now()
	for _, id := range ids {
		wg.Go(func() {
			for turn := range cfg.turns {
				ttfe, err := stream(ctx, hc, sc.url, id, cfg.deltas, &open, func() {
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
	cpu1, err := sc.sample(ctx, hc)
	if err != nil {
		return nil, err
	}
	res.cpu = cpu1.cpu - cpu0.cpu
	return res, nil
}

func post(ctx context.Context, hc *http.Client, url string, body any, check func(*http.Response) error) error {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("failed to encode request body: %w", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	if check != nil {
		return check(resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// stream runs one /run_sse and checks it: every delta as a partial event, a
// final event, no error event.
func stream(ctx context.Context, hc *http.Client, base, id string, deltas int, open *atomic.Int64, opened func()) (time.Duration, error) {
	start := time.Now()
	body := map[string]any{
		"appName": appName, "userId": "u", "sessionId": id, "streaming": true,
		"newMessage": map[string]any{"role": "user", "parts": []any{map[string]any{"text": "go"}}},
	}
	var ttfe time.Duration
	partial, final := 0, false
	isOpen := false
	defer func() {
		if isOpen {
			open.Add(-1)
		}
	}()
	err := post(ctx, hc, base+"/run_sse", body, func(resp *http.Response) error {
		r := bufio.NewReaderSize(resp.Body, 64<<10)
		for {
			line, err := r.ReadSlice('\n')
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("session %s: %w", id, err)
			}
			data, ok := bytes.CutPrefix(line, []byte("data: "))
			if !ok {
				continue
			}
			if bytes.Contains(data, []byte(`"errorCode"`)) || bytes.Contains(data, []byte(`"error"`)) {
				var ev struct{ ErrorCode, ErrorMessage, Error string }
				if json.Unmarshal(data, &ev) != nil {
					return fmt.Errorf("session %s: error event: %s", id, bytes.TrimSpace(data))
				}
				return fmt.Errorf("session %s: error event %s: %s%s", id, ev.ErrorCode, ev.ErrorMessage, ev.Error)
			}
			if bytes.Contains(data, []byte(`"partial":true`)) {
				if partial == 0 {
					ttfe = time.Since(start)
					isOpen = true
					opened()
				}
				partial++
			} else {
				final = true
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if partial != deltas || !final {
		return 0, fmt.Errorf("session %s: %d of %d deltas, final event %v", id, partial, deltas, final)
	}
	return ttfe, nil
}
