package gooseagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestCloseWithGooseGone: when goose cannot be reached, Close tries one
// deletion and says how many early sessions stay, rather than an error
// (and a wait) for each.
func TestCloseWithGooseGone(t *testing.T) {
	d := &deletions{fail: fmt.Errorf("failed to connect to goose: %w", goose.ErrUnavailable)}
	_, control, err := NewWithController(Config{Name: "goose", Backend: d, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		rememberEntry(control.g, id, true, time.Time{})
	}
	err = control.Close(t.Context())
	if err == nil || !errors.Is(err, goose.ErrUnavailable) || !strings.Contains(err.Error(), "2 more goose sessions started early stay in goose") {
		t.Fatalf("Close: %v, want goose unavailable and 2 more left", err)
	}
	if n := len(d.deleted()); n != 1 {
		t.Fatalf("deletions tried: %d, want 1", n)
	}
}
