package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// toolScript: text, a tool call with its result, more text, usage.
var toolScript = goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
	{Text: "Let me look. "},
	{Tool: &goosetest.ToolStep{ID: "call_1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "README.md"}},
	{Text: "There is a README."},
	{Usage: &goosetest.UsageStep{Input: 40, Output: 12}},
}})

func TestRESTEndToEnd(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			dir := t.TempDir()
			b := fl.start(t, goosetest.Echo)
			sc := startSidecar(t, b, dir)

			code, body := sc.do(http.MethodGet, "/list-apps", nil)
			if code != 200 || strings.TrimSpace(string(body)) != `["goose"]` {
				t.Fatalf("list-apps: %d %s", code, body)
			}
			sc.createSession("u1", "s1")
			if st := sc.stats(); st.LastTurnAt != nil {
				t.Fatalf("lastTurnAt before the first turn: %v", st.LastTurnAt)
			}
			firstTurn := time.Now().Truncate(time.Millisecond)

			// /run_sse: partial deltas, then the final event with usage.
			code, frames := sc.runSSE(runBody("u1", "s1", "hello world", true))
			if code != 200 || len(frames) < 2 {
				t.Fatalf("run_sse: %d %+v", code, frames)
			}
			var partial strings.Builder
			for _, f := range frames[:len(frames)-1] {
				if f.Data["partial"] != true {
					t.Fatalf("non-final frame not partial: %v", f.Data)
				}
				partial.WriteString(jpath(f.Data, "content", "parts", 0, "text").(string))
			}
			fin := frames[len(frames)-1].Data
			if fin["partial"] == true || jpath(fin, "content", "parts", 0, "text") != "echo: hello world" || partial.String() != "echo: hello world" {
				t.Fatalf("final %v / partial %q", fin, partial.String())
			}
			if jpath(fin, "usageMetadata", "promptTokenCount") != 21.0 || jpath(fin, "usageMetadata", "candidatesTokenCount") != 11.0 ||
				jpath(fin, "usageMetadata", "totalTokenCount") != 32.0 || fin["finishReason"] != "STOP" || fin["turnComplete"] != true {
				t.Fatalf("final usage/finish: %v", fin)
			}

			// /run returns the JSON array (no partials without streaming).
			code, body = sc.do(http.MethodPost, "/run", runBody("u1", "s1", "abcd", false))
			var events []map[string]any
			if code != 200 || json.Unmarshal(body, &events) != nil || len(events) != 1 {
				t.Fatalf("run: %d %s", code, body)
			}
			if jpath(events[0], "content", "parts", 0, "text") != "echo: abcd" || jpath(events[0], "usageMetadata", "totalTokenCount") != 18.0 {
				t.Fatalf("run event: %s", body)
			}

			// GET session: persisted user + final events, goose id and totals in state.
			code, body = sc.do(http.MethodGet, "/apps/goose/users/u1/sessions/s1", nil)
			var sess map[string]any
			if code != 200 || json.Unmarshal(body, &sess) != nil {
				t.Fatalf("get session: %d %s", code, body)
			}
			evs := sess["events"].([]any)
			if len(evs) != 4 || jpath(evs[1], "content", "parts", 0, "text") != "echo: hello world" || jpath(evs[0], "author") != "user" {
				t.Fatalf("persisted events: %s", body)
			}
			if jpath(sess, "state", gooseagent.SessionIDStateKey(appName)) == nil || jpath(sess, "state", gooseagent.UsageStateKey(appName), "totalTokens") != 50.0 {
				t.Fatalf("state: %v", sess["state"])
			}

			// list, a second session, delete.
			sc.createSession("u1", "s2")
			code, body = sc.do(http.MethodGet, "/apps/goose/users/u1/sessions", nil)
			var list []map[string]any
			if code != 200 || json.Unmarshal(body, &list) != nil || len(list) != 2 {
				t.Fatalf("list: %d %s", code, body)
			}
			if code, body = sc.do(http.MethodDelete, "/apps/goose/users/u1/sessions/s2", nil); code != 200 {
				t.Fatalf("delete: %d %s", code, body)
			}
			if code, _ = sc.do(http.MethodGet, "/apps/goose/users/u1/sessions/s2", nil); code != 404 {
				t.Fatalf("deleted session still there: %d", code)
			}

			st := sc.stats()
			if st.Sessions.Total != 1 || st.Sessions.Active != 1 || st.Sessions.InFlight != 0 ||
				st.Tokens.Input != 21+14 || st.Tokens.Output != 11+4 || st.Tokens.Total != 50 {
				t.Fatalf("stats before restart: %+v", st)
			}
			if st.LastTurnAt == nil || st.LastTurnAt.Before(firstTurn) || st.LastTurnAt.After(time.Now()) {
				t.Fatalf("lastTurnAt %v, want between %v and now", st.LastTurnAt, firstTurn)
			}

			// Restart on the same data dir: sessions, history and token totals survive.
			sc.stop()
			sc2 := startSidecar(t, b, dir)
			code, body = sc2.do(http.MethodGet, "/apps/goose/users/u1/sessions/s1", nil)
			if code != 200 || !strings.Contains(string(body), "echo: abcd") {
				t.Fatalf("after restart: %d %s", code, body)
			}
			if st2 := sc2.stats(); st2.Tokens != st.Tokens || st2.Sessions.Total != 1 || st2.Sessions.Active != 1 {
				t.Fatalf("stats after restart: %+v, before %+v", st2, st)
			}
			if st2 := sc2.stats(); st2.LastTurnAt == nil || !st2.LastTurnAt.Equal(*st.LastTurnAt) {
				t.Fatalf("lastTurnAt after restart %v, before %v: a restart must not reset it", st2.LastTurnAt, st.LastTurnAt)
			}
			// The same goose session carries on after the restart (resumed, not recreated).
			code, frames = sc2.runSSE(runBody("u1", "s1", "xy", true))
			fin = frames[len(frames)-1].Data
			if code != 200 || jpath(fin, "content", "parts", 0, "text") != "echo: xy" {
				t.Fatalf("run after restart: %v", frames)
			}
			if _, changed := jpath(fin, "actions", "stateDelta").(map[string]any)[gooseagent.SessionIDStateKey(appName)]; changed {
				t.Fatalf("a new goose session was started after restart: %v", fin)
			}
			if st3 := sc2.stats(); st3.Tokens.Total != 50+14 || st3.LastTurnAt == nil || st3.LastTurnAt.Before(*st.LastTurnAt) {
				t.Fatalf("stats after third turn: %+v", st3)
			}
		})
	}
}

func TestRESTToolCalls(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			sc := startSidecar(t, fl.start(t, toolScript), t.TempDir())
			sc.createSession("u", "s")
			code, frames := sc.runSSE(runBody("u", "s", "what is here?", true))
			if code != 200 {
				t.Fatal(code)
			}
			var call, resp map[string]any
			for _, f := range frames {
				for _, p := range jpath(f.Data, "content", "parts").([]any) {
					if c := jpath(p, "functionCall"); c != nil {
						call = c.(map[string]any)
					}
					if r := jpath(p, "functionResponse"); r != nil {
						resp = r.(map[string]any)
					}
				}
			}
			if call == nil || call["name"] != "shell" || call["id"] != "call_1" || jpath(call, "args", "command") != "ls" {
				t.Fatalf("functionCall: %v\n%v", call, frames)
			}
			if resp == nil || resp["id"] != "call_1" || jpath(resp, "response", "output") != "README.md" {
				t.Fatalf("functionResponse: %v", resp)
			}
			fin := frames[len(frames)-1].Data
			if jpath(fin, "content", "parts", 0, "text") != "There is a README." || jpath(fin, "usageMetadata", "totalTokenCount") != 52.0 {
				t.Fatalf("final: %v", fin)
			}
			// The call and response are persisted in the session history.
			_, body := sc.do(http.MethodGet, "/apps/goose/users/u/sessions/s", nil)
			if !strings.Contains(string(body), `"functionCall"`) || !strings.Contains(string(body), `"functionResponse"`) {
				t.Fatalf("tool events not persisted: %s", body)
			}
		})
	}
}

func TestGooseDown(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			sc := startSidecar(t, fl.down(t), t.TempDir())
			if code, body := sc.doWith(http.MethodGet, "/readyz", nil, nil); code != http.StatusServiceUnavailable {
				t.Fatalf("readyz: %d %s", code, body)
			}
			if code, _ := sc.doWith(http.MethodGet, "/healthz", nil, nil); code != 200 {
				t.Fatalf("healthz: %d", code)
			}
			sc.createSession("u", "s")
			start := time.Now()
			code, frames := sc.runSSE(runBody("u", "s", "hi", true))
			if code != 200 || len(frames) != 1 {
				t.Fatalf("run_sse: %d %v", code, frames)
			}
			if frames[0].Data["errorCode"] != gooseagent.ErrorCodeUnavailable || frames[0].Data["errorMessage"] == "" {
				t.Fatalf("error event: %v", frames[0].Data)
			}
			code, body := sc.do(http.MethodPost, "/run", runBody("u", "s", "hi", false))
			if code != 200 || !strings.Contains(string(body), gooseagent.ErrorCodeUnavailable) {
				t.Fatalf("run: %d %s", code, body)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

func TestReadyWhenGooseUp(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			sc := startSidecar(t, fl.start(t, goosetest.Echo), t.TempDir())
			code, body := sc.doWith(http.MethodGet, "/readyz", nil, nil)
			if code != 200 || !strings.Contains(string(body), fl.name) {
				t.Fatalf("readyz: %d %s", code, body)
			}
		})
	}
}

// TestDeleteSessionReachesGoose: DELETE of an ADK session deletes its goose
// session (persisted in SQLite, so also after a sidecar restart), and the
// same id created again starts a fresh goose conversation.
func TestDeleteSessionReachesGoose(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b := fl.start(t, goosetest.Echo)
			dir := t.TempDir()
			gooseID := func(sc *sidecar) string {
				code, body := sc.do(http.MethodGet, "/apps/goose/users/u1/sessions/s1", nil)
				var sess map[string]any
				if code != 200 || json.Unmarshal(body, &sess) != nil {
					t.Fatalf("get session: %d %s", code, body)
				}
				id, _ := jpath(sess, "state", gooseagent.SessionIDStateKey(appName)).(string)
				return id
			}
			run := func(sc *sidecar) {
				if code, body := sc.do(http.MethodPost, "/run", runBody("u1", "s1", "hi", false)); code != 200 || !strings.Contains(string(body), "echo: hi") {
					t.Fatalf("run: %d %s", code, body)
				}
			}
			del := func(sc *sidecar) {
				if code, body := sc.do(http.MethodDelete, "/apps/goose/users/u1/sessions/s1", nil); code != 200 {
					t.Fatalf("delete: %d %s", code, body)
				}
			}

			// In the process that ran the turn.
			sc := startSidecar(t, b, dir)
			sc.createSession("u1", "s1")
			run(sc)
			first := gooseID(sc)
			del(sc)
			if _, err := b.ResumeSession(t.Context(), first); !errors.Is(err, goose.ErrSessionNotFound) {
				t.Fatalf("goose session %s after the ADK delete: %v", first, err)
			}
			sc.createSession("u1", "s1")
			run(sc)
			second := gooseID(sc)
			if second == "" || second == first {
				t.Fatalf("re-created session went to goose session %q (first %q)", second, first)
			}

			// In a restarted sidecar, which knows the goose session from the state only.
			sc.stop()
			sc = startSidecar(t, b, dir)
			del(sc)
			if _, err := b.ResumeSession(t.Context(), second); !errors.Is(err, goose.ErrSessionNotFound) {
				t.Fatalf("goose session %s after the ADK delete: %v", second, err)
			}
		})
	}
}
