// Command livebench measures /run_live against /run_sse on the real
// adk2goose binary and the fake `goose serve`, and prints two tables:
//
//   - time to first event at concurrency 1: -turns turns over /run_sse
//     (one request each) and -turns over one /run_live socket, alternating,
//     with the target /run_live p50 <= /run_sse p50 + 1 ms;
//
//   - -sockets live sockets at once, each running -socket-turns turns: how
//     many completed, and the sidecar's RSS and goroutines per idle socket
//     (opened, before their first turn).
//
//     go run ./hack/livebench -adk2goose bin/adk2goose      (or: make live-bench)
//
// The exit status is 1 when a turn failed or the target was missed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/adk2goose/goose-operator/hack/internal/sidecarproc"
	"github.com/adk2goose/goose-operator/internal/testing/percentile"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

type config struct {
	binary      string
	turns       int
	sockets     int
	socketTurns int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.binary, "adk2goose", "bin/adk2goose", "the adk2goose binary")
	flag.IntVar(&cfg.turns, "turns", 200, "turns over each route at concurrency 1")
	flag.IntVar(&cfg.sockets, "sockets", 500, "live sockets open at once")
	flag.IntVar(&cfg.socketTurns, "socket-turns", 3, "turns on each of those sockets, one after the other")
	flag.Parse()
	ok, err := run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "livebench:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) (bool, error) {
	fake := goosetest.NewServe(nil, goosetest.WithServeScript(goosetest.Echo))
	defer fake.Close()
	sc, err := sidecarproc.Start(ctx, sidecarproc.Options{
		Binary: cfg.binary, Flavor: "serve", GooseURL: fake.URL, GooseSecret: fake.Secret,
		Args: []string{"-live-conns-per-user", fmt.Sprint(cfg.sockets + 10), "-goose-idle-timeout", "5m"},
	})
	if err != nil {
		return false, err
	}
	defer sc.Stop()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	fmt.Printf("adk2goose %s on the fake goose serve (echo replies)\n\n", cfg.binary)

	ok, err := ttfe(ctx, cfg, sc, hc)
	if err != nil {
		return false, err
	}
	many, err := manySockets(ctx, cfg, sc, hc)
	if err != nil {
		return false, err
	}
	return ok && many, nil
}

// ttfe alternates /run_sse turns and turns on one /run_live socket.
func ttfe(ctx context.Context, cfg config, sc *sidecarproc.Sidecar, hc *http.Client) (bool, error) {
	for _, id := range []string{"sse", "live"} {
		if err := sidecarproc.CreateSession(ctx, hc, sc.URL, id); err != nil {
			return false, err
		}
	}
	ws, err := dial(ctx, sc.URL, "live")
	if err != nil {
		return false, err
	}
	defer ws.Close()
	var sse, live []time.Duration
	for i := range cfg.turns {
		text := fmt.Sprintf("turn %d", i)
		start := time.Now()
		var first time.Duration
		if _, err := sidecarproc.Stream(ctx, hc, sc.URL, "sse", text, func() {
			if first == 0 {
				first = time.Since(start)
			}
		}); err != nil {
			return false, err
		}
		sse = append(sse, first)
		d, err := liveTurn(ws, text)
		if err != nil {
			return false, err
		}
		live = append(live, d)
	}
	fmt.Printf("time to first event, concurrency 1, %d turns each, alternating\n", cfg.turns)
	fmt.Printf("%-10s %10s %10s %10s\n", "path", "p50", "p90", "p99")
	row := func(name string, d []time.Duration) {
		fmt.Printf("%-10s %10s %10s %10s\n", name, ms(percentile.Of(d, 50)), ms(percentile.Of(d, 90)), ms(percentile.Of(d, 99)))
	}
	row("/run_sse", sse)
	row("/run_live", live)
	diff := percentile.Of(live, 50) - percentile.Of(sse, 50)
	holds := diff <= time.Millisecond
	verdict := "holds"
	if !holds {
		verdict = "MISSED"
	}
	fmt.Printf("target /run_live p50 <= /run_sse p50 + 1 ms: live - sse = %s: %s\n\n", ms(diff), verdict)
	return holds, nil
}

// manySockets opens cfg.sockets sockets, measures the sidecar with them
// idle, then runs cfg.socketTurns turns on each at once.
func manySockets(ctx context.Context, cfg config, sc *sidecarproc.Sidecar, hc *http.Client) (bool, error) {
	ids := make([]string, cfg.sockets)
	for i := range ids {
		ids[i] = fmt.Sprintf("many-%d", i)
		if err := sidecarproc.CreateSession(ctx, hc, sc.URL, ids[i]); err != nil {
			return false, err
		}
	}
	base, err := sc.Settle(ctx, hc, 0, 2*time.Second)
	if err != nil {
		return false, err
	}
	conns := make([]*websocket.Conn, len(ids))
	for i, id := range ids {
		if conns[i], err = dial(ctx, sc.URL, id); err != nil {
			return false, fmt.Errorf("socket %d: %w", i, err)
		}
		defer conns[i].Close()
	}
	idle, err := sc.Settle(ctx, hc, 0, 2*time.Second)
	if err != nil {
		return false, err
	}
	var done, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for i, ws := range conns {
		wg.Go(func() {
			for t := range cfg.socketTurns {
				if _, err := liveTurn(ws, fmt.Sprintf("socket %d turn %d", i, t)); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	n := float64(cfg.sockets)
	fmt.Printf("%d live sockets at once, %d turns each\n", cfg.sockets, cfg.socketTurns)
	fmt.Printf("%12s %8s %10s %22s %24s\n", "turns done", "failed", "wall", "RSS per idle socket", "goroutines per socket")
	fmt.Printf("%6d/%-5d %8d %10s %18.1f KiB %24.1f\n", done.Load(), cfg.sockets*cfg.socketTurns, failed.Load(),
		wall.Round(10*time.Millisecond), (idle.RSSMiB-base.RSSMiB)*1024/n, float64(idle.Goroutines-base.Goroutines)/n)
	if p := firstErr.Load(); p != nil {
		fmt.Printf("first error: %v\n", *p)
	}
	return failed.Load() == 0 && done.Load() == int64(cfg.sockets*cfg.socketTurns), nil
}

func dial(ctx context.Context, base, session string) (*websocket.Conn, error) {
	q := url.Values{"appName": {sidecarproc.AppName}, "userId": {"u"}, "sessionId": {session}}
	u := "ws" + strings.TrimPrefix(base, "http") + "/run_live?" + q.Encode()
	ws, resp, err := websocket.DefaultDialer.DialContext(ctx, u, http.Header{"Authorization": {"Bearer " + sidecarproc.Token}})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("failed to open %s: %s: %w", u, resp.Status, err)
		}
		return nil, fmt.Errorf("failed to open %s: %w", u, err)
	}
	return ws, nil
}

// liveTurn sends text on ws and reads the turn to its final event; it
// returns the time to the first event.
func liveTurn(ws *websocket.Conn, text string) (time.Duration, error) {
	msg := map[string]any{"content": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}
	_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
	start := time.Now()
	if err := ws.WriteJSON(msg); err != nil {
		return 0, fmt.Errorf("failed to send a live message: %w", err)
	}
	var first time.Duration
	for {
		var ev struct {
			Partial      bool   `json:"partial"`
			TurnComplete bool   `json:"turnComplete"`
			ErrorCode    string `json:"errorCode"`
			ErrorMessage string `json:"errorMessage"`
		}
		_, data, err := ws.ReadMessage()
		if err != nil {
			return 0, fmt.Errorf("failed to read a live event: %w", err)
		}
		if first == 0 {
			first = time.Since(start)
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return 0, fmt.Errorf("failed to decode a live event: %w", err)
		}
		if ev.ErrorCode != "" {
			return 0, fmt.Errorf("error event %s: %s", ev.ErrorCode, ev.ErrorMessage)
		}
		if ev.TurnComplete && !ev.Partial {
			return first, nil
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
