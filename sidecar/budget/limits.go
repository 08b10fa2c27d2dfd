// Package budget enforces a GooseAgent's token budget (spec.budget): a limit
// on the tokens the whole agent, all replicas together, may use per day, week
// or month.
//
// # How the replicas agree
//
// Every sidecar keeps a ledger (budget.db on its volume) of tokens per pod
// per UTC day. A sidecar adds its own turns to its own rows; every sync
// interval it asks every peer (the agent's headless Service, the same
// channel sessions are forwarded over) for the rows it holds from the
// current period's start, and keeps, per pod and day, the larger of the two
// figures. Each pod's count for a day only grows, so "keep the larger" is a
// grow-only counter (a G-Counter CRDT): merges commute, repeat and reorder
// safely, and knowledge spreads transitively, so a pod learns the usage of a
// peer that restarted, or was scaled away, from any pod that saw it. The
// ledger survives restarts, and a restarted pod relearns its own rows from
// its peers even if its volume was replaced.
//
// Agent-wide usage is the sum over pods of the period's days. A new turn is
// refused when that sum has reached a limit; a turn already running (or a
// tool approval being answered) always finishes.
//
// # Guarantee and worst-case overshoot
//
// A pod's view of another pod's usage is at most one sync interval (plus
// one lookup timeout) old while the peers answer. The budget can therefore
// be exceeded by at most:
//
//   - the tokens of turns already running when it was reached (they finish),
//     and
//   - the tokens of turns that other pods admitted during the sync interval
//     before they learned of it.
//
// That is at most (turns in flight across the agent + turns started during
// one sync interval) × the largest turn. While a peer cannot be reached, its
// last known usage still counts, but what it spends meanwhile is only
// learned when it answers again: a network partition lets each side spend
// what it believes is left. The budget never undercounts what a pod has
// reported, and never counts a token twice.
//
// Periods are calendar periods in UTC: a day from 00:00, a week from Monday
// 00:00 (ISO 8601), a month from the 1st 00:00.
package budget

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Period is the span a budget applies to.
type Period string

// Periods, spelled as in spec.budget.period.
const (
	Day   Period = "Day"
	Week  Period = "Week"
	Month Period = "Month"
)

// Bounds returns the UTC start and end ([start, end)) of the period that
// holds t.
func (p Period) Bounds(t time.Time) (start, end time.Time, err error) {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch p {
	case Day:
		return day, day.AddDate(0, 0, 1), nil
	case Week:
		// time.Weekday counts from Sunday; ISO weeks start on Monday.
		start = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		return start, start.AddDate(0, 0, 7), nil
	case Month:
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0), nil
	}
	return time.Time{}, time.Time{}, fmt.Errorf("unknown budget period %q: want Day, Week or Month", string(p))
}

// Limits is a budget: the JSON of spec.budget, which the operator renders
// into the file the sidecar reads. Total is required; Input and Output are
// optional further limits.
type Limits struct {
	Period       Period `json:"period"`
	TotalTokens  int64  `json:"totalTokens"`
	InputTokens  *int64 `json:"inputTokens,omitempty"`
	OutputTokens *int64 `json:"outputTokens,omitempty"`
}

// ParseLimits reads and validates a budget file's content.
func ParseLimits(b []byte) (*Limits, error) {
	var l Limits
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("failed to parse budget: %w", err)
	}
	if _, _, err := l.Period.Bounds(time.Time{}); err != nil {
		return nil, fmt.Errorf("failed to parse budget: %w", err)
	}
	if l.TotalTokens <= 0 {
		return nil, errors.New("failed to parse budget: totalTokens must be positive")
	}
	for name, v := range map[string]*int64{"inputTokens": l.InputTokens, "outputTokens": l.OutputTokens} {
		if v != nil && *v <= 0 {
			return nil, fmt.Errorf("failed to parse budget: %s must be positive", name)
		}
	}
	return &l, nil
}

// ReadLimits reads a budget file. A missing or empty file is no budget.
func ReadLimits(path string) (*Limits, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read budget file: %w", err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return nil, nil
	}
	return ParseLimits(b)
}

// exceeded names the first limit used has reached, or "".
func (l *Limits) exceeded(used Tokens) string {
	switch {
	case used.Total >= l.TotalTokens:
		return "total"
	case l.InputTokens != nil && used.Input >= *l.InputTokens:
		return "input"
	case l.OutputTokens != nil && used.Output >= *l.OutputTokens:
		return "output"
	}
	return ""
}

func (l *Limits) limit(kind string) int64 {
	switch kind {
	case "input":
		return *l.InputTokens
	case "output":
		return *l.OutputTokens
	}
	return l.TotalTokens
}

// Tokens are token counts. Total is goose.Usage.Total of what a turn used,
// so it is set when goose reported no total.
type Tokens struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	Total  int64 `json:"total"`
}

func (t Tokens) add(o Tokens) Tokens {
	return Tokens{Input: t.Input + o.Input, Output: t.Output + o.Output, Total: t.Total + o.Total}
}

func (t Tokens) max(o Tokens) Tokens {
	return Tokens{Input: max(t.Input, o.Input), Output: max(t.Output, o.Output), Total: max(t.Total, o.Total)}
}

func (t Tokens) valid() bool { return t.Input >= 0 && t.Output >= 0 && t.Total >= 0 }

// ReasonExhausted is the fixed code of a refusal: the REST error's "code",
// the A2A task's adk_error_code.
const ReasonExhausted = "BUDGET_EXHAUSTED"

// Refusal says why a turn was refused and when it can be retried.
type Refusal struct {
	Limits   Limits
	Used     Tokens
	Kind     string // total, input or output: the limit that was reached
	ResetsAt time.Time
}

func (r *Refusal) Error() string {
	used := r.Used.Total
	switch r.Kind {
	case "input":
		used = r.Used.Input
	case "output":
		used = r.Used.Output
	}
	return fmt.Sprintf("the agent's token budget is spent: %d of %d %s tokens used this %s; it resets at %s",
		used, r.Limits.limit(r.Kind), r.Kind, strings.ToLower(string(r.Limits.Period)), r.ResetsAt.UTC().Format(time.RFC3339))
}

// RetryAfter is the whole seconds from now until the period ends, at least 1:
// the value of a Retry-After header.
func (r *Refusal) RetryAfter(now time.Time) int64 {
	return max(1, int64((r.ResetsAt.Sub(now)+time.Second-1)/time.Second))
}
