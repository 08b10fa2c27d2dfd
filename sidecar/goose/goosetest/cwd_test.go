package goosetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestServeChecksCwdAsUpstream: goose's validate_absolute_cwd
// (crates/goose/src/acp/server.rs) runs on session/new and session/load;
// a cwd that is not an existing directory is -32602 "invalid directory
// path", and a load makes its cwd the session's working directory.
func TestServeChecksCwdAsUpstream(t *testing.T) {
	s := NewServe(t, WithServeSecret(""))
	c, _, err := dialServe(t, s, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	c.initialize(false)
	dir := t.TempDir()
	quote := func(v string) string { b, _ := json.Marshal(v); return string(b) }
	invalid := func(id float64, res map[string]any) {
		t.Helper()
		e, ok := res["error"].(map[string]any)
		if !ok || e["code"] != -32602.0 || e["data"] != "invalid directory path" {
			t.Fatalf("response %d = %v, want -32602 invalid directory path", int(id), res)
		}
	}

	c.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":` + quote(filepath.Join(dir, "missing")) + `,"mcpServers":[]}}`)
	_, res := c.recvUntilResponse(2)
	invalid(2, res)

	c.send(`{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":` + quote(dir) + `,"mcpServers":[]}}`)
	_, res = c.recvUntilResponse(3)
	sid := res["result"].(map[string]any)["sessionId"].(string)

	c.send(`{"jsonrpc":"2.0","id":4,"method":"session/load","params":{"sessionId":"` + sid + `","cwd":` + quote(filepath.Join(dir, "gone")) + `,"mcpServers":[]}}`)
	_, res = c.recvUntilResponse(4)
	invalid(4, res)

	moved := filepath.Join(dir, "moved")
	if err := os.Mkdir(moved, 0o750); err != nil {
		t.Fatal(err)
	}
	c.send(`{"jsonrpc":"2.0","id":5,"method":"session/load","params":{"sessionId":"` + sid + `","cwd":` + quote(moved) + `,"mcpServers":[]}}`)
	_, res = c.recvUntilResponse(5)
	if res["error"] != nil {
		t.Fatalf("load: %v", res)
	}
	if ss, _ := s.Session(sid); ss.WorkingDir != moved {
		t.Fatalf("working dir after load = %q, want %q", ss.WorkingDir, moved)
	}
}
