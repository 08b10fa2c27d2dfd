package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// clientImage is the image of the client pods (hack/e2e/images ClientRef).
const clientImage = "e2e.local/client:1"

// env is the cluster the suite runs against (hack/e2e/run.sh sets it up).
type env struct {
	kubeconfig, kubectlBin, helm, root string
	c                                  client.Client
}

var (
	timingsMu sync.Mutex
	timings   []timing
)

type timing struct {
	name string
	took time.Duration
}

// timed records how long a case took, for the table TestMain prints.
func timed(t *testing.T) {
	t.Helper()
	start := time.Now()
	t.Cleanup(func() {
		d := time.Since(start).Round(100 * time.Millisecond)
		t.Logf("%s took %s", t.Name(), d)
		timingsMu.Lock()
		timings = append(timings, timing{t.Name(), d})
		timingsMu.Unlock()
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	timingsMu.Lock()
	if len(timings) > 0 {
		fmt.Println("\ne2e timings")
		fmt.Printf("  %-60s %10s\n", "case", "took")
		for _, tm := range timings {
			fmt.Printf("  %-60s %10s\n", tm.name, tm.took)
		}
	}
	timingsMu.Unlock()
	os.Exit(code)
}

// newEnv skips the test unless E2E_KUBECONFIG names a cluster to use.
func newEnv(t *testing.T) *env {
	t.Helper()
	kc := os.Getenv("E2E_KUBECONFIG")
	if kc == "" {
		t.Skip("E2E_KUBECONFIG is not set: run `make e2e` (needs root; see README)")
	}
	e := &env{kubeconfig: kc, kubectlBin: os.Getenv("E2E_KUBECTL"), helm: os.Getenv("E2E_HELM")}
	if e.kubectlBin == "" {
		e.kubectlBin = "kubectl"
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	e.root = root
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("failed to load %s: %v", kc, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := agentsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if e.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatalf("failed to create client: %v", err)
	}
	return e
}

// run runs a command with stdin and returns stdout; the error carries stderr.
func run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// kubectl runs kubectl against the cluster.
func (e *env) kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	// Not t.Context(): cleanups run kubectl after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return run(ctx, stdin, e.kubectlBin, append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
}

func (e *env) mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := e.kubectl(t, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// notYet is nil when ok, else an error saying why not, for poll's conditions.
func notYet(ok bool, why string) error {
	if ok {
		return nil
	}
	return errors.New(why)
}

// namespace creates a namespace with labels for the test and deletes it
// afterwards (without waiting).
func (e *env) namespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{}
	ns.Name, ns.Labels = name, labels
	if err := e.c.Create(t.Context(), ns); err != nil {
		t.Fatalf("failed to create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if os.Getenv("E2E_KEEP") != "1" {
			_ = e.c.Delete(context.Background(), ns)
		}
	})
}

// agent returns the GooseAgent ns/name.
func (e *env) agent(t *testing.T, ns, name string) *agentsv1alpha1.GooseAgent {
	t.Helper()
	var a agentsv1alpha1.GooseAgent
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &a); err != nil {
		t.Fatalf("failed to get GooseAgent %s/%s: %v", ns, name, err)
	}
	return &a
}

func conditionStatus(a *agentsv1alpha1.GooseAgent, typ string) (string, string) {
	for _, c := range a.Status.Conditions {
		if c.Type == typ {
			return string(c.Status), c.Reason + ": " + c.Message
		}
	}
	return "", "no " + typ + " condition"
}

// waitAgentReady waits for Ready=True and every pod of the agent Running and Ready.
func (e *env) waitAgentReady(t *testing.T, ns, name string, replicas int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	poll.Within(t, 3*time.Minute, fmt.Sprintf("GooseAgent %s/%s Ready with %d ready pods", ns, name, replicas), func() error {
		var a agentsv1alpha1.GooseAgent
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &a); err != nil {
			return err
		}
		if st, why := conditionStatus(&a, "Ready"); st != "True" {
			return errors.New("Ready=" + st + " " + why + "; " + e.podSummary(t, ns, name))
		}
		var err error
		pods, err = e.agentPods(t, ns, name)
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				ready++
			}
		}
		return notYet(ready == replicas && len(pods) == replicas, fmt.Sprintf("%d/%d pods ready; %s", ready, replicas, e.podSummary(t, ns, name)))
	})
	return pods
}

func (e *env) agentPods(t *testing.T, ns, name string) ([]corev1.Pod, error) {
	t.Helper()
	var pl corev1.PodList
	if err := e.c.List(t.Context(), &pl, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/instance": name, "app.kubernetes.io/name": "goose-agent"}); err != nil {
		return nil, err
	}
	sort.Slice(pl.Items, func(i, j int) bool { return pl.Items[i].Name < pl.Items[j].Name })
	return pl.Items, nil
}

// podSummary says what the agent's pods are waiting for, for failure messages.
func (e *env) podSummary(t *testing.T, ns, name string) string {
	t.Helper()
	pods, err := e.agentPods(t, ns, name)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "pod %s %s", p.Name, p.Status.Phase)
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			switch {
			case cs.State.Waiting != nil:
				fmt.Fprintf(&b, " %s:waiting(%s %s)", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			case cs.State.Terminated != nil:
				fmt.Fprintf(&b, " %s:terminated(%s %d)", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
			case cs.State.Running != nil:
				fmt.Fprintf(&b, " %s:running(ready=%v)", cs.Name, cs.Ready)
			}
		}
		b.WriteString("; ")
	}
	if len(pods) == 0 {
		b.WriteString("no pods")
	}
	return b.String()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// clientPod starts a client pod (hack/e2e/images' client image, restricted
// pod security) in ns and waits for it.
func (e *env) clientPod(t *testing.T, ns string) string {
	t.Helper()
	const name = "e2e-client"
	e.mustKubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: client
    image: %s
    imagePullPolicy: Never
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, readOnlyRootFilesystem: true}
`, name, ns, clientImage), "apply", "--server-side", "-f", "-")
	poll.Within(t, 2*time.Minute, "client pod ready", func() error {
		var p corev1.Pod
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		return notYet(podReady(&p), string(p.Status.Phase))
	})
	return name
}

// turn is one chat turn's result as the client pod printed it.
type turn struct {
	Text             string     `json:"text"`
	Tools            []toolCall `json:"tools"`
	PromptTokens     int64      `json:"promptTokens"`
	CandidatesTokens int64      `json:"candidatesTokens"`
	TotalTokens      int64      `json:"totalTokens"`
}

// toolCall is one tool the agent ran in a REST turn.
type toolCall struct {
	Name   string `json:"name"`
	Output string `json:"output"`
	Error  string `json:"error"`
}

// gooseSession is the goose session id the stand-in names in its reply.
func (r turn) gooseSession() string {
	_, after, _ := strings.Cut(r.Text, "goose-session=")
	id, _, _ := strings.Cut(after, "]")
	return id
}

// gooseHost is the pod whose goose answered.
func (r turn) gooseHost() string {
	_, after, _ := strings.Cut(r.Text, "[pod=")
	id, _, _ := strings.Cut(after, " ")
	return id
}

// chat runs the client in the client pod: one turn over "rest" or "a2a".
//
// kube-proxy programs a Service's endpoint a moment after its pod is Ready
// (seen on the real node, for a new agent and after a pod was replaced).
// Until then the Service refuses connections, or, while its rule still
// names the replaced pod's address, the dial times out (seen once after
// case 3's roll). Neither connection reached the agent, so both are
// retried, for up to a minute; any other error is returned at once.
func (e *env) chat(t *testing.T, ns, pod string, args ...string) (turn, error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := e.chatOnce(t, ns, pod, args...)
		if err == nil || !dialFailed(err) || time.Now().After(deadline) {
			return r, err
		}
		t.Logf("the Service's connection failed (endpoint not programmed yet), retrying: %v", err)
		time.Sleep(500 * time.Millisecond)
	}
}

// dialFailed reports whether the client's request failed to connect, so
// it never reached the agent.
func dialFailed(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "connect: connection refused") ||
		(strings.Contains(msg, "dial tcp") && strings.Contains(msg, "i/o timeout"))
}

func (e *env) chatOnce(t *testing.T, ns, pod string, args ...string) (turn, error) {
	t.Helper()
	out, err := e.kubectl(t, "", append([]string{"-n", ns, "exec", pod, "--", "client"}, args...)...)
	if err != nil {
		return turn{}, err
	}
	var r turn
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return turn{}, fmt.Errorf("failed to decode client output %q: %w", out, err)
	}
	return r, nil
}

// token reads an agent's bearer token from its Secret.
func (e *env) token(t *testing.T, ns, name string) string {
	t.Helper()
	var s corev1.Secret
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name + "-adk2goose"}, &s); err != nil {
		t.Fatalf("failed to read the agent's token: %v", err)
	}
	tok := string(s.Data["auth-token"])
	if tok == "" {
		t.Fatalf("Secret %s-adk2goose has no auth-token", name)
	}
	return tok
}
