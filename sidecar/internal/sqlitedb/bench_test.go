package sqlitedb_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

// BenchmarkSmallWrite is one small write in its own transaction (what the
// usage store and the budget ledger do once a turn) on a one-connection
// pool, opened with Open and with OpenExclusive, side by side.
func BenchmarkSmallWrite(b *testing.B) {
	for _, o := range []struct {
		name string
		open func(string) (*sql.DB, error)
	}{{"shared", sqlitedb.Open}, {"exclusive", sqlitedb.OpenExclusive}} {
		b.Run(o.name, func(b *testing.B) {
			db, err := o.open(filepath.Join(b.TempDir(), "s.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(1)
			if _, err := db.ExecContext(b.Context(), "CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				if _, err := db.ExecContext(b.Context(), "INSERT INTO t (k, n) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET n = n + excluded.n",
					fmt.Sprint("k", i%20), i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
