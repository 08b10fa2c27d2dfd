// Package adkcompattest holds test checks of what adkcompat makes of the
// session database.
package adkcompattest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
)

// CheckEventsQuery returns an error unless SQLite answers the events query
// q with a search of adkcompat.EventsIndex on its leading columns (app,
// user, session) and no sort of its own.
func CheckEventsQuery(ctx context.Context, db *sql.DB, q string, args ...any) error {
	rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		return fmt.Errorf("failed to explain %q: %w", q, err)
	}
	defer func() { _ = rows.Close() }()
	var details []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			return fmt.Errorf("failed to read the plan of %q: %w", q, err)
		}
		details = append(details, detail)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("failed to read the plan of %q: %w", q, err)
	}
	plan := strings.Join(details, "; ")
	if !strings.Contains(plan, "USING INDEX "+adkcompat.EventsIndex+" (app_name=? AND user_id=? AND session_id=?") ||
		strings.Contains(plan, "TEMP B-TREE") {
		return fmt.Errorf("events query %q has the plan %q, want a search of %s and no sort", q, plan, adkcompat.EventsIndex)
	}
	return nil
}
