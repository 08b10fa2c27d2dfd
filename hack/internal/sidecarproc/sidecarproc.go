// Package sidecarproc runs the real adk2goose binary for the hack/ load
// tools, reads a process's RSS and CPU from /proc, and speaks the few ADK
// REST calls they make (create a session, stream a /run_sse).
package sidecarproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest/ttfestages"
)

// AppName and Token are the app and inbound token the sidecar is started with.
const (
	AppName = "load"
	Token   = "load-test-token"
)

// Options says how to start the sidecar.
type Options struct {
	Binary      string // the adk2goose binary
	Flavor      string // serve or goosed
	GooseURL    string
	GooseSecret string
	// Args are added to the command line.
	Args []string
	// Dir, when set, is the sidecar's directory (data, workspace, log),
	// which Stop keeps: a sidecar started again on it finds its sessions.
	// Empty: a new temporary directory.
	Dir string
	// Listen is the address to serve on; empty: a free loopback port.
	Listen string
}

// Sidecar is a running adk2goose process.
type Sidecar struct {
	URL     string
	cmd     *exec.Cmd
	dir     string
	tempDir bool // dir is Start's own, removed by Stop
	logPath string
	done    chan struct{} // closed when the process has exited, with exit set
	exit    error
}

// Start starts the binary on a free loopback port, in a new temporary
// directory (data, workspaces, its log), and waits until it is healthy.
func Start(ctx context.Context, o Options) (*Sidecar, error) {
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "adk2goose-load-"); err != nil {
			return nil, fmt.Errorf("failed to create the sidecar's directory: %w", err)
		}
	}
	for name, v := range map[string]string{"token": Token, "goose-secret": o.GooseSecret} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			return nil, fmt.Errorf("failed to write the sidecar's %s: %w", name, err)
		}
	}
	addr := o.Listen
	if addr == "" {
		var err error
		if addr, err = freeAddr(ctx); err != nil {
			return nil, err
		}
	}
	args := append([]string{
		"-listen", addr, "-app-name", AppName, "-data-dir", filepath.Join(dir, "data"),
		"-goose-url", o.GooseURL, "-goose-flavor", o.Flavor, "-goose-secret-file", filepath.Join(dir, "goose-secret"),
		"-auth-token-file", filepath.Join(dir, "token"), "-log-level", "warn", "-log-format", "text",
		"-goose-working-dir", filepath.Join(dir, "workspace"), // session directories go below it, removed with dir
	}, o.Args...)
	// Appended to: a sidecar started again on Dir adds to its log.
	logf, err := os.OpenFile(filepath.Join(dir, "adk2goose.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("failed to create the sidecar's log: %w", err)
	}
	cmd := exec.CommandContext(ctx, o.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	_ = logf.Close() // the child has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", o.Binary, err)
	}
	sc := &Sidecar{URL: "http://" + addr, cmd: cmd, dir: dir, tempDir: o.Dir == "", logPath: logf.Name(), done: make(chan struct{})}
	go func() {
		sc.exit = cmd.Wait()
		close(sc.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.URL+"/healthz", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return sc, nil
			}
		}
		select {
		case <-sc.done:
			return nil, fmt.Errorf("adk2goose exited (log: %s): %w", sc.logPath, sc.exit)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			sc.Stop()
			return nil, errors.New("adk2goose did not become healthy")
		}
	}
}

// freeAddr is a loopback address with a port nobody listens on.
func freeAddr(ctx context.Context) (string, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("failed to find a free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // the server binds it next; loopback ports are not reused that fast
	return addr, nil
}

// Pid is the sidecar's process id.
func (sc *Sidecar) Pid() int { return sc.cmd.Process.Pid }

// Signal sends sig to the sidecar.
func (sc *Sidecar) Signal(sig os.Signal) error {
	if err := sc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("failed to signal adk2goose: %w", err)
	}
	return nil
}

// Wait waits for the sidecar to exit, killing it after limit, and returns
// how it exited.
func (sc *Sidecar) Wait(limit time.Duration) error {
	select {
	case <-sc.done:
	case <-time.After(limit):
		_ = sc.cmd.Process.Kill()
		<-sc.done
	}
	return sc.exit
}

// Stop interrupts the sidecar and waits for it; Start's own directory is
// removed unless its log says something, which is then printed.
func (sc *Sidecar) Stop() {
	_ = sc.Signal(os.Interrupt)
	if exit := sc.Wait(30 * time.Second); exit != nil {
		fmt.Printf("adk2goose did not exit cleanly: %v\n", exit)
	}
	if !sc.tempDir {
		return
	}
	if fi, err := os.Stat(sc.logPath); err == nil && fi.Size() > 0 {
		fmt.Printf("adk2goose log (warnings and errors): %s\n", sc.logPath)
		_ = os.RemoveAll(filepath.Join(sc.dir, "data"))
		return
	}
	_ = os.RemoveAll(sc.dir)
}

// Sample is a process's resident memory, CPU used so far and, for the
// sidecar, its goroutines.
type Sample struct {
	RSSMiB     float64
	CPU        time.Duration
	Goroutines int
}

// ReadProc reads a process's RSS and CPU time (user + system) from /proc.
func ReadProc(pid int) (Sample, error) {
	var s Sample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("failed to read process %d's RSS (Linux /proc): %w", pid, err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			s.RSSMiB = kb / 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("failed to read process %d's CPU time: %w", pid, err)
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th fields, in clock ticks (100 per second).
	if i := bytes.LastIndexByte(stat, ')'); i > 0 {
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 13 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			k, _ := strconv.ParseInt(f[12], 10, 64)
			s.CPU = time.Duration(u+k) * 10 * time.Millisecond
		}
	}
	return s, nil
}

// Sample reads the sidecar's RSS and CPU from /proc and its goroutine
// count from its own /metrics (go_goroutines).
func (sc *Sidecar) Sample(ctx context.Context, hc *http.Client) (Sample, error) {
	s, err := ReadProc(sc.Pid())
	if err != nil {
		return s, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.URL+"/metrics", nil)
	if err != nil {
		return s, err
	}
	req.Header.Set("Authorization", "Bearer "+Token)
	resp, err := hc.Do(req)
	if err != nil {
		return s, fmt.Errorf("failed to read metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "go_goroutines "); ok {
			f, _ := strconv.ParseFloat(rest, 64)
			s.Goroutines = int(f)
		}
	}
	return s, lines.Err()
}

// Settle waits until the sidecar's goroutines are back to at most baseline
// (plus a few for pooled keep-alive connections), or limit passes, and
// returns the last sample.
func (sc *Sidecar) Settle(ctx context.Context, hc *http.Client, baseline int, limit time.Duration) (Sample, error) {
	hc.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	for {
		s, err := sc.Sample(ctx, hc)
		if err != nil || s.Goroutines <= baseline+10 || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// CreateSession creates the session id of user u.
func CreateSession(ctx context.Context, hc *http.Client, base, id string) error {
	return post(ctx, hc, base+"/apps/"+AppName+"/users/u/sessions/"+id, nil, nil)
}

// Stream runs one /run_sse of text on session id of user u and checks it
// ends well: no error event, a final event. onDelta is called for each goose
// delta as it arrives, and it returns how many there were: a partial event
// carries one, or several that reached the sidecar together (the
// goosetest.PacedDeltas it holds; an event with other text counts as one).
func Stream(ctx context.Context, hc *http.Client, base, id, text string, onDelta func()) (deltas int, err error) {
	body := map[string]any{
		"appName": AppName, "userId": "u", "sessionId": id, "streaming": true,
		"newMessage": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}},
	}
	final := false
	err = post(ctx, hc, base+"/run_sse", body, func(resp *http.Response) error {
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
				for range goosetest.PacedDeltasIn(data) {
					deltas++
					onDelta()
				}
			} else {
				final = true
			}
		}
	})
	if err == nil && !final {
		err = fmt.Errorf("session %s: no final event after %d deltas", id, deltas)
	}
	return deltas, err
}

// TraceView reads the spans the sidecar keeps of session id's turns, as the
// ADK web UI's trace view does: none once they are among the oldest beyond
// its -debug-traces.
func TraceView(ctx context.Context, hc *http.Client, base, id string) ([]ttfestages.DebugSpan, error) {
	var spans []ttfestages.DebugSpan
	err := call(ctx, hc, http.MethodGet, base+"/debug/trace/session/"+id, nil, func(resp *http.Response) error {
		return json.NewDecoder(resp.Body).Decode(&spans)
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read the trace view of session %s: %w", id, err)
	}
	return spans, nil
}

func post(ctx context.Context, hc *http.Client, url string, body any, check func(*http.Response) error) error {
	return call(ctx, hc, http.MethodPost, url, body, check)
}

func call(ctx context.Context, hc *http.Client, method, url string, body any, check func(*http.Response) error) error {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("failed to encode request body: %w", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+Token)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
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
