package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/adk/model"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// slowEcho answers like goosetest.Echo after a pause, so that turns sent
// together overlap; its usage is 10+len input and len output tokens.
func slowEcho(_ string, text string) goosetest.Reply {
	return goosetest.Reply{Steps: []goosetest.Step{
		{Delay: 30 * time.Millisecond, Text: "echo: "},
		{Text: text},
		{Usage: &goosetest.UsageStep{Input: int64(10 + len(text)), Output: int64(len(text))}},
	}}
}

// turnTexts reads a session's events as (author, text) pairs.
func (s *sidecar) turnTexts(user, id string) [][2]string {
	s.t.Helper()
	_, evs := s.history(user, id)
	var out [][2]string
	for _, e := range evs {
		text, _ := jpath(e, "content", "parts", 0, "text").(string)
		author, _ := jpath(e, "author").(string)
		out = append(out, [2]string{author, text})
	}
	return out
}

// serveClient is an ACP client of the fake goose serve g.
func serveClient(t *testing.T, g *goosetest.Serve) *acp.Client {
	t.Helper()
	c, err := acp.New(acp.Config{URL: g.URL, SecretKey: g.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// checkPaired fails unless the history is n user messages each followed by
// goose's echo of it: no turn lost, none interleaved with another.
func checkPaired(t *testing.T, h [][2]string, n int) {
	t.Helper()
	if len(h) != 2*n {
		t.Fatalf("history has %d events, want %d: %v", len(h), 2*n, h)
	}
	seen := map[string]bool{}
	for i := 0; i < len(h); i += 2 {
		u, a := h[i], h[i+1]
		if u[0] != "user" || a[0] != appName || a[1] != "echo: "+u[1] || seen[u[1]] {
			t.Fatalf("events %d-%d are %v then %v: want a user message then its own answer\n%v", i, i+1, u, a, h)
		}
		seen[u[1]] = true
	}
}

// TestConcurrentTurnsOneSession: five /run_sse at once on one session all
// complete without an error frame, one after another; every goose answer is
// in the history next to its message, and tokens are counted once per answer.
func TestConcurrentTurnsOneSession(t *testing.T) {
	g := goosetest.NewServe(t, goosetest.WithServeScript(slowEcho))
	sc := startSidecar(t, serveClient(t, g), t.TempDir())
	sc.createSession("u", "busy")
	const n = 5
	var wg sync.WaitGroup
	finals := make([]string, n)
	for i := range n {
		wg.Go(func() {
			code, frames := sc.runSSE(runBody("u", "busy", fmt.Sprint("turn ", i), true))
			if code != http.StatusOK {
				t.Errorf("turn %d: %d", i, code)
				return
			}
			for _, f := range frames {
				if f.Event == "error" || jpath(f.Data, "errorCode") != nil {
					t.Errorf("turn %d: error frame %v", i, f.Data)
				}
				if jpath(f.Data, "partial") != true {
					finals[i], _ = jpath(f.Data, "content", "parts", 0, "text").(string)
				}
			}
		})
	}
	wg.Wait()
	var wantTokens int64
	for i := range n {
		text := fmt.Sprint("turn ", i)
		if finals[i] != "echo: "+text {
			t.Errorf("turn %d ended with %q", i, finals[i])
		}
		wantTokens += int64(10 + 2*len(text))
	}
	checkPaired(t, sc.turnTexts("u", "busy"), n)
	if p := g.Prompts(); len(p) != n {
		t.Fatalf("goose was asked %d times, want %d", len(p), n)
	}
	if st := sc.stats(); st.Tokens.Total != wantTokens {
		t.Fatalf("tokens counted %d, want %d (each answer once)", st.Tokens.Total, wantTokens)
	}
}

// TestTurnWaitRunsOut: a request for a session whose turn outlasts the
// turn wait gets 409 with a JSON reason and Retry-After, and is neither
// sent to goose nor stored; session writes wait for the turn the same way.
func TestTurnWaitRunsOut(t *testing.T) {
	release := make(chan struct{})
	script := func(_ string, text string) goosetest.Reply {
		if text == "long" {
			<-release
		}
		return goosetest.Echo("", text)
	}
	g := goosetest.NewServe(t, goosetest.WithServeScript(script))
	sc := startSidecar(t, serveClient(t, g), t.TempDir(), func(c *server.Config) { c.TurnWait = 200 * time.Millisecond })
	sc.createSession("u", "s")
	done := make(chan int)
	go func() {
		code, _ := sc.runSSE(runBody("u", "s", "long", true))
		done <- code
	}()
	poll.Until(t, "goose to get the first prompt", func() bool { return len(g.Prompts()) == 1 })

	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/run_sse", runBody("u", "s", "second", true)},
		{http.MethodPost, "/run", runBody("u", "s", "third", false)},
		{http.MethodPatch, "/apps/goose/users/u/sessions/s", map[string]any{"stateDelta": map[string]any{"x": 1}}},
		{http.MethodDelete, "/apps/goose/users/u/sessions/s", nil},
	} {
		resp := sc.raw(c.method, c.path, c.body)
		if resp.status != http.StatusConflict || resp.json["code"] != "SESSION_BUSY" || resp.header.Get("Retry-After") == "" {
			t.Fatalf("%s %s during a turn: %d %v", c.method, c.path, resp.status, resp.json)
		}
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("first turn: %d", code)
	}
	checkPaired(t, sc.turnTexts("u", "s"), 1)
	if p := g.Prompts(); len(p) != 1 {
		t.Fatalf("goose was asked %d times, want 1", len(p))
	}
}

// TestReplicasOneTurnAtATime: runs of one session sent to both pods at once
// meet at the pod that has the session and take turns there.
func TestReplicasOneTurnAtATime(t *testing.T) {
	rs := startReplicaSet(t)
	rs.pods[0].createSessionHere("u", "shared")
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code, frames := rs.pods[i%2].runSSE(runBody("u", "shared", fmt.Sprint("turn ", i), true))
			if code != http.StatusOK {
				t.Errorf("turn %d: %d", i, code)
			}
			for _, f := range frames {
				if f.Event == "error" {
					t.Errorf("turn %d: error frame %v", i, f.Data)
				}
			}
		})
	}
	wg.Wait()
	checkPaired(t, rs.pods[1].turnTexts("u", "shared"), n)
	if a, b := len(rs.gooses[0].Prompts()), len(rs.gooses[1].Prompts()); a != n || b != 0 {
		t.Fatalf("prompts per pod %d and %d, want %d on the owner", a, b, n)
	}
}

// TestClientMistakesAreJSON4xx: every client mistake on the ADK REST routes
// gets a 4xx with a JSON reason, as ADK clients parse errors, and changes
// nothing.
func TestClientMistakesAreJSON4xx(t *testing.T) {
	g := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	sc := startSidecar(t, serveClient(t, g), t.TempDir())
	sc.createSession("u", "s1")
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, contains     string
	}{
		{"run_sse unknown session", "POST", "/run_sse", runBody("u", "nope", "hi", true), 404, "SESSION_NOT_FOUND", "nope"},
		{"run unknown session", "POST", "/run", runBody("u", "nope", "hi", false), 404, "SESSION_NOT_FOUND", "nope"},
		{"run_sse unknown app", "POST", "/run_sse", map[string]any{"appName": "other", "userId": "u", "sessionId": "s1", "newMessage": "hi"}, 404, "APP_NOT_FOUND", "other"},
		{"create for unknown app", "POST", "/apps/other/users/u/sessions", nil, 404, "APP_NOT_FOUND", "other"},
		{"create with id for unknown app", "POST", "/apps/other/users/u/sessions/x", nil, 404, "APP_NOT_FOUND", "other"},
		{"list for unknown app", "GET", "/apps/other/users/u/sessions", nil, 404, "APP_NOT_FOUND", "other"},
		{"duplicate session id", "POST", "/apps/goose/users/u/sessions/s1", nil, 409, "SESSION_EXISTS", "Session already exists"},
		{"get unknown session", "GET", "/apps/goose/users/u/sessions/nope", nil, 404, "NOT_FOUND", "nope"},
		{"patch unknown session", "PATCH", "/apps/goose/users/u/sessions/nope", map[string]any{"stateDelta": map[string]any{"x": 1}}, 404, "NOT_FOUND", "nope"},
		{"patch bad JSON", "PATCH", "/apps/goose/users/u/sessions/s1", "{not json", 400, "BAD_REQUEST", ""},
		{"patch scoped key", "PATCH", "/apps/goose/users/u/sessions/s1", map[string]any{"stateDelta": map[string]any{"app:x": 1}}, 400, "BAD_REQUEST", "app:x"},
		{"create bad JSON", "POST", "/apps/goose/users/u/sessions/fresh", "[1,2", 400, "BAD_REQUEST", ""},
		{"run bad JSON", "POST", "/run", "{", 400, "BAD_REQUEST", "JSON object"},
		{"run without message", "POST", "/run_sse", map[string]any{"appName": appName, "userId": "u", "sessionId": "s1"}, 400, "BAD_REQUEST", "newMessage"},
		{"wrong method", "PUT", "/run", nil, 405, "METHOD_NOT_ALLOWED", ""},
		{"unknown path", "GET", "/no/such/route", nil, 404, "NOT_FOUND", ""},
		{"unknown function response", "POST", "/run_sse", map[string]any{"appName": appName, "userId": "u", "sessionId": "s1",
			"newMessage": map[string]any{"parts": []any{map[string]any{"functionResponse": map[string]any{"id": "adk-x", "name": "adk_request_confirmation", "response": map[string]any{"confirmed": true}}}}}}, 400, "GOOSE_CONFIRMATION_NOT_PENDING", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := sc.raw(c.method, c.path, c.body)
			if resp.status != c.status || resp.json["code"] != c.code || resp.json["error"] == "" ||
				!strings.Contains(resp.json["error"], c.contains) || resp.json["detail"] != resp.json["error"] {
				t.Fatalf("%d %v; want %d %s mentioning %q", resp.status, resp.json, c.status, c.code, c.contains)
			}
		})
	}
	// Nothing reached goose or the stores.
	if p := g.Prompts(); len(p) != 0 {
		t.Fatalf("goose got %d prompts", len(p))
	}
	if h := sc.turnTexts("u", "s1"); len(h) != 0 {
		t.Fatalf("s1 history %v", h)
	}
	code, body := sc.do(http.MethodGet, "/apps/goose/users/u/sessions", nil)
	if code != http.StatusOK || strings.Count(string(body), `"id"`) != 1 {
		t.Fatalf("sessions: %d %s", code, body)
	}
}

type rawResponse struct {
	status int
	header http.Header
	json   map[string]string
}

// raw sends an authenticated request and decodes its JSON object answer.
func (s *sidecar) raw(method, path string, body any) rawResponse {
	s.t.Helper()
	resp, b := s.exchange(method, path, body, map[string]string{"Authorization": "Bearer " + testToken})
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		s.t.Fatalf("%s %s: %d answered %q, want JSON", method, path, resp.StatusCode, ct)
	}
	out := rawResponse{status: resp.StatusCode, header: resp.Header, json: map[string]string{}}
	_ = json.Unmarshal(b, &out.json)
	return out
}

// TestConcurrentA2AMessagesOneContext: A2A messages sent at once in one
// context (one ADK session) take turns like REST runs: every task
// completes and every answer is in the context's history.
func TestConcurrentA2AMessagesOneContext(t *testing.T) {
	g := goosetest.NewServe(t, goosetest.WithServeScript(slowEcho))
	sc := startSidecar(t, serveClient(t, g), t.TempDir())
	const n = 4
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code, body := sc.do(http.MethodPost, server.A2APathV03, map[string]any{
				"jsonrpc": "2.0", "id": i, "method": "message/send",
				"params": map[string]any{"message": map[string]any{
					"kind": "message", "messageId": fmt.Sprint("m", i), "role": "user", "contextId": "ctx-c",
					"parts": []any{map[string]any{"kind": "text", "text": fmt.Sprint("turn ", i)}},
				}},
			})
			var rpc struct {
				Result struct {
					Status struct {
						State string `json:"state"`
					} `json:"status"`
				} `json:"result"`
			}
			if code != http.StatusOK || json.Unmarshal(body, &rpc) != nil || rpc.Result.Status.State != "completed" {
				t.Errorf("message %d: %d %s", i, code, body)
			}
		})
	}
	wg.Wait()
	checkPaired(t, sc.turnTexts("A2A_USER_ctx-c", "ctx-c"), n)
	if p := g.Prompts(); len(p) != n {
		t.Fatalf("goose was asked %d times, want %d", len(p), n)
	}
}

// TestRunOfLegacySessionKeepsItsGooseSession: a run loads only the last
// event of its session, except for a session of an older version whose
// goose session id is under the unscoped state key: gooseagent accepts that
// id only after finding the event that set it, however far back, so the
// conversation goes on in the same goose session.
func TestRunOfLegacySessionKeepsItsGooseSession(t *testing.T) {
	g := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	b := serveClient(t, g)
	sc := startSidecar(t, b, t.TempDir())
	gs, err := b.StartSession(t.Context(), goose.StartOptions{WorkingDir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	svc := sc.srv.SessionService()
	cr, err := svc.Create(t.Context(), &session.CreateRequest{AppName: appName, UserID: "u", SessionID: "old"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		ev := session.NewEventWithContext(t.Context(), "inv-old")
		ev.Author = appName
		ev.LLMResponse = model.LLMResponse{Content: genai.NewContentFromText(fmt.Sprint("old reply ", i), genai.RoleModel)}
		if i == 0 {
			ev.Actions.StateDelta = map[string]any{gooseagent.StateKeySessionID: gs.ID}
		}
		if err := svc.AppendEvent(t.Context(), cr.Session, ev); err != nil {
			t.Fatal(err)
		}
	}
	if code, _ := sc.runSSE(runBody("u", "old", "still there?", true)); code != http.StatusOK {
		t.Fatalf("run: %d", code)
	}
	if p := g.Prompts(); len(p) != 1 || p[0].SessionID != gs.ID {
		t.Fatalf("prompts %+v, want one in goose session %s", p, gs.ID)
	}
}
