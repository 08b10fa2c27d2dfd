package goosetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/goose/rest"
)

// goosed stores a streamed message once, its deltas merged: text deltas
// sharing a message id concatenate into its last text item, other items
// (thinking, the tool request) are appended; the next message (the tool
// response, then the answer after it) is stored apart. GET /sessions/{id}
// returns that conversation, mid-reply too (here while goose waits for a
// tool approval).
func TestGoosedStoresStreamedDeltasMerged(t *testing.T) {
	fake := goosetest.NewGoosed(goosetest.GoosedOptions{Script: goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "Hel"}, {Text: "lo"}, {Thinking: "hmm"}, {Text: " wor"}, {Text: "ld"},
		{Tool: &goosetest.ToolStep{ID: "call_1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{}`), Result: "ok", NeedsApproval: true}},
		{Text: "do"}, {Text: "ne"},
	}})})
	defer fake.Close()
	c, err := rest.New(rest.Config{URL: fake.URL, SecretKey: fake.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	s, err := c.StartSession(ctx, goose.StartOptions{WorkingDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	conversation := func() []map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fake.URL+"/sessions/"+s.ID, nil)
		req.Header.Set("X-Secret-Key", fake.SecretKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var got struct {
			Conversation []map[string]any `json:"conversation"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		return got.Conversation
	}
	content := func(m map[string]any) string { return jsonString(t, m["content"]) }
	const merged = `[{"text":"Hello","type":"text"},{"signature":"","thinking":"hmm","type":"thinking"},{"text":" world","type":"text"},` +
		`{"id":"call_1","toolCall":{"status":"success","value":{"arguments":{},"name":"shell"}},"type":"toolRequest"}]`

	approvals := 0
	for ev, err := range c.Reply(ctx, s.ID, goose.UserMessage{Text: "go"}) {
		if err != nil {
			t.Fatal(err)
		}
		if ar, ok := ev.(*goose.ApprovalRequest); ok {
			approvals++
			conv := conversation()
			if len(conv) != 2 || content(conv[1]) != merged {
				t.Errorf("while waiting for approval: %s, want the user's message and the assistant's so far, merged", jsonString(t, conv))
			}
			if err := c.Approve(ctx, s.ID, ar.ID, goose.AllowOnce); err != nil {
				t.Fatal(err)
			}
		}
	}
	if approvals != 1 {
		t.Fatalf("%d approval requests, want 1", approvals)
	}
	conv := conversation()
	if len(conv) != 4 {
		t.Fatalf("%d messages, want 4 (user, assistant, tool response, assistant): %s", len(conv), jsonString(t, conv))
	}
	if conv[1]["role"] != "assistant" || content(conv[1]) != merged {
		t.Errorf("first answer %s, want %s", jsonString(t, conv[1]), merged)
	}
	if !strings.Contains(content(conv[2]), `"toolResponse"`) {
		t.Errorf("third message %s, want the tool response", jsonString(t, conv[2]))
	}
	if conv[3]["role"] != "assistant" || content(conv[3]) != `[{"text":"done","type":"text"}]` {
		t.Errorf("last answer %s, want one text item \"done\"", jsonString(t, conv[3]))
	}
	if conv[1]["id"] == conv[3]["id"] {
		t.Errorf("both answers stored under message id %v", conv[1]["id"])
	}
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// DropMidFrame ends a reply inside an SSE event: the body's last bytes are
// half an event, with no blank line after them, and the body is cut.
func TestGoosedDropMidFrame(t *testing.T) {
	fake := goosetest.NewGoosed(goosetest.GoosedOptions{Script: goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "a"}, {DropMidFrame: true}}})})
	defer fake.Close()
	c, err := rest.New(rest.Config{URL: fake.URL, SecretKey: fake.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	s, err := c.StartSession(t.Context(), goose.StartOptions{WorkingDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"session_id":"` + s.ID + `","user_message":{"role":"user","created":1,"content":[{"type":"text","text":"go"}],"metadata":{"userVisible":true,"agentVisible":true}}}`
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, fake.URL+"/reply", strings.NewReader(body))
	req.Header.Set("X-Secret-Key", fake.SecretKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read error %v, want the body cut", err)
	}
	last := got[strings.LastIndex(string(got), "\n\n")+2:]
	if !strings.HasPrefix(string(last), `data: {`) || strings.Contains(string(last), "\n") || !strings.Contains(string(got), `"text":"a"`) {
		t.Fatalf("body does not end in half an event after the text: %q", got)
	}
}
