package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Outcome is how a turn ended for its client.
type Outcome string

const (
	Answered  Outcome = "answered"   // a final event with goose's answer
	ErrorEvt  Outcome = "error"      // an error event, an A2A failed task, or a 4xx/5xx with a reason
	Refused   Outcome = "refused"    // the connection was refused or reset before any response
	Left      Outcome = "left"       // the client left (disconnect, cancel) as scripted
	Truncated Outcome = "truncated"  // the stream ended with neither a final nor an error event
	Hung      Outcome = "hung"       // nothing ended it before its deadline
	Confirm   Outcome = "confirming" // an approval's first request ended asking for the confirmation
)

// TurnRecord is what a turn's client saw.
type TurnRecord struct {
	Turn       Turn
	Session    string // the ADK session id ("" when none could be made)
	Start, End time.Time
	Outcome    Outcome
	Detail     string
	// UsageTotals are the session's token totals each final event carried
	// (its state delta), in order.
	UsageTotals []int64
	// ConfirmationID is the adk_request_confirmation call's id of an
	// approval turn; Answers the outcomes of the requests answering it.
	ConfirmationID string
	Answers        []Outcome
	AnswerDetails  []string
}

// StoredEvent is one event of a stored session's history.
type StoredEvent struct {
	Text string // its text parts, joined
	// FunctionResponses are the ids of its function responses.
	FunctionResponses []string
	Usage             int64 // usageMetadata.totalTokenCount
}

// StoredSession is a session as the sidecar stored it at the end.
type StoredSession struct {
	Events      []StoredEvent
	UsageTotal  int64 // its state's token totals
	HasUsage    bool
	FetchFailed string // why it could not be read; "" when it was
}

// Window is a time when a replica's process faults excuse a stream cut
// short: killed, or stopped.
type Window struct {
	Replica    int
	Kind       FaultKind
	Start, End time.Time
}

// Resource is a count that must come back down once the run settles.
type Resource struct {
	What            string
	Baseline, After int
	Slack           int
}

// History is everything a run recorded; Check reads only it.
type History struct {
	Seed  uint64
	Turns []TurnRecord
	// Stored are the sessions as stored at the end, by ADK session id.
	Stored map[string]StoredSession
	// Permissions are the answers goose received to its permission
	// requests, by tool call id.
	Permissions map[string][]PermissionAnswer
	// AgentTotals are the sums of the replicas' /stats token totals, sampled
	// during the run, in order; AgentTotal is the last, once it settled.
	AgentTotals []int64
	AgentTotal  int64
	Excused     []Window
	Resources   []Resource
	// Injected counts the process faults injected, by kind.
	Injected map[string]int
	// Integrity is PRAGMA integrity_check's answer by SQLite file copy.
	Integrity map[string]string
}

// PermissionAnswer is one answer goose received to a permission request.
// goose asks again, with a new request id, for a tool call whose run ended
// waiting for approval when it loads the session (load_session.rs
// start_resumed_state_machine_turn; the fake does the same), so one tool
// call may have several requests, each answered once.
type PermissionAnswer struct {
	ToolCallID string `json:"toolCallId"`
	RequestID  string `json:"requestId"`
	// Allowed says goose ran the tool on it (an allow_* option).
	Allowed bool `json:"allowed"`
}

// Violation is one broken invariant.
type Violation struct {
	Invariant string
	Session   string // "" when it is not one session's
	Detail    string
}

func (v Violation) String() string {
	if v.Session == "" {
		return v.Invariant + ": " + v.Detail
	}
	return v.Invariant + ": session " + v.Session + ": " + v.Detail
}

// Check returns every invariant h breaks.
func Check(h History) []Violation {
	var out []Violation
	for _, c := range []func(History) []Violation{checkEnded, checkAnswersOnce, checkConfirmations, checkTokens, checkResources, checkIntegrity} {
		out = append(out, c(h)...)
	}
	return out
}

// checkEnded: every turn ended in an answer or a clear error before its
// deadline; a stream may be cut short only while a replica was killed or
// stopped.
func checkEnded(h History) []Violation {
	var out []Violation
	for _, t := range h.Turns {
		switch t.Outcome {
		case Hung:
			out = append(out, Violation{"ended", t.Session, fmt.Sprintf("turn %d hung: %s", t.Turn.ID, t.Detail)})
		case Truncated:
			if !excused(h.Excused, t.Start, t.End) {
				out = append(out, Violation{"ended", t.Session, fmt.Sprintf("turn %d: stream ended with neither an answer nor an error: %s", t.Turn.ID, t.Detail)})
			}
		}
	}
	return out
}

func excused(ws []Window, start, end time.Time) bool {
	for _, w := range ws {
		if w.Start.Before(end) && w.End.After(start) {
			return true
		}
	}
	return false
}

// checkAnswersOnce: an answer a client got is in its session's history
// exactly once; no answer is there twice.
func checkAnswersOnce(h History) []Violation {
	var out []Violation
	for _, t := range h.Turns {
		st, ok := h.Stored[t.Session]
		if t.Session == "" || !ok || st.FetchFailed != "" {
			if t.Outcome == Answered {
				out = append(out, Violation{"answer stored once", t.Session, fmt.Sprintf("turn %d was answered but its session could not be read: %s", t.Turn.ID, st.FetchFailed)})
			}
			continue
		}
		n := 0
		for _, ev := range st.Events {
			n += strings.Count(ev.Text, answerText(t.Turn.ID))
		}
		switch {
		case n > 1:
			out = append(out, Violation{"answer stored once", t.Session, fmt.Sprintf("turn %d's answer is in the history %d times", t.Turn.ID, n)})
		case n == 0 && t.Outcome == Answered:
			out = append(out, Violation{"answer stored once", t.Session, fmt.Sprintf("turn %d was answered but its answer is not in the history", t.Turn.ID)})
		}
	}
	return out
}

// checkConfirmations: goose got at most one answer per permission request
// and ran the tool at most once, and did run it when a client's answer was
// taken (its request ended in goose's answer); the history holds each
// confirmation and tool response at most once; of two answers at once, at
// most one was taken.
func checkConfirmations(h History) []Violation {
	var out []Violation
	for _, t := range h.Turns {
		if t.Turn.Kind != Approval {
			continue
		}
		call := toolCallID(t.Turn.ID)
		perRequest := map[string]int{}
		runs := 0
		for _, p := range h.Permissions[call] {
			perRequest[p.RequestID]++
			if p.Allowed {
				runs++
			}
		}
		for _, id := range sortedKeys(perRequest) {
			if n := perRequest[id]; n > 1 {
				out = append(out, Violation{"confirmation once", t.Session, fmt.Sprintf("turn %d: goose received %d answers to its permission request %s for %s", t.Turn.ID, n, id, call)})
			}
		}
		taken := 0
		for _, a := range t.Answers {
			if a == Answered {
				taken++
			}
		}
		switch {
		case runs > 1:
			out = append(out, Violation{"confirmation once", t.Session, fmt.Sprintf("turn %d: goose ran %s %d times", t.Turn.ID, call, runs)})
		case taken > 0 && runs == 0:
			out = append(out, Violation{"confirmation once", t.Session, fmt.Sprintf("turn %d: the client's answer was taken but goose never ran %s", t.Turn.ID, call)})
		}
		if taken > 1 {
			out = append(out, Violation{"confirmation once", t.Session, fmt.Sprintf("turn %d: %d answers to one confirmation were each taken", t.Turn.ID, taken)})
		}
		st := h.Stored[t.Session]
		for _, id := range []string{call, t.ConfirmationID} {
			if id == "" {
				continue
			}
			n := 0
			for _, ev := range st.Events {
				for _, r := range ev.FunctionResponses {
					if r == id {
						n++
					}
				}
			}
			if n > 1 {
				out = append(out, Violation{"confirmation once", t.Session, fmt.Sprintf("turn %d: the response to %s is in the history %d times", t.Turn.ID, id, n)})
			}
		}
	}
	return out
}

// checkTokens: a session's totals, as its turns' final events carried them,
// never go down; stored, they are the sum of its stored turns' usage (at
// least, when a turn ended without its final event being stored: goose
// counted it); the agent's totals never go down and end as the sum of its
// sessions'.
func checkTokens(h History) []Violation {
	var out []Violation
	last := map[string]int64{}
	clean := map[string]bool{}
	for _, t := range h.Turns {
		if _, seen := clean[t.Session]; !seen {
			clean[t.Session] = true
		}
		if t.Outcome != Answered && t.Outcome != Confirm {
			clean[t.Session] = false
		}
		for _, u := range t.UsageTotals {
			if u < last[t.Session] {
				out = append(out, Violation{"tokens", t.Session, fmt.Sprintf("turn %d: the session's token total went down from %d to %d", t.Turn.ID, last[t.Session], u)})
			}
			last[t.Session] = max(last[t.Session], u)
		}
	}
	var sessions int64
	for _, id := range sortedKeys(h.Stored) {
		st := h.Stored[id]
		if st.FetchFailed != "" {
			continue
		}
		var sum int64
		for _, ev := range st.Events {
			sum += ev.Usage
		}
		sessions += st.UsageTotal
		switch {
		case clean[id] && st.UsageTotal != sum:
			out = append(out, Violation{"tokens", id, fmt.Sprintf("stored total %d, its turns' usage sums to %d (every turn answered)", st.UsageTotal, sum)})
		case st.UsageTotal < sum:
			out = append(out, Violation{"tokens", id, fmt.Sprintf("stored total %d is below its turns' usage, %d", st.UsageTotal, sum)})
		case st.UsageTotal < last[id]:
			out = append(out, Violation{"tokens", id, fmt.Sprintf("stored total %d is below the %d a turn reported", st.UsageTotal, last[id])})
		}
	}
	for i := 1; i < len(h.AgentTotals); i++ {
		if h.AgentTotals[i] < h.AgentTotals[i-1] {
			out = append(out, Violation{"tokens", "", fmt.Sprintf("the agent's token total went down from %d to %d (sample %d)", h.AgentTotals[i-1], h.AgentTotals[i], i)})
		}
	}
	if h.AgentTotal != sessions {
		out = append(out, Violation{"tokens", "", fmt.Sprintf("the agent's token total is %d, its sessions' totals sum to %d", h.AgentTotal, sessions)})
	}
	return out
}

// checkResources: goroutines, descriptors and goose connections are back
// near where they started.
func checkResources(h History) []Violation {
	var out []Violation
	for _, r := range h.Resources {
		if r.After > r.Baseline+r.Slack {
			out = append(out, Violation{"no leak", "", fmt.Sprintf("%s: %d after the run settled, %d before (slack %d)", r.What, r.After, r.Baseline, r.Slack)})
		}
	}
	return out
}

// checkIntegrity: every SQLite file copy passed PRAGMA integrity_check.
func checkIntegrity(h History) []Violation {
	var out []Violation
	for _, f := range sortedKeys(h.Integrity) {
		if r := h.Integrity[f]; r != "ok" {
			out = append(out, Violation{"sqlite intact", "", fmt.Sprintf("%s: %s", f, r)})
		}
	}
	return out
}

// SessionTurns is the smallest history that shows a session's violation:
// its turns, in order.
func SessionTurns(h History, session string) []TurnRecord {
	var out []TurnRecord
	for _, t := range h.Turns {
		if t.Session == session {
			out = append(out, t)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Turn.ID < out[j].Turn.ID })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
