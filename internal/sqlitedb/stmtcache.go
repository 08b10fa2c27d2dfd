package sqlitedb

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"slices"
	"sync"
)

// keepStatements wraps a connector so that each connection keeps the last n
// statements it prepared and hands one out again when the same query is
// prepared while it is not in use.
//
// Why: database/sql prepares a statement again for every transaction that
// uses it (Tx.StmtContext re-prepares any statement bound to another
// transaction: golang/go#28130), and gorm's PrepareStmt caches exactly such
// statements when a query is first run inside a transaction (gorm#4644).
// adk-go appends each session event in a transaction of six statements, so
// SQLite parsed all six on every event. Keeping them per connection, below
// database/sql, makes every later prepare of the same query free. The
// connection implements neither ExecerContext nor QueryerContext, so plain
// Exec and Query go through PrepareContext too and share the statements.
//
// A statement is handed to one user at a time: from PrepareContext until
// its Close, which returns it to the connection instead of finalizing it
// (the driver resets a statement after each Exec and when its Rows close).
// A query prepared again while its statement is in use gets a statement of
// its own, finalized on Close.
//
// The wrapped driver's statements must implement StmtExecContext and
// StmtQueryContext, and neither its connections nor its statements may
// implement NamedValueChecker or ColumnConverter (this hides them);
// modernc.org/sqlite's qualify.
func keepStatements(c driver.Connector, n int) driver.Connector {
	return &keepingConnector{Connector: c, n: n}
}

type keepingConnector struct {
	driver.Connector
	n int
}

func (c *keepingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &keepingConn{conn: dc, n: c.n, lru: list.New(), byQuery: map[string]*list.Element{}}, nil
}

// keepingConn is a connection keeping up to n prepared statements, the most
// recently used at the front of lru.
type keepingConn struct {
	conn driver.Conn
	n    int

	mu      sync.Mutex
	lru     *list.List // of *keptStmt
	byQuery map[string]*list.Element
	closed  bool
}

// keptStmt is a statement of a keepingConn; kept tells whether the
// connection keeps it (else Close finalizes it).
type keptStmt struct {
	driver.Stmt
	c     *keepingConn
	query string
	kept  bool
	inUse bool
}

var (
	_ driver.ConnPrepareContext = (*keepingConn)(nil)
	_ driver.ConnBeginTx        = (*keepingConn)(nil)
	_ driver.Pinger             = (*keepingConn)(nil)
	_ driver.SessionResetter    = (*keepingConn)(nil)
	_ driver.Validator          = (*keepingConn)(nil)
	_ driver.StmtExecContext    = (*keptStmt)(nil)
	_ driver.StmtQueryContext   = (*keptStmt)(nil)
)

func (c *keepingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *keepingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.mu.Lock()
	if e, ok := c.byQuery[query]; ok {
		if s := e.Value.(*keptStmt); !s.inUse {
			s.inUse = true
			c.lru.MoveToFront(e)
			c.mu.Unlock()
			return s, nil
		}
	}
	c.mu.Unlock()

	var ds driver.Stmt
	var err error
	if p, ok := c.conn.(driver.ConnPrepareContext); ok {
		ds, err = p.PrepareContext(ctx, query)
	} else {
		ds, err = c.conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	s := &keptStmt{Stmt: ds, c: c, query: query, inUse: true}

	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byQuery[query]; ok || c.closed {
		return s, nil // the kept one is in use: this one is the caller's alone
	}
	s.kept = true
	c.byQuery[query] = c.lru.PushFront(s)
	for _, old := range c.trim() {
		_ = old.Close()
	}
	return s, nil
}

// trim forgets the least recently used statements not in use while more
// than n are kept, and returns them to be finalized (one in use is trimmed
// at its Close). c.mu is held.
func (c *keepingConn) trim() []driver.Stmt {
	var out []driver.Stmt
	for e := c.lru.Back(); e != nil && c.lru.Len() > c.n; {
		prev := e.Prev()
		if s := e.Value.(*keptStmt); !s.inUse {
			c.lru.Remove(e)
			delete(c.byQuery, s.query)
			s.kept = false
			out = append(out, s.Stmt)
		}
		e = prev
	}
	return out
}

// Close returns a kept statement to its connection, or finalizes it.
func (s *keptStmt) Close() error {
	c := s.c
	c.mu.Lock()
	s.inUse = false
	finalize := c.trim()
	if !s.kept && !slices.Contains(finalize, s.Stmt) {
		finalize = append(finalize, s.Stmt)
	}
	c.mu.Unlock()
	var errs []error
	for _, ds := range finalize {
		errs = append(errs, ds.Close())
	}
	return errors.Join(errs...)
}

func (s *keptStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return nil, errNoContextStmt
}

func (s *keptStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return nil, errNoContextStmt
}

var errNoContextStmt = errors.New("sqlitedb: the driver's statements lack ExecContext/QueryContext")

// Close finalizes every kept statement, then closes the connection.
func (c *keepingConn) Close() error {
	c.mu.Lock()
	c.closed = true
	var errs []error
	for e := c.lru.Front(); e != nil; e = e.Next() {
		s := e.Value.(*keptStmt)
		s.kept = false
		if !s.inUse {
			errs = append(errs, s.Stmt.Close())
		}
	}
	c.lru.Init()
	clear(c.byQuery)
	c.mu.Unlock()
	errs = append(errs, c.conn.Close())
	return errors.Join(errs...)
}

func (c *keepingConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *keepingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	if opts != (driver.TxOptions{}) {
		return nil, errors.New("sqlitedb: the driver does not support transaction options")
	}
	return c.conn.Begin() //nolint:staticcheck // the fallback for drivers without BeginTx
}

func (c *keepingConn) Ping(ctx context.Context) error {
	if p, ok := c.conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *keepingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *keepingConn) IsValid() bool {
	if v, ok := c.conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}
