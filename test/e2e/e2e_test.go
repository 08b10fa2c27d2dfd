// Package e2e runs the operator on a real one-node cluster (kubelet +
// containerd) that hack/e2e/cluster.sh brings up: `make e2e` (needs root).
// Without E2E_KUBECONFIG every test skips, so `go test ./...` stays fast.
//
// The goose containers run the stand-in of test/e2e/cmd/goose (the fake
// servers of sidecar/goose/goosetest behind goose's command line and image
// layout); everything else is the real thing: the operator installed from
// dist/install.yaml (and the Helm chart), its images built from `make build`'s
// binaries with the Dockerfile's user and entrypoint, the kubelet, the
// scheduler, the garbage collector, kube-proxy, CoreDNS and a dynamic
// storage provisioner.
package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

const (
	operatorNS     = "goose-operator-system"
	managerDeploy  = "goose-operator-controller-manager"
	leaderLease    = "goose-operator.agents.adk2goose.dev"
	metricsService = "goose-operator-controller-manager-metrics-service"
	samplesNS      = "e2e-samples"
)

// TestE2E runs the cases in order against one install from dist/install.yaml.
func TestE2E(t *testing.T) {
	e := newEnv(t)
	t.Run("install", func(t *testing.T) { timed(t); e.installManifest(t) })
	if t.Failed() {
		return
	}
	e.namespace(t, samplesNS, nil)
	t.Run("1-samples", func(t *testing.T) { timed(t); e.samples(t) })
	var pod string
	t.Run("2-chat", func(t *testing.T) { timed(t); pod = e.chatThroughService(t) })
	if pod != "" {
		t.Run("3-secret-roll", func(t *testing.T) { timed(t); e.secretRoll(t, pod) })
		t.Run("4-pod-deletion", func(t *testing.T) { timed(t); e.podDeletion(t, pod) })
		t.Run("5-two-replicas", func(t *testing.T) { timed(t); e.twoReplicas(t, pod) })
		t.Run("9-runtime-mcp", func(t *testing.T) { timed(t); e.runtimeMCP(t, pod) })
		t.Run("10-live", func(t *testing.T) { timed(t); e.liveConversation(t, pod) })
	}
	t.Run("10-identity", func(t *testing.T) { timed(t); e.identity(t) })
	t.Run("6-restricted", func(t *testing.T) { timed(t); e.restricted(t) })
	t.Run("11-park", func(t *testing.T) { timed(t); e.park(t) })
	t.Run("8-invalid-spec", func(t *testing.T) { timed(t); e.invalidSpec(t) })
	t.Run("7-delete", func(t *testing.T) { timed(t); e.deleteAgent(t) })
	t.Run("uninstall", func(t *testing.T) { timed(t); e.uninstallManifest(t) })
}

// installManifest installs the operator as the README tells users to, and
// checks the manager's probes, leader election and secured metrics.
func (e *env) installManifest(t *testing.T) {
	e.mustKubectl(t, "", "apply", "--server-side", "-f", e.root+"/dist/install.yaml")
	e.waitManager(t)
}

func (e *env) waitManager(t *testing.T) {
	t.Helper()
	var pod corev1.Pod
	poll.Within(t, 3*time.Minute, "manager pod Ready (its readiness probe)", func() error {
		var pl corev1.PodList
		// Not t.Context(): cases wait for the manager in their cleanups too,
		// when it is already cancelled.
		if err := e.c.List(context.Background(), &pl, client.InNamespace(operatorNS), client.MatchingLabels{"app.kubernetes.io/component": "manager"}); err != nil {
			return err
		}
		for _, p := range pl.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d manager pods, none ready: %s", len(pl.Items), podsState(pl.Items))
	})
	poll.Within(t, time.Minute, "leader election Lease held by the manager pod", func() error {
		var l coordinationv1.Lease
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: operatorNS, Name: leaderLease}, &l); err != nil {
			return err
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return notYet(strings.HasPrefix(holder, pod.Name+"_"), "holder "+holder)
	})
	if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
		t.Errorf("the manager pod has no service account token")
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "manager" && (c.LivenessProbe == nil || c.ReadinessProbe == nil) {
			t.Errorf("the manager container lacks a liveness or readiness probe")
		}
	}
	t.Logf("manager pod %s Ready and leader", pod.Name)
}

func podsState(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "%s %s; ", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil {
				fmt.Fprintf(&b, "%s waiting %s %s; ", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			}
		}
	}
	return b.String()
}

// metrics reads the manager's metrics endpoint from a pod, as Prometheus
// would: HTTPS with a ServiceAccount token bound to the metrics-reader role.
func (e *env) managerMetrics(t *testing.T, ns, pod string) {
	t.Helper()
	e.mustKubectl(t, "", "-n", ns, "create", "serviceaccount", "metrics-client")
	e.mustKubectl(t, "", "create", "clusterrolebinding", "e2e-metrics-client", "--clusterrole=goose-operator-metrics-reader", "--serviceaccount="+ns+":metrics-client")
	t.Cleanup(func() {
		_, _ = e.kubectl(t, "", "delete", "clusterrolebinding", "e2e-metrics-client", "--ignore-not-found")
	})
	tok := strings.TrimSpace(e.mustKubectl(t, "", "-n", ns, "create", "token", "metrics-client"))
	url := fmt.Sprintf("https://%s.%s.svc:8443/metrics", metricsService, operatorNS)
	var body string
	poll.Within(t, time.Minute, "manager metrics over HTTPS with a reader's token", func() error {
		out, err := e.kubectl(t, "", "-n", ns, "exec", pod, "--", "client", "get", "-insecure", "-url", url, "-token", tok)
		if err != nil {
			return err
		}
		body = out
		return nil
	})
	if !strings.Contains(body, "controller_runtime_reconcile_total{controller=\"gooseagent\"") {
		t.Errorf("the manager's metrics lack controller_runtime_reconcile_total for gooseagent:\n%.2000s", body)
	}
	// Without a token the endpoint refuses: the metrics are really protected.
	if _, err := e.kubectl(t, "", "-n", ns, "exec", pod, "--", "client", "get", "-insecure", "-url", url); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("metrics without a token: want HTTP 401, got %v", err)
	}
}

// samples is case 1: every sample applies and becomes Ready.
func (e *env) samples(t *testing.T) {
	// What the samples' comments tell users to create first.
	e.mustKubectl(t, "", "-n", samplesNS, "create", "secret", "generic", "openai", "--from-literal=api-key=sk-e2e-1")
	e.mustKubectl(t, "", "-n", samplesNS, "create", "secret", "generic", "anthropic", "--from-literal=api-key=sk-ant-e2e")
	e.mustKubectl(t, "", "-n", samplesNS, "create", "secret", "generic", "tickets-mcp", "--from-literal=authorization=Bearer e2e")
	e.mustKubectl(t, "", "-n", samplesNS, "create", "configmap", "reviewer-prompt", "--from-literal=instructions.md=Review carefully.")
	kust, err := os.ReadFile(e.root + "/config/samples/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for l := range strings.SplitSeq(string(kust), "\n") {
		if f, ok := strings.CutPrefix(l, "- "); ok {
			files = append(files, f)
		}
	}
	var withRuntimes []string
	for _, f := range files {
		b, err := os.ReadFile(e.root + "/config/samples/" + f)
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"-n", samplesNS, "apply", "--server-side", "-f", e.root + "/config/samples/" + f}
		// The samples' spec.runtimes name public images, which the kubelet
		// would pull (no packet may leave this machine); the API server still
		// admits them. Case 9 runs spec.runtimes with a local image.
		if strings.Contains(string(b), "\n  runtimes:") {
			args = append(args, "--dry-run=server")
			withRuntimes = append(withRuntimes, f)
		}
		e.mustKubectl(t, "", args...)
	}
	if len(withRuntimes) > 0 {
		t.Logf("admitted by a server-side dry run only (their spec.runtimes images would be pulled from a registry): %v", withRuntimes)
	}
	out := e.mustKubectl(t, "", "-n", samplesNS, "get", "gooseagents", "-o", "jsonpath={.items[*].metadata.name}")
	list := strings.Fields(out)
	if want := len(files) - len(withRuntimes); len(list) != want {
		t.Fatalf("want the %d samples of config/samples, got %v", want, list)
	}
	start := time.Now()
	var running []string
	podOf := map[string]string{}
	for _, name := range list {
		pods := e.waitAgentReady(t, samplesNS, name, 1)
		t.Logf("%s: pod %s Ready %s after apply", name, pods[0].Name, time.Since(start).Round(100*time.Millisecond))
		sidecarBeforeGoose(t, &pods[0])
		running = append(running, name)
		podOf[name] = pods[0].Name
	}
	// The sidecar gives the Go runtime 90% of its container's memory limit
	// (the openai sample's 512Mi), as the node's cgroup reports it.
	if pod := podOf["openai-coder"]; pod != "" {
		limit := float64(512 << 20)
		want := strconv.FormatUint(uint64(limit*0.9), 10)
		logs := e.mustKubectl(t, "", "-n", samplesNS, "logs", pod, "-c", "adk2goose")
		if !strings.Contains(logs, "GOMEMLIMIT") || !strings.Contains(logs, want) {
			t.Errorf("openai-coder's sidecar did not set GOMEMLIMIT=%s from its 512Mi limit; its log:\n%s", want, logs)
		}
	} else {
		t.Error("the openai sample is not running: the sidecar's memory limit went unchecked")
	}
	// The manager reaches every sidecar's /stats over the pod network.
	for _, name := range running {
		poll.Within(t, 2*time.Minute, name+" StatsAvailable", func() error {
			st, why := conditionStatus(e.agent(t, samplesNS, name), "StatsAvailable")
			return notYet(st == "True", st+" "+why)
		})
	}
	table := e.mustKubectl(t, "", "-n", samplesNS, "get", "gooseagents")
	t.Logf("kubectl get gooseagents:\n%s", table)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	for _, c := range []string{"NAME", "READY", "MODEL", "SESSIONS", "TOKENS"} {
		if !slices.Contains(strings.Fields(lines[0]), c) {
			t.Fatalf("kubectl get gooseagents has no %s column: %q", c, lines[0])
		}
	}
	for _, l := range lines[1:] {
		f := tableRow(lines[0], l)
		a := e.agent(t, samplesNS, f["NAME"])
		if f["READY"] != "True" || f["MODEL"] != a.Spec.Provider.Model || f["SESSIONS"] != "0" || f["TOKENS"] != "0" {
			t.Errorf("row %q: want Ready True, model %s, 0 sessions and 0 tokens", l, a.Spec.Provider.Model)
		}
	}
}

// sidecarBeforeGoose checks the native sidecar ran before goose started.
func sidecarBeforeGoose(t *testing.T, p *corev1.Pod) {
	t.Helper()
	var sidecar, goose *corev1.ContainerStatus
	for i, cs := range p.Status.InitContainerStatuses {
		if cs.Name == "adk2goose" {
			sidecar = &p.Status.InitContainerStatuses[i]
		}
	}
	for i, cs := range p.Status.ContainerStatuses {
		if cs.Name == "goose" {
			goose = &p.Status.ContainerStatuses[i]
		}
	}
	if sidecar == nil || goose == nil || sidecar.State.Running == nil || goose.State.Running == nil {
		t.Errorf("pod %s: want adk2goose (init, restartPolicy Always) and goose both running", p.Name)
		return
	}
	if goose.State.Running.StartedAt.Before(&sidecar.State.Running.StartedAt) {
		t.Errorf("pod %s: goose started at %s, before the sidecar (%s)", p.Name, goose.State.Running.StartedAt, sidecar.State.Running.StartedAt)
	}
	if sidecar.Started == nil || !*sidecar.Started {
		t.Errorf("pod %s: the sidecar is not marked started", p.Name)
	}
}

// chatThroughService is case 2: ADK REST and A2A through the Service from a
// pod, then the status shows that chat's sessions and tokens. It returns the
// client pod for the next cases.
func (e *env) chatThroughService(t *testing.T) string {
	const name = "minimal"
	pod := e.clientPod(t, samplesNS)
	e.managerMetrics(t, samplesNS, pod)
	a := e.agent(t, samplesNS, name)
	url := a.Status.Endpoints.REST
	if !strings.HasPrefix(url, "http://"+name+"."+samplesNS+".svc") {
		t.Fatalf("status.endpoints.rest = %q", url)
	}
	tok := e.token(t, samplesNS, name)
	rest, err := e.chat(t, samplesNS, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "case2", "-create", "-text", "hello over REST")
	if err != nil {
		t.Fatalf("REST chat through the Service: %v", err)
	}
	if !strings.Contains(rest.Text, "echo: hello over REST") || rest.gooseSession() == "" || rest.TotalTokens <= 0 {
		t.Errorf("REST reply %+v: want the echo, a goose session and tokens", rest)
	}
	a2a, err := e.chat(t, samplesNS, pod, "a2a", "-url", url, "-token", tok, "-text", "hello over A2A")
	if err != nil {
		t.Fatalf("A2A chat through the Service: %v", err)
	}
	if !strings.Contains(a2a.Text, "echo: hello over A2A") {
		t.Errorf("A2A reply %+v: want the echo", a2a)
	}
	// Found on the real node: adk-go's stock card provider refuses the agent's
	// plain-http in-cluster card (http is trusted on loopback only), which
	// the demo on 127.0.0.1 never showed. README documents the provider above.
	if _, err := e.chat(t, samplesNS, pod, "a2a", "-stock-card-provider", "-url", url, "-token", tok, "-text", "x"); err == nil ||
		!strings.Contains(err.Error(), "untrusted agent card interface") {
		t.Errorf("remoteagent.NewAgentCardProvider on the in-cluster URL: want adk-go's untrusted-interface refusal, got %v", err)
	}
	// Without the token the sidecar refuses: auth is on through the Service too.
	if _, err := e.chat(t, samplesNS, pod, "rest", "-url", url, "-app", name, "-session", "nope", "-create"); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("a request without the token: want HTTP 401, got %v", err)
	}

	// The REST client saw its turn's usage; A2A's remote agent may not carry it,
	// so the status must hold at least the REST tokens plus A2A's input.
	poll.Within(t, 2*time.Minute, "status shows the chat's 2 sessions and its tokens", func() error {
		a := e.agent(t, samplesNS, name)
		s, tk := a.Status.Sessions.Total, a.Status.Tokens.Total
		st, why := conditionStatus(a, "StatsAvailable")
		return notYet(s == 2 && tk >= rest.TotalTokens+a2a.TotalTokens && tk > rest.TotalTokens,
			fmt.Sprintf("sessions %d tokens %d (REST turn %d, A2A turn %d); StatsAvailable=%s %s", s, tk, rest.TotalTokens, a2a.TotalTokens, st, why))
	})
	t.Logf("kubectl get gooseagent %s:\n%s", name, e.mustKubectl(t, "", "-n", samplesNS, "get", "gooseagent", name))
	return pod
}

// invalidSpec is case 8: the real API server rejects a bad spec naming the field.
func (e *env) invalidSpec(t *testing.T) {
	_, err := e.kubectl(t, `apiVersion: agents.adk2goose.dev/v1alpha1
kind: GooseAgent
metadata: {name: invalid, namespace: `+samplesNS+`}
spec:
  provider: {name: openai, model: gpt-4o}
  mode: yolo
`, "apply", "--server-side", "-f", "-")
	if err == nil {
		t.Fatal("a GooseAgent with mode yolo was accepted")
	}
	if !strings.Contains(err.Error(), "spec.mode") || !strings.Contains(err.Error(), "yolo") {
		t.Errorf("the rejection does not name spec.mode and the value: %v", err)
	}
	t.Logf("rejected as expected: %v", err)
}

// deleteAgent is case 7: the garbage collector removes the children; the
// claims stay.
func (e *env) deleteAgent(t *testing.T) {
	const name = "minimal"
	a := e.agent(t, samplesNS, name)
	var claims corev1.PersistentVolumeClaimList
	if err := e.c.List(t.Context(), &claims, client.InNamespace(samplesNS)); err != nil {
		t.Fatal(err)
	}
	var claim *corev1.PersistentVolumeClaim
	for i, c := range claims.Items {
		if c.Name == "data-"+name+"-0" {
			claim = &claims.Items[i]
		}
	}
	if claim == nil || claim.Status.Phase != corev1.ClaimBound {
		t.Fatalf("want the Bound claim data-%s-0 (local-path provisioner), have %v", name, claims.Items)
	}
	if err := e.c.Delete(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	children := []client.Object{
		&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.Secret{}, &corev1.ConfigMap{},
	}
	names := map[client.Object][]string{
		children[0]: {name}, children[1]: {name, name + "-headless"}, children[2]: {name + "-adk2goose"}, children[3]: {name + "-goose-config"},
	}
	poll.Within(t, 2*time.Minute, "the garbage collector removes the agent's children and pods", func() error {
		for _, obj := range children {
			for _, n := range names[obj] {
				err := e.c.Get(t.Context(), client.ObjectKey{Namespace: samplesNS, Name: n}, obj)
				if !apierrors.IsNotFound(err) {
					return fmt.Errorf("%T %s still there (%v)", obj, n, err)
				}
			}
		}
		pods, err := e.agentPods(t, samplesNS, name)
		if err != nil || len(pods) > 0 {
			return fmt.Errorf("%d pods left (%v)", len(pods), err)
		}
		return nil
	})
	var after corev1.PersistentVolumeClaim
	if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(claim), &after); err != nil {
		t.Fatalf("the claim %s is gone after deleting the GooseAgent (README: claims stay): %v", claim.Name, err)
	}
	if after.UID != claim.UID || after.DeletionTimestamp != nil {
		t.Errorf("the claim %s was replaced or is being deleted", claim.Name)
	}
}

// uninstallManifest removes the operator the way the README says.
func (e *env) uninstallManifest(t *testing.T) {
	// The agents go first, while the manager still runs.
	e.mustKubectl(t, "", "delete", "namespace", samplesNS, "--ignore-not-found", "--wait=true", "--timeout=2m")
	e.mustKubectl(t, "", "delete", "--ignore-not-found", "--wait=true", "--timeout=2m", "-f", e.root+"/dist/install.yaml")
}

// tableRow reads a row of kubectl's table by the header's column offsets:
// a column whose value is absent (such as PARKED for an agent that never
// parks) is blank there, so splitting on spaces would shift the rest.
func tableRow(header, row string) map[string]string {
	out := map[string]string{}
	names := strings.Fields(header)
	at := 0
	starts := make([]int, len(names))
	for i, n := range names {
		starts[i] = at + strings.Index(header[at:], n)
		at = starts[i] + len(n)
	}
	for i, n := range names {
		end := len(row)
		if i+1 < len(names) && starts[i+1] < end {
			end = starts[i+1]
		}
		if starts[i] < len(row) {
			out[n] = strings.TrimSpace(row[starts[i]:end])
		}
	}
	return out
}
