// Package sqlitedb opens the sidecar's SQLite files with one DSN for all of
// them.
package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"

	// Pure-Go SQLite, no cgo. TimeFormat keeps the way the glebarez fork
	// earlier sidecars used stored times.
	_ "modernc.org/sqlite"
)

// TimeFormat is how times are stored: "YYYY-MM-DD HH:MM:SS.fffffffff+hh:mm"
// (DSN _time_format=sqlite), as every earlier sidecar (the glebarez driver)
// stored them. adk-go orders events and checks a session is not stale by
// comparing these columns, so one database must not mix two formats.
const TimeFormat = "2006-01-02 15:04:05.999999999-07:00"

// DSN builds a DSN for modernc.org/sqlite. WAL lets readers run beside the
// single writer, busy_timeout waits out short write locks, and immediate
// transactions avoid the lock-upgrade deadlock that busy_timeout cannot
// resolve.
func DSN(path string) string { return dsn(path, false) }

// dsn is DSN, or with exclusive the DSN OpenExclusive uses.
func dsn(path string, exclusive bool) string {
	q := url.Values{}
	if exclusive {
		// Before journal_mode, as SQLite's WAL documentation asks: a
		// connection exclusive when it first reads a WAL database keeps
		// the WAL index in its own memory, never in a -shm file.
		q.Add("_pragma", "locking_mode(EXCLUSIVE)")
	}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	q.Set("_time_format", "sqlite")
	return "file:" + filepath.ToSlash(path) + "?" + q.Encode()
}

// Open opens the SQLite file at path (created on first use) with DSN.
func Open(path string) (*sql.DB, error) {
	return open(DSN(path), path)
}

// OpenExclusive opens the SQLite file at path as Open does, for a store
// that one connection serves: the pool has that one connection, and it
// holds the file locked for as long as it is open (locking_mode
// EXCLUSIVE). SQLite then takes no file lock per transaction and keeps the
// WAL index in the connection's memory instead of a shared -shm file.
// Nothing else, in this process or another, can open the file meanwhile; a
// process killed holding it loses its lock with it.
func OpenExclusive(path string) (*sql.DB, error) {
	db, err := open(dsn(path, true), path)
	if err != nil {
		return nil, err
	}
	// The lock is the connection's: a second one would wait for it in
	// busy_timeout and fail.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, nil
}

func open(source, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", source)
	if err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", path, err)
	}
	return db, nil
}

// Uncancelled is ctx without its cancellation and deadline, for statements
// that take microseconds: point reads and writes. Given a context that can
// end, database/sql starts a goroutine for each transaction and result set,
// and modernc.org/sqlite one for each statement (even BEGIN and COMMIT),
// each only to interrupt it when the context ends: for a session load,
// more work than the reads themselves. What such a
// statement can wait for, a lock, is bounded by busy_timeout; callers check
// that ctx has not ended before they start.
func Uncancelled(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// ExecPoint runs a point write on db as Uncancelled says: not at all when
// ctx has ended, otherwise to its end.
func ExecPoint(ctx context.Context, db *sql.DB, query string, args ...any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := db.ExecContext(Uncancelled(ctx), query, args...)
	return err
}
