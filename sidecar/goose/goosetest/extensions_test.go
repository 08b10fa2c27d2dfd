package goosetest

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// recordingExtensions is a ServeExtensions that records what goose asked of it.
type recordingExtensions struct {
	mu        sync.Mutex
	activated []string // "sessionID cwd"
	released  []string
	results   []ExtensionResult
}

func (r *recordingExtensions) Activate(sessionID, cwd string) []ExtensionResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.activated = append(r.activated, sessionID+" "+cwd)
	return r.results
}

func (r *recordingExtensions) Release(sessionID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released = append(r.released, sessionID)
}

func (r *recordingExtensions) calls() (activated, released []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.activated...), append([]string(nil), r.released...)
}

// extensionResults decodes a session/new or session/load answer's
// _meta.extensionResults.
func extensionResults(t *testing.T, res map[string]any) []ExtensionResult {
	t.Helper()
	r, ok := res["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result: %v", res)
	}
	raw, ok := r["_meta"].(map[string]any)["extensionResults"]
	if !ok {
		t.Fatalf("no _meta.extensionResults: %v", r)
	}
	b, _ := json.Marshal(raw)
	var out []ExtensionResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out == nil {
		t.Fatalf("extensionResults %s is not a list", b)
	}
	return out
}

// initializedClient dials s with its secret and initializes the connection.
func initializedClient(t *testing.T, s *Serve) *rawClient {
	t.Helper()
	c, _, err := dialServe(t, s, http.Header{"X-Secret-Key": {s.Secret}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.initialize(false)
	return c
}

// call sends one request with params and returns its response.
func (c *rawClient) call(id int, method string, params map[string]any) map[string]any {
	c.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	c.send(string(b))
	_, res := c.recvUntilResponse(float64(id))
	return res
}

// TestServeExtensionsFollowTheSession: the extensions start at session/new
// and again at session/load (in the cwd each names), their results are in
// both answers' _meta, and session/delete stops them.
func TestServeExtensionsFollowTheSession(t *testing.T) {
	defer goleak.VerifyNone(t)
	ext := &recordingExtensions{results: []ExtensionResult{
		{Name: "tools", Success: true},
		{Name: "broken", Success: false, Error: "could not resolve command 'nope'"},
	}}
	s := NewServe(nil, WithServeExtensions(ext))
	defer s.Close()
	c := initializedClient(t, s)
	cwd, other := t.TempDir(), t.TempDir()
	res := c.call(2, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
	sid := res["result"].(map[string]any)["sessionId"].(string)
	if got := extensionResults(t, res); !reflect.DeepEqual(got, ext.results) {
		t.Errorf("session/new extensionResults %+v, want %+v", got, ext.results)
	}

	res = c.call(3, "session/load", map[string]any{"sessionId": sid, "cwd": other, "mcpServers": []any{}})
	if got := extensionResults(t, res); !reflect.DeepEqual(got, ext.results) {
		t.Errorf("session/load extensionResults %+v, want %+v", got, ext.results)
	}
	if act, rel := ext.calls(); !reflect.DeepEqual(act, []string{sid + " " + cwd, sid + " " + other}) || len(rel) != 0 {
		t.Errorf("after new and load: activated %v, released %v", act, rel)
	}

	if res := c.call(4, "session/delete", map[string]any{"sessionId": sid}); res["error"] != nil {
		t.Fatalf("session/delete: %v", res)
	}
	if _, rel := ext.calls(); !reflect.DeepEqual(rel, []string{sid}) {
		t.Errorf("after delete: released %v, want [%s]", rel, sid)
	}
	c.ws.Close()
}

// TestServeWithoutExtensions: goose always sends the list, empty when no
// extension is configured.
func TestServeWithoutExtensions(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewServe(nil)
	defer s.Close()
	c := initializedClient(t, s)
	cwd := t.TempDir()
	res := c.call(2, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
	sid := res["result"].(map[string]any)["sessionId"].(string)
	if got := extensionResults(t, res); len(got) != 0 {
		t.Errorf("session/new extensionResults %+v, want []", got)
	}
	res = c.call(3, "session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	if got := extensionResults(t, res); len(got) != 0 {
		t.Errorf("session/load extensionResults %+v, want []", got)
	}
	c.ws.Close()
}
