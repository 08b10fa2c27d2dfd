package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
)

// OwnsSession tells peers whether this pod's database has the session
// (package peering).
func (s *Server) OwnsSession(ctx context.Context, user, session string) (bool, error) {
	// The last pool is the readers' (see openSessionService).
	return adkcompat.SessionExists(ctx, s.sessDBs[len(s.sessDBs)-1], s.cfg.AppName, user, session)
}

// countUsers counts the distinct ADK users with a session on this pod.
func (s *Server) countUsers(ctx context.Context) (int, error) {
	return adkcompat.CountUsers(ctx, s.sessDBs[len(s.sessDBs)-1], s.cfg.AppName)
}

// listUsers lists up to limit distinct ADK users with a session on this pod.
func (s *Server) listUsers(ctx context.Context, limit int) ([]string, error) {
	return adkcompat.ListUsers(ctx, s.sessDBs[len(s.sessDBs)-1], s.cfg.AppName, limit)
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
