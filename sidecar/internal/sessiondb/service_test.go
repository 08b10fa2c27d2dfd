package sessiondb_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/adk/platform"
	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"
	"google.golang.org/genai"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
	"github.com/adk2goose/goose-operator/sidecar/internal/sessiondb"
	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openADK opens adk-go's database session service on a fresh SQLite file,
// migrated as the sidecar migrates it.
func openADK(t testing.TB) (session.Service, *sql.DB) {
	t.Helper()
	db, err := sqlitedb.Open(filepath.Join(t.TempDir(), "sessions.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	// As the sidecar ran it: gorm prepares each statement once per
	// connection (a TTL this long starts no expiry goroutine).
	svc, err := database.NewSessionService(&sqlite.Dialector{Conn: db}, &gorm.Config{
		Logger: gormlogger.Default.LogMode(gormlogger.Silent), PrepareStmt: true, PrepareStmtTTL: 10 * 365 * 24 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := adkcompat.Migrate(t.Context(), svc, db); err != nil {
		t.Fatal(err)
	}
	return svc, db
}

// openOurs opens this package's service on a fresh file migrated the same way.
func openOurs(t testing.TB) (*sessiondb.Service, *sql.DB) {
	t.Helper()
	_, db := openADK(t)
	return sessiondb.New(db), db
}

// side is one service under TestMatchesADK, with the sessions its steps
// hold by name.
type side struct {
	name     string
	svc      session.Service
	db       *sql.DB
	sessions map[string]session.Session
}

// step is one call made on both services; it returns what the call gave
// back, compared between them.
type step struct {
	name string
	want string // the error class both must give (errorClass)
	do   func(ctx context.Context, s *side) (any, error)
}

var base = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

// at is a time with nanoseconds, which the services store in microseconds.
func at(sec int) time.Time { return base.Add(time.Duration(sec)*time.Second + 123456789) }

func textEvent(id, author, text string, ts time.Time) *session.Event {
	ev := session.NewEventWithContext(context.Background(), "inv-1")
	ev.ID, ev.Author, ev.Timestamp = id, author, ts
	ev.Content = genai.NewContentFromText(text, genai.RoleModel)
	return ev
}

// fullEvent sets every field the services store.
func fullEvent(id string, ts time.Time) *session.Event {
	ev := textEvent(id, "goose", "", ts)
	ev.Content = &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{
		{Text: "thinking", Thought: true},
		genai.NewPartFromFunctionCall("developer__shell", map[string]any{"command": "ls", "n": 2.0}),
	}}
	ev.Content.Parts[1].FunctionCall.ID = "call-1"
	ev.LongRunningToolIDs = []string{"call-1"}
	ev.Branch = "root.goose"
	ev.ErrorCode, ev.ErrorMessage = "GOOSE_ERROR", "goose said no"
	ev.TurnComplete, ev.Interrupted = true, true
	ev.CustomMetadata = map[string]any{"goose_message_id": "m-1"}
	ev.UsageMetadata = &genai.GenerateContentResponseUsageMetadata{PromptTokenCount: 10, CandidatesTokenCount: 5, TotalTokenCount: 15}
	ev.GroundingMetadata = &genai.GroundingMetadata{WebSearchQueries: []string{"q"}}
	ev.CitationMetadata = &genai.CitationMetadata{Citations: []*genai.Citation{{URI: "https://example.invalid/"}}}
	ev.Actions.TransferToAgent = "other"
	ev.Actions.ArtifactDelta = map[string]int64{"a.txt": 1}
	return ev
}

func stateEvent(id string, ts time.Time, delta map[string]any) *session.Event {
	ev := textEvent(id, "goose", "state", ts)
	ev.Actions.StateDelta = delta
	return ev
}

// view is what a session shows a caller, comparable as JSON.
type view struct {
	ID, App, User string
	State         map[string]any
	Events        []*session.Event
	Updated       string
}

func viewOf(s session.Session) view {
	v := view{ID: s.ID(), App: s.AppName(), User: s.UserID(), State: maps.Collect(s.State().All()),
		Events: slices.Collect(s.Events().All()), Updated: s.LastUpdateTime().UTC().Format(time.RFC3339Nano)}
	return v
}

// errorClass is what callers tell errors apart by.
func errorClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, session.ErrNotFound):
		return "not_found"
	case strings.Contains(err.Error(), "stale session error"):
		return "stale"
	default:
		return "error"
	}
}

func (s *side) create(ctx context.Context, name string, req *session.CreateRequest) (any, error) {
	r, err := s.svc.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	s.sessions[name] = r.Session
	return viewOf(r.Session), nil
}

// load gets a session into the side's sessions under name.
func (s *side) load(ctx context.Context, name string, req session.GetRequest) (any, error) {
	if req.AppName == "" {
		req.AppName, req.UserID, req.SessionID = "app", "u1", "s1"
	}
	r, err := s.svc.Get(ctx, &req)
	if err != nil {
		return nil, err
	}
	s.sessions[name] = r.Session
	return viewOf(r.Session), nil
}

// appendTo appends ev through the session held as name and shows it after.
func (s *side) appendTo(ctx context.Context, name string, ev *session.Event) (any, error) {
	sess := s.sessions[name]
	err := s.svc.AppendEvent(ctx, sess, ev)
	return struct {
		Session view
		Event   *session.Event
	}{viewOf(sess), ev}, err
}

// The same calls through adk-go's database service and this one return
// the same sessions, events, states and errors, and leave the same rows
// (values and SQLite types) in every table; each reads what the other
// wrote. The one difference, on purpose, is deleting a session's events.
func TestMatchesADK(t *testing.T) {
	adkSvc, adkDB := openADK(t)
	ourSvc, ourDB := openOurs(t)
	_, cachedDB := openADK(t)
	cache := sessiondb.NewCache(0)
	sides := []*side{
		{name: "adk-go", svc: adkSvc, db: adkDB, sessions: map[string]session.Session{}},
		{name: "sessiondb", svc: ourSvc, db: ourDB, sessions: map[string]session.Session{}},
		// The newest-event reads ("newest" steps) are served from the
		// cache where it holds the session.
		{name: "sessiondb with a cache", svc: sessiondb.NewCached(cachedDB, cache), db: cachedDB, sessions: map[string]session.Session{}},
	}
	// newest reads session id with its newest event only; cached: whether
	// the cache must hold the session then.
	newest := func(name, user, id string, cached bool) step {
		name = "get only the newest event of " + id + " (" + name + ")"
		return step{name, "ok", func(ctx context.Context, s *side) (any, error) {
			if s.svc == sides[2].svc && cache.Holds("app", user, id) != cached {
				t.Errorf("%s: cache holds the session: %v, want %v", name, !cached, cached)
			}
			return s.load(ctx, "newest", session.GetRequest{AppName: "app", UserID: user, SessionID: id, NumRecentEvents: 1})
		}}
	}
	steps := []step{
		{"create with scoped state", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.create(ctx, "s1", &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "s1",
				State: map[string]any{"k": "v", "app:shared": 1.0, "user:pref": "dark", "temp:scratch": true}})
		}},
		{"create with a generated id and no state", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.create(platform.WithUUIDProvider(ctx, func() string { return "generated-1" }), "s2",
				&session.CreateRequest{AppName: "app", UserID: "u2"})
		}},
		newest("created", "u1", "s1", true),
		{"create an existing id", "error", func(ctx context.Context, s *side) (any, error) {
			return s.create(ctx, "dup", &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		}},
		{"create without a user", "error", func(ctx context.Context, s *side) (any, error) {
			return s.create(ctx, "bad", &session.CreateRequest{AppName: "app"})
		}},
		{"append a text event", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.appendTo(ctx, "s1", textEvent("e1", "user", "hello", at(1)))
		}},
		newest("after a text event", "u1", "s1", true),
		{"append a partial event", "ok", func(ctx context.Context, s *side) (any, error) {
			ev := textEvent("partial", "goose", "hel", at(2))
			ev.Partial = true
			return s.appendTo(ctx, "s1", ev)
		}},
		{"append an event with every field", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.appendTo(ctx, "s1", fullEvent("e2", at(3)))
		}},
		newest("after an event with every field", "u1", "s1", true),
		newest("of another user, created", "u2", "generated-1", true),
		{"append state of every scope", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.appendTo(ctx, "s1", stateEvent("e3", at(4), map[string]any{
				"k": "v2", "new": []any{1.0, "x"}, "app:shared": 2.0, "user:pref": "light", "user:other": nil, "temp:t": "gone",
			}))
		}},
		newest("after state of every scope", "u1", "s1", true),
		newest("of another user, after app state changed", "u2", "generated-1", false),
		{"append only temp state", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.appendTo(ctx, "s1", stateEvent("e4", at(5), map[string]any{"temp:only": 1.0}))
		}},
		{"append only user state", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.appendTo(ctx, "s1", stateEvent("e4u", at(5).Add(time.Millisecond), map[string]any{"user:pref": "blue"}))
		}},
		newest("after user state", "u1", "s1", true),
		{"get the whole session", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.load(ctx, "s1", session.GetRequest{})
		}},
		{"get the 2 most recent events", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.load(ctx, "recent", session.GetRequest{NumRecentEvents: 2})
		}},
		{"get events at or after a time", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.load(ctx, "after", session.GetRequest{After: at(3).Truncate(time.Microsecond)})
		}},
		{"another user's session sees app state, not user state", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.load(ctx, "s2", session.GetRequest{AppName: "app", UserID: "u2", SessionID: "generated-1"})
		}},
		{"get an unknown session", "not_found", func(ctx context.Context, s *side) (any, error) {
			return s.load(ctx, "none", session.GetRequest{AppName: "app", UserID: "u1", SessionID: "nope"})
		}},
		{"get without an id", "error", func(ctx context.Context, s *side) (any, error) {
			return s.load(ctx, "none", session.GetRequest{AppName: "app", UserID: "u1"})
		}},
		// The stale-session rule gooseagent relies on (adkcompat.StoredTime):
		// an event stamped in the past moves the update time back, so an
		// older copy may still write; one stamped later makes it stale.
		{"load a copy", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.load(ctx, "old", session.GetRequest{})
		}},
		{"append stamped in the past through a fresh copy", "ok", func(ctx context.Context, s *side) (any, error) {
			if _, err := s.load(ctx, "fresh", session.GetRequest{}); err != nil {
				return nil, err
			}
			return s.appendTo(ctx, "fresh", textEvent("e5", "goose", "earlier", at(1).Add(time.Microsecond)))
		}},
		newest("after an event stamped in the past", "u1", "s1", false),
		{"the old copy still writes", "ok", func(ctx context.Context, s *side) (any, error) {
			return s.appendTo(ctx, "old", textEvent("e6", "goose", "through old", at(6)))
		}},
		{"append stamped later through a fresh copy", "ok", func(ctx context.Context, s *side) (any, error) {
			if _, err := s.load(ctx, "fresh", session.GetRequest{}); err != nil {
				return nil, err
			}
			return s.appendTo(ctx, "fresh", textEvent("e7", "goose", "later", at(9)))
		}},
		newest("after an event stamped later", "u1", "s1", true),
		{"the older copy is stale", "stale", func(ctx context.Context, s *side) (any, error) {
			return s.appendTo(ctx, "recent", textEvent("e8", "goose", "too late", at(8)))
		}},
		newest("after a stale write", "u1", "s1", false),
		{"append an event id twice", "error", func(ctx context.Context, s *side) (any, error) {
			if _, err := s.load(ctx, "fresh", session.GetRequest{}); err != nil {
				return nil, err
			}
			return s.appendTo(ctx, "fresh", textEvent("e1", "goose", "same id", at(10)))
		}},
		newest("after a failed write", "u1", "s1", false),
		{"list the app", "ok", func(ctx context.Context, s *side) (any, error) {
			r, err := s.svc.List(ctx, &session.ListRequest{AppName: "app"})
			if err != nil {
				return nil, err
			}
			var vs []view
			for _, sess := range r.Sessions {
				vs = append(vs, viewOf(sess))
			}
			return vs, nil
		}},
		{"list one user", "ok", func(ctx context.Context, s *side) (any, error) {
			r, err := s.svc.List(ctx, &session.ListRequest{AppName: "app", UserID: "u1"})
			if err != nil {
				return nil, err
			}
			var vs []view
			for _, sess := range r.Sessions {
				vs = append(vs, viewOf(sess))
			}
			return vs, nil
		}},
		{"list without an app", "error", func(ctx context.Context, s *side) (any, error) {
			return s.svc.List(ctx, &session.ListRequest{})
		}},
		{"append to nil", "error", func(ctx context.Context, s *side) (any, error) {
			return nil, s.svc.AppendEvent(ctx, nil, textEvent("x", "u", "x", at(11)))
		}},
		{"append nil", "error", func(ctx context.Context, s *side) (any, error) {
			return nil, s.svc.AppendEvent(ctx, s.sessions["s1"], nil)
		}},
	}
	for i, st := range steps {
		ctx := platform.WithTimeProvider(t.Context(), func() time.Time { return at(100 + i) })
		var want string
		for _, s := range sides {
			got, err := st.do(ctx, s)
			if err != nil {
				got = nil
			}
			b, jerr := json.Marshal(got)
			if jerr != nil {
				t.Fatalf("%s: %s: %v", st.name, s.name, jerr)
			}
			out := errorClass(err) + " " + string(b)
			if s == sides[0] {
				want = out
				continue
			}
			if out != want {
				t.Errorf("%s:\n  %s: %s\n  %s: %s", st.name, sides[0].name, want, s.name, out)
			}
		}
		if class := strings.Fields(want)[0]; class != st.want {
			t.Errorf("%s: %s on both, want %s: %s", st.name, class, st.want, want)
		}
	}
	for _, table := range []string{"sessions", "events", "app_states", "user_states"} {
		if a, b := tableRows(t, adkDB, table), tableRows(t, ourDB, table); a != b {
			t.Errorf("table %s:\n  adk-go:    %s\n  sessiondb: %s", table, a, b)
		}
		if a, b := tableRows(t, ourDB, table), tableRows(t, cachedDB, table); a != b {
			t.Errorf("table %s:\n  sessiondb:              %s\n  sessiondb with a cache: %s", table, a, b)
		}
	}

	// Each reads the other's rows as its own.
	for _, c := range []struct {
		reader session.Service
		name   string
		db     *sql.DB
	}{{adkSvc, "adk-go reading sessiondb's rows", ourDB}, {ourSvc, "sessiondb reading adk-go's rows", adkDB}} {
		own, err := c.reader.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		other := sessiondb.New(c.db)
		var crossed session.Service = other
		if c.reader == ourSvc {
			crossed, _ = reopenADK(t, c.db)
		}
		got, err := crossed.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := jsonOf(t, viewOf(own.Session)), jsonOf(t, viewOf(got.Session)); a != b {
			t.Errorf("%s:\n  %s\n  %s", c.name, a, b)
		}
	}

	// Deleting: adk-go leaves the session's events behind (SQLite ignores
	// the foreign key's ON DELETE CASCADE without PRAGMA foreign_keys); this
	// service deletes them.
	for _, s := range sides {
		if err := s.svc.Delete(t.Context(), &session.DeleteRequest{AppName: "app", UserID: "u1", SessionID: "s1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.svc.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u1", SessionID: "s1"}); !errors.Is(err, session.ErrNotFound) {
			t.Fatalf("%s: get after delete: %v", s.name, err)
		}
	}
	if n := countEvents(t, adkDB, "s1"); n == 0 {
		t.Errorf("adk-go deleted the session's events: sessiondb's Delete differs from it for no reason now")
	}
	if n := countEvents(t, ourDB, "s1"); n != 0 {
		t.Errorf("sessiondb left %d events of the deleted session", n)
	}
	if err := ourSvc.Delete(t.Context(), &session.DeleteRequest{AppName: "app", UserID: "u1"}); err == nil {
		t.Error("delete without a session id succeeded")
	}

	// A session created again with a deleted one's id starts empty, also
	// where adk-go's Delete left the events behind.
	ours := sessiondb.New(adkDB)
	if _, err := ours.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	again, err := ours.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if n := again.Session.Events().Len(); n != 0 {
		t.Errorf("the session created again holds %d events of the deleted one", n)
	}
}

// TestEndedContextChangesNothing: a call whose context has ended fails
// with the context's error and stores nothing, as adk-go's does, though
// this service runs its statements without the context's cancellation.
func TestEndedContextChangesNothing(t *testing.T) {
	adk, adkDB := openADK(t)
	ours, ourDB := openOurs(t)
	for _, sd := range []*side{{name: "adk-go", svc: adk, db: adkDB}, {name: "sessiondb", svc: ours, db: ourDB}} {
		cr, err := sd.svc.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
		if err != nil {
			t.Fatal(err)
		}
		ended, cancel := context.WithCancel(t.Context())
		cancel()
		calls := map[string]func() error{
			"Create": func() error {
				_, err := sd.svc.Create(ended, &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s2"})
				return err
			},
			"Get": func() error {
				_, err := sd.svc.Get(ended, &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 1})
				return err
			},
			"AppendEvent": func() error {
				return sd.svc.AppendEvent(ended, cr.Session, textEvent("e1", "goose", "lost", at(1)))
			},
			"Delete": func() error {
				return sd.svc.Delete(ended, &session.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"})
			},
		}
		for _, name := range slices.Sorted(maps.Keys(calls)) {
			if err := calls[name](); !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %s with an ended context: %v, want context.Canceled", sd.name, name, err)
			}
		}
		var ids string
		if err := sd.db.QueryRowContext(t.Context(), "SELECT group_concat(id) FROM sessions").Scan(&ids); err != nil {
			t.Fatal(err)
		}
		if n := countEvents(t, sd.db, "s"); ids != "s" || n != 0 {
			t.Errorf("%s: after the calls: sessions %q, %d events; want s alone, no events", sd.name, ids, n)
		}
	}
}

// reopenADK opens adk-go's service on an existing database.
func reopenADK(t *testing.T, db *sql.DB) (session.Service, error) {
	t.Helper()
	return database.NewSessionService(&sqlite.Dialector{Conn: db}, &gorm.Config{Logger: gormlogger.Default.LogMode(gormlogger.Silent)})
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func countEvents(t *testing.T, db *sql.DB, sessionID string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM events WHERE session_id = ?", sessionID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// tableRows is every row of table as SQL literals (quote(): text, blob,
// number or NULL, so a value stored with another type differs), in
// primary-key order.
func tableRows(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SELECT name, pk FROM pragma_table_info(?) ORDER BY cid", table)
	if err != nil {
		t.Fatal(err)
	}
	var cols, quoted []string
	keys := map[int]string{}
	for rows.Next() {
		var name string
		var pk int
		if err := rows.Scan(&name, &pk); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, name)
		quoted = append(quoted, fmt.Sprintf("quote(%q)", name))
		if pk > 0 {
			keys[pk] = fmt.Sprintf("%q", name)
		}
	}
	_ = rows.Close()
	if len(cols) == 0 {
		t.Fatalf("table %s has no columns", table)
	}
	var order []string
	for i := 1; i <= len(keys); i++ {
		order = append(order, keys[i])
	}
	q := "SELECT " + strings.Join(quoted, " || ' | ' || ") + " FROM " + table + " ORDER BY " + strings.Join(order, ", ")
	rows, err = db.QueryContext(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(cols, ",") + ": " + strings.Join(out, " / ")
}

// A cache keeps no more than its bytes, and a session it dropped to make
// room reads the same from the database.
func TestCacheStaysWithinItsBytes(t *testing.T) {
	_, db := openADK(t)
	const maxBytes = 32 << 10
	cache := sessiondb.NewCache(maxBytes)
	svc := sessiondb.NewCached(db, cache)
	plain := sessiondb.New(db)
	const n = 100
	for i := range n {
		id := fmt.Sprint("s", i)
		cr, err := svc.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: id})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.AppendEvent(t.Context(), cr.Session, textEvent(id+"-e", "goose", strings.Repeat("x", 1000), at(i))); err != nil {
			t.Fatal(err)
		}
		if b := cache.Bytes(); b > maxBytes {
			t.Fatalf("after %d sessions the cache holds %d bytes, more than %d", i+1, b, maxBytes)
		}
	}
	if l := cache.Len(); l == 0 || l == n {
		t.Fatalf("the cache holds %d of %d sessions of about 1 KiB in %d bytes", l, n, maxBytes)
	}
	for i := range n {
		cachedAsStored(t, svc, plain, &session.GetRequest{AppName: "app", UserID: "u", SessionID: fmt.Sprint("s", i), NumRecentEvents: 1})
	}
}

// What a cache counts is what its entries take in memory: sessions with
// one short event each (the common session: its entry is mostly overhead)
// grow the heap by what the cache counts, within a quarter.
func TestCacheBytesAreItsMemory(t *testing.T) {
	_, db := openADK(t)
	cache := sessiondb.NewCache(0)
	svc := sessiondb.NewCached(db, cache)
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	const n = 5000
	for i := range n {
		cr, err := svc.Create(t.Context(), &session.CreateRequest{AppName: "goose", UserID: "user-123", SessionID: fmt.Sprintf("b3e0c6f2-1a2b-4c5d-8e9f-%012d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.AppendEvent(t.Context(), cr.Session, textEvent(fmt.Sprint("e", i), "goose", "Hello from goose! You asked something.", at(i))); err != nil {
			t.Fatal(err)
		}
	}
	grown, counted := heap()-before, int64(cache.Bytes())
	if cache.Len() != n {
		t.Fatalf("the cache holds %d of %d sessions", cache.Len(), n)
	}
	if r := float64(grown) / float64(counted); r < 0.8 || r > 1.25 {
		t.Errorf("%d sessions grew the heap by %d bytes, the cache counts %d: x%.2f, want within [0.8, 1.25]", n, grown, counted, r)
	}
}

// cachedAsStored checks that req reads the same through cached as through
// plain, which reads the database, and returns what cached read.
func cachedAsStored(t *testing.T, cached, plain session.Service, req *session.GetRequest) session.Session {
	t.Helper()
	a, err := cached.Get(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := plain.Get(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if x, y := jsonOf(t, viewOf(a.Session)), jsonOf(t, viewOf(b.Session)); x != y {
		t.Errorf("session %s:\n  cached: %s\n  stored: %s", req.SessionID, x, y)
	}
	return a.Session
}

// What the cache holds is served without the database, which is why only
// the services sharing it may write there: a row deleted behind its back
// is still read.
func TestCacheServesWithoutTheDatabase(t *testing.T) {
	_, db := openADK(t)
	svc := sessiondb.NewCached(db, sessiondb.NewCache(0))
	cr, err := svc.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(t.Context(), cr.Session, textEvent("e", "goose", "hi", at(1))); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), "DELETE FROM sessions"); err != nil {
		t.Fatal(err)
	}
	got, err := svc.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 1})
	if err != nil {
		t.Fatalf("newest event read: %v", err)
	}
	if evs := got.Session.Events(); evs.Len() != 1 || evs.At(0).ID != "e" {
		t.Errorf("newest event read from the cache: %s", jsonOf(t, viewOf(got.Session)))
	}
	// Any other read goes to the database.
	if _, err := svc.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s"}); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("whole-session read: %v, want not found", err)
	}
}

// Writers of many sessions at once, some changing app or user state that
// other sessions show, and readers of newest events beside them: after
// them, every session reads from the cache as it reads from the database.
func TestCacheUnderConcurrentWrites(t *testing.T) {
	_, db := openADK(t)
	db.SetMaxOpenConns(4)
	cache := sessiondb.NewCache(0)
	svc := sessiondb.NewCached(db, cache)
	plain := sessiondb.New(db)
	const sessions, events = 8, 40
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, sessions*2)
	for i := range sessions {
		user, id := fmt.Sprint("u", i%3), fmt.Sprint("s", i)
		cr, err := svc.Create(ctx, &session.CreateRequest{AppName: "app", UserID: user, SessionID: id})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() { // the session's writer
			defer wg.Done()
			sess := cr.Session
			for j := range events {
				delta := map[string]any{"n": float64(j)}
				switch j % 7 {
				case 1, 4: // no state: the session is not read (appendUnchanged)
					delta = nil
				case 3:
					delta["app:last"] = id
				case 5:
					delta["user:last"] = id
				}
				if err := svc.AppendEvent(ctx, sess, stateEvent(fmt.Sprint(id, "-", j), time.Now(), delta)); err != nil {
					errs <- fmt.Errorf("session %s event %d: %w", id, j, err)
					return
				}
			}
		}()
		go func() { // a reader of its newest event
			defer wg.Done()
			for range events {
				if _, err := svc.Get(ctx, &session.GetRequest{AppName: "app", UserID: user, SessionID: id, NumRecentEvents: 1}); err != nil {
					errs <- fmt.Errorf("session %s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	held := 0
	for i := range sessions {
		user, id := fmt.Sprint("u", i%3), fmt.Sprint("s", i)
		if cache.Holds("app", user, id) {
			held++
		}
		cachedAsStored(t, svc, plain, &session.GetRequest{AppName: "app", UserID: user, SessionID: id, NumRecentEvents: 1})
	}
	// The last write that emptied the cache kept its own session.
	if held == 0 {
		t.Error("the cache holds no session: the comparison tested the database only")
	}
}

// An event that changes no state is appended to a session the cache holds
// without reading the session; the write still checks, by its update
// time, that the file holds what the cache does, and when another writer
// changed or deleted the session it reads the session after all, and the
// file decides: a copy as new as the file's session writes (older or newer
// than the cache's), one older is stale, a deleted session is not found,
// and the cache follows.
func TestCachedAppendIsCheckedAgainstTheFile(t *testing.T) {
	_, db := openADK(t)
	cache := sessiondb.NewCache(0)
	svc := sessiondb.NewCached(db, cache)
	other := sessiondb.New(db) // another writer, which the cache does not see
	ctx := t.Context()
	newest := &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 1}
	whole := &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s"}
	if _, err := svc.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s", State: map[string]any{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	cached, err := svc.Get(ctx, newest) // from the cache
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(ctx, cached.Session, textEvent("e1", "user", "one", at(1))); err != nil {
		t.Fatalf("append to a cached session: %v", err)
	}
	if !cache.Holds("app", "u", "s") {
		t.Fatal("the cache let the session go after an append that changed no state")
	}

	// The other writer appends; the cache still holds e1's session.
	stored, err := other.Get(ctx, whole)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.AppendEvent(ctx, stored.Session, textEvent("e2", "goose", "two", at(2))); err != nil {
		t.Fatal(err)
	}
	old, err := svc.Get(ctx, newest) // from the cache: e1's session
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(ctx, old.Session, textEvent("e3", "goose", "from the past", at(3))); err == nil || !strings.Contains(err.Error(), "stale session") {
		t.Fatalf("append through a copy older than the file's session: %v, want stale session", err)
	}
	fresh, err := svc.Get(ctx, whole) // from the file: e2's session
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(ctx, fresh.Session, textEvent("e4", "goose", "four", at(4))); err != nil {
		t.Fatalf("append through a copy as new as the file's session: %v", err)
	}
	if s := cachedAsStored(t, svc, other, newest); s.Events().At(0).ID != "e4" {
		t.Errorf("after the writes the newest event is %s, want e4", s.Events().At(0).ID)
	}
	all, err := other.Get(ctx, whole)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for ev := range all.Session.Events().All() {
		ids = append(ids, ev.ID)
	}
	if got := strings.Join(ids, " "); got != "e1 e2 e4" {
		t.Errorf("stored events %q, want e1 e2 e4 (the stale e3 not written)", got)
	}

	// The other writer moves the update time back (an event stamped in the
	// past): a copy read from the file is older than the cache's, and fresh.
	behind, err := other.Get(ctx, whole)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.AppendEvent(ctx, behind.Session, textEvent("e5", "goose", "in the past", at(3).Add(time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	fresh, err = svc.Get(ctx, whole)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(ctx, fresh.Session, textEvent("e6", "goose", "six", at(6))); err != nil {
		t.Fatalf("append through a copy as new as the file's session, older than the cache's: %v", err)
	}

	// The other writer deletes the session the cache holds.
	if err := other.Delete(ctx, &session.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	gone, err := svc.Get(ctx, newest) // from the cache
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(ctx, gone.Session, textEvent("e7", "goose", "to nothing", at(7))); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("append to a session deleted behind the cache: %v, want not found", err)
	}
	if n := tableRows(t, db, "events"); strings.Contains(n, "e7") {
		t.Errorf("the append to a deleted session left its event: %s", n)
	}
}

// An append that changes no state to a session the cache holds does not
// read the session: a state changed in the file behind the cache's back,
// its update time left alone, is not seen (what the cache holds is what
// its services wrote).
func TestCachedAppendDoesNotReadTheSession(t *testing.T) {
	_, db := openADK(t)
	svc := sessiondb.NewCached(db, sessiondb.NewCache(0))
	ctx := t.Context()
	cr, err := svc.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s", State: map[string]any{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE sessions SET state = '{"k":"behind"}'`); err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(ctx, cr.Session, textEvent("e1", "user", "one", at(1))); err != nil {
		t.Fatal(err)
	}
	got, err := svc.Get(ctx, &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 1})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got.Session.State().Get("k"); v != "v" || got.Session.Events().At(0).ID != "e1" {
		t.Errorf("after the append: k = %v, newest %s; want the cache's v (the append did not read the file) and e1", v, got.Session.Events().At(0).ID)
	}
}

// An entry that does not decode (it never should) is dropped, and the
// session is read from the database instead of failing the read.
func TestCacheDropsAnEntryThatDoesNotDecode(t *testing.T) {
	_, db := openADK(t)
	cache := sessiondb.NewCache(0)
	svc := sessiondb.NewCached(db, cache)
	if _, err := svc.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s", State: map[string]any{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	cache.Corrupt("app", "u", "s")
	got, err := svc.Get(t.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 1})
	if err != nil {
		t.Fatalf("newest event read: %v, want the stored session", err)
	}
	if v, _ := got.Session.State().Get("k"); v != "v" {
		t.Errorf("state k = %v, want v", v)
	}
	if cache.Holds("app", "u", "s") {
		t.Error("the undecodable entry is still held")
	}
}
