package sqlitedb_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

// TestOpenExclusiveHoldsTheFile: the one connection keeps the file locked
// and the WAL index in its memory (no -shm file) while it is open; its
// writers queue for it rather than fail; on Close the lock goes and what
// was written is there.
func TestOpenExclusiveHoldsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := sqlitedb.OpenExclusive(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE t (k INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			_, err := db.ExecContext(t.Context(), "INSERT INTO t (k) VALUES (?)", i)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a concurrent write failed: %v", err)
		}
	}
	var mode, journal string
	if err := db.QueryRowContext(t.Context(), "PRAGMA locking_mode").Scan(&mode); err != nil || mode != "exclusive" {
		t.Fatalf("locking_mode %q, %v; want exclusive", mode, err)
	}
	if err := db.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&journal); err != nil || journal != "wal" {
		t.Fatalf("journal_mode %q, %v; want wal", journal, err)
	}
	if _, err := os.Stat(path + "-shm"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a -shm file exists (%v): the WAL index is shared, not in the connection's memory", err)
	}

	// Another connection, not waiting for locks, is refused while it is open.
	other, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	count := func() (int, error) {
		var n int
		err := other.QueryRowContext(t.Context(), "SELECT count(*) FROM t").Scan(&n)
		return n, err
	}
	if n, err := count(); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("another connection read %d rows (err %v) while the file was held", n, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := count(); err != nil || n != 20 {
		t.Fatalf("after Close: %d rows, %v; want 20", n, err)
	}
}

// TestExecPoint: a point write with an ended context is not run; with a
// live one it is, and a later end of that context does not undo it.
func TestExecPoint(t *testing.T) {
	db, err := sqlitedb.OpenExclusive(filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE t (k INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := sqlitedb.ExecPoint(ended, db, "INSERT INTO t (k) VALUES (1)"); !errors.Is(err, context.Canceled) {
		t.Fatalf("with an ended context: %v", err)
	}
	live, cancel := context.WithCancel(t.Context())
	if err := sqlitedb.ExecPoint(live, db, "INSERT INTO t (k) VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	cancel()
	var keys string
	if err := db.QueryRowContext(t.Context(), "SELECT group_concat(k) FROM t").Scan(&keys); err != nil || keys != "2" {
		t.Fatalf("stored %q, %v; want 2", keys, err)
	}
}
