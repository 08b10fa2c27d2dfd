package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/syncbuf"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// liveScript answers "slow ..." with a delta and then a long wait, "tool
// ..." with a tool that needs approval, and anything else as Echo.
func liveScript(id, text string) goosetest.Reply {
	switch {
	case strings.HasPrefix(text, "slow"):
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "thinking"}, {Delay: time.Minute, Text: "too late"}}}
	case strings.HasPrefix(text, "big"):
		var r goosetest.Reply
		for range 300 {
			r.Steps = append(r.Steps, goosetest.Step{Text: strings.Repeat("z", 64<<10)})
		}
		return r
	case strings.HasPrefix(text, "tool"):
		return goosetest.Reply{Steps: []goosetest.Step{
			{Text: "I will list the files."},
			{Tool: &goosetest.ToolStep{ID: "t1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "a b", NeedsApproval: true}},
			{Text: "Two files."},
		}}
	}
	return goosetest.Echo(id, text)
}

// startLiveSidecar is a sidecar on a fake goose serve with the real ACP
// client, and that fake.
func startLiveSidecar(t *testing.T, opts ...option) (*sidecar, *goosetest.Serve) {
	t.Helper()
	fake := goosetest.NewServe(t, goosetest.WithServeScript(liveScript))
	b, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return startSidecar(t, b, t.TempDir(), opts...), fake
}

// liveURL is the sidecar's /run_live URL for a session.
func (s *sidecar) liveURL(user, session string, extra url.Values) string {
	q := url.Values{"appName": {appName}, "userId": {user}, "sessionId": {session}}
	for k, v := range extra {
		q[k] = v
	}
	return "ws" + strings.TrimPrefix(s.URL, "http") + server.LivePath + "?" + q.Encode()
}

// dialLive opens a live socket; on a refusal it returns the answer.
func (s *sidecar) dialLive(user, session string, hdr http.Header, extra url.Values) (*websocket.Conn, int, []byte) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.DefaultDialer.DialContext(ctx, s.liveURL(user, session, extra), hdr)
	if err != nil {
		if resp == nil {
			s.t.Fatalf("dial %s: %v", server.LivePath, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, body
	}
	s.t.Cleanup(func() { _ = ws.Close() })
	return ws, http.StatusSwitchingProtocols, nil
}

func tokenHeader(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// liveEvent is what adkrest writes for each event.
type liveEvent struct {
	Author       string   `json:"author"`
	Partial      bool     `json:"partial"`
	TurnComplete bool     `json:"turnComplete"`
	ErrorCode    string   `json:"errorCode"`
	ErrorMessage string   `json:"errorMessage"`
	LongRunning  []string `json:"longRunningToolIds"`
	Content      *struct {
		Parts []struct {
			Text         string `json:"text"`
			FunctionCall *struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"functionCall"`
			FunctionResponse *struct {
				Response map[string]any `json:"response"`
			} `json:"functionResponse"`
		} `json:"parts"`
	} `json:"content"`
}

func say(t *testing.T, ws *websocket.Conn, text string) {
	t.Helper()
	msg := map[string]any{"content": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}
	if err := ws.WriteJSON(msg); err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
}

func readEvent(t *testing.T, ws *websocket.Conn) liveEvent {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	var ev liveEvent
	if err := ws.ReadJSON(&ev); err != nil {
		t.Fatalf("read an event: %v", err)
	}
	return ev
}

// readTurn reads up to the turn's final event: the streamed text, the
// events between, and the final event.
func readTurn(t *testing.T, ws *websocket.Conn) (string, []liveEvent, liveEvent) {
	t.Helper()
	var b strings.Builder
	var mid []liveEvent
	for {
		ev := readEvent(t, ws)
		switch {
		case ev.Partial:
			b.WriteString(ev.Content.Parts[0].Text)
		case ev.TurnComplete:
			return b.String(), mid, ev
		default:
			mid = append(mid, ev)
		}
	}
}

// readClose reads until the socket closes and returns the close error.
func readClose(t *testing.T, ws *websocket.Conn) *websocket.CloseError {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("the socket ended without a close frame: %v", err)
		}
		return ce
	}
}

func TestLiveTurnsOnOneSocket(t *testing.T) {
	sc, _ := startLiveSidecar(t, func(c *server.Config) { c.TurnWait = 200 * time.Millisecond })
	sc.createSession("u", "s1")
	ws, code, body := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	if ws == nil {
		t.Fatalf("dial: %d %s", code, body)
	}
	for _, text := range []string{"hello goose", "second", "third"} {
		say(t, ws, text)
		streamed, _, final := readTurn(t, ws)
		if streamed != "echo: "+text || final.ErrorCode != "" {
			t.Fatalf("turn %q: streamed %q, final %s %s", text, streamed, final.ErrorCode, final.ErrorMessage)
		}
	}
	// The history holds the three messages and answers, in order.
	sess := sc.sessionOf(testToken, "u", "s1")
	var authors []string
	for _, ev := range sess["events"].([]any) {
		authors = append(authors, ev.(map[string]any)["author"].(string))
	}
	if got := strings.Join(authors, ","); got != "user,goose,user,goose,user,goose" {
		t.Errorf("history authors: %s", got)
	}
	// While the socket is open it holds the session: a run waits, then 409.
	if code, _ := sc.do(http.MethodPost, "/run", runBody("u", "s1", "meanwhile", false)); code != http.StatusConflict {
		t.Errorf("a run during the socket: %d, want 409", code)
	}
	_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	readClose(t, ws)
	poll.Until(t, "the session is free again", func() bool {
		code, _ := sc.do(http.MethodPost, "/run", runBody("u", "s1", "after", false))
		return code == http.StatusOK
	})
}

func TestLiveApprovalOnTheSocket(t *testing.T) {
	sc, fake := startLiveSidecar(t)
	sc.createSession("u", "s1")
	ws, _, _ := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	say(t, ws, "tool please")
	_, _, final := readTurn(t, ws)
	var confID string
	for _, p := range final.Content.Parts {
		if p.FunctionCall != nil && p.FunctionCall.Name == gooseagent.ConfirmationFunctionName {
			confID = p.FunctionCall.ID
		}
	}
	if confID == "" || len(final.LongRunning) != 1 {
		t.Fatalf("no confirmation call in %+v", final)
	}
	answer := map[string]any{"content": map[string]any{"role": "user", "parts": []any{map[string]any{
		"functionResponse": map[string]any{"id": confID, "name": gooseagent.ConfirmationFunctionName, "response": map[string]any{"confirmed": true}},
	}}}}
	if err := ws.WriteJSON(answer); err != nil {
		t.Fatal(err)
	}
	streamed, mid, final := readTurn(t, ws)
	if streamed != "Two files." || final.ErrorCode != "" || len(mid) != 1 || mid[0].Content.Parts[0].FunctionResponse == nil {
		t.Fatalf("after the answer: %q, %d events, final %s %s", streamed, len(mid), final.ErrorCode, final.ErrorMessage)
	}
	if p := fake.Permissions(); len(p) != 1 || p[0].Outcome != "selected" {
		t.Errorf("goose got %+v", p)
	}
}

func TestLiveStopThenAnotherTurn(t *testing.T) {
	sc, fake := startLiveSidecar(t)
	sc.createSession("u", "s1")
	ws, _, _ := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	say(t, ws, "slow one")
	if ev := readEvent(t, ws); !ev.Partial {
		t.Fatalf("want the first delta, got %+v", ev)
	}
	if err := ws.WriteJSON(map[string]any{"activityStart": map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	_, _, final := readTurn(t, ws)
	if final.ErrorCode != gooseagent.ErrorCodeCancelled || !strings.Contains(final.ErrorMessage, "activityStart") {
		t.Fatalf("stopped turn: %s %q", final.ErrorCode, final.ErrorMessage)
	}
	poll.Until(t, "goose is told to cancel", func() bool { return len(fake.Cancels()) == 1 })
	say(t, ws, "go on")
	if streamed, _, final := readTurn(t, ws); streamed != "echo: go on" || final.ErrorCode != "" {
		t.Fatalf("turn after the stop: %q %s", streamed, final.ErrorCode)
	}
}

func TestLiveClientVanishesMidTurn(t *testing.T) {
	sc, fake := startLiveSidecar(t)
	sc.createSession("u", "s1")
	ws, _, _ := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	say(t, ws, "slow one")
	readEvent(t, ws)
	start := time.Now()
	_ = ws.NetConn().Close() // no close frame
	poll.Until(t, "goose is told to cancel", func() bool { return len(fake.Cancels()) == 1 })
	if d := time.Since(start); d > time.Second {
		t.Errorf("goose was cancelled %s after the client vanished, want within 1s", d)
	}
	poll.Until(t, "the socket's stream metric is back to 0", func() bool {
		code, body := sc.do(http.MethodGet, "/metrics", nil)
		return code == http.StatusOK && strings.Contains(string(body), `adk2goose_open_streams{route="run_live"} 0`)
	})
}

func TestLiveRefusesBinaryFrames(t *testing.T) {
	sc, _ := startLiveSidecar(t)
	sc.createSession("u", "s1")
	ws, _, _ := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	ce := readClose(t, ws)
	if !strings.Contains(ce.Text, "goose takes text") {
		t.Fatalf("close %d %q, want goose takes text", ce.Code, ce.Text)
	}
}

func TestLiveRefusesOversizedMessages(t *testing.T) {
	sc, fake := startLiveSidecar(t, func(c *server.Config) { c.MaxMessageBytes = 1024 })
	sc.createSession("u", "s1")
	ws, _, _ := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	say(t, ws, strings.Repeat("x", 2000))
	ce := readClose(t, ws)
	if ce.Code != websocket.CloseMessageTooBig || !strings.Contains(ce.Text, "1024-byte cap") {
		t.Fatalf("close %d %q, want 1009", ce.Code, ce.Text)
	}
	if n := len(fake.Prompts()); n != 0 {
		t.Errorf("goose got %d prompts", n)
	}
}

func TestLiveAuthentication(t *testing.T) {
	var logs syncbuf.Buffer
	sc, _ := startLiveSidecar(t, func(c *server.Config) {
		c.CORSOrigins = []string{"https://ui.example"}
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	defer func() {
		for _, secret := range []string{testToken, "nope"} {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("the log holds a presented token %q", secret)
			}
		}
	}()
	sc.createSession("u", "s1")
	for name, tc := range map[string]struct {
		hdr   http.Header
		query url.Values
		want  int
	}{
		"no token":          {nil, nil, http.StatusUnauthorized},
		"wrong token":       {tokenHeader("nope"), nil, http.StatusUnauthorized},
		"wrong query token": {nil, url.Values{"api_key": {"nope"}}, http.StatusUnauthorized},
		"query token":       {nil, url.Values{"api_key": {testToken}}, http.StatusSwitchingProtocols},
		"header token":      {tokenHeader(testToken), nil, http.StatusSwitchingProtocols},
		"own origin":        {http.Header{"Authorization": {"Bearer " + testToken}, "Origin": {sc.URL}}, nil, http.StatusSwitchingProtocols},
		"CORS origin":       {http.Header{"Authorization": {"Bearer " + testToken}, "Origin": {"https://ui.example"}}, nil, http.StatusSwitchingProtocols},
		"other origin":      {http.Header{"Authorization": {"Bearer " + testToken}, "Origin": {"https://evil.example"}}, nil, http.StatusForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			ws, code, body := sc.dialLive("u", "s1", tc.hdr, tc.query)
			if code != tc.want {
				t.Fatalf("got %d %s, want %d", code, body, tc.want)
			}
			if ws == nil {
				var m map[string]any
				if err := json.Unmarshal(body, &m); err != nil || m["error"] == nil {
					t.Errorf("refusal is not a JSON error: %s", body)
				}
				return
			}
			say(t, ws, "hi")
			if streamed, _, _ := readTurn(t, ws); streamed != "echo: hi" {
				t.Errorf("streamed %q", streamed)
			}
			_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			readClose(t, ws)
		})
	}
}

func TestLiveIdentityModes(t *testing.T) {
	sc, _ := startLiveSidecar(t, withIdentity)
	sc.createSessionWith(alice, "a1", bearerOf(aliceToken))
	// bob may not open alice's session.
	if _, code, body := sc.dialLive(alice, "a1", tokenHeader(bobToken), nil); code != http.StatusForbidden {
		t.Fatalf("bob on alice's session: %d %s", code, body)
	}
	// alice may, with her token in the header or the query.
	for _, how := range []struct {
		hdr   http.Header
		query url.Values
	}{{tokenHeader(aliceToken), nil}, {nil, url.Values{"api_key": {aliceToken}}}} {
		ws, code, body := sc.dialLive(alice, "a1", how.hdr, how.query)
		if ws == nil {
			t.Fatalf("alice: %d %s", code, body)
		}
		say(t, ws, "mine")
		if streamed, _, _ := readTurn(t, ws); streamed != "echo: mine" {
			t.Errorf("streamed %q", streamed)
		}
		_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		readClose(t, ws)
	}
}

func TestLiveRefusals(t *testing.T) {
	sc, _ := startLiveSidecar(t, func(c *server.Config) {
		c.LiveConnsPerUser = 2
		c.TurnWait = 200 * time.Millisecond
	})
	sc.createSession("u", "s1")
	sc.createSession("u", "s2")
	sc.createSession("u", "s3")
	hdr := tokenHeader(testToken)
	if _, code, body := sc.dialLive("u", "missing", hdr, nil); code != http.StatusNotFound || !strings.Contains(string(body), "SESSION_NOT_FOUND") {
		t.Errorf("unknown session: %d %s", code, body)
	}
	first, _, _ := sc.dialLive("u", "s1", hdr, nil)
	// The socket holds s1: a second one waits for the turn wait, then 409.
	if _, code, body := sc.dialLive("u", "s1", hdr, nil); code != http.StatusConflict || !strings.Contains(string(body), "SESSION_BUSY") {
		t.Errorf("second socket on s1: %d %s", code, body)
	}
	if ws, code, body := sc.dialLive("u", "s2", hdr, nil); ws == nil {
		t.Fatalf("s2: %d %s", code, body)
	}
	// Two are open: a third gets 429.
	if _, code, body := sc.dialLive("u", "s3", hdr, nil); code != http.StatusTooManyRequests || !strings.Contains(string(body), "TOO_MANY_CONNECTIONS") {
		t.Errorf("third socket: %d %s", code, body)
	}
	_ = first.Close()
	poll.Until(t, "a socket closed frees a place", func() bool {
		ws, _, _ := sc.dialLive("u", "s3", hdr, nil)
		return ws != nil
	})
	// Not a WebSocket, or another app.
	if code, body := sc.do(http.MethodGet, server.LivePath+"?appName="+appName+"&userId=u&sessionId=s3", nil); code != http.StatusBadRequest {
		t.Errorf("plain GET: %d %s", code, body)
	}
	q := url.Values{"appName": {"other"}}
	if _, code, body := sc.dialLive("u", "s3", hdr, q); code != http.StatusNotFound || !strings.Contains(string(body), "APP_NOT_FOUND") {
		t.Errorf("other app: %d %s", code, body)
	}
}

func TestLiveIdleAndDrain(t *testing.T) {
	sc, _ := startLiveSidecar(t, func(c *server.Config) { c.LiveIdleTimeout = 300 * time.Millisecond })
	sc.createSession("u", "s1")
	sc.createSession("u", "s2")
	ws, _, _ := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	say(t, ws, "hi")
	readTurn(t, ws)
	if ce := readClose(t, ws); ce.Code != websocket.CloseGoingAway || !strings.Contains(ce.Text, "idle") {
		t.Fatalf("idle close: %d %q", ce.Code, ce.Text)
	}

	ws, _, _ = sc.dialLive("u", "s2", tokenHeader(testToken), nil)
	say(t, ws, "slow one")
	readEvent(t, ws)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- sc.srv.Drain(ctx) }()
	// The running turn is ended when the drain times out; then the socket closes.
	_, _, final := readTurn(t, ws)
	if final.ErrorCode != "DRAINING" {
		t.Errorf("the turn cut by the drain: %s %q, want DRAINING", final.ErrorCode, final.ErrorMessage)
	}
	if ce := readClose(t, ws); ce.Code != websocket.CloseGoingAway || !strings.Contains(ce.Text, "draining") {
		t.Fatalf("drain close: %d %q", ce.Code, ce.Text)
	}
	<-drained
}

func TestLiveBudgetPerTurn(t *testing.T) {
	f := goosetest.NewServe(t, goosetest.WithServeScript(spendScript(nil, nil)))
	b, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	file := filepath.Join(t.TempDir(), "budget.json")
	writeBudget(t, file, "Day", 100)
	sc := startSidecar(t, b, t.TempDir(), budgeted(file, &fakeClock{t: monday10}, "goose-0"))
	sc.createSession("u", "s1")
	ws, code, body := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	if ws == nil {
		t.Fatalf("dial: %d %s", code, body)
	}
	say(t, ws, "spend 120")
	if _, _, final := readTurn(t, ws); final.ErrorCode != "" {
		t.Fatalf("first turn: %s %s", final.ErrorCode, final.ErrorMessage)
	}
	poll.Until(t, "the budget is spent", func() bool { st := sc.stats().Budget; return st != nil && st.Exhausted })
	say(t, ws, "spend 10")
	_, _, final := readTurn(t, ws)
	if final.ErrorCode != "BUDGET_EXHAUSTED" {
		t.Fatalf("turn over the budget: %s %q", final.ErrorCode, final.ErrorMessage)
	}
	if n := len(f.Prompts()); n != 1 {
		t.Errorf("goose got %d prompts, want 1", n)
	}
	// The socket stays open.
	if err := ws.WriteJSON(map[string]any{"activityEnd": map[string]any{}}); err != nil {
		t.Errorf("the socket closed after a refused turn: %v", err)
	}
}

// TestLiveForwardedToTheOwner: a socket opened on the pod without the
// session is forwarded to the pod that has it, and works both ways.
func TestLiveForwardedToTheOwner(t *testing.T) {
	rs := startReplicaSet(t)
	rs.pods[0].createSessionHere("u", "s1")
	for i := range 2 {
		ws, code, body := rs.pods[1].dialLive("u", "s1", tokenHeader(testToken), nil)
		if ws == nil {
			t.Fatalf("socket %d through pod 1: %d %s", i, code, body)
		}
		say(t, ws, "over the hop")
		if streamed, _, final := readTurn(t, ws); streamed != "echo: over the hop" || final.ErrorCode != "" {
			t.Fatalf("streamed %q (%s)", streamed, final.ErrorCode)
		}
		_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		readClose(t, ws)
	}
	if own, _ := rs.owner(t, 2); own != 0 {
		t.Fatalf("goose of pod %d answered, want pod 0's", own)
	}
}

// TestLiveClientStopsReading: a client that stops reading loses its socket
// after the write timeout, and goose's turn is cancelled.
func TestLiveClientStopsReading(t *testing.T) {
	sc, fake := startLiveSidecar(t, func(c *server.Config) { c.LiveWriteTimeout = 300 * time.Millisecond })
	sc.createSession("u", "s1")
	ws, _, _ := sc.dialLive("u", "s1", tokenHeader(testToken), nil)
	say(t, ws, "big reply") // about 19 MiB, never read
	poll.Until(t, "goose is told to cancel", func() bool { return len(fake.Cancels()) == 1 })
	poll.Until(t, "the socket is counted closed", func() bool {
		code, body := sc.do(http.MethodGet, "/metrics", nil)
		return code == http.StatusOK && strings.Contains(string(body), `adk2goose_open_streams{route="run_live"} 0`)
	})
}
