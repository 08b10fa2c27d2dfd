package gooseagent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// startRecorder records the options goose sessions are started with.
type startRecorder struct {
	*scriptBackend
	mu     sync.Mutex
	starts []goose.StartOptions
}

func (b *startRecorder) StartSession(ctx context.Context, opts goose.StartOptions) (goose.Session, error) {
	b.mu.Lock()
	b.starts = append(b.starts, opts)
	b.mu.Unlock()
	return b.scriptBackend.StartSession(ctx, opts)
}

// fakeWorkspaces hands out /ws/<user>/<session> and counts opens and releases.
type fakeWorkspaces struct {
	mu               sync.Mutex
	opened, released int
	fail             error
}

func (w *fakeWorkspaces) Open(_ context.Context, user, sess string) (string, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return "", nil, w.fail
	}
	w.opened++
	return "/ws/" + user + "/" + sess, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.released++
	}, nil
}

func (w *fakeWorkspaces) counts() (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.opened, w.released
}

func TestWorkspacesChooseWorkingDir(t *testing.T) {
	var mu sync.Mutex
	var prompts []string
	b := &startRecorder{scriptBackend: newScriptBackend(func(sid, text string) goosetest.Reply {
		mu.Lock()
		prompts = append(prompts, text)
		mu.Unlock()
		return goosetest.Echo(sid, text)
	})}
	ws := &fakeWorkspaces{}
	a, err := gooseagent.New(gooseagent.Config{Name: "goose", Backend: b, Workspaces: ws,
		StartOptions: goose.StartOptions{WorkingDir: "/unused", Mode: "approve"}})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{backend: b.scriptBackend, sessions: session.InMemoryService()}
	if h.runner, err = runner.New(runner.Config{AppName: "app", Agent: a, SessionService: h.sessions}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sessions.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	h.run(t, "one", agent.StreamingModeNone)
	h.run(t, "two", agent.StreamingModeNone)
	if len(b.starts) != 1 || b.starts[0].WorkingDir != "/ws/u/s" || b.starts[0].Mode != "approve" {
		t.Fatalf("goose sessions started with %+v", b.starts)
	}
	// Opened before every turn (goose refuses a session whose directory is
	// gone) and released when the turn ends.
	if o, r := ws.counts(); o != 2 || r != 2 {
		t.Fatalf("opened %d, released %d", o, r)
	}

	ws.fail = errors.New("disk full")
	evs := h.run(t, "three", agent.StreamingModeNone)
	last := evs[len(evs)-1]
	if last.ErrorCode != gooseagent.ErrorCodeInternal || !strings.Contains(last.ErrorMessage, "failed to prepare working directory: disk full") {
		t.Fatalf("got %s", dump(evs))
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(prompts, ",") != "one,two" {
		t.Fatalf("goose got %v, want the first two prompts only", prompts)
	}
}
