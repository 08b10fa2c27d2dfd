package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// OwnsSession tells peers whether this pod's database has the session
// (package peering).
func (s *Server) OwnsSession(ctx context.Context, user, session string) (bool, error) {
	// The last pool is the readers' (see openSessionService); the sessions
	// table's primary key is (app_name, user_id, id).
	db := s.sessDBs[len(s.sessDBs)-1]
	var one int
	err := db.QueryRowContext(ctx, "SELECT 1 FROM sessions WHERE app_name = ? AND user_id = ? AND id = ? LIMIT 1",
		s.cfg.AppName, user, session).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to look up session: %w", err)
	}
	return true, nil
}

// OwnsTask tells peers whether this pod runs or ran the A2A task.
func (s *Server) OwnsTask(ctx context.Context, task string) (bool, error) {
	_, err := s.tasks.Get(ctx, a2a.TaskID(task))
	switch {
	case errors.Is(err, a2a.ErrTaskNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to look up task: %w", err)
	}
	return true, nil
}
