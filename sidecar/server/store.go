package server

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

// File names inside the data directory.
const (
	SessionsDBFile = "sessions.db" // adk-go's session tables (sessiondb)
	UsageDBFile    = "usage.db"    // per-session token totals and early goose sessions (UsageStore)
)

// UsageStore keeps each ADK session's accumulated goose token totals and
// last use in SQLite. Rows outlive deleted sessions on purpose: tokens that
// were spent stay spent in the totals.
type UsageStore struct {
	db *sql.DB
}

var (
	_ gooseagent.UsageStore        = (*UsageStore)(nil)
	_ gooseagent.EarlySessionStore = (*UsageStore)(nil)
)

// OpenUsageStore opens (creating if needed) the store at path.
func OpenUsageStore(ctx context.Context, path string) (*UsageStore, error) {
	// One connection, holding the file: every turn ends with a write, and
	// concurrent writers would wait for each other in busy_timeout's
	// sleep-and-retry loop instead of queueing for the connection, which is
	// handed over at once. The only reads are /stats's two small queries.
	db, err := sqlitedb.OpenExclusive(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open usage store: %w", err)
	}
	const schema = `CREATE TABLE IF NOT EXISTS session_usage (
		app_name TEXT NOT NULL,
		user_id TEXT NOT NULL,
		session_id TEXT NOT NULL,
		goose_session_id TEXT NOT NULL,
		input_tokens INTEGER NOT NULL DEFAULT 0,
		output_tokens INTEGER NOT NULL DEFAULT 0,
		total_tokens INTEGER NOT NULL DEFAULT 0,
		turns INTEGER NOT NULL DEFAULT 0,
		last_used_ms INTEGER NOT NULL,
		PRIMARY KEY (app_name, user_id, session_id)
	);
	CREATE INDEX IF NOT EXISTS session_usage_last_used ON session_usage (app_name, last_used_ms);
	CREATE TABLE IF NOT EXISTS early_goose_sessions (
		goose_session_id TEXT PRIMARY KEY,
		started_ms INTEGER NOT NULL
	);`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("failed to create usage schema: %w", err)
	}
	return &UsageStore{db: db}, nil
}

// RecordUsage implements gooseagent.UsageStore. Totals are absolute, so a
// retried or replayed record cannot double count.
func (s *UsageStore) RecordUsage(ctx context.Context, r gooseagent.UsageRecord) error {
	err := sqlitedb.ExecPoint(ctx, s.db, `INSERT INTO session_usage
		(app_name, user_id, session_id, goose_session_id, input_tokens, output_tokens, total_tokens, turns, last_used_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)
		ON CONFLICT (app_name, user_id, session_id) DO UPDATE SET
			goose_session_id = excluded.goose_session_id,
			input_tokens = excluded.input_tokens,
			output_tokens = excluded.output_tokens,
			total_tokens = excluded.total_tokens,
			turns = turns + 1,
			last_used_ms = excluded.last_used_ms`,
		r.Key.AppName, r.Key.UserID, r.Key.SessionID, r.GooseSessionID,
		r.Totals.InputTokens, r.Totals.OutputTokens, r.Totals.Total(), r.At.UnixMilli())
	if err != nil {
		return fmt.Errorf("failed to record session usage: %w", err)
	}
	return nil
}

// Totals sums the token totals of every session of app ever recorded.
func (s *UsageStore) Totals(ctx context.Context, app string) (goose.Usage, error) {
	var u goose.Usage
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(input_tokens),0), COALESCE(SUM(output_tokens),0),
		COALESCE(SUM(total_tokens),0) FROM session_usage WHERE app_name = ?`, app).
		Scan(&u.InputTokens, &u.OutputTokens, &u.TotalTokens)
	if err != nil {
		return u, fmt.Errorf("failed to sum session usage: %w", err)
	}
	return u, nil
}

// UsedSince returns the sessions of app whose last turn ended at or after t.
func (s *UsageStore) UsedSince(ctx context.Context, app string, t time.Time) ([]gooseagent.SessionKey, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT user_id, session_id FROM session_usage
		WHERE app_name = ? AND last_used_ms >= ?`, app, t.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("failed to query recent sessions: %w", err)
	}
	defer rows.Close()
	var out []gooseagent.SessionKey
	for rows.Next() {
		k := gooseagent.SessionKey{AppName: app}
		if err := rows.Scan(&k.UserID, &k.SessionID); err != nil {
			return nil, fmt.Errorf("failed to read recent sessions: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to read recent sessions: %w", err)
	}
	return out, nil
}

// AddEarly implements gooseagent.EarlySessionStore.
func (s *UsageStore) AddEarly(ctx context.Context, gooseID string) error {
	err := sqlitedb.ExecPoint(ctx, s.db, `INSERT INTO early_goose_sessions (goose_session_id, started_ms) VALUES (?, ?)
		ON CONFLICT (goose_session_id) DO NOTHING`, gooseID, time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("failed to list an early goose session: %w", err)
	}
	return nil
}

// RemoveEarly implements gooseagent.EarlySessionStore.
func (s *UsageStore) RemoveEarly(ctx context.Context, gooseID string) error {
	if err := sqlitedb.ExecPoint(ctx, s.db, `DELETE FROM early_goose_sessions WHERE goose_session_id = ?`, gooseID); err != nil {
		return fmt.Errorf("failed to unlist an early goose session: %w", err)
	}
	return nil
}

// ListEarly implements gooseagent.EarlySessionStore.
func (s *UsageStore) ListEarly(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT goose_session_id FROM early_goose_sessions ORDER BY started_ms`)
	if err != nil {
		return nil, fmt.Errorf("failed to list early goose sessions: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("failed to read early goose sessions: %w", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("failed to read early goose sessions: %w", err)
	}
	return out, nil
}

// LastUsed returns when the last turn of any session of app ended, zero
// when none has. It is read from the file, so a restart does not reset it.
func (s *UsageStore) LastUsed(ctx context.Context, app string) (time.Time, error) {
	var ms sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT MAX(last_used_ms) FROM session_usage WHERE app_name = ?`, app).Scan(&ms)
	if err != nil {
		return time.Time{}, fmt.Errorf("failed to read the last turn's time: %w", err)
	}
	if !ms.Valid {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms.Int64).UTC(), nil
}

// Close closes the database.
func (s *UsageStore) Close() error { return s.db.Close() }
