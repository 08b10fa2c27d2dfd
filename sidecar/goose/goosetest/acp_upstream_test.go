package goosetest

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// Each test here pins one behaviour of upstream goose serve
// (aaif-goose/goose, crates/goose/src/acp/...) that the fake reproduces; the
// test name says which.

func dialInitialized(t *testing.T, s *Serve) *rawClient {
	t.Helper()
	c, _, err := dialServe(t, s, http.Header{"X-Secret-Key": {s.Secret}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.initialize(true)
	return c
}

// kindsOf names each frame: the sessionUpdate kind of a notification.
func kindsOf(frames []map[string]any) []string {
	var out []string
	for _, f := range frames {
		_, kind, _ := updateOf(f)
		out = append(out, kind)
	}
	return out
}

// expectSetupNotifications reads send_session_setup_notifications' frames:
// custom usage_update, stable usage_update, available_commands_update.
func (c *rawClient) expectSetupNotifications() {
	c.t.Helper()
	var after []map[string]any
	for range 3 {
		after = append(after, c.recv())
	}
	if got := strings.Join(kindsOf(after), " "); got != "usage_update usage_update available_commands_update" {
		c.t.Errorf("after the response: %s, want the setup notifications", got)
	}
}

// dispatch.rs, NewSessionRequest handler: responder.respond(response), then
// send_session_setup_notifications.
func TestUpstreamSessionNewAnswersBeforeSetupNotifications(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil)
	defer s.Close()
	c := dialInitialized(t, s)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":` + jsonString(t.TempDir()) + `,"mcpServers":[]}}`)
	before, res := c.recvUntilResponse(2)
	if len(before) != 0 || res["result"] == nil {
		t.Fatalf("frames before the session/new response: %v (response %v)", kindsOf(before), res)
	}
	c.expectSetupNotifications()
	c.ws.Close()
}

// dispatch.rs, LoadSessionRequest handler: the history replay happens inside
// handle_load_session (load_session.rs replay_conversation_to_client), then
// responder.respond, then send_session_setup_notifications.
func TestUpstreamSessionLoadAnswersBeforeSetupNotifications(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil)
	defer s.Close()
	cwd := t.TempDir()
	sid := s.SeedSession(cwd, 2)
	c := dialInitialized(t, s)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"session/load","params":{"sessionId":"` + sid + `","cwd":` + jsonString(cwd) + `,"mcpServers":[]}}`)
	before, res := c.recvUntilResponse(2)
	if res["result"] == nil {
		t.Fatalf("session/load: %v", res)
	}
	if got := strings.Join(kindsOf(before), " "); got != "user_message_chunk agent_message_chunk" {
		t.Errorf("before the response: %s, want the history replay only", got)
	}
	c.expectSetupNotifications()
	c.ws.Close()
}

// manage_sessions.rs on_delete_session maps every SessionStorage error with
// internal_err; session_manager.rs SessionStorage::delete_session fails with
// "Session not found" for an unknown id. So: -32603, not -32002.
func TestUpstreamSessionDeleteOfUnknownIDIsInternalError(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil)
	defer s.Close()
	c := dialInitialized(t, s)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"session/delete","params":{"sessionId":"20200101_99"}}`)
	_, res := c.recvUntilResponse(2)
	e, _ := res["error"].(map[string]any)
	if e["code"] != -32603.0 || e["data"] != "Session not found" {
		t.Errorf("session/delete of an unknown id: %v", res)
	}
	c.ws.Close()
}

// server.rs validate_absolute_cwd: session/new and session/load need cwd to
// be absolute and to exist as a directory, else -32602 with the reason.
func TestUpstreamSessionCwdMustBeAnExistingDirectory(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil)
	defer s.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sid := s.SeedSession(dir, 0)
	c := dialInitialized(t, s)
	cases := []struct{ method, cwd, data string }{
		{"session/new", "relative", "cwd must be an absolute path"},
		{"session/new", filepath.Join(dir, "missing"), "invalid directory path"},
		{"session/new", file, "invalid directory path"},
		{"session/load", filepath.Join(dir, "missing"), "invalid directory path"},
	}
	for i, tc := range cases {
		id := float64(10 + i)
		c.send(`{"jsonrpc":"2.0","id":` + jsonNum(id) + `,"method":"` + tc.method + `","params":{"sessionId":"` + sid + `","cwd":` + jsonString(tc.cwd) + `,"mcpServers":[]}}`)
		_, res := c.recvUntilResponse(id)
		e, _ := res["error"].(map[string]any)
		if e["code"] != -32602.0 || e["data"] != tc.data {
			t.Errorf("%s cwd=%q: %v, want -32602 %q", tc.method, tc.cwd, res, tc.data)
		}
	}
	c.ws.Close()
}

// platform_extensions/mod.rs: developer is a platform extension with
// unprefixed_tools, so its shell tool is "shell"; server.rs
// tool_call_identity_meta reports toolName "shell" and extensionName
// "developer" (from the tool's goose_extension meta). Prefixed MCP tools keep
// their prefix as the extension name.
func TestUpstreamDeveloperToolsAreUnprefixed(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil, WithServeScript(Fixed(Reply{Steps: []Step{
		{Tool: &ToolStep{ID: "t1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "ok"}},
		{Tool: &ToolStep{ID: "t2", Name: "github__list_issues", Result: "[]"}},
	}})))
	defer s.Close()
	c := dialInitialized(t, s)
	sid := c.newSession()
	c.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"hi"}]}}`)
	frames, _ := c.recvUntilResponse(3)
	var got []string
	for _, f := range frames {
		if _, kind, u := updateOf(f); kind == "tool_call" {
			tc := u["_meta"].(map[string]any)["goose"].(map[string]any)["toolCall"].(map[string]any)
			got = append(got, tc["toolName"].(string)+"@"+tc["extensionName"].(string))
		}
	}
	if strings.Join(got, " ") != "shell@developer github__list_issues@github" {
		t.Errorf("tool calls: %v", got)
	}
	c.ws.Close()
}

// load_session.rs handle_load_session / start_resumed_state_machine_turn: a
// session whose history ends in a pending tool confirmation (its client went
// away while goose waited) is resumed by session/load: before the answer,
// a session_info_update names a "resume_" run and the permission request is
// sent again. The resumed run holds the session, so a session/prompt meanwhile
// gets -32602 (§2.4); it ends with activeRunId null and no response.
func TestUpstreamSessionLoadResumesAPendingApproval(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil, WithServeScript(Fixed(Reply{Steps: []Step{
		{Tool: &ToolStep{ID: "toolu_7", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "removed", NeedsApproval: true}},
		{Text: "done"},
	}})))
	defer s.Close()
	cwd := t.TempDir()
	c1 := dialInitialized(t, s)
	c1.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":` + jsonString(cwd) + `,"mcpServers":[]}}`)
	_, res := c1.recvUntilResponse(2)
	sid := res["result"].(map[string]any)["sessionId"].(string)
	c1.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"go"}]}}`)
	for m := c1.recv(); m["method"] != "session/request_permission"; m = c1.recv() {
	}
	c1.ws.Close() // the client dies before answering
	poll.Until(t, "the aborted reply's pending approval", func() bool {
		ss, _ := s.Session(sid)
		return ss.AwaitingApproval
	})

	c2 := dialInitialized(t, s)
	c2.send(`{"jsonrpc":"2.0","id":2,"method":"session/load","params":{"sessionId":"` + sid + `","cwd":` + jsonString(cwd) + `,"mcpServers":[]}}`)
	before, res := c2.recvUntilResponse(2)
	if res["result"] == nil {
		t.Fatalf("session/load: %v", res)
	}
	var runID, permID string
	for _, f := range before {
		if _, kind, u := updateOf(f); kind == "session_info_update" {
			runID, _ = u["_meta"].(map[string]any)["goose"].(map[string]any)["activeRunId"].(string)
		}
		if f["method"] == "session/request_permission" {
			permID, _ = f["id"].(string)
			if tc := f["params"].(map[string]any)["toolCall"].(map[string]any); tc["toolCallId"] != "toolu_7" {
				t.Errorf("resent request for %v", tc)
			}
		}
	}
	if !strings.HasPrefix(runID, "resume_") || permID == "" {
		t.Fatalf("before the load answer: run %q, permission request %q; frames %v", runID, permID, kindsOf(before))
	}
	c2.send(`{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"next"}]}}`)
	_, res = c2.recvUntilResponse(4)
	if e, _ := res["error"].(map[string]any); e["code"] != -32602.0 || !strings.Contains(e["data"].(string), runID) {
		t.Errorf("prompt during the resumed run: %v", res)
	}
	c2.send(`{"jsonrpc":"2.0","id":"` + permID + `","result":{"outcome":{"outcome":"selected","optionId":"allow_once"}}}`)
	for {
		m := c2.recv()
		if _, kind, u := updateOf(m); kind == "session_info_update" && u["_meta"].(map[string]any)["goose"].(map[string]any)["activeRunId"] == nil {
			break
		}
	}
	if p := s.Permissions(); len(p) != 1 || p[0].ToolCallID != "toolu_7" || p[0].OptionID != "allow_once" {
		t.Errorf("permissions %+v", p)
	}
	c2.ws.Close()
}
