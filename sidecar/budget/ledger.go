package budget

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

// LedgerFile is the ledger's file name in the sidecar's data directory.
const LedgerFile = "budget.db"

// dayLayout is how a UTC day is keyed: ISO dates sort as strings.
const dayLayout = "2006-01-02"

// keepDays bounds the ledger: the longest period is a month.
const keepDays = 62

// Day returns the ledger key of t's UTC day.
func dayOf(t time.Time) string { return t.UTC().Format(dayLayout) }

// Row is one pod's tokens on one UTC day.
type Row struct {
	Pod string `json:"pod"`
	Day string `json:"day"`
	Tokens
}

type rowKey struct{ pod, day string }

// Ledger holds tokens per pod per day, in memory for the checks on every
// turn and in SQLite so they survive restarts.
type Ledger struct {
	db   *sql.DB
	self string

	mu   sync.Mutex
	rows map[rowKey]Tokens
}

// OpenLedger opens (creating if needed) the ledger at path for the pod named
// self, and loads it.
func OpenLedger(ctx context.Context, path, self string) (*Ledger, error) {
	if self == "" {
		return nil, fmt.Errorf("failed to open budget ledger: no pod name")
	}
	db, err := sqlitedb.OpenExclusive(path) // a single writer; see the usage store
	if err != nil {
		return nil, fmt.Errorf("failed to open budget ledger: %w", err)
	}
	const schema = `CREATE TABLE IF NOT EXISTS day_usage (
		pod TEXT NOT NULL,
		day TEXT NOT NULL,
		input_tokens INTEGER NOT NULL,
		output_tokens INTEGER NOT NULL,
		total_tokens INTEGER NOT NULL,
		PRIMARY KEY (pod, day)
	)`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("failed to create budget ledger schema: %w", err)
	}
	l := &Ledger{db: db, self: self, rows: map[rowKey]Tokens{}}
	if err := l.load(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return l, nil
}

func (l *Ledger) load(ctx context.Context) error {
	rs, err := l.db.QueryContext(ctx, `SELECT pod, day, input_tokens, output_tokens, total_tokens FROM day_usage`)
	if err != nil {
		return fmt.Errorf("failed to load budget ledger: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.Pod, &r.Day, &r.Input, &r.Output, &r.Total); err != nil {
			return fmt.Errorf("failed to load budget ledger: %w", err)
		}
		l.rows[rowKey{r.Pod, r.Day}] = r.Tokens
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("failed to load budget ledger: %w", err)
	}
	return nil
}

// Self is the name of the pod whose own rows Add grows.
func (l *Ledger) Self() string { return l.self }

// Add counts tokens this pod used at t.
func (l *Ledger) Add(ctx context.Context, t time.Time, u Tokens) error {
	if u == (Tokens{}) {
		return nil
	}
	if !u.valid() {
		return fmt.Errorf("failed to record budget usage: negative count %+v", u)
	}
	k := rowKey{l.self, dayOf(t)}
	l.mu.Lock()
	defer l.mu.Unlock()
	next := l.rows[k].add(u)
	if err := l.write(ctx, k, next); err != nil {
		return err
	}
	l.rows[k] = next
	return nil
}

// Merge keeps, per pod and day, the larger of the known and the given
// figures, and reports how many rows grew. Rows older than the ledger keeps
// are ignored.
func (l *Ledger) Merge(ctx context.Context, rows []Row, now time.Time) (grown int, err error) {
	oldest := dayOf(now.AddDate(0, 0, -keepDays))
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rows {
		if r.Day < oldest {
			continue
		}
		k := rowKey{r.Pod, r.Day}
		cur, had := l.rows[k]
		next := cur.max(r.Tokens)
		if had && next == cur {
			continue
		}
		if err := l.write(ctx, k, next); err != nil {
			return grown, err
		}
		l.rows[k] = next
		grown++
	}
	return grown, nil
}

func (l *Ledger) write(ctx context.Context, k rowKey, t Tokens) error {
	err := sqlitedb.ExecPoint(ctx, l.db, `INSERT INTO day_usage (pod, day, input_tokens, output_tokens, total_tokens)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (pod, day) DO UPDATE SET input_tokens = excluded.input_tokens,
			output_tokens = excluded.output_tokens, total_tokens = excluded.total_tokens`,
		k.pod, k.day, t.Input, t.Output, t.Total)
	if err != nil {
		return fmt.Errorf("failed to write budget ledger: %w", err)
	}
	return nil
}

// Since returns every row from day from on, sorted by pod and day.
func (l *Ledger) Since(from string) []Row {
	l.mu.Lock()
	out := make([]Row, 0, len(l.rows))
	for k, t := range l.rows {
		if k.day >= from {
			out = append(out, Row{Pod: k.pod, Day: k.day, Tokens: t})
		}
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pod != out[j].Pod {
			return out[i].Pod < out[j].Pod
		}
		return out[i].Day < out[j].Day
	})
	return out
}

// Sum adds every pod's tokens on the days that [start, end) touches.
func (l *Ledger) Sum(start, end time.Time) Tokens {
	from, last := dayOf(start), dayOf(end.Add(-time.Nanosecond))
	var sum Tokens
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, t := range l.rows {
		if k.day >= from && k.day <= last {
			sum = sum.add(t)
		}
	}
	return sum
}

// Prune forgets the days older than any period can reach back from now.
func (l *Ledger) Prune(ctx context.Context, now time.Time) error {
	oldest := dayOf(now.AddDate(0, 0, -keepDays))
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.db.ExecContext(ctx, `DELETE FROM day_usage WHERE day < ?`, oldest); err != nil {
		return fmt.Errorf("failed to prune budget ledger: %w", err)
	}
	for k := range l.rows {
		if k.day < oldest {
			delete(l.rows, k)
		}
	}
	return nil
}

// Close closes the database.
func (l *Ledger) Close() error { return l.db.Close() }
