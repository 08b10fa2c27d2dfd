package adkcompat_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"iter"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"go.uber.org/goleak"
	"google.golang.org/adk/agent"
	"google.golang.org/adk/agent/llmagent"
	"google.golang.org/adk/model"
	"google.golang.org/adk/runner"
	adka2a "google.golang.org/adk/server/adka2a/v2"
	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"
	"google.golang.org/adk/tool"
	"google.golang.org/adk/tool/functiontool"
	"google.golang.org/genai"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat/adkcompattest"
	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// query is one SELECT gorm ran, with its arguments.
type query struct {
	sql  string
	vars []any
}

// queryLog is a gorm plugin that records the service's SELECTs.
type queryLog struct {
	mu      sync.Mutex
	queries []query
}

func (*queryLog) Name() string { return "adkcompat_test_queries" }

func (l *queryLog) Initialize(db *gorm.DB) error {
	return db.Callback().Query().After("gorm:query").Register("adkcompat_test:record", func(db *gorm.DB) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.queries = append(l.queries, query{db.Statement.SQL.String(), append([]any(nil), db.Statement.Vars...)})
	})
}

func (l *queryLog) take() []query {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queries
	l.queries = nil
	return q
}

// openService opens adk-go's database session service on a fresh SQLite
// file as the sidecar does, migrated by Migrate.
func openService(t *testing.T) (session.Service, *sql.DB, *queryLog) {
	t.Helper()
	db, err := sqlitedb.Open(filepath.Join(t.TempDir(), "sessions.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	log := &queryLog{}
	svc, err := database.NewSessionService(&sqlite.Dialector{Conn: db}, &gorm.Config{
		Logger:  gormlogger.Default.LogMode(gormlogger.Silent),
		Plugins: map[string]gorm.Plugin{log.Name(): log},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := adkcompat.Migrate(t.Context(), svc, db); err != nil {
		t.Fatal(err)
	}
	return svc, db, log
}

// create creates session "s" of user "u" in app "app".
func create(t *testing.T, svc session.Service) session.Session {
	t.Helper()
	resp, err := svc.Create(t.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Session
}

func get(t *testing.T, svc session.Service, s session.Session) session.Session {
	t.Helper()
	resp, err := svc.Get(t.Context(), &session.GetRequest{AppName: s.AppName(), UserID: s.UserID(), SessionID: s.ID()})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Session
}

func textEvent(author, text string, at time.Time) *session.Event {
	ev := session.NewEventWithContext(context.Background(), "inv")
	ev.Author, ev.Timestamp = author, at
	ev.Content = genai.NewContentFromText(text, genai.RoleUser)
	return ev
}

// The events queries adk-go's Get runs (the whole history, the recent
// events the sidecar loads for a run, events after a time) are served by
// the index Migrate adds: a search on its leading columns, no sort of their
// own.
func TestEventsIndexServesGet(t *testing.T) {
	svc, db, log := openService(t)
	s := create(t, svc)
	if err := svc.AppendEvent(t.Context(), s, textEvent("user", "hi", time.Now())); err != nil {
		t.Fatal(err)
	}
	for _, req := range []session.GetRequest{{}, {NumRecentEvents: 1}, {After: time.Now().Add(-time.Hour)}} {
		req.AppName, req.UserID, req.SessionID = s.AppName(), s.UserID(), s.ID()
		log.take()
		if _, err := svc.Get(t.Context(), &req); err != nil {
			t.Fatal(err)
		}
		var events []query
		for _, q := range log.take() {
			if strings.Contains(q.sql, "`events`") {
				events = append(events, q)
			}
		}
		if len(events) != 1 {
			t.Fatalf("Get ran %d events queries, want 1: %+v", len(events), events)
		}
		if err := adkcompattest.CheckEventsQuery(t.Context(), db, events[0].sql, events[0].vars...); err != nil {
			t.Fatalf("adk-go's Get: %v", err)
		}
	}
}

// adk-go's migrator parses the stored DDL of the index on every start: the
// database Migrate made migrates again. Migrate puts the index back when
// the migrator has rebuilt the table without it.
func TestMigrateAgain(t *testing.T) {
	svc, db, _ := openService(t)
	indexes := func() string {
		t.Helper()
		var ddl []string
		rows, err := db.QueryContext(t.Context(), "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", adkcompat.EventsIndex)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			ddl = append(ddl, s)
		}
		return strings.Join(ddl, "; ")
	}
	want := "CREATE INDEX " + adkcompat.EventsIndex + " ON events (app_name, user_id, session_id, timestamp)"
	for range 2 {
		if err := adkcompat.Migrate(t.Context(), svc, db); err != nil {
			t.Fatal(err)
		}
		if got := indexes(); got != want {
			t.Fatalf("stored index %q, want %q", got, want)
		}
	}
	if _, err := db.ExecContext(t.Context(), "DROP INDEX "+adkcompat.EventsIndex); err != nil {
		t.Fatal(err)
	}
	if err := adkcompat.Migrate(t.Context(), svc, db); err != nil {
		t.Fatal(err)
	}
	if got := indexes(); got != want {
		t.Fatalf("index after a rebuild: %q, want %q", got, want)
	}
}

// SessionExists reads the sessions table adk-go writes.
func TestSessionExists(t *testing.T) {
	svc, db, _ := openService(t)
	create(t, svc)
	for _, c := range []struct {
		app, user, id string
		want          bool
	}{
		{"app", "u", "s", true},
		{"app", "u", "other", false},
		{"app", "other", "s", false},
		{"other", "u", "s", false},
	} {
		got, err := adkcompat.SessionExists(t.Context(), db, c.app, c.user, c.id)
		if err != nil || got != c.want {
			t.Errorf("SessionExists(%s, %s, %s) = %v, %v; want %v", c.app, c.user, c.id, got, err, c.want)
		}
	}
	if err := svc.Delete(t.Context(), &session.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if got, err := adkcompat.SessionExists(t.Context(), db, "app", "u", "s"); err != nil || got {
		t.Fatalf("deleted session: %v, %v", got, err)
	}
}

// Event timestamps are stored in whole microseconds.
func TestStoredTime(t *testing.T) {
	svc, _, _ := openService(t)
	s := create(t, svc)
	at := time.Date(2026, 5, 1, 10, 0, 0, 123456789, time.UTC)
	if err := svc.AppendEvent(t.Context(), s, textEvent("user", "hi", at)); err != nil {
		t.Fatal(err)
	}
	stored := get(t, svc, s).Events().At(0).Timestamp
	if want := adkcompat.StoredTime(at); !stored.Equal(want) || want.Equal(at) {
		t.Fatalf("stored %s, StoredTime %s, sent %s", stored.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
	}
	if after := adkcompat.StoredTimeAfter(at); !after.After(stored) || adkcompat.StoredTime(after) != after || after.Sub(stored) != time.Microsecond {
		t.Fatalf("StoredTimeAfter(%s) = %s", at.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
	}
}

// The stale-session rule gooseagent works around when it records an event
// outside a turn: a session's update time is its last appended event's
// timestamp, even an earlier one, and an append through a copy older than
// the stored update time is refused.
func TestStaleSessionRule(t *testing.T) {
	svc, _, _ := openService(t)
	asked := time.Now().Add(-time.Minute)
	s := create(t, svc)
	if err := svc.AppendEvent(t.Context(), s, textEvent("agent", "may I?", asked)); err != nil {
		t.Fatal(err)
	}
	// A turn loads the session and writes its user message now.
	turn := get(t, svc, s)
	if err := svc.AppendEvent(t.Context(), turn, textEvent("user", "new message", time.Now())); err != nil {
		t.Fatal(err)
	}
	// Meanwhile an event is recorded through a fresh copy, stamped right
	// after the question: the update time moves back...
	if err := svc.AppendEvent(t.Context(), get(t, svc, s), textEvent("agent", "abandoned", adkcompat.StoredTimeAfter(asked))); err != nil {
		t.Fatal(err)
	}
	// ...so the turn's copy is not stale, and its next write goes through.
	if err := svc.AppendEvent(t.Context(), turn, textEvent("agent", "answer", time.Now())); err != nil {
		t.Fatalf("the turn's write after an event stamped in the past: %v", err)
	}
	var order []string
	for ev := range get(t, svc, s).Events().All() {
		order = append(order, ev.Content.Parts[0].Text)
	}
	if want := "may I?|abandoned|new message|answer"; strings.Join(order, "|") != want {
		t.Fatalf("events in order %q, want %q", strings.Join(order, "|"), want)
	}

	// An event stamped now through an old copy's view makes that copy stale.
	old := get(t, svc, s)
	if err := svc.AppendEvent(t.Context(), get(t, svc, s), textEvent("agent", "later", time.Now().Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := svc.AppendEvent(t.Context(), old, textEvent("agent", "too late", time.Now())); err == nil || !strings.Contains(err.Error(), "stale session") {
		t.Fatalf("append through a stale copy: %v, want a stale session error", err)
	}
}

// adka2a runs an A2A context as the user A2AUserID names, with or without
// an authenticated caller.
func TestA2AUserID(t *testing.T) {
	users := make(chan string, 1)
	ag, err := agent.New(agent.Config{Name: "recorder", Run: func(ic agent.InvocationContext) iter.Seq2[*session.Event, error] {
		users <- ic.Session().UserID()
		return func(func(*session.Event, error) bool) {}
	}})
	if err != nil {
		t.Fatal(err)
	}
	exec := adka2a.NewExecutor(adka2a.ExecutorConfig{RunnerConfig: runner.Config{AppName: "app", Agent: ag, SessionService: session.InMemoryService()}})
	authenticated, cc := a2asrv.NewCallContext(t.Context(), nil)
	cc.User = &a2asrv.User{Name: "alice", Authenticated: true}
	for name, ctx := range map[string]context.Context{"anonymous": t.Context(), "authenticated": authenticated} {
		ec := &a2asrv.ExecutorContext{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("hi")), TaskID: a2a.NewTaskID(), ContextID: "ctx-" + name}
		for _, err := range exec.Execute(ctx, ec) {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if got, want := <-users, adkcompat.A2AUserID(ctx, ec.ContextID); got != want {
			t.Errorf("%s: adka2a ran the context as %q, A2AUserID says %q", name, got, want)
		}
	}
	if got := adkcompat.A2AUserID(t.Context(), "c"); got != "A2A_USER_c" {
		t.Fatalf("A2AUserID = %q", got)
	}
}

// scriptedModel answers with its replies in turn and keeps what it was sent.
type scriptedModel struct {
	replies []*genai.Content
	mu      sync.Mutex
	sent    [][]byte // each request's contents, as JSON
}

func (*scriptedModel) Name() string { return "scripted" }

func (m *scriptedModel) GenerateContent(_ context.Context, req *model.LLMRequest, _ bool) iter.Seq2[*model.LLMResponse, error] {
	m.mu.Lock()
	b, err := json.Marshal(req.Contents)
	m.sent = append(m.sent, b)
	reply := m.replies[min(len(m.sent), len(m.replies))-1]
	m.mu.Unlock()
	return func(yield func(*model.LLMResponse, error) bool) {
		if err != nil {
			yield(nil, err)
			return
		}
		yield(&model.LLMResponse{Content: reply, TurnComplete: true}, nil)
	}
}

var functionCallID = regexp.MustCompile(`^adk-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// adk-go names a model's call that has no id as NewFunctionCallID does, and
// removes such ids, its own and the sidecar's, from what it sends a model.
func TestNewFunctionCallID(t *testing.T) {
	if id := adkcompat.NewFunctionCallID(); !functionCallID.MatchString(id) {
		t.Fatalf("NewFunctionCallID() = %q", id)
	}
	lookup, err := functiontool.New(functiontool.Config{Name: "lookup", Description: "looks up"},
		func(agent.ToolContext, map[string]any) (map[string]any, error) {
			return map[string]any{"answer": 42}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	llm := &scriptedModel{replies: []*genai.Content{
		{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{Name: "lookup", Args: map[string]any{}}}}},
		genai.NewContentFromText("done", genai.RoleModel),
	}}
	ag, err := llmagent.New(llmagent.Config{Name: "assistant", Model: llm, Tools: []tool.Tool{lookup}})
	if err != nil {
		t.Fatal(err)
	}
	svc := session.InMemoryService()
	s := create(t, svc)
	// An earlier call and its answer with an id the sidecar made.
	ours := adkcompat.NewFunctionCallID()
	for _, c := range []*genai.Content{
		{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{ID: ours, Name: "lookup", Args: map[string]any{}}}}},
		{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: ours, Name: "lookup", Response: map[string]any{"answer": 1}}}}},
	} {
		ev := session.NewEventWithContext(t.Context(), "earlier")
		ev.Author, ev.Content = "assistant", c
		if err := svc.AppendEvent(t.Context(), s, ev); err != nil {
			t.Fatal(err)
		}
	}
	r, err := runner.New(runner.Config{AppName: "app", Agent: ag, SessionService: svc})
	if err != nil {
		t.Fatal(err)
	}
	var given string
	for ev, err := range r.Run(t.Context(), "u", "s", genai.NewContentFromText("again", genai.RoleUser), agent.RunConfig{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Content == nil {
			continue
		}
		for _, p := range ev.Content.Parts {
			if p.FunctionCall != nil {
				given = p.FunctionCall.ID
			}
		}
	}
	if !functionCallID.MatchString(given) {
		t.Fatalf("adk-go named the model's call %q, not as NewFunctionCallID does", given)
	}
	llm.mu.Lock()
	defer llm.mu.Unlock()
	if len(llm.sent) != 2 {
		t.Fatalf("model called %d times, want 2", len(llm.sent))
	}
	var contents []*genai.Content
	if err := json.Unmarshal(llm.sent[1], &contents); err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, c := range contents {
		for _, p := range c.Parts {
			if fc, fr := p.FunctionCall, p.FunctionResponse; fc != nil || fr != nil {
				calls++
				if (fc != nil && fc.ID != "") || (fr != nil && fr.ID != "") {
					t.Errorf("the model was sent an id: %s", llm.sent[1])
				}
			}
		}
	}
	if calls != 4 {
		t.Fatalf("the model was sent %d function calls and responses, want 4 (ours and its own): %s", calls, llm.sent[1])
	}
}
