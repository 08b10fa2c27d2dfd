package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/adk2goose/goose-operator/test/e2e/mcpserver"
)

// runtimeImage is the e2e runtime image (hack/e2e/images RuntimeRef): the
// e2e MCP server as usr/local/bin/e2e-mcp-server, laid out like the node image.
const runtimeImage = "e2e.local/mcp-runtime:1"

// runtimeMCP is case 9: a stdio extension whose command comes from
// spec.runtimes. The runtime image is mounted into the goose container as a
// Kubernetes image volume (containerd 2.x), goose starts the MCP server from
// the runtime's bin directory on its PATH, and a chat through the Service
// lists the server's tools and calls one.
func (e *env) runtimeMCP(t *testing.T, pod string) {
	const name, runtime, ext = "runtime-mcp", "e2e-mcp", "e2etools"
	e.mustKubectl(t, fmt.Sprintf(`apiVersion: agents.adk2goose.dev/v1alpha1
kind: GooseAgent
metadata: {name: %s, namespace: %s}
spec:
  provider: {name: ollama, model: qwen3:8b, baseURL: "http://ollama.ollama.svc.cluster.local:11434"}
  runtimes:
  - name: %s
    image: %s
    imagePullPolicy: Never
    subPath: usr/local
    commands: [e2e-mcp-server]
  extensions:
  - name: %s
    type: stdio
    cmd: e2e-mcp-server
    env: [{name: E2E_GREETING, value: hello-from-the-spec}]
`, name, samplesNS, runtime, runtimeImage, ext), "apply", "--server-side", "-f", "-")
	pods := e.waitAgentReady(t, samplesNS, name, 1)
	var vol *corev1.Volume
	for i, v := range pods[0].Spec.Volumes {
		if v.Image != nil {
			vol = &pods[0].Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Image.Reference != runtimeImage {
		t.Fatalf("pod %s has no image volume of %s: %+v", pods[0].Name, runtimeImage, pods[0].Spec.Volumes)
	}

	url := e.agent(t, samplesNS, name).Status.Endpoints.REST
	tok := e.token(t, samplesNS, name)
	chat := func(text string, more ...string) turn {
		t.Helper()
		args := append([]string{"rest", "-url", url, "-token", tok, "-app", name, "-session", "case9", "-text", text}, more...)
		r, err := e.chat(t, samplesNS, pod, args...)
		if err != nil {
			t.Fatalf("chat %q: %v", text, err)
		}
		return r
	}
	// goose names an extension's tools <extension>__<tool>.
	var want []string
	for _, tool := range mcpserver.ToolNames() {
		want = append(want, ext+"__"+tool)
	}
	listed := chat("list tools", "-create")
	if !strings.Contains(listed.Text, "tools: "+strings.Join(want, ", ")) {
		t.Fatalf("list tools answered %q; want the MCP server's tools %v", listed.Text, want)
	}
	t.Logf("list tools: %s", listed.Text)

	called := chat(`call ` + ext + `__process_info {"env":["E2E_GREETING","AGENT_SESSION_ID","PATH"]}`)
	if len(called.Tools) != 1 || called.Tools[0].Error != "" {
		t.Fatalf("the process_info call: want one successful tool call, got %+v (text %q)", called.Tools, called.Text)
	}
	var info mcpserver.ProcessInfo
	if err := json.Unmarshal([]byte(called.Tools[0].Output), &info); err != nil {
		t.Fatalf("process_info output %q: %v", called.Tools[0].Output, err)
	}
	bin := "/opt/goose-runtimes/" + runtime + "/bin"
	if info.Command != bin+"/e2e-mcp-server" {
		t.Errorf("goose started the MCP server as %q, want it from the runtime's bin directory %s", info.Command, bin)
	}
	if info.Env["E2E_GREETING"] != "hello-from-the-spec" || info.Env["AGENT_SESSION_ID"] != called.gooseSession() ||
		!strings.Contains(info.Env["PATH"], bin) {
		t.Errorf("the MCP server's environment %v: want the extension's env, goose session %s and the runtime's bin on PATH", info.Env, called.gooseSession())
	}
	t.Logf("process_info: %+v", info)
}
