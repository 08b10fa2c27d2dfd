package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHelm installs the operator from the Helm chart instead (after TestE2E
// removed the dist/install.yaml install): the manager comes up with its
// probes, leader election and RBAC, and an agent answers a chat.
func TestHelm(t *testing.T) {
	e := newEnv(t)
	timed(t)
	if e.helm == "" {
		t.Fatal("E2E_HELM is not set (make e2e builds helm into bin/)")
	}
	const ns, name = "e2e-helm", "minimal"
	helm := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := run(ctx, "", e.helm, append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	helm("install", "goose-operator", e.root+"/charts/goose-operator", "-n", operatorNS, "--create-namespace")
	t.Cleanup(func() {
		_, _ = e.kubectl(t, "", "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=2m")
		helm("uninstall", "goose-operator", "-n", operatorNS, "--wait")
		// Helm never deletes the CRDs of a chart's crds/ directory.
		_, _ = e.kubectl(t, "", "delete", "crd", "gooseagents.agents.adk2goose.dev", "--ignore-not-found")
		_, _ = e.kubectl(t, "", "delete", "namespace", operatorNS, "--ignore-not-found")
	})
	e.waitManager(t)

	e.namespace(t, ns, nil)
	e.mustKubectl(t, "", "-n", ns, "apply", "--server-side", "-f", e.root+"/config/samples/agents_v1alpha1_gooseagent_minimal.yaml")
	e.waitAgentReady(t, ns, name, 1)
	pod := e.clientPod(t, ns)
	url, tok := e.agent(t, ns, name).Status.Endpoints.REST, e.token(t, ns, name)
	r, err := e.chat(t, ns, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "helm", "-create", "-text", "hello from the chart")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Text, "echo: hello from the chart") {
		t.Errorf("reply %+v", r)
	}
}
