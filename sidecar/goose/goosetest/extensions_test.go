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
	c, _, err := dialServe(t, s, http.Header{"X-Secret-Key": {s.Secret}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.initialize(false)
	cwd := t.TempDir()
	c.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":` + jsonString(cwd) + `,"mcpServers":[]}}`)
	_, res := c.recvUntilResponse(2)
	sid := res["result"].(map[string]any)["sessionId"].(string)
	if got := extensionResults(t, res); !reflect.DeepEqual(got, ext.results) {
		t.Errorf("session/new extensionResults %+v, want %+v", got, ext.results)
	}

	other := t.TempDir()
	c.send(`{"jsonrpc":"2.0","id":3,"method":"session/load","params":{"sessionId":"` + sid + `","cwd":` + jsonString(other) + `,"mcpServers":[]}}`)
	_, res = c.recvUntilResponse(3)
	if got := extensionResults(t, res); !reflect.DeepEqual(got, ext.results) {
		t.Errorf("session/load extensionResults %+v, want %+v", got, ext.results)
	}
	if act, rel := ext.calls(); !reflect.DeepEqual(act, []string{sid + " " + cwd, sid + " " + other}) || len(rel) != 0 {
		t.Errorf("after new and load: activated %v, released %v", act, rel)
	}

	c.send(`{"jsonrpc":"2.0","id":4,"method":"session/delete","params":{"sessionId":"` + sid + `"}}`)
	if _, res := c.recvUntilResponse(4); res["error"] != nil {
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
	c, _, err := dialServe(t, s, http.Header{"X-Secret-Key": {s.Secret}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.initialize(false)
	cwd := t.TempDir()
	c.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":` + jsonString(cwd) + `,"mcpServers":[]}}`)
	_, res := c.recvUntilResponse(2)
	sid := res["result"].(map[string]any)["sessionId"].(string)
	if got := extensionResults(t, res); len(got) != 0 {
		t.Errorf("session/new extensionResults %+v, want []", got)
	}
	c.send(`{"jsonrpc":"2.0","id":3,"method":"session/load","params":{"sessionId":"` + sid + `","cwd":` + jsonString(cwd) + `,"mcpServers":[]}}`)
	_, res = c.recvUntilResponse(3)
	if got := extensionResults(t, res); len(got) != 0 {
		t.Errorf("session/load extensionResults %+v, want []", got)
	}
	c.ws.Close()
}
