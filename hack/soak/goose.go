package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/adk2goose/goose-operator/hack/internal/selfproc"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// The fake goose runs in a child process (`soak fake-goose`) so that it can
// be killed, stopped and started again on the same address, as goose is in
// its container. Its store (sessions, history, token totals) and the
// approvals it received are kept in a state file, as goose keeps its
// sessions.db: written when it stops and when it crashes.

// holdFor keeps goose busy in the replies a client leaves or cancels, so
// that it leaves mid-reply.
const holdFor = 5 * time.Second

// stallFor is how long goose pauses in a stalled reply.
const stallFor = 1500 * time.Millisecond

// prompt is the user text of a turn: the fake's script reads what to do
// from it.
func prompt(t Turn) string {
	hold := t.Kind == Cancel || t.Client == Disconnect
	return fmt.Sprintf("soak t=%d approval=%t hold=%t reply=%s in=%d out=%d", t.ID, t.Kind == Approval, hold, t.Reply, t.Usage.In, t.Usage.Out)
}

// answerText is what goose answers turn id with; it is in the session's
// history once when the turn was answered.
func answerText(id int) string { return fmt.Sprintf("ans-%d.", id) }

// toolCallID is goose's id of the tool call of approval turn id.
func toolCallID(id int) string { return fmt.Sprintf("call-%d", id) }

// script answers a prompt: a few deltas, the tool call an approval turn
// asks about, the answer and the reply's usage. Other text gets an echo.
func script(_ string, text string) goosetest.Reply {
	f := map[string]string{}
	for _, kv := range strings.Fields(text) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	id, err := strconv.Atoi(f["t"])
	if err != nil {
		return goosetest.Echo("", text)
	}
	in, _ := strconv.ParseInt(f["in"], 10, 64)
	out, _ := strconv.ParseInt(f["out"], 10, 64)
	steps := []goosetest.Step{{Text: fmt.Sprintf("t%d ", id)}, {Text: "working "}}
	if f["hold"] == "true" {
		steps = append(steps, goosetest.Step{Delay: holdFor, Text: "held "})
	}
	if f["approval"] == "true" {
		steps = append(steps, goosetest.Step{Tool: &goosetest.ToolStep{
			ID: toolCallID(id), Name: "shell", Extension: "developer", Arguments: json.RawMessage(fmt.Sprintf(`{"command":"t%d"}`, id)),
			Result: fmt.Sprintf("ran-%d", id), NeedsApproval: true,
		}})
	}
	switch ReplyFault(f["reply"]) {
	case Stall:
		steps = append(steps, goosetest.Step{Delay: stallFor, Text: "stalled "})
	case DropMidFrame:
		return goosetest.Reply{Steps: append(steps, goosetest.Step{DropMidFrame: true})}
	}
	return goosetest.Reply{Steps: append(steps, goosetest.Step{Text: answerText(id)}, goosetest.Step{Usage: &goosetest.UsageStep{Input: in, Output: out}})}
}

// gooseState is the fake's state file.
type gooseState struct {
	Store goosetest.ServeStore `json:"store"`
	// Permissions are the answers goose received to its permission
	// requests, in order.
	Permissions []PermissionAnswer `json:"permissions"`
}

// gooseStats is what the fake's control address answers.
type gooseStats struct {
	OpenConnections int                `json:"openConnections"`
	Permissions     []PermissionAnswer `json:"permissions"`
}

// serveGoose is the child role: the fake goose serve on -listen, its
// control server on a port of its own (GET /stats, POST /crash), until the
// parent closes stdin.
func serveGoose(args []string) error {
	fs := flag.NewFlagSet("fake-goose", flag.ContinueOnError)
	listen := fs.String("listen", "", "address to serve goose on")
	secret := fs.String("secret", "", "goose's secret key")
	statePath := fs.String("state", "", "the state file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var st gooseState
	if b, err := os.ReadFile(*statePath); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("failed to read the state file: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("failed to read the state file: %w", err)
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", *listen)
	if err != nil {
		return fmt.Errorf("failed to listen: %w", err)
	}
	fake := goosetest.NewServe(nil, goosetest.WithServeScript(script), goosetest.WithServeListener(ln),
		goosetest.WithServeSecret(*secret), goosetest.WithServeRestore(st.Store))
	stats := func() gooseStats {
		s := gooseStats{OpenConnections: fake.OpenConnections(), Permissions: append([]PermissionAnswer(nil), st.Permissions...)}
		for _, p := range fake.Permissions() {
			// goose runs the tool on an allow_* option only; anything else
			// (reject_*, cancelled) declines it.
			s.Permissions = append(s.Permissions, PermissionAnswer{ToolCallID: p.ToolCallID, RequestID: p.RequestID,
				Allowed: p.Outcome == "selected" && strings.HasPrefix(p.OptionID, "allow_")})
		}
		return s
	}
	save := func() error {
		b, err := json.Marshal(gooseState{Store: fake.Snapshot(), Permissions: stats().Permissions})
		if err != nil {
			return err
		}
		if err := os.WriteFile(*statePath+".tmp", b, 0o600); err != nil {
			return fmt.Errorf("failed to write the state file: %w", err)
		}
		return os.Rename(*statePath+".tmp", *statePath)
	}
	control := http.NewServeMux()
	control.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(stats()) })
	control.HandleFunc("POST /crash", func(http.ResponseWriter, *http.Request) {
		// The server first, its sockets cut with no close frames as the
		// kernel cuts them: nothing goose tells a client, even on a
		// connection made a moment ago, can be missing from the save, as
		// goose writes a message to its sessions.db before sending it.
		fake.Close()
		if err := save(); err != nil {
			fmt.Fprintln(os.Stderr, "fake-goose:", err)
		}
		os.Exit(3) // no close frames, no answers: the sockets just close
	})
	cln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("failed to listen: %w", err)
	}
	csrv := &http.Server{Handler: control, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = csrv.Serve(cln) }()
	if err := json.NewEncoder(os.Stdout).Encode(childInfo{URL: fake.URL, Secret: fake.Secret, Control: "http://" + cln.Addr().String()}); err != nil {
		return err
	}
	selfproc.UntilStdinCloses()
	_ = csrv.Close()
	fake.Close()
	return save()
}

// childInfo is the first line the child prints.
type childInfo struct {
	URL     string `json:"url"`
	Secret  string `json:"secret"`
	Control string `json:"control"`
}

// gooseProc is a running fake goose child.
type gooseProc struct {
	*selfproc.Proc
	info childInfo
}

// startGoose starts the fake goose on listen with its state in statePath.
func startGoose(ctx context.Context, listen, secret, statePath string) (*gooseProc, error) {
	g := &gooseProc{}
	p, err := selfproc.Start(ctx, &g.info, "fake-goose", "-listen", listen, "-secret", secret, "-state", statePath)
	if err != nil {
		return nil, err
	}
	g.Proc = p
	return g, nil
}

// crash makes goose die at once, its store saved, and waits for it.
func (g *gooseProc) crash(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.info.Control+"/crash", nil)
	if err != nil {
		return err
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
	}
	select {
	case <-g.Done():
		return nil
	case <-time.After(10 * time.Second):
		_ = g.Cmd.Process.Kill()
		<-g.Done()
		return errors.New("the fake goose did not crash when asked; killed it")
	}
}

// stats reads the fake's figures.
func (g *gooseProc) stats(ctx context.Context) (gooseStats, error) {
	var s gooseStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.info.Control+"/stats", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("failed to read the fake goose's stats: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("failed to read the fake goose's stats: %w", err)
	}
	return s, nil
}
