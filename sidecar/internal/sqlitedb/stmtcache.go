package sqlitedb

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
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
// The wrapped driver's connections must implement ConnPrepareContext and
// ConnBeginTx, its statements StmtExecContext and StmtQueryContext (Connect
// and PrepareContext fail otherwise), and neither may implement
// NamedValueChecker or ColumnConverter (this hides them); modernc.org/sqlite's
// qualify.
func keepStatements(c driver.Connector, n int) driver.Connector {
	return &keepingConnector{Connector: c, n: n}
}

type keepingConnector struct {
	driver.Connector
	n int
}

// contextConn and contextStmt are what keepStatements needs of the driver.
type contextConn interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
}

type contextStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

func (c *keepingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	cc, ok := dc.(contextConn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("sqlitedb: a %T connection lacks PrepareContext or BeginTx", dc)
	}
	return &keepingConn{conn: cc, n: c.n, lru: list.New(), byQuery: map[string]*list.Element{}}, nil
}

// keepingConn is a connection keeping up to n prepared statements, the most
// recently used at the front of lru.
type keepingConn struct {
	conn contextConn
	n    int

	mu      sync.Mutex
	lru     *list.List // of *keptStmt
	byQuery map[string]*list.Element
	closed  bool
}

// keptStmt is a statement of a keepingConn; kept tells whether the
// connection keeps it (else Close finalizes it).
type keptStmt struct {
	contextStmt
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

	ds, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	cs, ok := ds.(contextStmt)
	if !ok {
		_ = ds.Close()
		return nil, fmt.Errorf("sqlitedb: a %T statement lacks ExecContext or QueryContext", ds)
	}
	s := &keptStmt{contextStmt: cs, c: c, query: query, inUse: true}

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
			out = append(out, s.contextStmt)
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
	if !s.kept && !slices.Contains(finalize, driver.Stmt(s.contextStmt)) {
		finalize = append(finalize, s.contextStmt)
	}
	c.mu.Unlock()
	var errs []error
	for _, ds := range finalize {
		errs = append(errs, ds.Close())
	}
	return errors.Join(errs...)
}

// Close finalizes every kept statement, then closes the connection.
func (c *keepingConn) Close() error {
	c.mu.Lock()
	c.closed = true
	var errs []error
	for e := c.lru.Front(); e != nil; e = e.Next() {
		s := e.Value.(*keptStmt)
		s.kept = false
		if !s.inUse {
			errs = append(errs, s.contextStmt.Close())
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
	return c.conn.BeginTx(ctx, opts)
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
