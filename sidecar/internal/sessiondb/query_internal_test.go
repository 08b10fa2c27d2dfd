package sessiondb

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/adk2goose/goose-operator/internal/sqlitedb"
	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
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
		rows, err := db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		_ = rows.Close()
		p := strings.Join(plan, "; ")
		if !strings.Contains(p, "USING INDEX "+adkcompat.EventsIndex+" (app_name=? AND user_id=? AND session_id=?") || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("%q: plan %q, want a search of %s and no sort", q, p, adkcompat.EventsIndex)
		}
	}
}
