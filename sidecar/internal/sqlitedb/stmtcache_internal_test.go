package sqlitedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"maps"
	"path/filepath"
	"sync"
	"testing"

	"modernc.org/sqlite"
)

// counting sits between the statement cache and modernc.org/sqlite and
// counts what reaches the driver: statements prepared (per query) and
// finalized.
type counting struct {
	driver.Connector
	mu        sync.Mutex
	prepared  map[string]int
	finalized int
}

func (c *counting) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: dc, c: c}, nil
}

func (c *counting) counts() (prepared map[string]int, finalized int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.prepared), c.finalized
}

type countingConn struct {
	driver.Conn
	c *counting
}

func (cc *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	ds, err := cc.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	cc.c.mu.Lock()
	cc.c.prepared[query]++
	cc.c.mu.Unlock()
	return &countingStmt{Stmt: ds, c: cc.c}, nil
}

func (cc *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return cc.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

type countingStmt struct {
	driver.Stmt
	c *counting
}

func (s *countingStmt) Close() error {
	s.c.mu.Lock()
	s.c.finalized++
	s.c.mu.Unlock()
	return s.Stmt.Close()
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

// openCounting opens a one-connection database on a fresh file whose
// connections keep n statements, over a counting driver, with table t(k, v).
func openCounting(t *testing.T, n int) (*sql.DB, *counting) {
	t.Helper()
	mc, err := sqlite.NewConnector(DSN(filepath.Join(t.TempDir(), "t.db")))
	if err != nil {
		t.Fatal(err)
	}
	c := &counting{Connector: mc, prepared: map[string]int{}}
	db := sql.OpenDB(keepStatements(c, n))
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	return db, c
}

const (
	insertKV = `INSERT INTO t (k, v) VALUES (?, ?)`
	selectV  = `SELECT v FROM t WHERE k = ?`
	updateV  = `UPDATE t SET v = ? WHERE k = ?`
)

// The case this exists for: a statement first prepared in one transaction
// (as gorm's PrepareStmt caches it) and used in later ones through
// Tx.StmtContext, which database/sql prepares again each time; and plain
// Exec and QueryRow inside and outside transactions.
func TestEachQueryIsPreparedOncePerConnection(t *testing.T) {
	db, c := openCounting(t, 8)
	ctx := t.Context()

	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	update, err := tx1.PrepareContext(ctx, updateV)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	for k := range 5 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, insertKV, k, "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.StmtContext(ctx, update).ExecContext(ctx, "b", k); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := tx.QueryRowContext(ctx, selectV, k).Scan(&v); err != nil || v != "b" {
			t.Fatalf("row %d: %q, %v; want b", k, v, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, selectV, k).Scan(&v); err != nil || v != "b" {
			t.Fatalf("row %d after commit: %q, %v; want b", k, v, err)
		}
	}
	prepared, finalized := c.counts()
	for _, q := range []string{insertKV, selectV, updateV} {
		if prepared[q] != 1 {
			t.Errorf("%q prepared %d times, want once", q, prepared[q])
		}
	}
	if finalized != 0 {
		t.Errorf("%d statements finalized while the connection is open, want 0", finalized)
	}

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	prepared, finalized = c.counts()
	total := 0
	for _, n := range prepared {
		total += n
	}
	if finalized != total {
		t.Errorf("after Close: %d of %d statements finalized", finalized, total)
	}
}

// A query prepared again while its kept statement is still in use (here an
// open Rows in the same transaction) gets a statement of its own: both
// result sets come out whole, and the extra statement is finalized on close.
func TestStatementInUseIsNotShared(t *testing.T) {
	db, c := openCounting(t, 8)
	ctx := t.Context()
	for k, v := range []string{"zero", "one"} {
		if _, err := db.ExecContext(ctx, insertKV, k, v); err != nil {
			t.Fatal(err)
		}
	}
	_, finalizedBefore := c.counts()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rows0, err := tx.QueryContext(ctx, selectV, 0)
	if err != nil {
		t.Fatal(err)
	}
	rows1, err := tx.QueryContext(ctx, selectV, 1)
	if err != nil {
		t.Fatal(err)
	}
	for rows, want := range map[*sql.Rows]string{rows1: "one", rows0: "zero"} {
		var got []string
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("rows: %q, want [%s]", got, want)
		}
	}
	prepared, finalized := c.counts()
	if prepared[selectV] != 2 {
		t.Errorf("select prepared %d times, want 2 (one kept, one for the second open Rows)", prepared[selectV])
	}
	if finalized-finalizedBefore != 1 {
		t.Errorf("%d statements finalized, want 1 (the second one)", finalized-finalizedBefore)
	}

	// The kept statement is free again.
	var v string
	if err := tx.QueryRowContext(ctx, selectV, 1).Scan(&v); err != nil || v != "one" {
		t.Fatalf("%q, %v; want one", v, err)
	}
	if prepared, _ := c.counts(); prepared[selectV] != 2 {
		t.Errorf("select prepared %d times, want still 2", prepared[selectV])
	}
}

// Beyond n, the least recently used statements are finalized.
func TestKeepsTheMostRecentlyUsed(t *testing.T) {
	db, c := openCounting(t, 2)
	ctx := t.Context()
	queries := []string{`SELECT 1`, `SELECT 2`, `SELECT 3`, `SELECT 4`}
	run := func(q string) {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range queries {
		run(q)
	}
	_, finalized := c.counts()
	// The table's CREATE and SELECT 1, SELECT 2 made way for SELECT 3, 4.
	if finalized != 3 {
		t.Errorf("%d finalized, want 3", finalized)
	}
	run(`SELECT 4`)
	run(`SELECT 3`)
	run(`SELECT 1`)
	prepared, finalized := c.counts()
	if prepared[`SELECT 3`] != 1 || prepared[`SELECT 4`] != 1 {
		t.Errorf("kept statements prepared again: %v", prepared)
	}
	if prepared[`SELECT 1`] != 2 || finalized != 4 {
		t.Errorf("SELECT 1 prepared %d times, %d finalized; want 2 and 4 (SELECT 4 made way)", prepared[`SELECT 1`], finalized)
	}
}

// A query that fails to prepare returns the driver's error and keeps
// nothing; the connection goes on.
func TestFailedPrepareKeepsNothing(t *testing.T) {
	db, c := openCounting(t, 8)
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, `INSERT INTO missing VALUES (1)`); err == nil {
		t.Fatal("insert into a missing table succeeded")
	}
	if _, err := db.ExecContext(ctx, insertKV, 1, "x"); err != nil {
		t.Fatal(err)
	}
	if prepared, _ := c.counts(); prepared[`INSERT INTO missing VALUES (1)`] != 0 {
		t.Errorf("the failed query reached the counter: %v", prepared)
	}
}
