package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// liveTurn is one turn of the client's live conversation (client live).
type liveTurn struct {
	Sent      string `json:"sent"`
	Text      string `json:"text"`
	ErrorCode string `json:"errorCode"`
	Events    int    `json:"events"`
}

// liveConversation is case 10: a conversation on one /run_live WebSocket
// through the agent's Service, from a client pod: a turn, a slow turn
// stopped with ADK's interrupt ({"activityStart":{}}) while it streams,
// and another turn on the same socket; and a socket without the token is
// refused.
func (e *env) liveConversation(t *testing.T, pod string) {
	const name = "minimal"
	url := e.agent(t, samplesNS, name).Status.Endpoints.REST
	tok := e.token(t, samplesNS, name)
	args := []string{"-n", samplesNS, "exec", pod, "--", "client", "live", "-url", url, "-app", name, "-session", "case10"}
	var out string
	var err error
	deadline := time.Now().Add(time.Minute)
	for {
		out, err = e.kubectl(t, "", append(args, "-token", tok, "-create", "-text", "hello over live")...)
		if err == nil || !dialFailed(err) || time.Now().After(deadline) {
			break
		}
		t.Logf("the Service's connection failed, retrying: %v", err)
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("live conversation through the Service: %v", err)
	}
	var turns []liveTurn
	if err := json.Unmarshal([]byte(out), &turns); err != nil {
		t.Fatalf("failed to decode %q: %v", out, err)
	}
	t.Logf("live turns: %+v", turns)
	if len(turns) != 3 {
		t.Fatalf("%d turns, want 3", len(turns))
	}
	if !strings.HasPrefix(turns[0].Text, "echo: hello over live [") || turns[0].ErrorCode != "" {
		t.Errorf("first turn %+v: want the echo", turns[0])
	}
	if turns[1].ErrorCode != "GOOSE_CANCELLED" || strings.Contains(turns[1].Text, "slow done") {
		t.Errorf("stopped turn %+v: want GOOSE_CANCELLED before it finished", turns[1])
	}
	if !strings.HasPrefix(turns[2].Text, "echo: again: hello over live [") || turns[2].ErrorCode != "" {
		t.Errorf("turn after the stop %+v: want the echo", turns[2])
	}
	// Without the token the upgrade is refused.
	if _, err := e.kubectl(t, "", append(args, "-text", "x")...); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("a live socket without the token: want HTTP 401, got %v", err)
	}
}
