package gooseagent_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// gatedStarts holds every StartSession until release is closed and counts
// them; failing makes them fail.
type gatedStarts struct {
	*scriptBackend
	mu      sync.Mutex
	calls   int
	entered chan struct{} // one send per StartSession
	release chan struct{}
	failing bool
}

func (b *gatedStarts) StartSession(ctx context.Context, opts goose.StartOptions) (goose.Session, error) {
	b.mu.Lock()
	b.calls++
	failing := b.failing
	b.mu.Unlock()
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return goose.Session{}, ctx.Err()
	}
	if failing {
		return goose.Session{}, errors.New("goose is starting up")
	}
	return b.scriptBackend.StartSession(ctx, opts)
}

func (b *gatedStarts) starts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

func newEarly(t *testing.T, b goose.Backend) (func(string) []string, session.Service, *gooseagent.Controller) {
	t.Helper()
	a, control, err := gooseagent.NewWithController(gooseagent.Config{Name: "goose", Backend: b, StartGooseOnCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = control.Close(context.Background()) })
	svc := control.SessionService(session.InMemoryService())
	r := newRunner(t, a, svc)
	return func(text string) []string { return texts(t, r, "s", text) }, svc, control
}

func gooseIDInState(t *testing.T, svc session.Service) any {
	t.Helper()
	got, err := svc.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := got.Session.State().Get(gooseagent.SessionIDStateKey("goose"))
	return v
}

// TestStartGooseOnCreate: creating the ADK session starts its goose
// session before any turn; a first turn that comes while the start is in
// flight waits for it and uses that session (one start in all), and the
// session state then names it.
func TestStartGooseOnCreate(t *testing.T) {
	b := &gatedStarts{scriptBackend: newScriptBackend(whoAmI), entered: make(chan struct{}, 4), release: make(chan struct{})}
	chat, svc, _ := newEarly(t, b)
	newSession(t, svc, "s")
	<-b.entered // started by Create, not by a turn
	done := make(chan []string, 1)
	go func() { done <- chat("one") }()
	close(b.release)
	if got := <-done; !slices.Equal(got, []string{"goose: g1 got one"}) {
		t.Fatalf("first turn: %q", got)
	}
	if n := b.starts(); n != 1 {
		t.Fatalf("goose sessions started: %d, want 1", n)
	}
	if v := gooseIDInState(t, svc); v != "g1" {
		t.Fatalf("state names goose session %v, want g1", v)
	}
	if got := chat("two"); !slices.Equal(got, []string{"goose: g1 got two"}) {
		t.Fatalf("second turn: %q", got)
	}
}

// TestStartGooseOnCreateFails: an early start that fails costs nothing but
// the attempt: the first turn starts the goose session itself.
func TestStartGooseOnCreateFails(t *testing.T) {
	b := &gatedStarts{scriptBackend: newScriptBackend(whoAmI), entered: make(chan struct{}, 4), release: make(chan struct{}), failing: true}
	chat, svc, _ := newEarly(t, b)
	newSession(t, svc, "s")
	<-b.entered
	b.mu.Lock()
	b.failing = false
	b.mu.Unlock()
	close(b.release)
	if got := chat("one"); !slices.Equal(got, []string{"goose: g1 got one"}) {
		t.Fatalf("first turn: %q", got)
	}
	if n := b.starts(); n != 2 {
		t.Fatalf("goose session starts: %d, want the failed early one and the turn's", n)
	}
	if v := gooseIDInState(t, svc); v != "g1" {
		t.Fatalf("state names goose session %v, want g1", v)
	}
}

// TestStartGooseOnCreateThenDelete: deleting a session whose early start is
// in flight waits for it and deletes the goose session it started.
func TestStartGooseOnCreateThenDelete(t *testing.T) {
	b := &gatedStarts{scriptBackend: newScriptBackend(whoAmI), entered: make(chan struct{}, 4), release: make(chan struct{})}
	_, svc, _ := newEarly(t, b)
	newSession(t, svc, "s")
	<-b.entered
	deleted := make(chan error, 1)
	go func() {
		deleted <- svc.Delete(context.Background(), &session.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"})
	}()
	close(b.release)
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if b.exists("g1") {
		t.Fatal("goose session g1 survived the ADK session's deletion")
	}
}

// TestStartGooseOnCreateStopsAtClose: Close cancels an early start goose
// never answers, once its grace is over, and waits for it (goleak checks
// nothing is left).
func TestStartGooseOnCreateStopsAtClose(t *testing.T) {
	gooseagent.SetEarlyStartGrace(t, 50*time.Millisecond)
	b := &gatedStarts{scriptBackend: newScriptBackend(whoAmI), entered: make(chan struct{}, 4), release: make(chan struct{})}
	_, svc, control := newEarly(t, b)
	newSession(t, svc, "s")
	<-b.entered
	if err := control.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// After Close nothing starts early any more.
	if _, err := svc.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "t"}); err != nil {
		t.Fatal(err)
	}
	if n := b.starts(); n != 1 {
		t.Fatalf("starts after Close: %d", n)
	}
}

// TestEarlySessionsOfADeadProcessAreDeleted: a process that dies without
// its Close (kill -9, a crash) cannot delete the goose sessions it started
// early that no turn took, and no ADK state names them. EarlySessions
// lists them until a turn takes one, so the next process deletes those it
// finds listed (DeleteLeftEarly); the one a turn took is not listed, and
// stays.
func TestEarlySessionsOfADeadProcessAreDeleted(t *testing.T) {
	store, err := server.OpenUsageStore(t.Context(), filepath.Join(t.TempDir(), server.UsageDBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	b := newScriptBackend(whoAmI)
	cfg := gooseagent.Config{Name: "goose", Backend: b, StartGooseOnCreate: true, EarlySessions: store}

	// The process that dies: never closed.
	a, control, err := gooseagent.NewWithController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc := control.SessionService(session.InMemoryService())
	newSession(t, svc, "s")
	newSession(t, svc, "unused")
	poll.Until(t, "both early starts", func() bool { return b.exists("g1") && b.exists("g2") })
	got := texts(t, newRunner(t, a, svc), "s", "one")
	used := gooseIDInState(t, svc)
	if len(got) != 1 || used == nil {
		t.Fatalf("turn: %q, state names %v", got, used)
	}
	unused := "g1"
	if used == "g1" {
		unused = "g2"
	}
	left, err := store.ListEarly(t.Context())
	if err != nil || !slices.Equal(left, []string{unused}) {
		t.Fatalf("listed early sessions: %v %v, want only %s, the one no turn took", left, err, unused)
	}

	// The next process.
	_, next, err := gooseagent.NewWithController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = next.Close(context.Background()) }()
	if rest, err := next.DeleteLeftEarly(t.Context(), left); len(rest) != 0 || err != nil {
		t.Fatalf("DeleteLeftEarly: %v left, %v", rest, err)
	}
	if b.exists(unused) || !b.exists(used.(string)) {
		t.Errorf("goose sessions after the next process started: %s exists %t, %s exists %t; want only the used one",
			unused, b.exists(unused), used, b.exists(used.(string)))
	}
	if left, err := store.ListEarly(t.Context()); len(left) != 0 || err != nil {
		t.Errorf("still listed: %v %v", left, err)
	}
}
