package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/adk2goose/goose-operator/internal/jsonhttp"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/budget"
)

// Stats is the JSON body of GET /stats, consumed by the operator's status
// collector. Example:
//
//	{
//	  "appName": "goose",
//	  "sessions": {"total": 12, "active": 2, "inFlight": 1},
//	  "tokens": {"input": 48211, "output": 9120, "total": 57331},
//	  "activeWindowSeconds": 600,
//	  "lastTurnAt": "2026-11-22T03:29:41.512Z",
//	  "generatedAt": "2026-11-22T03:30:00Z"
//	}
//
// sessions.total counts the ADK sessions currently stored. sessions.active
// counts sessions with a goose reply in flight or whose last turn ended
// within activeWindowSeconds; sessions.inFlight only the former. tokens are
// the sums of every session's accumulated goose totals, including sessions
// deleted since (tokens spent stay spent); they and the last-use times are
// kept in SQLite on the data volume, so they survive restarts. lastTurnAt
// is when the last turn on this pod ended (absent before the first), read
// from the same file: the operator parks an idle agent by it.
type Stats struct {
	AppName  string       `json:"appName"`
	Sessions SessionStats `json:"sessions"`
	// Users counts the distinct ADK users with a session on this pod: in
	// an identity mode, the callers who used the agent.
	Users int `json:"users"`
	// UserHashes name up to MaxUserHashes of those users (UserHash), so
	// that the operator counts a user with sessions on two replicas once:
	// complete while Users is at most MaxUserHashes.
	UserHashes          []string   `json:"userHashes,omitempty"`
	Tokens              TokenStats `json:"tokens"`
	ActiveWindowSeconds float64    `json:"activeWindowSeconds"`
	LastTurnAt          *time.Time `json:"lastTurnAt,omitempty"`
	GeneratedAt         time.Time  `json:"generatedAt"`
	// Budget is the agent's token budget and its use in the current period,
	// as this pod knows it; absent without a budget.
	Budget *budget.Status `json:"budget,omitempty"`
}

// MaxUserHashes bounds Stats.UserHashes: a /stats body stays under about
// 19 KiB.
const MaxUserHashes = 1000

// UserHash is how /stats names an ADK user: the first 8 bytes of its
// HMAC-SHA256 keyed with the agent's token, in hex. Every pod of an agent
// has the same token, so a user has one hash across replicas, and no one
// without the token can test a guessed name against it.
func UserHash(key, user string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(user))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// SessionStats is Stats.Sessions.
type SessionStats struct {
	Total    int `json:"total"`
	Active   int `json:"active"`
	InFlight int `json:"inFlight"`
}

// TokenStats is Stats.Tokens.
type TokenStats struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	Total  int64 `json:"total"`
}

// Stats computes the current figures.
func (s *Server) Stats(ctx context.Context) (Stats, error) {
	now := time.Now()
	st := Stats{AppName: s.cfg.AppName, ActiveWindowSeconds: s.cfg.ActiveWindow.Seconds(), GeneratedAt: now.UTC()}
	list, err := s.sessions.List(ctx, &session.ListRequest{AppName: s.cfg.AppName})
	if err != nil {
		return st, fmt.Errorf("failed to list sessions: %w", err)
	}
	st.Sessions.Total = len(list.Sessions)
	if st.Users, err = s.countUsers(ctx); err != nil {
		return st, err
	}
	users, err := s.listUsers(ctx, MaxUserHashes)
	if err != nil {
		return st, err
	}
	for _, u := range users {
		st.UserHashes = append(st.UserHashes, UserHash(s.cfg.AuthToken, u))
	}

	active := s.activity.snapshot()
	st.Sessions.InFlight = len(active)
	recent, err := s.usage.UsedSince(ctx, s.cfg.AppName, now.Add(-s.cfg.ActiveWindow))
	if err != nil {
		return st, err
	}
	for _, k := range recent {
		active[k] = true
	}
	st.Sessions.Active = len(active)

	u, err := s.usage.Totals(ctx, s.cfg.AppName)
	if err != nil {
		return st, err
	}
	st.Tokens = TokenStats{Input: u.InputTokens, Output: u.OutputTokens, Total: u.TotalTokens}
	last, err := s.usage.LastUsed(ctx, s.cfg.AppName)
	if err != nil {
		return st, err
	}
	if !last.IsZero() {
		st.LastTurnAt = &last
	}
	st.Budget = s.budget.Status()
	return st, nil
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	st, err := s.Stats(r.Context())
	if err != nil {
		s.log.Error("failed to compute stats", "error", err)
		jsonhttp.Write(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	jsonhttp.Write(w, http.StatusOK, st)
}
