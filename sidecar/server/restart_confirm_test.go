package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// The sidecar restarts (same data volume, same goose) while a turn waits for
// a tool confirmation. goose keeps the pending approval and resumes it on the
// next session/load (load_session.rs start_resumed_state_machine_turn); the
// new sidecar holds no confirmation. The ADK client's late answer gets a 409
// (the session did ask it: its history has the call) saying it is no longer
// pending since the restart; its next message gets a function response
// ending the lost tool call, then goose's answer: the session works again.
func TestRESTConfirmationLostInARestart(t *testing.T) {
	f := goosetest.NewServe(t, goosetest.WithServeScript(func(_, text string) goosetest.Reply {
		if text == "delete x" {
			return goosetest.Reply{Steps: []goosetest.Step{
				{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "removed", NeedsApproval: true}},
				{Delay: time.Minute, Text: "never"},
			}}
		}
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "Hello again."}}}
	}))
	backend := func() goose.Backend {
		c, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	dir := t.TempDir()
	before := startSidecar(t, backend(), dir, approveMode)
	before.createSession("u", "s")
	_, frames := before.runSSE(runBody("u", "s", "delete x", true))
	id := confirmationFrame(t, frames)
	// The process dies: its goose connection goes with it.
	f.DropConnections()
	before.stop()

	after := startSidecar(t, backend(), dir, approveMode)
	code, resp := after.do(http.MethodPost, "/run_sse", answerBody("s", id, map[string]any{"confirmed": true}))
	var m map[string]string
	_ = json.Unmarshal(resp, &m)
	if code != http.StatusConflict || !strings.Contains(m["error"], "no longer pending") || !strings.Contains(m["error"], "restarted") {
		t.Fatalf("late answer: %d %s", code, resp)
	}
	code, frames = after.runSSE(runBody("u", "s", "hello", true))
	if code != 200 {
		t.Fatal(code)
	}
	var lost string
	for _, fr := range frames {
		ps, _ := jpath(fr.Data, "content", "parts").([]any)
		for _, p := range ps {
			if jpath(p, "functionResponse", "id") == "c1" {
				b, _ := json.Marshal(jpath(p, "functionResponse", "response"))
				lost = string(b)
			}
		}
	}
	if !strings.Contains(lost, "restarted") {
		t.Errorf("no function response ending the lost call c1 in %v", frames)
	}
	fin := frames[len(frames)-1].Data
	if jpath(fin, "content", "parts", 0, "text") != "Hello again." || fin["errorCode"] != nil {
		t.Fatalf("final: %v", fin)
	}
	if p := f.Permissions(); len(p) != 1 || p[0].ToolCallID != "c1" || p[0].Outcome != "cancelled" {
		t.Errorf("goose heard %+v", p)
	}
}

// A confirmation whose session the agent forgot while idle (beyond
// IdleSessions) is no longer held either: answering it again gets a 409
// saying it is no longer pending, as for one answered before, not the 400
// of an id the session never asked.
func TestRESTConfirmationOfAForgottenIdleSession(t *testing.T) {
	f := goosetest.NewServe(t, goosetest.WithServeScript(func(_, text string) goosetest.Reply {
		if text == "delete x" {
			return goosetest.Reply{Steps: []goosetest.Step{
				{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "removed", NeedsApproval: true}},
				{Text: "Done."},
			}}
		}
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "Hello."}}}
	}))
	c, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sc := startSidecar(t, c, t.TempDir(), approveMode, func(cfg *server.Config) { cfg.IdleSessions = 1 })
	sc.createSession("u", "s")
	_, frames := sc.runSSE(runBody("u", "s", "delete x", true))
	id := confirmationFrame(t, frames)
	if code, frames := sc.runSSE(answerBody("s", id, map[string]any{"confirmed": true})); code != 200 ||
		jpath(frames[len(frames)-1].Data, "content", "parts", 0, "text") != "Done." {
		t.Fatalf("answer: %d %v", code, frames)
	}
	answerAgain := func() (int, string) {
		code, resp := sc.do(http.MethodPost, "/run_sse", answerBody("s", id, map[string]any{"confirmed": true}))
		var m map[string]string
		_ = json.Unmarshal(resp, &m)
		return code, m["error"]
	}
	if code, msg := answerAgain(); code != http.StatusConflict || !strings.Contains(msg, "already answered") {
		t.Fatalf("second answer while remembered: %d %s", code, msg)
	}
	// A turn of another session makes "s" the least recently used idle one.
	sc.createSession("u", "other")
	if code, _ := sc.runSSE(runBody("u", "other", "hi", true)); code != 200 {
		t.Fatal(code)
	}
	if code, msg := answerAgain(); code != http.StatusConflict || !strings.Contains(msg, "no longer pending") || !strings.Contains(msg, "idle") {
		t.Fatalf("answer after the session was forgotten: %d %s", code, msg)
	}
	// An id the session never asked is still a 400.
	code, _ := sc.do(http.MethodPost, "/run_sse", answerBody("s", "adk-never-asked", map[string]any{"confirmed": true}))
	if code != http.StatusBadRequest {
		t.Fatalf("unknown id: %d, want 400", code)
	}
}
