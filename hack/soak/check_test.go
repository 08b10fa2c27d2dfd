package main

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)

// cleanHistory is a run that broke nothing: session a answered two turns
// (the second an approval), session b's client left its turn.
func cleanHistory() History {
	return History{
		Seed: 1,
		Turns: []TurnRecord{
			{Turn: Turn{ID: 0, Session: 0}, Session: "a", Start: t0, End: t0.Add(time.Second), Outcome: Answered, UsageTotals: []int64{10}},
			{Turn: Turn{ID: 1, Session: 1, Kind: Cancel}, Session: "b", Start: t0, End: t0.Add(time.Second), Outcome: Left},
			{Turn: Turn{ID: 2, Session: 0, Kind: Approval, Answer: AnswerOnce}, Session: "a", Start: t0.Add(time.Second), End: t0.Add(2 * time.Second),
				Outcome: Answered, UsageTotals: []int64{25}, ConfirmationID: "adk-1", Answers: []Outcome{Answered}},
		},
		Stored: map[string]StoredSession{
			"a": {UsageTotal: 25, HasUsage: true, Events: []StoredEvent{
				{Text: prompt(Turn{ID: 0})}, {Text: "t0 " + answerText(0), Usage: 10},
				{Text: prompt(Turn{ID: 2})}, {Text: "t2 "}, {FunctionResponses: []string{"adk-1"}}, {FunctionResponses: []string{toolCallID(2)}},
				{Text: answerText(2), Usage: 15},
			}},
			"b": {Events: []StoredEvent{{Text: prompt(Turn{ID: 1})}}},
		},
		Permissions: map[string][]PermissionAnswer{toolCallID(2): {{ToolCallID: toolCallID(2), RequestID: "r1", Allowed: true}}},
		AgentTotals: []int64{0, 10, 25},
		AgentTotal:  25,
		Resources:   []Resource{{What: "goroutines", Baseline: 16, After: 20, Slack: 10}, {What: "goose connections", After: 0}},
		Integrity:   map[string]string{"r0 sessions.db": "ok"},
	}
}

// wantViolation checks that Check finds exactly one violation of invariant
// in h, mentioning what.
func wantViolation(t *testing.T, h History, invariant, what string) {
	t.Helper()
	vs := Check(h)
	if len(vs) != 1 || vs[0].Invariant != invariant || !strings.Contains(vs[0].Detail, what) {
		t.Fatalf("got %v, want one %q violation about %q", vs, invariant, what)
	}
}

func TestCheckCleanHistory(t *testing.T) {
	if vs := Check(cleanHistory()); len(vs) != 0 {
		t.Fatalf("violations in a clean history: %v", vs)
	}
}

func TestCheckHungTurn(t *testing.T) {
	h := cleanHistory()
	h.Turns[1].Outcome = Hung
	wantViolation(t, h, "ended", "turn 1 hung")
}

func TestCheckTruncatedStream(t *testing.T) {
	h := cleanHistory()
	h.Turns[1].Outcome = Truncated
	wantViolation(t, h, "ended", "neither an answer nor an error")
	// A replica killed while it streamed excuses it.
	h.Excused = []Window{{Kind: SidecarKill, Start: t0.Add(500 * time.Millisecond), End: t0.Add(3 * time.Second)}}
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("an excused cut: %v", vs)
	}
}

func TestCheckAnswerMissing(t *testing.T) {
	h := cleanHistory()
	st := h.Stored["a"]
	st.Events[1].Text = "t0 "
	h.Stored["a"] = st
	wantViolation(t, h, "answer stored once", "not in the history")
}

func TestCheckAnswerTwice(t *testing.T) {
	h := cleanHistory()
	st := h.Stored["a"]
	st.Events = append(st.Events, StoredEvent{Text: answerText(0)})
	h.Stored["a"] = st
	wantViolation(t, h, "answer stored once", "2 times")
}

func TestCheckConfirmationAnsweredTwice(t *testing.T) {
	h := cleanHistory()
	call := toolCallID(2)
	h.Permissions[call] = append(h.Permissions[call], PermissionAnswer{ToolCallID: call, RequestID: "r1"})
	wantViolation(t, h, "confirmation once", "2 answers to its permission request r1")
}

func TestCheckConfirmationAppliedTwice(t *testing.T) {
	h := cleanHistory()
	call := toolCallID(2)
	h.Permissions[call] = append(h.Permissions[call], PermissionAnswer{ToolCallID: call, RequestID: "r2", Allowed: true})
	wantViolation(t, h, "confirmation once", "goose ran call-2 2 times")
}

// goose asks again, with a new request id, when it loads a session whose
// run ended waiting for the approval; each request answered once is fine.
func TestCheckConfirmationAskedAgain(t *testing.T) {
	h := cleanHistory()
	call := toolCallID(2)
	h.Permissions[call] = append([]PermissionAnswer{{ToolCallID: call, RequestID: "r0"}}, h.Permissions[call]...)
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("a request asked again and answered once each: %v", vs)
	}
}

func TestCheckConfirmationLost(t *testing.T) {
	h := cleanHistory()
	h.Permissions[toolCallID(2)][0].Allowed = false
	wantViolation(t, h, "confirmation once", "never ran call-2")
	delete(h.Permissions, toolCallID(2))
	wantViolation(t, h, "confirmation once", "never ran call-2")
}

func TestCheckConfirmationTakenTwice(t *testing.T) {
	h := cleanHistory()
	h.Turns[2].Answers = []Outcome{Answered, Answered}
	wantViolation(t, h, "confirmation once", "each taken")
}

func TestCheckConfirmationStoredTwice(t *testing.T) {
	h := cleanHistory()
	st := h.Stored["a"]
	st.Events = append(st.Events[:5:5], append([]StoredEvent{{FunctionResponses: []string{"adk-1"}}}, st.Events[5:]...)...)
	h.Stored["a"] = st
	wantViolation(t, h, "confirmation once", "adk-1 is in the history 2 times")
}

func TestCheckSessionTokensGoDown(t *testing.T) {
	h := cleanHistory()
	h.Turns[2].UsageTotals = []int64{5}
	wantViolation(t, h, "tokens", "went down from 10 to 5")
}

func TestCheckSessionTokensAreTheSumOfItsTurns(t *testing.T) {
	h := cleanHistory()
	st := h.Stored["a"]
	st.UsageTotal = 30
	h.Stored["a"] = st
	h.AgentTotal = 30
	wantViolation(t, h, "tokens", "stored total 30, its turns' usage sums to 25")
}

func TestCheckSessionTokensBelowItsTurns(t *testing.T) {
	h := cleanHistory()
	h.Turns[0].Outcome = ErrorEvt // not every turn answered: goose may have counted more
	st := h.Stored["a"]
	st.UsageTotal = 20
	h.Stored["a"] = st
	h.AgentTotal = 20
	wantViolation(t, h, "tokens", "below its turns' usage")
}

func TestCheckAgentTokensGoDown(t *testing.T) {
	h := cleanHistory()
	h.AgentTotals = []int64{10, 25, 24, 25}
	wantViolation(t, h, "tokens", "agent's token total went down from 25 to 24")
}

func TestCheckAgentTokensAreTheSumOfSessions(t *testing.T) {
	h := cleanHistory()
	h.AgentTotal = 40
	wantViolation(t, h, "tokens", "the agent's token total is 40, its sessions' totals sum to 25")
}

func TestCheckLeak(t *testing.T) {
	h := cleanHistory()
	h.Resources[1].After = 1
	wantViolation(t, h, "no leak", "goose connections: 1")
}

func TestCheckIntegrity(t *testing.T) {
	h := cleanHistory()
	h.Integrity["r1 usage.db"] = "*** in database main ***; Page 5: never used"
	wantViolation(t, h, "sqlite intact", "r1 usage.db")
}

func TestSessionTurnsInOrder(t *testing.T) {
	h := cleanHistory()
	h.Turns[0], h.Turns[2] = h.Turns[2], h.Turns[0]
	got := SessionTurns(h, "a")
	if len(got) != 2 || got[0].Turn.ID != 0 || got[1].Turn.ID != 2 {
		t.Fatalf("session a's turns: %+v", got)
	}
}
