package server

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"

	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
	"github.com/adk2goose/goose-operator/sidecar/internal/sessiondb"
	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

// sessionReadConns bounds the pool the session service reads from, and as
// many connections stay open when idle: database/sql keeps only 2 by
// default, so concurrent runs kept opening new ones, each paying for the
// open, the DSN pragmas, a schema parse and a cold page cache. Reads are
// CPU-bound in-process, so a few connections suffice.
const sessionReadConns = 8

// openSessionService opens the session store on the SQLite file at path:
// adk-go's database session service's tables, migrated by adk-go
// (adkcompat.Migrate) and read and written by sessiondb. Reads and writes
// go through two pools (see sessionService); Close the *sql.DBs.
func openSessionService(ctx context.Context, path string) (dbs []*sql.DB, svc *sessionService, err error) {
	defer func() {
		if err != nil {
			for _, db := range dbs {
				_ = db.Close()
			}
			dbs = nil
		}
	}()
	open := func(conns int) (*sql.DB, error) {
		db, err := sqlitedb.Open(path)
		if err != nil {
			return nil, fmt.Errorf("failed to open session database: %w", err)
		}
		dbs = append(dbs, db)
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		return db, nil
	}
	w, err := open(1)
	if err != nil {
		return dbs, nil, err
	}
	r, err := open(sessionReadConns)
	if err != nil {
		return dbs, nil, err
	}
	// adk-go's own service makes and migrates the tables, so that they stay
	// what it would make. gorm's SQLite dialector on w (modernc.org/sqlite,
	// see sqlitedb): its own driver, mattn's cgo one, is never opened (and
	// is a stub in the CGO_ENABLED=0 images).
	migrator, err := database.NewSessionService(&sqlite.Dialector{Conn: w}, &gorm.Config{Logger: gormlogger.Default.LogMode(gormlogger.Silent)})
	if err != nil {
		return dbs, nil, fmt.Errorf("failed to open session database for migration: %w", err)
	}
	if err := adkcompat.Migrate(ctx, migrator, w); err != nil {
		return dbs, nil, err
	}
	// One cache for both: each run reads its session's newest event
	// through r right after its previous run wrote it through w.
	cache := sessiondb.NewCache(0)
	return dbs, newSessionService(sessiondb.NewCached(r, cache), sessiondb.NewCached(w, cache)), nil
}

// sessionService is the session store (sessiondb) with its reads and
// writes on separate connection pools; each call is passed to one of two
// instances of that (stateless) service on the same database.
//
// SQLite admits one writer at a time. In one shared pool, the others took a
// connection and then waited in busy_timeout's handler, which sleeps 1, 2,
// 5, … up to 100 ms between attempts and does not wake in order; with
// concurrent runs that polling, not the writes, was most of a run's time to
// first event (the runner appends the user message before the agent
// starts). Here writers queue in arrival order (gate) for the one write
// connection, which is handed over as soon as the previous one commits; and
// readers, which WAL never makes wait for the writer, cannot hold the writer
// up by taking all connections.
//
// Three things keep a run's first event from waiting on the database (see
// runContext): the session a run loads is loaded once per request, not by
// each of adkrest's check, the runner and the guard; it is usually loaded
// from what the session's last write left in memory (sessiondb.Cache); and
// the runner's write of the user message goes on in the background while
// goose starts, finished before the run's next write of the session and
// before its turn ends (flush).
type sessionService struct {
	session.Service // reads
	w               session.Service
	gate            chan struct{}
	// deleted run, in order, after a session was deleted, to clean up what
	// it owned outside the database. Set up before serving.
	deleted []func(context.Context, *session.DeleteRequest)

	// needsHistory, if set, tells from a session loaded with its last
	// event only whether its run needs the whole history after all.
	needsHistory func(session.Session) bool

	mu sync.Mutex
	// pending is the background write of each session's user message.
	pending map[sessionID]*pendingWrite
}

// onDelete adds a hook run after every successful Delete.
func (s *sessionService) onDelete(f func(context.Context, *session.DeleteRequest)) {
	s.deleted = append(s.deleted, f)
}

type sessionID struct{ app, user, id string }

type pendingWrite struct {
	done chan struct{}
	err  error
}

func newSessionService(r, w session.Service) *sessionService {
	return &sessionService{Service: r, w: w, gate: make(chan struct{}, 1), pending: map[sessionID]*pendingWrite{}}
}

// runKey marks a request context as one run's: its session is loaded once
// and its user message written in the background.
type runKey struct{}

type runState struct {
	id      sessionID
	session session.Session // loaded by the first Get
	// userMessage is true until the run's first user event is appended.
	// Atomic: on /run_live the runner appends user messages from the
	// socket's reader while the agent's events are appended.
	userMessage atomic.Bool
}

// runContext prepares ctx for one run of the session (under its turn).
func runContext(ctx context.Context, app, user, id string) context.Context {
	rs := &runState{id: sessionID{app, user, id}}
	rs.userMessage.Store(true)
	return context.WithValue(ctx, runKey{}, rs)
}

func (s *sessionService) Get(ctx context.Context, req *session.GetRequest) (*session.GetResponse, error) {
	rs, _ := ctx.Value(runKey{}).(*runState)
	if rs == nil || rs.id != (sessionID{req.AppName, req.UserID, req.SessionID}) || req.NumRecentEvents > 0 || !req.After.IsZero() {
		return s.Service.Get(ctx, req)
	}
	// adkrest checks the session exists, then the runner loads it: the
	// turn keeps anyone else from writing it in between, so one load
	// serves both. A run needs the session's state, not its history: the
	// runner reads events only to pick which agent of a tree answers (here
	// there is one, the goose agent, which keeps its history in goose), so
	// one event is loaded instead of every event of a long conversation.
	if rs.session == nil {
		recent := *req
		recent.NumRecentEvents = 1
		resp, err := s.Service.Get(ctx, &recent)
		if err == nil && s.needsHistory != nil && s.needsHistory(resp.Session) {
			resp, err = s.Service.Get(ctx, req)
		}
		if err != nil {
			return nil, err
		}
		rs.session = resp.Session
	}
	return &session.GetResponse{Session: rs.session}, nil
}

// acquire waits for the write turn. When ctx ends first the write goes
// ahead ungated, so that the service fails it exactly as it would have.
func (s *sessionService) acquire(ctx context.Context) (release func()) {
	select {
	case s.gate <- struct{}{}:
		return func() { <-s.gate }
	case <-ctx.Done():
		return func() {}
	}
}

func (s *sessionService) Create(ctx context.Context, req *session.CreateRequest) (*session.CreateResponse, error) {
	defer s.acquire(ctx)()
	return s.w.Create(ctx, req)
}

func (s *sessionService) Delete(ctx context.Context, req *session.DeleteRequest) error {
	if err := s.flush(sessionID{req.AppName, req.UserID, req.SessionID}); err != nil {
		return err
	}
	if err := s.delete(ctx, req); err != nil {
		return err
	}
	for _, f := range s.deleted {
		f(ctx, req)
	}
	return nil
}

func (s *sessionService) delete(ctx context.Context, req *session.DeleteRequest) error {
	defer s.acquire(ctx)()
	return s.w.Delete(ctx, req)
}

// appendTimeout bounds one event write, which outlives its request.
const appendTimeout = 30 * time.Second

func (s *sessionService) AppendEvent(ctx context.Context, sess session.Session, ev *session.Event) error {
	// The database service drops partial events without touching the
	// database; they need no turn.
	if ev != nil && ev.Partial {
		return s.w.AppendEvent(ctx, sess, ev)
	}
	if sess == nil || ev == nil {
		return s.w.AppendEvent(ctx, sess, ev)
	}
	id := sessionID{sess.AppName(), sess.UserID(), sess.ID()}
	// Writes of one session go in order: the database service rejects a
	// write through a copy older than the stored session.
	if err := s.flush(id); err != nil {
		return err
	}
	if rs, _ := ctx.Value(runKey{}).(*runState); rs != nil && rs.id == id && ev.Author == "user" && rs.userMessage.CompareAndSwap(true, false) {
		// The runner appends the user message before the agent starts and
		// yields nothing for it: the agent need not wait for the write.
		p := &pendingWrite{done: make(chan struct{})}
		s.mu.Lock()
		s.pending[id] = p
		s.mu.Unlock()
		go func() {
			defer close(p.done)
			p.err = s.write(ctx, sess, ev)
		}()
		return nil
	}
	// An event that reached here happened: goose answered (and counted the
	// tokens) even if the client went away meanwhile, so the write does not
	// end with the request; otherwise the answer would be missing from the
	// history.
	return s.write(ctx, sess, ev)
}

func (s *sessionService) write(ctx context.Context, sess session.Session, ev *session.Event) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), appendTimeout)
	defer cancel()
	defer s.acquire(ctx)()
	return s.w.AppendEvent(ctx, sess, ev)
}

// flush waits for the session's background write and returns its error.
func (s *sessionService) flush(id sessionID) error {
	s.mu.Lock()
	p := s.pending[id]
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	// Even when ctx has ended: the write is bounded by appendTimeout, and
	// what follows must not overtake it.
	<-p.done
	s.mu.Lock()
	if s.pending[id] == p {
		delete(s.pending, id)
	}
	s.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("failed to store the user message: %w", p.err)
	}
	return nil
}
