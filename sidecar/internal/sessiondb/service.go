// Package sessiondb is adk-go's database session service in plain SQL: the
// same tables (adk-go makes them, adkcompat.Migrate), rows and behaviour,
// without gorm.
//
// Why not adk-go's own: under gorm an append is six statements built by
// reflection, here three unless its event changes app or user state
// (binding target: first event p50 at concurrency 1; BenchmarkAppendEvent
// has both). TestMatchesADK runs the same calls through both services and
// compares what they return and store, so a change in adk-go's shows there.
//
// Where this service differs from adk-go v1.7.0's, on purpose: deleting a
// session deletes its events (adk-go declares ON DELETE CASCADE, which
// SQLite ignores without PRAGMA foreign_keys, so a session created again
// with the same id showed the deleted one's events), and creating one
// clears events such a deletion left behind.
package sessiondb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/adk/platform"
	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/internal/sessiondb/internal/storedstate"
	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

// Service is a session.Service on a database whose tables adk-go's database
// session service made. Transactions take SQLite's write lock when they
// begin (sqlitedb's DSN), so writes of one session never interleave.
type Service struct {
	db    *sql.DB
	cache *Cache // nil: none
}

var _ session.Service = (*Service)(nil)

// New returns the service on db.
func New(db *sql.DB) *Service { return &Service{db: db} }

// NewCached returns the service on db, keeping in c what a read of a
// session's newest event gives (see Cache). Services that share c must be
// on the same database and its only writers.
func NewCached(db *sql.DB, c *Cache) *Service { return &Service{db: db, cache: c} }

const (
	// selectSession is a session's state and update time, with the app's
	// and the user's state (NULL when not stored).
	selectSession = "SELECT s.state, s.update_time, " +
		"(SELECT a.state FROM app_states a WHERE a.app_name = s.app_name), " +
		"(SELECT u.state FROM user_states u WHERE u.app_name = s.app_name AND u.user_id = s.user_id) " +
		"FROM sessions s WHERE s.app_name = ? AND s.user_id = ? AND s.id = ?"
	selectAppState  = "SELECT state FROM app_states WHERE app_name = ?"
	selectUserState = "SELECT state FROM user_states WHERE app_name = ? AND user_id = ?"
	insertSession   = "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES (?, ?, ?, ?, ?, ?)"
	upsertAppState  = "INSERT INTO app_states (app_name, state, update_time) VALUES (?, ?, ?) " +
		"ON CONFLICT (app_name) DO UPDATE SET state = excluded.state, update_time = excluded.update_time"
	upsertUserState = "INSERT INTO user_states (app_name, user_id, state, update_time) VALUES (?, ?, ?, ?) " +
		"ON CONFLICT (app_name, user_id) DO UPDATE SET state = excluded.state, update_time = excluded.update_time"
	selectNewestEventTime = "SELECT timestamp FROM events WHERE app_name = ? AND user_id = ? AND session_id = ? " +
		"ORDER BY timestamp DESC LIMIT 1"
	deleteEvents        = "DELETE FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?"
	touchSession        = "UPDATE sessions SET update_time = ? WHERE app_name = ? AND user_id = ? AND id = ?"
	touchSessionAt      = touchSession + " AND update_time = ?"
	touchSessionAndSave = "UPDATE sessions SET update_time = ?, state = ? WHERE app_name = ? AND user_id = ? AND id = ?"
)

// querier is what reads need of a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *Service) Create(ctx context.Context, req *session.CreateRequest) (*session.CreateResponse, error) {
	if req.AppName == "" || req.UserID == "" {
		return nil, errors.New("app_name and user_id are required")
	}
	id := req.SessionID
	if id == "" {
		id = platform.NewUUID(ctx)
	}
	now := platform.Now(ctx)
	delta := splitState(req.State)
	sess := &storedSession{app: req.AppName, user: req.UserID, id: id, updatedAt: now}
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		app, user, err := scopeStates(ctx, tx, req.AppName, req.UserID)
		if err != nil {
			return err
		}
		if err := saveScopes(ctx, tx, req.AppName, req.UserID, app, user, delta, now); err != nil {
			return err
		}
		state, err := json.Marshal(delta.session)
		if err != nil {
			return fmt.Errorf("failed to marshal session state: %w", err)
		}
		if _, err := tx.ExecContext(ctx, insertSession, req.AppName, req.UserID, id, string(state), now, now); err != nil {
			return fmt.Errorf("failed to create session: %w", err)
		}
		// Events a deleted session of this id left (adk-go's Delete, see
		// the package doc) are not the new session's.
		if _, err := tx.ExecContext(ctx, deleteEvents, req.AppName, req.UserID, id); err != nil {
			return fmt.Errorf("failed to clear events of an earlier session %q: %w", id, err)
		}
		stored := scopedState{app: app, user: user, session: delta.session}
		sess.state = stored.merged()
		s.cache.written(sessionKey{req.AppName, req.UserID, id}, delta.scoped(), stored, now, nil)
		return nil
	})
	if err != nil {
		s.cache.dropped(sessionKey{req.AppName, req.UserID, id}, delta.scoped())
		return nil, err
	}
	return &session.CreateResponse{Session: sess}, nil
}

func (s *Service) Get(ctx context.Context, req *session.GetRequest) (*session.GetResponse, error) {
	if req.AppName == "" || req.UserID == "" || req.SessionID == "" {
		return nil, fmt.Errorf("app_name, user_id, session_id are required, got app_name: %q, user_id: %q, session_id: %q",
			req.AppName, req.UserID, req.SessionID)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.NumRecentEvents == 1 && req.After.IsZero() {
		if sess, ok := s.cache.session(sessionKey{req.AppName, req.UserID, req.SessionID}); ok {
			return &session.GetResponse{Session: sess}, nil
		}
	}
	point := sqlitedb.Uncancelled(ctx)
	state, updated, err := loadSession(point, s.db, req.AppName, req.UserID, req.SessionID)
	if err != nil {
		return nil, err
	}
	events := point
	if req.NumRecentEvents == 0 {
		// How many events a whole history holds is up to the client: that
		// read still ends with the request.
		events = ctx
	}
	evs, err := s.loadEvents(events, req)
	if err != nil {
		return nil, err
	}
	return &session.GetResponse{Session: &storedSession{
		app: req.AppName, user: req.UserID, id: req.SessionID, events: evs, updatedAt: updated,
		state: state.merged(),
	}}, nil
}

// loadEvents reads the events req asks for (its NumRecentEvents newest,
// those at or after its After), oldest first.
func (s *Service) loadEvents(ctx context.Context, req *session.GetRequest) ([]*session.Event, error) {
	q, args := eventsQuery(req)
	evs := []*session.Event{}
	err := eachRow(ctx, s.db, q, args, func(rows *sql.Rows) error {
		ev, err := scanEvent(rows)
		evs = append(evs, ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read events: %w", err)
	}
	slices.Reverse(evs)
	return evs, nil
}

// eventsQuery selects the events req asks for, newest first: a search of
// adkcompat.EventsIndex, not a scan and sort of all events.
func eventsQuery(req *session.GetRequest) (string, []any) {
	q, args := selectEvents, []any{req.AppName, req.UserID, req.SessionID}
	if !req.After.IsZero() {
		q += " AND timestamp >= ?"
		args = append(args, req.After)
	}
	q += " ORDER BY timestamp DESC"
	if req.NumRecentEvents > 0 {
		q += " LIMIT ?"
		args = append(args, req.NumRecentEvents)
	}
	return q, args
}

func (s *Service) List(ctx context.Context, req *session.ListRequest) (*session.ListResponse, error) {
	if req.AppName == "" {
		return nil, fmt.Errorf("app_name is required, got app_name: %q", req.AppName)
	}
	q, args := "SELECT user_id, id, state, update_time FROM sessions WHERE app_name = ?", []any{req.AppName}
	if req.UserID != "" {
		q += " AND user_id = ?"
		args = append(args, req.UserID)
	}
	type row struct {
		user, id string
		state    map[string]any
		updated  time.Time
	}
	var found []row
	err := eachRow(ctx, s.db, q, args, func(rows *sql.Rows) error {
		var r row
		var state []byte
		if err := rows.Scan(&r.user, &r.id, &state, &r.updated); err != nil {
			return err
		}
		var err error
		r.state, err = storedstate.Decode(state)
		found = append(found, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("failed to list sessions: %w", err)
	}
	app, err := loadState(ctx, s.db, selectAppState, req.AppName)
	if err != nil {
		return nil, err
	}
	users := map[string]map[string]any{}
	uq, uargs := "SELECT user_id, state FROM user_states WHERE app_name = ?", []any{req.AppName}
	if req.UserID != "" {
		uq += " AND user_id = ?"
		uargs = append(uargs, req.UserID)
	}
	err = eachRow(ctx, s.db, uq, uargs, func(rows *sql.Rows) error {
		var user string
		var state []byte
		if err := rows.Scan(&user, &state); err != nil {
			return err
		}
		var err error
		users[user], err = storedstate.Decode(state)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read user states: %w", err)
	}
	out := make([]session.Session, 0, len(found))
	for _, r := range found {
		out = append(out, &storedSession{
			app: req.AppName, user: r.user, id: r.id, updatedAt: r.updated,
			state: scopedState{app: app, user: users[r.user], session: r.state}.merged(),
		})
	}
	return &session.ListResponse{Sessions: out}, nil
}

func (s *Service) Delete(ctx context.Context, req *session.DeleteRequest) error {
	if req.AppName == "" || req.UserID == "" || req.SessionID == "" {
		return fmt.Errorf("app_name, user_id, session_id are required, got app_name: %q, user_id: %q, session_id: %q",
			req.AppName, req.UserID, req.SessionID)
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// Under the write lock, before the commit; if it rolls back, the
		// session is only read from the file.
		s.cache.dropped(sessionKey{req.AppName, req.UserID, req.SessionID}, false)
		for _, q := range []string{deleteEvents, "DELETE FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?"} {
			if _, err := tx.ExecContext(ctx, q, req.AppName, req.UserID, req.SessionID); err != nil {
				return fmt.Errorf("failed to delete session: %w", err)
			}
		}
		return nil
	})
}

// AppendEvent stores ev (partial events are not stored) and adds it to
// sess, which must come from this service. The write is refused, as adk-go
// refuses it, when the stored session was updated after sess was read
// ("stale session"): sess holds no longer what the session holds.
func (s *Service) AppendEvent(ctx context.Context, cur session.Session, ev *session.Event) error {
	if cur == nil {
		return errors.New("session is nil")
	}
	if ev == nil {
		return errors.New("event is nil")
	}
	if ev.Partial {
		return nil
	}
	sess, ok := cur.(*storedSession)
	if !ok {
		return fmt.Errorf("unexpected session type %T", cur)
	}
	// Stored times have whole microseconds; the event the caller holds
	// must say what was stored.
	ev.Timestamp = ev.Timestamp.Truncate(time.Microsecond)
	sess.add(ev)
	stored := withoutTempState(ev)
	evRow, err := newEventRow(stored)
	if err != nil {
		return err
	}
	k := sessionKey{sess.app, sess.user, sess.id}
	delta := splitState(stored.Actions.StateDelta)
	known := sess.LastUpdateTime()
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// An event that changes no state, the common one (a user's message,
		// goose's answer), of a session the cache holds: the session is not
		// read again (appendUnchanged).
		if len(delta.session) == 0 && !delta.scoped() {
			if prev, ok := s.cache.stored(k); ok {
				if done, err := s.appendUnchanged(ctx, tx, k, prev, known, &evRow, ev.Timestamp); done || err != nil {
					return err
				}
			}
		}
		row, updated, err := loadSession(ctx, tx, sess.app, sess.user, sess.id)
		if err != nil {
			return fmt.Errorf("cannot apply event: %w", err)
		}
		if err := checkFresh(known, updated); err != nil {
			return err
		}
		newest, err := s.isNewest(ctx, tx, k, evRow.timestamp)
		if err != nil {
			return err
		}
		if delta.scoped() {
			if err := saveScopes(ctx, tx, sess.app, sess.user, row.app, row.user, delta, ev.Timestamp); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, insertEvent, evRow.args(sess.app, sess.user, sess.id)...); err != nil {
			return fmt.Errorf("failed to save event: %w", err)
		}
		if len(delta.session) == 0 {
			_, err = tx.ExecContext(ctx, touchSession, ev.Timestamp, sess.app, sess.user, sess.id)
		} else {
			maps.Copy(row.session, delta.session)
			var state []byte
			if state, err = json.Marshal(row.session); err != nil {
				return fmt.Errorf("failed to marshal session state: %w", err)
			}
			_, err = tx.ExecContext(ctx, touchSessionAndSave, ev.Timestamp, string(state), sess.app, sess.user, sess.id)
		}
		if err != nil {
			return fmt.Errorf("failed to save session state: %w", err)
		}
		if newest {
			s.cache.written(k, delta.scoped(), row, ev.Timestamp, &evRow)
		} else {
			s.cache.dropped(k, delta.scoped())
		}
		return nil
	})
	if err != nil {
		s.cache.dropped(k, delta.scoped())
		return err
	}
	sess.setUpdated(ev.Timestamp)
	return nil
}

// appendUnchanged is AppendEvent's transaction for an event that changes
// no state, of session k whose cache entry is prev: the session's
// update time and the event's row are written, and the session is not
// read. What the cache holds is what the file holds, as only the services
// sharing it write the file; the update checks that all the same, by the
// update time prev holds, and changes nothing otherwise. done is false
// when it wrote nothing: the caller then reads the session from the file,
// which also decides whether a copy older than prev is stale.
func (s *Service) appendUnchanged(ctx context.Context, tx *sql.Tx, k sessionKey, prev *cacheEntry, known time.Time, evRow *eventRow, at time.Time) (done bool, err error) {
	if olderThan(known, prev.updated) {
		return false, nil
	}
	res, err := tx.ExecContext(ctx, touchSessionAt, at, k.app, k.user, k.id, prev.updated)
	if err != nil {
		return false, fmt.Errorf("failed to save session state: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("failed to save session state: %w", err)
	}
	if n != 1 {
		s.cache.dropped(k, false)
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, insertEvent, evRow.args(k.app, k.user, k.id)...); err != nil {
		return false, fmt.Errorf("failed to save event: %w", err)
	}
	if prev.newest == nil || evRow.timestamp.After(prev.newest.timestamp) {
		s.cache.appended(k, prev, at, evRow)
	} else {
		s.cache.dropped(k, false)
	}
	return true, nil
}

// checkFresh refuses a write made from a copy of the session read at known
// when the stored session was updated since (at updated), as adk-go does.
func checkFresh(known, updated time.Time) error {
	if olderThan(known, updated) {
		return fmt.Errorf("stale session error: last update time from request (%s) is older than in database (%s)",
			time.UnixMicro(known.UnixMicro()).Format(time.RFC3339Nano), time.UnixMicro(updated.UnixMicro()).Format(time.RFC3339Nano))
	}
	return nil
}

// olderThan reports whether a copy of a session read at known is older
// than the session updated at updated, to the microsecond times are stored
// with.
func olderThan(known, updated time.Time) bool { return updated.UnixMicro() > known.UnixMicro() }

// isNewest reports whether an event stamped at would be session k's
// newest: false when the cache is off (nothing asks), or when an event the
// session has is as new (a read of the newest event could give either).
// Called in the append's transaction, before the insert.
func (s *Service) isNewest(ctx context.Context, tx *sql.Tx, k sessionKey, at time.Time) (bool, error) {
	if s.cache == nil {
		return false, nil
	}
	prev, cached := s.cache.newestTime(k)
	if !cached {
		var err error
		if prev, err = newestEventTime(ctx, tx, k); err != nil {
			return false, err
		}
	}
	return at.After(prev), nil
}

// newestEventTime is the time of session k's newest event, zero when it
// has none.
func newestEventTime(ctx context.Context, q querier, k sessionKey) (time.Time, error) {
	var at time.Time
	err := q.QueryRowContext(ctx, selectNewestEventTime, k.app, k.user, k.id).Scan(&at)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, fmt.Errorf("failed to read the newest event's time: %w", err)
	}
	return at, nil
}

// inTx runs f in a transaction, committed when f returns nil, unless ctx
// has ended. The transaction's statements are a few point reads and
// writes: they get sqlitedb.Uncancelled(ctx), passed to f.
func (s *Service) inTx(ctx context.Context, f func(context.Context, *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx = sqlitedb.Uncancelled(ctx)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("failed to begin transaction: %w", err)
	}
	if err := f(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("failed to commit: %w", err)
	}
	return nil
}

// loadSession reads a session's own state, the app's and the user's, and
// its update time, in one statement (one read snapshot); a session not
// stored is session.ErrNotFound.
func loadSession(ctx context.Context, q querier, app, user, id string) (scopedState, time.Time, error) {
	var own, appState, userState []byte
	var updated time.Time
	err := q.QueryRowContext(ctx, selectSession, app, user, id).Scan(&own, &updated, &appState, &userState)
	if errors.Is(err, sql.ErrNoRows) {
		return scopedState{}, time.Time{}, fmt.Errorf("%w: %q", session.ErrNotFound, id)
	}
	if err != nil {
		return scopedState{}, time.Time{}, fmt.Errorf("failed to read session: %w", err)
	}
	var st scopedState
	for _, d := range []struct {
		into *map[string]any
		b    []byte
	}{{&st.session, own}, {&st.app, appState}, {&st.user, userState}} {
		if *d.into, err = storedstate.Decode(d.b); err != nil {
			return scopedState{}, time.Time{}, fmt.Errorf("failed to read state of session %q: %w", id, err)
		}
	}
	return st, updated, nil
}

// scopeStates reads the app's and the user's state (empty when not stored).
func scopeStates(ctx context.Context, q querier, app, user string) (appState, userState map[string]any, err error) {
	if appState, err = loadState(ctx, q, selectAppState, app); err != nil {
		return nil, nil, err
	}
	if userState, err = loadState(ctx, q, selectUserState, app, user); err != nil {
		return nil, nil, err
	}
	return appState, userState, nil
}

// saveScopes merges delta's app and user keys into the app's and the
// user's state and stores those that changed.
func saveScopes(ctx context.Context, tx *sql.Tx, app, user string, appState, userState map[string]any, delta scopedState, at time.Time) error {
	for _, sc := range []struct {
		state, delta map[string]any
		upsert       string
		keys         []any
	}{
		{appState, delta.app, upsertAppState, []any{app}},
		{userState, delta.user, upsertUserState, []any{app, user}},
	} {
		if len(sc.delta) == 0 {
			continue
		}
		maps.Copy(sc.state, sc.delta)
		b, err := json.Marshal(sc.state)
		if err != nil {
			return fmt.Errorf("failed to marshal state: %w", err)
		}
		if _, err := tx.ExecContext(ctx, sc.upsert, append(sc.keys, string(b), at)...); err != nil {
			return fmt.Errorf("failed to save state: %w", err)
		}
	}
	return nil
}

// loadState reads one state column; no row is an empty state.
func loadState(ctx context.Context, q querier, query string, args ...any) (map[string]any, error) {
	var b []byte
	err := q.QueryRowContext(ctx, query, args...).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return map[string]any{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read state: %w", err)
	}
	return storedstate.Decode(b)
}

// eachRow runs query and calls f for each row.
func eachRow(ctx context.Context, q querier, query string, args []any, f func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
