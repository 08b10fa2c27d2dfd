package sessiondb

import (
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat/adkcompattest"
	"github.com/adk2goose/goose-operator/sidecar/internal/sqlitedb"
)

// Every events query Get makes (the whole history, the recent events a run
// loads, events after a time) searches the index adkcompat.Migrate adds on
// its leading columns and needs no sort of its own.
func TestEventsQueriesUseTheIndex(t *testing.T) {
	db, err := sqlitedb.Open(filepath.Join(t.TempDir(), "sessions.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	adk, err := database.NewSessionService(&sqlite.Dialector{Conn: db}, &gorm.Config{Logger: gormlogger.Default.LogMode(gormlogger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := adkcompat.Migrate(t.Context(), adk, db); err != nil {
		t.Fatal(err)
	}
	for _, req := range []session.GetRequest{{}, {NumRecentEvents: 1}, {After: time.Now()}, {NumRecentEvents: 3, After: time.Now()}} {
		req.AppName, req.UserID, req.SessionID = "app", "u", "s"
		q, args := eventsQuery(&req)
		if err := adkcompattest.CheckEventsQuery(t.Context(), db, q, args...); err != nil {
			t.Error(err)
		}
	}
}
