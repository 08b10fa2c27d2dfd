package sqlitedb_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"google.golang.org/adk/model"
	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"
	"google.golang.org/genai"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

// BenchmarkADKAppendEvent appends events with adk-go's database session
// service (a transaction of six statements each, gorm's PrepareStmt on, as
// the sidecar runs it), with connections that keep statements and with the
// driver alone, side by side.
func BenchmarkADKAppendEvent(b *testing.B) {
	for _, keep := range []int{0, sqlitedb.KeptStatements} {
		b.Run(fmt.Sprintf("kept=%d", keep), func(b *testing.B) {
			db, err := sqlitedb.OpenKeeping(filepath.Join(b.TempDir(), "s.db"), keep)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(1)
			svc, err := database.NewSessionService(&sqlite.Dialector{Conn: db}, &gorm.Config{
				Logger: gormlogger.Default.LogMode(gormlogger.Silent), PrepareStmt: true,
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := database.AutoMigrate(svc); err != nil {
				b.Fatal(err)
			}
			cr, err := svc.Create(b.Context(), &session.CreateRequest{AppName: "a", UserID: "u", SessionID: "s"})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				ev := session.NewEventWithContext(b.Context(), "inv-1")
				ev.Author = "goose"
				ev.LLMResponse = model.LLMResponse{Content: genai.NewContentFromText("an answer of a few words", genai.RoleModel)}
				if err := svc.AppendEvent(b.Context(), cr.Session, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

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
