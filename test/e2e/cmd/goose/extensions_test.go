package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/test/e2e/mcpserver"
)

// mcpServerCmd is the command the runtime image provides.
const mcpServerCmd = "e2e-mcp-server"

// TestMain: started under mcpServerCmd's name, the test binary is the e2e MCP
// server, so the tests start a real stdio server found on PATH, as goose does
// in the pod.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == mcpServerCmd {
		if err := mcpserver.New().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadExtensionsLayers: later layers override earlier ones field by
// field within an extension, add extensions, and missing files are skipped.
func TestLoadExtensionsLayers(t *testing.T) {
	dir := t.TempDir()
	system := writeFile(t, dir+"/etc/config.yaml", `
GOOSE_MODEL: a
extensions:
  tools: {enabled: true, type: stdio, name: tools, cmd: one, args: [a], timeout: 30}
  fetch: {enabled: true, type: stdio, name: fetch, cmd: uvx}
`)
	extra := writeFile(t, dir+"/extra/config.yaml", `
extensions:
  tools: {args: [b, c]}
  fetch: {enabled: false}
`)
	user := writeFile(t, dir+"/user/config.yaml", `
extensions:
  mine: {enabled: true, type: stdio, cmd: mine, envs: {K: v}, env_keys: [SECRET]}
  off: {enabled: true, type: stdio, cmd: off}
`)
	got, err := loadExtensions([]string{dir + "/missing.yaml", system, extra, user})
	if err != nil {
		t.Fatal(err)
	}
	timeout := int64(30)
	want := map[string]extensionConfig{
		"tools": {Enabled: true, Type: "stdio", Name: "tools", Cmd: "one", Args: []string{"b", "c"}, Timeout: &timeout},
		"fetch": {Enabled: false, Type: "stdio", Name: "fetch", Cmd: "uvx"},
		"mine":  {Enabled: true, Type: "stdio", Name: "mine", Cmd: "mine", Envs: map[string]string{"K": "v"}, EnvKeys: []string{"SECRET"}},
		// YAML 1.2 like goose's serde_yaml: off is a string, not false.
		"off": {Enabled: true, Type: "stdio", Name: "off", Cmd: "off"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged extensions\n got %+v\nwant %+v", got, want)
	}

	bad := writeFile(t, dir+"/bad.yaml", "extensions: [not, a, map]\n")
	if got, err := loadExtensions([]string{system, bad}); err == nil || !strings.Contains(err.Error(), bad) || len(got) != 2 {
		t.Errorf("a broken layer: want an error naming it and the other layers' extensions, got %v, %v", got, err)
	}
}

func TestResolveCommand(t *testing.T) {
	home, other := t.TempDir(), t.TempDir()
	for _, d := range []string{home + "/.local/bin", home + "/.npm-global/bin", other} {
		writeFile(t, d+"/tool", "#!/bin/sh\n")
		if err := os.Chmod(d+"/tool", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, other+"/npx", "#!/bin/sh\n")
	if err := os.Chmod(other+"/npx", 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, other+"/plain", "not executable")
	for _, tc := range []struct{ cmd, want, err string }{
		// ~/.local/bin comes before goose's PATH.
		{"tool", home + "/.local/bin/tool", ""},
		{"npx", other + "/npx", ""},
		{"/abs/path/server", "/abs/path/server", ""},
		{"plain", "", "could not resolve command 'plain'"},
		{"missing", "", "could not resolve command 'missing'"},
	} {
		got, err := resolveCommand(tc.cmd, home, other)
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("resolveCommand(%q) = %q, %v; want %q, %q", tc.cmd, got, err, tc.want, tc.err)
		}
	}
	if got := searchPath(home, "/a:/b", false); !reflect.DeepEqual(got, []string{home + "/.local/bin", "/usr/local/bin", "/a", "/b"}) {
		t.Errorf("the extension's PATH %v", got)
	}
}

func TestNameToKey(t *testing.T) {
	for in, want := range map[string]string{"GitHub": "github", "My Tools": "mytools", "a.b/c": "a_b_c", "e2e-tools_1": "e2e-tools_1"} {
		if got := nameToKey(in); got != want {
			t.Errorf("nameToKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestActivateStartsStdioExtensions starts the e2e MCP server as a stdio
// extension found on PATH (the way a runtime's bin directory provides it),
// lists and calls its tools through the script, and stops it.
func TestActivateStartsStdioExtensions(t *testing.T) {
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	runtimeBin := dir + "/runtime/bin"
	if err := os.MkdirAll(runtimeBin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, runtimeBin+"/"+mcpServerCmd); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", runtimeBin+string(filepath.ListSeparator)+os.Getenv("PATH"))
	t.Setenv("HOME", dir+"/home")
	t.Setenv("E2E_SECRET", "s3cret")
	cfg := writeFile(t, dir+"/config.yaml", `
extensions:
  tools: {enabled: true, type: stdio, name: E2E Tools, cmd: `+mcpServerCmd+`, args: [], envs: {GREETING: hi}, env_keys: [E2E_SECRET], timeout: 30}
  missing: {enabled: true, type: stdio, name: missing, cmd: no-such-mcp-server}
  off: {enabled: false, type: stdio, name: off, cmd: `+mcpServerCmd+`}
  developer: {enabled: true, type: platform, name: developer}
`)
	workDir := t.TempDir()
	host := newExtensionHost([]string{cfg})
	defer host.Close()

	results := host.Activate("s1", workDir)
	if len(results) != 2 || results[0].Name != "missing" || results[0].Success ||
		!strings.Contains(results[0].Error, "could not resolve command 'no-such-mcp-server'") ||
		results[1] != (goosetest.ExtensionResult{Name: "E2E Tools", Success: true}) {
		t.Fatalf("extension results %+v: want missing failed, E2E Tools started", results)
	}
	wantTools := []string{"e2etools__echo", "e2etools__process_info"}
	if got := host.Tools("s1"); !reflect.DeepEqual(got, wantTools) {
		t.Errorf("tools %v, want %v", got, wantTools)
	}

	script := newScript(host, "pod-1")
	if got := replyText(script("s1", "list tools")); !strings.HasPrefix(got, "tools: e2etools__echo, e2etools__process_info [pod=pod-1 goose-session=s1]") {
		t.Errorf("list tools: %q", got)
	}
	tool := toolOf(t, script("s1", `call e2etools__process_info {"env":["GREETING","E2E_SECRET","AGENT_SESSION_ID","PATH"]}`))
	out, isErr := tool.Run()
	if isErr {
		t.Fatalf("process_info failed: %s", out)
	}
	var info mcpserver.ProcessInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("process_info output %q: %v", out, err)
	}
	wantPath := strings.Join(searchPath(dir+"/home", os.Getenv("PATH"), false), string(filepath.ListSeparator))
	if info.Command != runtimeBin+"/"+mcpServerCmd || info.WorkingDir != workDir ||
		!reflect.DeepEqual(info.Env, map[string]string{"GREETING": "hi", "E2E_SECRET": "s3cret", "AGENT_SESSION_ID": "s1", "PATH": wantPath}) {
		t.Errorf("the server ran as %+v; want command %s in %s with envs, env_keys, AGENT_SESSION_ID and goose's search path", info, runtimeBin+"/"+mcpServerCmd, workDir)
	}
	if out, isErr := toolOf(t, script("s1", `call e2etools__echo {"text":"ping"}`)).Run(); isErr || !strings.Contains(out, `"ping"`) {
		t.Errorf("echo: %q (error %v)", out, isErr)
	}
	if out, isErr := host.Call("s1", "other__echo", nil); !isErr || !strings.Contains(out, "not found") {
		t.Errorf("a tool of no extension: %q (error %v)", out, isErr)
	}

	// A second activation (session/load) replaces the extensions.
	if r := host.Activate("s1", workDir); len(r) != 2 || !r[1].Success {
		t.Fatalf("second activation %+v", r)
	}
	host.Release("s1")
	if got := host.Tools("s1"); len(got) != 0 {
		t.Errorf("tools after Release: %v", got)
	}
	if got := replyText(script("s1", "list tools")); !strings.HasPrefix(got, "tools: none") {
		t.Errorf("list tools after Release: %q", got)
	}
}

func replyText(r goosetest.Reply) string {
	var b strings.Builder
	for _, s := range r.Steps {
		b.WriteString(s.Text)
	}
	return b.String()
}

func toolOf(t *testing.T, r goosetest.Reply) *goosetest.ToolStep {
	t.Helper()
	for _, s := range r.Steps {
		if s.Tool != nil {
			if s.Tool.Run == nil {
				t.Fatalf("tool step %+v does not run the tool", s.Tool)
			}
			return s.Tool
		}
	}
	t.Fatalf("no tool step in %+v", r)
	return nil
}
