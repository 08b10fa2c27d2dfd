// Package sample decodes and checks a sidecar's /stats answer (a Sample) and
// adds such answers up into an agent's Totals.
package sample

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Sample is what one sidecar's /stats reports (the fields the operator uses).
type Sample struct {
	Sessions struct {
		Total  int64 `json:"total"`
		Active int64 `json:"active"`
		// InFlight counts the turns running now.
		InFlight int64 `json:"inFlight"`
	} `json:"sessions"`
	Users int64 `json:"users"`
	// UserHashes name up to MaxUserHashes of those users by a keyed hash
	// (the sidecar's server.UserHash), so that a user with sessions on two
	// replicas counts once. Decoded into UserKeys.
	UserHashes []string `json:"userHashes,omitempty"`
	Tokens     struct {
		Input  int64 `json:"input"`
		Output int64 `json:"output"`
		Total  int64 `json:"total"`
	} `json:"tokens"`
	Budget *Budget `json:"budget,omitempty"`

	// UserKeys are UserHashes as numbers: what the collector keeps of each
	// pod, 8 bytes a user. Set by Decode only, never read from the answer.
	UserKeys []uint64 `json:"-"`
	// LastTurnAt is when the pod's last turn ended, from its usage.db; nil
	// before the first.
	LastTurnAt *time.Time `json:"lastTurnAt,omitempty"`
}

// MaxUserHashes is the most user hashes a sidecar sends (server.MaxUserHashes).
const MaxUserHashes = 1000

// Decode reads a /stats answer: figures Totals.Add can add up, or an error.
func Decode(body []byte) (Sample, error) {
	var s Sample
	if err := json.Unmarshal(body, &s); err != nil {
		return Sample{}, fmt.Errorf("failed to decode stats: %w", err)
	}
	if s.Sessions.Total < 0 || s.Sessions.Active < 0 || s.Sessions.InFlight < 0 || s.Tokens.Input < 0 || s.Tokens.Output < 0 || s.Tokens.Total < 0 {
		return Sample{}, errors.New("stats hold a negative count")
	}
	if b := s.Budget; b != nil && (b.Used.Input < 0 || b.Used.Output < 0 || b.Used.Total < 0) {
		return Sample{}, errors.New("stats hold a negative budget count")
	}
	if s.Users < 0 || len(s.UserHashes) > MaxUserHashes {
		return Sample{}, fmt.Errorf("stats hold %d users with %d user hashes (at most %d)", s.Users, len(s.UserHashes), MaxUserHashes)
	}
	s.UserKeys = make([]uint64, 0, len(s.UserHashes))
	for _, h := range s.UserHashes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 8 {
			return Sample{}, fmt.Errorf("stats hold a user hash %.40q that is not 8 bytes in hex", h)
		}
		s.UserKeys = append(s.UserKeys, binary.BigEndian.Uint64(b))
	}
	s.UserHashes = nil
	return s, nil
}

// Totals are an agent's figures, summed over its pods by Add. Users is the
// exception: Add leaves it to the caller, which counts each user once over
// the pods' UserKeys.
type Totals struct {
	SessionsTotal, SessionsActive, Users   int64
	TokensInput, TokensOutput, TokensTotal int64
	// Budget is the agent's budget use, nil when no pod reports a budget.
	Budget *Budget
	// InFlight counts the turns running; LastTurnAt is the latest turn's
	// end on any pod, zero before the first.
	InFlight   int64
	LastTurnAt time.Time
}

// Add adds one pod's sample to the agent's totals.
func (t *Totals) Add(s Sample) {
	t.SessionsTotal += s.Sessions.Total
	t.SessionsActive += s.Sessions.Active
	t.TokensInput += s.Tokens.Input
	t.TokensOutput += s.Tokens.Output
	t.TokensTotal += s.Tokens.Total
	t.Budget = mergeBudget(t.Budget, s.Budget)
	t.InFlight += s.Sessions.InFlight
	if s.LastTurnAt != nil && s.LastTurnAt.After(t.LastTurnAt) {
		t.LastTurnAt = *s.LastTurnAt
	}
}
