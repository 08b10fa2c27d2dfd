package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
	"google.golang.org/adk/model"
	"google.golang.org/adk/session"
	"google.golang.org/genai"
)

func openTestSessions(t *testing.T, dir string) session.Service {
	t.Helper()
	dbs, svc, err := openSessionService(t.Context(), filepath.Join(dir, SessionsDBFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	})
	return svc
}

// textEvent is an event of goose's model text.
func textEvent(text string, partial bool) *session.Event {
	ev := session.NewEventWithContext(context.Background(), "inv-1")
	ev.Author = "goose"
	ev.LLMResponse = model.LLMResponse{Content: genai.NewContentFromText(text, genai.RoleModel), Partial: partial}
	return ev
}

// The split pools must keep adk-go's session semantics: what one call
// writes the next reads, partial events are not stored, stale sessions are
// refused, deletes delete.
func TestSessionServiceSemantics(t *testing.T) {
	ctx := t.Context()
	svc := openTestSessions(t, t.TempDir())
	cr, err := svc.Create(ctx, &session.CreateRequest{AppName: "a", UserID: "u", SessionID: "s", State: map[string]any{"k": "v", "app:x": 1.0}})
	if err != nil {
		t.Fatal(err)
	}
	sess := cr.Session
	for i, partial := range []bool{true, false, true, false} {
		ev := textEvent(fmt.Sprint("t", i), partial)
		if i == 3 {
			ev.Actions.StateDelta = map[string]any{"k": "w"}
		}
		if err := svc.AppendEvent(ctx, sess, ev); err != nil {
			t.Fatal(err)
		}
	}
	got, err := svc.Get(ctx, &session.GetRequest{AppName: "a", UserID: "u", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	evs := got.Session.Events()
	if evs.Len() != 2 || evs.At(0).Content.Parts[0].Text != "t1" || evs.At(1).Content.Parts[0].Text != "t3" {
		t.Fatalf("stored events: %d", evs.Len())
	}
	if v, _ := got.Session.State().Get("k"); v != "w" {
		t.Fatalf("state k = %v", v)
	}
	if v, _ := got.Session.State().Get("app:x"); v != 1.0 {
		t.Fatalf("state app:x = %v", v)
	}
	// The first handle is now stale for the service, as with adk-go alone.
	old, err := svc.Get(ctx, &session.GetRequest{AppName: "a", UserID: "u", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(ctx, got.Session, textEvent("t4", false)); err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(ctx, old.Session, textEvent("t5", false)); err == nil || !strings.Contains(err.Error(), "stale session") {
		t.Fatalf("append to stale session: %v", err)
	}
	list, err := svc.List(ctx, &session.ListRequest{AppName: "a"})
	if err != nil || len(list.Sessions) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if err := svc.Delete(ctx, &session.DeleteRequest{AppName: "a", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Get(ctx, &session.GetRequest{AppName: "a", UserID: "u", SessionID: "s"}); err == nil {
		t.Fatal("deleted session still there")
	}
	// A write whose context has ended fails as adk-go fails it, not hangs.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := svc.Create(cctx, &session.CreateRequest{AppName: "a", UserID: "u", SessionID: "s2"}); err == nil {
		t.Fatal("create with a cancelled context succeeded")
	}
}

// Concurrent writers to one SQLite file all get through, in order per
// session, without busy errors.
func TestSessionServiceConcurrentWrites(t *testing.T) {
	ctx := t.Context()
	svc := openTestSessions(t, t.TempDir())
	const sessions, events = 20, 10
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Go(func() {
			id := fmt.Sprint("s", i)
			cr, err := svc.Create(ctx, &session.CreateRequest{AppName: "a", UserID: "u", SessionID: id})
			if err != nil {
				errs <- err
				return
			}
			for j := range events {
				if _, err := svc.Get(ctx, &session.GetRequest{AppName: "a", UserID: "u", SessionID: id}); err != nil {
					errs <- err
					return
				}
				if err := svc.AppendEvent(ctx, cr.Session, textEvent(fmt.Sprint(j), false)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range sessions {
		got, err := svc.Get(ctx, &session.GetRequest{AppName: "a", UserID: "u", SessionID: fmt.Sprint("s", i)})
		if err != nil || got.Session.Events().Len() != events {
			t.Fatalf("session %d: %v", i, err)
		}
		for j := range events {
			if txt := got.Session.Events().At(j).Content.Parts[0].Text; txt != fmt.Sprint(j) {
				t.Fatalf("session %d event %d: %q", i, j, txt)
			}
		}
	}
}

// TestSessionsWrittenByEarlierSidecars: testdata/sessions-glebarez-driver.db
// was written by a sidecar on the glebarez driver and dialector (a session
// with app, user and session state, two events). The session loads whole,
// takes new events (adk-go's stale-session check compares the stored update
// time with the loaded one), keeps its events in order, and new times are
// stored in the format the earlier rows use, so ordering by them stays right.
func TestSessionsWrittenByEarlierSidecars(t *testing.T) {
	dir := t.TempDir()
	old, err := os.ReadFile(filepath.Join("testdata", "sessions-glebarez-driver.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, SessionsDBFile), old, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	dbs, svc, err := openSessionService(ctx, filepath.Join(dir, SessionsDBFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	})
	get := func() session.Session {
		t.Helper()
		gr, err := svc.Get(ctx, &session.GetRequest{AppName: "a", UserID: "u", SessionID: "s"})
		if err != nil {
			t.Fatal(err)
		}
		return gr.Session
	}
	s := get()
	for k, want := range map[string]any{"k": "v", "n": float64(2), "user:x": 1.5, "app:y": "z"} {
		if got, err := s.State().Get(k); err != nil || got != want {
			t.Errorf("state %s = %v (%v), want %v", k, got, err, want)
		}
	}
	for _, text := range []string{"three", "four"} {
		ev := textEvent(text, false)
		ev.Actions.StateDelta = map[string]any{"n": text}
		if err := svc.AppendEvent(ctx, s, ev); err != nil {
			t.Fatalf("append to a session an earlier sidecar wrote: %v", err)
		}
	}
	var texts []string
	for ev := range get().Events().All() {
		texts = append(texts, ev.Content.Parts[0].Text)
	}
	if got := strings.Join(texts, " "); got != "one two three four" {
		t.Errorf("events = %q, want them in order", got)
	}
	rows, err := dbs[0].QueryContext(ctx, `SELECT CAST(timestamp AS TEXT) FROM events ORDER BY timestamp`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var stored string
		if err := rows.Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(sqlitedb.TimeFormat, stored); err != nil {
			t.Errorf("stored time %q is not in the earlier sidecars' format: %v", stored, err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSessionLoad is the load a run starts with (the session, its last
// event, app and user state); BenchmarkSessionAppend one event written as a
// turn writes its answer (a transaction of five statements).
func BenchmarkSessionLoad(b *testing.B) {
	svc, s := benchSession(b)
	req := &session.GetRequest{AppName: s.AppName(), UserID: s.UserID(), SessionID: s.ID(), NumRecentEvents: 1}
	for b.Loop() {
		if _, err := svc.Get(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSessionAppend(b *testing.B) {
	svc, s := benchSession(b)
	for b.Loop() {
		if err := svc.AppendEvent(b.Context(), s, textEvent("an answer of a few words", false)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchSession opens a session service on a fresh file and creates a
// session with one event.
func benchSession(b *testing.B) (*sessionService, session.Session) {
	b.Helper()
	dbs, svc, err := openSessionService(b.Context(), filepath.Join(b.TempDir(), SessionsDBFile))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	})
	cr, err := svc.Create(b.Context(), &session.CreateRequest{AppName: "a", UserID: "u", SessionID: "s"})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.AppendEvent(b.Context(), cr.Session, textEvent("hello", false)); err != nil {
		b.Fatal(err)
	}
	return svc, cr.Session
}
