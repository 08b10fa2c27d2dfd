package gooseagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// deletions is a goose that only deletes sessions, and notes which.
type deletions struct {
	goose.Backend // nil: nothing else is called
	mu            sync.Mutex
	ids           []string
	fail          error // every deletion's answer, when set
}

func (d *deletions) Flavor() goose.Flavor { return goose.FlavorServe }

func (d *deletions) DeleteSession(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids = append(d.ids, id)
	return d.fail
}

func (d *deletions) deleted() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ids)
}

// TestForgottenEarlySessionsAreDeleted: an entry forgotten beyond
// IdleSessions whose goose session was started early and never used takes
// that goose session with it (nothing else names it); a forgotten entry a
// turn used does not (its ADK state names it, the next turn resumes it).
// Close deletes the unused early sessions still remembered.
func TestForgottenEarlySessionsAreDeleted(t *testing.T) {
	d := &deletions{}
	_, control, err := NewWithController(Config{Name: "goose", Backend: d, IdleSessions: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g := control.g
	remember := func(id string, unusedEarly bool, lastUsed time.Time) { rememberEntry(g, id, unusedEarly, lastUsed) }
	long := time.Now().Add(-time.Hour)
	remember("used", false, long)
	remember("early", true, long.Add(time.Minute))
	// A third entry is one beyond IdleSessions: the idle ones are forgotten
	// down to one, the oldest first.
	remember("newest", true, time.Time{})
	g.wg.Wait()
	if got := d.deleted(); !slices.Equal(got, []string{"goose-early"}) {
		t.Fatalf("goose sessions deleted as their entries were forgotten: %v, want only goose-early", got)
	}
	if err := control.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := d.deleted(); !slices.Equal(got, []string{"goose-early", "goose-newest"}) {
		t.Fatalf("goose sessions deleted by Close: %v, want goose-newest after goose-early", got)
	}
}

// rememberEntry makes g remember session id with goose session "goose-"+id
// (unusedEarly: started early, no turn since), last used at lastUsed (now
// when zero).
func rememberEntry(g *gooseAgent, id string, unusedEarly bool, lastUsed time.Time) {
	e := g.entry(SessionKey{AppName: "app", UserID: "u", SessionID: id})
	e.gooseID, e.ready = "goose-"+id, true
	g.mu.Lock()
	e.unusedEarly = unusedEarly
	g.mu.Unlock()
	g.unuse(e)
	if !lastUsed.IsZero() {
		g.mu.Lock()
		e.lastUsed = lastUsed
		g.mu.Unlock()
	}
}

// rememberingUnusedEarly is a controller on d that remembers sessions ids,
// each with an unused early goose session.
func rememberingUnusedEarly(t *testing.T, d *deletions, ids ...string) *Controller {
	t.Helper()
	_, control, err := NewWithController(Config{Name: "goose", Backend: d, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		rememberEntry(control.g, id, true, time.Time{})
	}
	return control
}

// TestCloseWithGooseGone: when goose cannot be reached, Close tries one
// deletion and says how many early sessions stay, rather than an error
// (and a wait) for each.
func TestCloseWithGooseGone(t *testing.T) {
	d := &deletions{fail: fmt.Errorf("failed to connect to goose: %w", goose.ErrUnavailable)}
	control := rememberingUnusedEarly(t, d, "a", "b", "c")
	err := control.Close(t.Context())
	if err == nil || !errors.Is(err, goose.ErrUnavailable) || !strings.Contains(err.Error(), "2 more goose sessions started early stay in goose") {
		t.Fatalf("Close: %v, want goose unavailable and 2 more left", err)
	}
	if n := len(d.deleted()); n != 1 {
		t.Fatalf("deletions tried: %d, want 1", n)
	}
}

// lateStarts is a goose whose session starts finish when release is
// closed: goose then has the session even if the caller gave up meanwhile
// (its answer came too late, the id is lost to it).
type lateStarts struct {
	deletions
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	made    []string
}

func (l *lateStarts) StartSession(ctx context.Context, _ goose.StartOptions) (goose.Session, error) {
	l.entered <- struct{}{}
	<-l.release
	l.mu.Lock()
	id := fmt.Sprintf("goose-%d", len(l.made)+1)
	l.made = append(l.made, id)
	l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return goose.Session{}, err
	}
	return goose.Session{ID: id}, nil
}

// TestCloseLetsAnEarlyStartFinish: an early start still waiting for goose
// when Close comes is not cancelled at once: goose's answer arrives within
// the grace, and the goose session it made, which no turn used, is
// deleted rather than left in goose under an id nobody learned.
func TestCloseLetsAnEarlyStartFinish(t *testing.T) {
	l := &lateStarts{entered: make(chan struct{}, 1), release: make(chan struct{})}
	_, control, err := NewWithController(Config{Name: "goose", Backend: l, StartGooseOnCreate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g := control.g
	svc := control.SessionService(session.InMemoryService())
	if _, err := svc.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	<-l.entered
	closed := make(chan error, 1)
	go func() { closed <- control.Close(t.Context()) }()
	for {
		g.mu.Lock()
		c := g.closed
		g.mu.Unlock()
		if c {
			break
		}
		runtime.Gosched()
	}
	close(l.release) // goose answers while Close is under way
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := l.deleted(); !slices.Equal(got, []string{"goose-1"}) {
		t.Fatalf("goose sessions deleted: %v, want goose-1, the early start's", got)
	}
}

// TestGooseThatCannotDeleteIsAskedOnce: goosed 1.38-1.41 answers that it
// cannot delete sessions; after that first answer no deletion goes to goose
// (not the other unused early sessions at Close, nor an ADK session's
// deletion), and none of it is an error.
func TestGooseThatCannotDeleteIsAskedOnce(t *testing.T) {
	d := &deletions{fail: fmt.Errorf("failed to delete session: %w", goose.ErrUnsupported)}
	control := rememberingUnusedEarly(t, d, "a", "b", "c")
	rememberEntry(control.g, "d", false, time.Time{}) // used by a turn
	if err := control.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := control.DeleteSession(t.Context(), SessionKey{AppName: "app", UserID: "u", SessionID: "d"}, nil); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if n := len(d.deleted()); n != 1 {
		t.Fatalf("deletions sent to goose: %d, want 1", n)
	}
}
