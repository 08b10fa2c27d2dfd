// Package adkcompat holds everything the sidecar relies on in adk-go
// (google.golang.org/adk v1.7.0) beyond its API: the tables of the database
// session service, the index its event reads need and the migrator that
// index must get past, how it stores timestamps, and the ids adk-go makes.
// Each is tested against the real adk-go, so a test here fails when adk-go
// changes one; moving to another adk-go (google.golang.org/adk/v2) starts
// here.
package adkcompat

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/google/uuid"
	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"

	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// Migrate migrates adk-go's database session service svc, whose database is
// db, and adds the index its event reads need.
//
// The service reads a session's events with WHERE app_name, user_id,
// session_id ORDER BY timestamp, twice per run, but the events table's only
// index is its primary key, which starts with the event id: every run
// scanned and sorted the events of all sessions ever stored. The index is
// checked on every start, since gorm's SQLite migrator rebuilds a table
// (dropping its other indexes) when it changes a column.
func Migrate(ctx context.Context, svc session.Service, db *sql.DB) error {
	if err := database.AutoMigrate(svc); err != nil {
		return fmt.Errorf("failed to migrate session database: %w", err)
	}
	if _, err := db.ExecContext(ctx, eventsIndexDDL); err != nil {
		return fmt.Errorf("failed to create index %s: %w", EventsIndex, err)
	}
	return nil
}

// EventsIndex names the index Migrate adds to the events table.
const EventsIndex = "adk2goose_events_by_session"

// eventsIndexDDL: gorm's SQLite migrator parses the stored DDL of a table's
// indexes on every AutoMigrate and fails on a statement its pattern
// (CREATE INDEX name ON ...) does not match, so the name stays a plain word.
// SQLite stores the statement without IF NOT EXISTS.
const eventsIndexDDL = "CREATE INDEX IF NOT EXISTS " + EventsIndex + " ON events (app_name, user_id, session_id, timestamp)"

// SessionExists tells whether the database session service's database db
// holds the session, with one primary-key lookup instead of the service's
// Get, which also loads the session's events and state.
func SessionExists(ctx context.Context, db *sql.DB, app, user, id string) (bool, error) {
	var one int
	err := db.QueryRowContext(ctx, "SELECT 1 FROM sessions WHERE app_name = ? AND user_id = ? AND id = ? LIMIT 1",
		app, user, id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to look up session: %w", err)
	}
	return true, nil
}

// CountUsers counts the distinct ADK users with a session of app.
func CountUsers(ctx context.Context, db *sql.DB, app string) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(DISTINCT user_id) FROM sessions WHERE app_name = ?", app).Scan(&n); err != nil {
		return 0, fmt.Errorf("failed to count users: %w", err)
	}
	return n, nil
}

// ListUsers lists up to limit distinct ADK users with a session of app, in
// byte order.
func ListUsers(ctx context.Context, db *sql.DB, app string, limit int) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT DISTINCT user_id FROM sessions WHERE app_name = ? ORDER BY user_id LIMIT ?", app, limit)
	if err != nil {
		return nil, fmt.Errorf("failed to list users: %w", err)
	}
	defer rows.Close()
	var users []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, fmt.Errorf("failed to list users: %w", err)
		}
		users = append(users, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to list users: %w", err)
	}
	return users, nil
}

// StoredTime is t as the database session service stores an event's
// timestamp: in whole microseconds.
//
// The service also sets the session's update time to the timestamp of each
// event appended, even one earlier than the stored update time, and refuses
// an append through a copy of the session whose update time is older than
// the stored one ("stale session"). An event written outside a turn can
// therefore be stamped StoredTimeAfter an earlier event of the session, so
// that a turn which loaded the session meanwhile can still write it.
func StoredTime(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// StoredTimeAfter is the first stored time after t: an event stamped with it
// sorts right after one stamped t.
func StoredTimeAfter(t time.Time) time.Time { return StoredTime(t).Add(time.Microsecond) }

// A2AUserID is the ADK user adka2a runs an A2A context as: a2asrv's
// authenticated user when the call has one, else "A2A_USER_" + contextID
// (adka2a's toInvocationMeta). The session is the context itself. Before
// a2asrv has made the call's context (the peer router), the verified
// caller is that user: the server's interceptor makes it a2asrv's.
func A2AUserID(ctx context.Context, contextID string) string {
	if cc, ok := a2asrv.CallContextFrom(ctx); ok && cc.User != nil && cc.User.Name != "" {
		return cc.User.Name
	}
	if c, ok := identity.CallerFrom(ctx); ok {
		return c.User
	}
	return "A2A_USER_" + contextID
}

// NewFunctionCallID returns a function call id shaped like those adk-go
// gives calls a model left without one ("adk-<uuid>"); adk-go removes ids
// of that shape from the contents it sends back to a model.
func NewFunctionCallID() string { return "adk-" + uuid.NewString() }
