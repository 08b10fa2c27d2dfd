package goosetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"
)

// rawClient speaks the wire by hand, to check the fake's frames exactly.
type rawClient struct {
	t  *testing.T
	ws *websocket.Conn
}

func dialServe(t *testing.T, s *Serve, header http.Header, query string) (*rawClient, *http.Response, error) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(s.URL, "http") + "/acp" + query
	ws, resp, err := websocket.DefaultDialer.Dial(u, header)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { ws.Close() })
	return &rawClient{t: t, ws: ws}, resp, nil
}

func (c *rawClient) send(frame string) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) recv() map[string]any {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatal(err)
	}
	if strings.ContainsAny(string(data), "\n") {
		c.t.Errorf("frame spans lines: %s", data)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		c.t.Fatalf("bad frame %s: %v", data, err)
	}
	return m
}

// recvUntilResponse returns the notifications/requests before the response
// with the given numeric id, and the response.
func (c *rawClient) recvUntilResponse(id float64) ([]map[string]any, map[string]any) {
	c.t.Helper()
	var before []map[string]any
	for {
		m := c.recv()
		if v, ok := m["id"].(float64); ok && v == id && m["method"] == nil {
			return before, m
		}
		before = append(before, m)
	}
}

func (c *rawClient) initialize(custom bool) {
	c.t.Helper()
	meta := ""
	if custom {
		meta = `,"_meta":{"goose":{"customNotifications":true}}`
	}
	c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{}` + meta + `}}}`)
	_, res := c.recvUntilResponse(1)
	r := res["result"].(map[string]any)
	if r["protocolVersion"] != 1.0 || r["agentInfo"].(map[string]any)["name"] != "goose" {
		c.t.Fatalf("initialize result %v", r)
	}
}

func (c *rawClient) newSession() string {
	c.t.Helper()
	c.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":` + jsonString(c.t.TempDir()) + `,"mcpServers":[]}}`)
	_, res := c.recvUntilResponse(2)
	return res["result"].(map[string]any)["sessionId"].(string)
}

func TestServeHealthAndAuth(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil)
	defer s.Close()
	for _, p := range []string{"/status", "/health"} {
		resp, err := http.Get(s.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Errorf("%s = %d %q", p, resp.StatusCode, body)
		}
	}
	_, resp, err := dialServe(t, s, http.Header{"X-Secret-Key": {"nope"}}, "")
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong secret: err=%v resp=%v", err, resp)
	}
	if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
		t.Errorf("401 body = %q, want empty", b)
	}
	if _, resp, err := dialServe(t, s, http.Header{"Origin": {"https://evil.example"}, "X-Secret-Key": {s.Secret}}, ""); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Origin: err=%v", err)
	}
	c, resp, err := dialServe(t, s, nil, "?token="+s.Secret)
	if err != nil {
		t.Fatalf("?token= dial: %v", err)
	}
	if resp.Header.Get("acp-connection-id") == "" {
		t.Error("no acp-connection-id on the 101")
	}
	c.initialize(false)
	c.ws.Close()
	if s.Connections() != 1 {
		t.Errorf("connections = %d", s.Connections())
	}
	s.Close()
}

func TestServeWireErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil)
	defer s.Close()
	c, _, err := dialServe(t, s, http.Header{"X-Secret-Key": {s.Secret}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.send(`{"jsonrpc":"2.0","id":9,"method":"session/list","params":{}}`)
	if _, res := c.recvUntilResponse(9); res["error"] == nil {
		t.Error("request before initialize succeeded")
	}
	c.initialize(true)
	c.send(`{not json`)
	m := c.recv()
	if m["id"] != nil || m["error"].(map[string]any)["code"] != -32700.0 {
		t.Errorf("parse error frame = %v", m)
	}
	for i, method := range []string{"session/set_model", "session/resume", "_goose/unstable/nope"} {
		id := float64(10 + i)
		c.send(`{"jsonrpc":"2.0","id":` + jsonNum(id) + `,"method":"` + method + `","params":{"sessionId":"x"}}`)
		if _, res := c.recvUntilResponse(id); res["error"].(map[string]any)["code"] != -32601.0 {
			t.Errorf("%s: %v, want -32601", method, res)
		}
	}
	c.send(`{"jsonrpc":"2.0","id":20,"method":"session/prompt","params":{"sessionId":"20200101_1","prompt":[]}}`)
	if _, res := c.recvUntilResponse(20); res["error"].(map[string]any)["code"] != -32002.0 {
		t.Errorf("unknown session: %v, want -32002", res)
	}
	c.send(`{"jsonrpc":"2.0","id":21,"method":"session/new","params":{"cwd":"relative","mcpServers":[]}}`)
	if _, res := c.recvUntilResponse(21); res["error"].(map[string]any)["code"] != -32602.0 {
		t.Errorf("relative cwd: %v, want -32602", res)
	}
	s.FailMethod("session/list", -32603, "boom")
	c.send(`{"jsonrpc":"2.0","id":22,"method":"session/list","params":{}}`)
	if _, res := c.recvUntilResponse(22); res["error"].(map[string]any)["message"] != "boom" {
		t.Errorf("injected failure: %v", res)
	}
	c.ws.Close()
	s.Close()
}

func jsonString(v string) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonNum(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

var sessionIDRe = regexp.MustCompile(`^\d{8}_\d+$`)
var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func updateOf(m map[string]any) (method, kind string, u map[string]any) {
	method, _ = m["method"].(string)
	p, _ := m["params"].(map[string]any)
	u, _ = p["update"].(map[string]any)
	kind, _ = u["sessionUpdate"].(string)
	return method, kind, u
}

func TestServePromptWire(t *testing.T) {
	defer goleak.VerifyNone(t)
	script := Fixed(Reply{Steps: []Step{
		{Text: "a"}, {Text: "b"},
		{Tool: &ToolStep{ID: "toolu_1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "ok", NeedsApproval: true}},
		{Usage: &UsageStep{Input: 5, Output: 7}},
	}})
	for _, custom := range []bool{true, false} {
		s := NewServe(nil, WithServeScript(script))
		c, _, err := dialServe(t, s, http.Header{"X-Secret-Key": {s.Secret}}, "")
		if err != nil {
			t.Fatal(err)
		}
		c.initialize(custom)
		sid := c.newSession()
		if !sessionIDRe.MatchString(sid) {
			t.Errorf("session id %q", sid)
		}
		c.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"hi"}]}}`)
		var frames []map[string]any
		var res map[string]any
		for res == nil {
			m := c.recv()
			if m["method"] == "session/request_permission" {
				id, _ := m["id"].(string)
				if !uuidRe.MatchString(id) {
					t.Errorf("permission request id %v is not a UUID string", m["id"])
				}
				opts := m["params"].(map[string]any)["options"].([]any)
				if len(opts) != 4 {
					t.Errorf("options = %v", opts)
				}
				b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
				c.send(string(b))
			}
			if v, ok := m["id"].(float64); ok && v == 3 && m["method"] == nil {
				res = m
				break
			}
			frames = append(frames, m)
		}
		var kinds []string
		var msgIDs []string
		for _, f := range frames {
			method, kind, u := updateOf(f)
			if method == "_goose/unstable/session/update" && !custom {
				t.Errorf("custom notification sent without opt-in: %v", f)
			}
			if kind == "agent_message_chunk" {
				msgIDs = append(msgIDs, u["_meta"].(map[string]any)["goose"].(map[string]any)["messageId"].(string))
			}
			if kind == "tool_call" {
				if _, has := u["status"]; has {
					t.Errorf("first tool_call carries status: %v", u)
				}
			}
			if method == "session/request_permission" {
				kind = "request_permission"
			}
			kinds = append(kinds, kind)
		}
		// session/new's setup notifications follow its response (§2.6).
		want := "usage_update usage_update available_commands_update session_info_update agent_message_chunk agent_message_chunk tool_call request_permission tool_call_update message_usage session_info_update usage_update usage_update"
		if !custom {
			want = "usage_update available_commands_update session_info_update agent_message_chunk agent_message_chunk tool_call request_permission tool_call_update session_info_update usage_update"
		}
		if strings.Join(kinds, " ") != want {
			t.Errorf("custom=%v frames:\n got %s\nwant %s", custom, strings.Join(kinds, " "), want)
		}
		if len(msgIDs) != 2 || msgIDs[0] != msgIDs[1] {
			t.Errorf("chunk message ids %v, want one shared", msgIDs)
		}
		r := res["result"].(map[string]any)
		if r["stopReason"] != "end_turn" || r["usage"].(map[string]any)["totalTokens"] != 12.0 {
			t.Errorf("prompt result %v", r)
		}
		if p := s.Permissions(); len(p) != 1 || p[0].OptionID != "allow_once" {
			t.Errorf("permissions %v", p)
		}
		c.ws.Close()
		s.Close()
	}
}

// recordingConn keeps every byte read from the connection.
type recordingConn struct {
	net.Conn
	mu   sync.Mutex
	read []byte
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read = append(c.read, p[:n]...)
	c.mu.Unlock()
	return n, err
}

func TestServeDropMidFrame(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil, WithServeScript(Fixed(Reply{Steps: []Step{{Text: "a"}, {DropMidFrame: true}}})))
	defer s.Close()
	var rec *recordingConn
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			rec = &recordingConn{Conn: conn}
			return rec, nil
		}
		return nil, err
	}}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(s.URL, "http")+"/acp", http.Header{"X-Secret-Key": {s.Secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	c := &rawClient{t: t, ws: ws}
	c.initialize(false)
	sid := c.newSession()
	c.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"text","text":"hi"}]}}`)
	for {
		_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, data, err := ws.ReadMessage()
		if err == nil {
			if strings.Contains(string(data), `"id":3`) {
				t.Fatalf("the prompt was answered: %s", data)
			}
			continue
		}
		if !websocket.IsCloseError(err, websocket.CloseAbnormalClosure) {
			t.Fatalf("read error %v, want an abnormal closure", err)
		}
		break
	}
	// The last bytes are a text frame's header and half its payload.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	i := bytes.LastIndex(rec.read, []byte(`{"jsonrpc"`))
	var want int
	switch {
	case i >= 2 && rec.read[i-2] == 0x81 && rec.read[i-1] < 126:
		want = int(rec.read[i-1])
	case i >= 4 && rec.read[i-4] == 0x81 && rec.read[i-3] == 126:
		want = int(binary.BigEndian.Uint16(rec.read[i-2 : i]))
	default:
		t.Fatalf("no text frame header before the last frame: % x", rec.read[max(0, i-4):])
	}
	if got := len(rec.read) - i; got != want/2 {
		t.Fatalf("the last frame carries %d bytes of %d, want half: %s", got, want, rec.read[i:])
	}
}
