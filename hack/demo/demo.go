// Command demo runs goose-operator end to end on one machine with no cluster:
// an embedded control plane (envtest's kube-apiserver and etcd), the real
// manager binary, a sample GooseAgent, and the real adk2goose binary started
// with the very arguments the operator rendered for the agent's pod. Only the
// kubelet's part is played here: envtest runs no pods, so the demo marks the
// agent's pod ready at 127.0.0.1, where it runs the sidecar itself.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"google.golang.org/adk/agent"
	remoteagent "google.golang.org/adk/agent/remoteagent/v2"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/bearer"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// Config says where the binaries are.
type Config struct {
	Manager, Adk2goose string
	// Sample is the GooseAgent manifest to apply.
	Sample string
	// WorkDir holds logs, the sidecar's data and secrets. Created if missing.
	WorkDir string
	// StatsInterval is passed to the manager; short so the demo is quick.
	StatsInterval time.Duration
}

// Run runs the demo, writing what happens to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (err error) {
	d := &demo{cfg: cfg, out: out}
	defer d.cleanup()
	return d.run(ctx)
}

type demo struct {
	cfg      Config
	out      io.Writer
	env      *testenv.Env
	procs    []*exec.Cmd
	closers  []func()
	agent    *agentsv1alpha1.GooseAgent
	token    string
	sidecar  string // base URL
	appName  string
	kubectlE []string
}

func (d *demo) sayf(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }
func (d *demo) stepf(format string, args ...any) {
	fmt.Fprintf(d.out, "\n==> "+format+"\n", args...)
}

func (d *demo) cleanup() {
	for _, p := range slices.Backward(d.procs) {
		_ = p.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	for _, v := range slices.Backward(d.closers) {
		v()
	}
	if d.env != nil {
		_ = d.env.Stop()
	}
}

func (d *demo) run(ctx context.Context) error {
	if err := os.MkdirAll(d.cfg.WorkDir, 0o700); err != nil {
		return fmt.Errorf("failed to create work dir: %w", err)
	}
	d.stepf("Starting an embedded control plane (kube-apiserver and etcd, no kubelet) and installing the CRD")
	env, err := testenv.New()
	if err != nil {
		return err
	}
	d.env = env
	d.kubectlE = []string{"--kubeconfig", env.Kubeconfig}
	d.sayf("kubeconfig: %s", env.Kubeconfig)

	d.stepf("Running the operator (%s)", d.cfg.Manager)
	if err := d.start(ctx, "manager", d.cfg.Manager, []string{"KUBECONFIG=" + env.Kubeconfig},
		"--health-probe-bind-address=0", "--metrics-bind-address=0",
		"--stats-interval="+d.cfg.StatsInterval.String()); err != nil {
		return err
	}

	port, err := freePort(ctx)
	if err != nil {
		return err
	}
	if err := d.apply(ctx, port); err != nil {
		return err
	}
	if err := d.provideAPIKey(ctx); err != nil {
		return err
	}
	sts, err := d.waitForChildren(ctx)
	if err != nil {
		return err
	}
	if err := d.kubectl(ctx, "get", "statefulsets,services,configmaps,secrets", "-l",
		render.LabelInstance+"="+d.agent.Name, "-o", "wide"); err != nil {
		return err
	}
	if err := d.runSidecar(ctx, sts, port); err != nil {
		return err
	}
	if err := d.markPodReady(ctx, sts); err != nil {
		return err
	}
	if err := d.chatREST(ctx); err != nil {
		return err
	}
	if err := d.chatA2A(ctx); err != nil {
		return err
	}
	return d.showStatus(ctx)
}

// start runs a binary in the background, its output in <workdir>/<name>.log.
// It outlives ctx: cleanup stops it (interrupt, then kill), in reverse order
// of start, where ctx's end would kill it at once.
func (d *demo) start(ctx context.Context, name, bin string, env []string, args ...string) error {
	logPath := filepath.Join(d.cfg.WorkDir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("failed to create %s log: %w", name, err)
	}
	d.closers = append(d.closers, func() { _ = logf.Close() })
	cmd := exec.CommandContext(context.WithoutCancel(ctx), bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start %s: %w", name, err)
	}
	d.procs = append(d.procs, cmd)
	d.sayf("%s running (pid %d), log: %s", name, cmd.Process.Pid, logPath)
	return nil
}

// apply applies the sample with kubectl. The sidecar port is set to a free
// local port, because this machine plays the pod and serves the sidecar there.
func (d *demo) apply(ctx context.Context, port int) error {
	raw, err := os.ReadFile(d.cfg.Sample)
	if err != nil {
		return fmt.Errorf("failed to read sample: %w", err)
	}
	var a agentsv1alpha1.GooseAgent
	if err := yaml.UnmarshalStrict(raw, &a); err != nil {
		return fmt.Errorf("failed to parse sample: %w", err)
	}
	a.Namespace = "default"
	a.Spec.Sidecar.Port = int32(port)
	manifest, err := yaml.Marshal(&a)
	if err != nil {
		return fmt.Errorf("failed to render sample: %w", err)
	}
	d.stepf("Applying %s (sidecar port set to %d, free on this machine)", d.cfg.Sample, port)
	d.sayf("%s", strings.TrimSpace(string(raw)))
	cmd := exec.CommandContext(ctx, d.env.Kubectl(), append(d.kubectlE, "apply", "--server-side", "-f", "-")...)
	cmd.Stdin = bytes.NewReader(manifest)
	cmd.Stdout, cmd.Stderr = d.out, d.out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("failed to apply sample: %w", err)
	}
	d.agent = &a
	return nil
}

// provideAPIKey shows the agent waiting for its API-key Secret, then creates
// it (from the provider's usual environment variable when set).
func (d *demo) provideAPIKey(ctx context.Context) error {
	ref := d.agent.Spec.Provider.APIKeySecretRef
	if ref == nil {
		return nil
	}
	key := client.ObjectKeyFromObject(d.agent)
	if err := poll(ctx, "the missing Secret to be reported", func() (bool, error) {
		var a agentsv1alpha1.GooseAgent
		if err := d.env.Client.Get(ctx, key, &a); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionReady)
		if c != nil && c.Reason == agentsv1alpha1.ReasonReferenceNotFound {
			d.sayf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
			return true, nil
		}
		return false, nil
	}); err != nil {
		return err
	}
	envVar := strings.ToUpper(d.agent.Spec.Provider.Name) + "_API_KEY"
	value := os.Getenv(envVar)
	if value == "" {
		value = "demo-key-not-used-by-the-fake-goose"
	}
	d.stepf("Creating the Secret the agent references (value from $%s, or a placeholder)", envVar)
	return d.kubectl(ctx, "create", "secret", "generic", ref.Name, "--from-literal="+ref.Key+"="+value)
}

func (d *demo) kubectl(ctx context.Context, args ...string) error {
	shown := make([]string, len(args))
	for i, a := range args { // never print a secret value
		if k, _, ok := strings.Cut(strings.TrimPrefix(a, "--from-literal="), "="); ok && strings.HasPrefix(a, "--from-literal=") {
			a = "--from-literal=" + k + "=..."
		}
		shown[i] = a
	}
	d.sayf("$ kubectl %s", strings.Join(shown, " "))
	cmd := exec.CommandContext(ctx, d.env.Kubectl(), append(d.kubectlE, args...)...)
	cmd.Stdout, cmd.Stderr = d.out, d.out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("failed to run kubectl %s: %w", args[0], err)
	}
	return nil
}

// pollTimeout is how long poll waits: each step takes seconds at most.
const pollTimeout = 60 * time.Second

// poll calls ok until it returns true, an error, or pollTimeout passes.
func poll(ctx context.Context, what string, ok func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		done, err := ok()
		if done && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("timed out waiting for %s: %w", what, last)
			}
			return fmt.Errorf("timed out waiting for %s", what)
		case <-t.C:
		}
	}
}

func (d *demo) waitForChildren(ctx context.Context) (*appsv1.StatefulSet, error) {
	d.stepf("Waiting for the operator to create the agent's objects")
	var sts appsv1.StatefulSet
	key := types.NamespacedName{Namespace: d.agent.Namespace, Name: render.StatefulSetName(d.agent)}
	if err := poll(ctx, "the StatefulSet", func() (bool, error) {
		return d.env.Client.Get(ctx, key, &sts) == nil, nil
	}); err != nil {
		return nil, err
	}
	return &sts, nil
}

// runSidecar starts adk2goose with the arguments the operator rendered into
// the StatefulSet, changing only what points into the pod: addresses, the
// mounted secret files and the data volume.
func (d *demo) runSidecar(ctx context.Context, sts *appsv1.StatefulSet, port int) error {
	var secret corev1.Secret
	if err := d.env.Client.Get(ctx, types.NamespacedName{Namespace: d.agent.Namespace, Name: render.SecretName(d.agent)}, &secret); err != nil {
		return fmt.Errorf("failed to read the generated Secret: %w", err)
	}
	d.token = string(secret.Data[render.KeyAuthToken])
	gooseKey := string(secret.Data[render.KeyGooseSecret])

	gooseURL, which, err := d.startGoose(ctx, gooseKey)
	if err != nil {
		return err
	}
	d.stepf("goose server: %s", which)

	var args []string
	for _, c := range sts.Spec.Template.Spec.InitContainers {
		if c.Name == render.SidecarContainer {
			args = append(append(args, c.Command...), c.Args...)
		}
	}
	if len(args) == 0 {
		return errors.New("the StatefulSet has no adk2goose sidecar")
	}
	if strings.HasPrefix(args[0], "/") { // the image's entrypoint path
		args = args[1:]
	}
	secrets := filepath.Join(d.cfg.WorkDir, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		return fmt.Errorf("failed to create secrets dir: %w", err)
	}
	tokenFile, keyFile := filepath.Join(secrets, "token"), filepath.Join(secrets, "goose-secret-key")
	if err := os.WriteFile(tokenFile, []byte(d.token), 0o600); err != nil {
		return fmt.Errorf("failed to write token: %w", err)
	}
	if err := os.WriteFile(keyFile, []byte(gooseKey), 0o600); err != nil {
		return fmt.Errorf("failed to write goose key: %w", err)
	}
	d.sidecar = fmt.Sprintf("http://127.0.0.1:%d", port)
	local := map[string]string{
		"--listen":            fmt.Sprintf("127.0.0.1:%d", port),
		"--goose-url":         gooseURL,
		"--auth-token-file":   tokenFile,
		"--goose-secret-file": keyFile,
		"--data-dir":          filepath.Join(d.cfg.WorkDir, "data"),
		"--public-base-url":   d.sidecar,
		"--peers-host":        "", // one local sidecar and no cluster DNS: no forwarding
		// The pod's workspace volume: the sidecar creates each session's
		// directory below it, and goose must find it there.
		"--goose-working-dir": filepath.Join(d.cfg.WorkDir, "workspace"),
	}
	for i, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := local[name]; ok {
			args[i] = name + "=" + v
		}
		if strings.HasPrefix(name, "--app-name") {
			_, d.appName, _ = strings.Cut(a, "=")
		}
	}
	d.sayf("adk2goose %s", strings.Join(args, " "))
	if err := d.start(ctx, "adk2goose", d.cfg.Adk2goose, nil, args...); err != nil {
		return err
	}
	return poll(ctx, "adk2goose /readyz", func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.sidecar+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// startGoose starts a real `goose serve` when goose is on PATH and a provider
// is configured, the fake goose server otherwise.
func (d *demo) startGoose(ctx context.Context, secretKey string) (url, which string, err error) {
	if bin, err := exec.LookPath("goose"); err == nil && os.Getenv("GOOSE_PROVIDER") != "" {
		port, err := freePort(ctx)
		if err != nil {
			return "", "", err
		}
		if err := d.start(ctx, "goose", bin, []string{"GOOSE_SERVER__SECRET_KEY=" + secretKey},
			"serve", "--host", "127.0.0.1", "--port", fmt.Sprint(port)); err != nil {
			return "", "", err
		}
		return fmt.Sprintf("http://127.0.0.1:%d", port), "the real goose (" + bin + " serve, provider " + os.Getenv("GOOSE_PROVIDER") + ")", nil
	}
	fake := goosetest.NewServe(nil, goosetest.WithServeSecret(secretKey), goosetest.WithServeScript(script))
	d.closers = append(d.closers, fake.Close)
	return fake.URL, "the fake goose serve from sidecar/goose/goosetest (no goose binary on PATH with GOOSE_PROVIDER set); it answers with a scripted reply", nil
}

// script is the fake goose's reply: word by word, like a streaming model.
func script(_, userText string) goosetest.Reply {
	words := strings.Fields("Hello from goose! You asked: \"" + userText + "\". I am running behind the adk2goose sidecar.")
	r := goosetest.Reply{}
	for i, w := range words {
		if i > 0 {
			w = " " + w
		}
		r.Steps = append(r.Steps, goosetest.Step{Delay: 20 * time.Millisecond, Text: w})
	}
	r.Steps = append(r.Steps, goosetest.Step{Usage: &goosetest.UsageStep{Input: int64(200 + len(userText)), Output: int64(len(words))}})
	return r
}

// markPodReady plays the kubelet for pod 0 of the StatefulSet.
func (d *demo) markPodReady(ctx context.Context, sts *appsv1.StatefulSet) error {
	name := sts.Name + "-0"
	d.stepf("Playing the kubelet and the StatefulSet controller: pod %s is ready at 127.0.0.1 (the sidecar above)", name)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: name, Labels: sts.Spec.Template.Labels},
		Spec:       *sts.Spec.Template.Spec.DeepCopy(),
	}
	// As the StatefulSet controller does: one volume per claim template.
	for _, vct := range sts.Spec.VolumeClaimTemplates {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vct.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: vct.Name + "-" + name},
		}})
	}
	if err := d.env.Client.Create(ctx, pod); err != nil {
		return fmt.Errorf("failed to create pod: %w", err)
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := d.env.Client.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("failed to mark pod ready: %w", err)
	}
	// No StatefulSet controller runs either: report the replica ready as it would.
	s := &appsv1.StatefulSet{}
	if err := d.env.Client.Get(ctx, client.ObjectKeyFromObject(sts), s); err != nil {
		return fmt.Errorf("failed to read the StatefulSet: %w", err)
	}
	s.Status = appsv1.StatefulSetStatus{
		ObservedGeneration: s.Generation, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		CurrentReplicas: 1, UpdatedReplicas: 1,
	}
	if err := d.env.Client.Status().Update(ctx, s); err != nil {
		return fmt.Errorf("failed to report the StatefulSet ready: %w", err)
	}
	return nil
}

func (d *demo) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.sidecar+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	return resp, nil
}

func (d *demo) chatREST(ctx context.Context) error {
	d.stepf("Talking to the agent over the ADK REST API (POST /run_sse)")
	text := "What can you do for me?"
	resp, err := d.do(ctx, http.MethodPost, "/apps/"+d.appName+"/users/demo/sessions/rest-demo", nil)
	if err != nil {
		return fmt.Errorf("failed to create session: %w", err)
	}
	resp.Body.Close()
	resp, err = d.do(ctx, http.MethodPost, "/run_sse", map[string]any{
		"appName": d.appName, "userId": "demo", "sessionId": "rest-demo", "streaming": true,
		"newMessage": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}},
	})
	if err != nil {
		return fmt.Errorf("failed to run: %w", err)
	}
	defer resp.Body.Close()
	fmt.Fprintf(d.out, "user> %s\ngoose> ", text)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var final map[string]any
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("failed to decode event: %w", err)
		}
		if msg, _ := ev["errorMessage"].(string); msg != "" {
			return fmt.Errorf("the agent answered an error: %s", msg)
		}
		if ev["partial"] == true {
			fmt.Fprint(d.out, partsText(ev))
			continue
		}
		final = ev
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("failed to read stream: %w", err)
	}
	fmt.Fprintln(d.out)
	if final == nil || final["usageMetadata"] == nil {
		return errors.New("the stream ended without a final event carrying usageMetadata")
	}
	u, err := json.Marshal(final["usageMetadata"])
	if err != nil {
		return fmt.Errorf("failed to encode usageMetadata: %w", err)
	}
	d.sayf("final event usageMetadata: %s", u)
	return nil
}

func partsText(ev map[string]any) string {
	content, _ := ev["content"].(map[string]any)
	parts, _ := content["parts"].([]any)
	var b strings.Builder
	for _, p := range parts {
		if m, ok := p.(map[string]any); ok && m["thought"] != true {
			s, _ := m["text"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}

// chatA2A uses adk-go's own A2A client: the agent as a remote sub-agent.
func (d *demo) chatA2A(ctx context.Context) error {
	d.stepf("Talking to the agent over A2A with ADK's remoteagent (agent card %s/.well-known/agent-card.json)", d.sidecar)
	hc := &http.Client{Transport: bearer.Transport{Token: d.token}}
	defer hc.CloseIdleConnections()
	remote, err := remoteagent.NewA2A(remoteagent.A2AConfig{
		Name:              "goose_remote",
		AgentCardProvider: remoteagent.NewAgentCardProvider(d.sidecar),
		ClientProvider:    remoteagent.NewA2AClientProvider(a2aclient.NewFactory(a2aclient.WithJSONRPCTransport(hc))),
	})
	if err != nil {
		return fmt.Errorf("failed to create A2A client: %w", err)
	}
	sessions := session.InMemoryService()
	r, err := runner.New(runner.Config{AppName: "demo_client", Agent: remote, SessionService: sessions})
	if err != nil {
		return fmt.Errorf("failed to create runner: %w", err)
	}
	if _, err := sessions.Create(ctx, &session.CreateRequest{AppName: "demo_client", UserID: "demo", SessionID: "a2a-demo"}); err != nil {
		return fmt.Errorf("failed to create client session: %w", err)
	}
	text := "Summarise yourself in one line."
	fmt.Fprintf(d.out, "user> %s\ngoose> ", text)
	var usage *genai.GenerateContentResponseUsageMetadata
	for ev, err := range r.Run(ctx, "demo", "a2a-demo", genai.NewContentFromText(text, genai.RoleUser), agent.RunConfig{StreamingMode: agent.StreamingModeSSE}) {
		if err != nil {
			return fmt.Errorf("failed to run over A2A: %w", err)
		}
		if ev.ErrorMessage != "" {
			return fmt.Errorf("the agent answered an error over A2A: %s", ev.ErrorMessage)
		}
		if ev.Partial && ev.Content != nil {
			for _, p := range ev.Content.Parts {
				if !p.Thought {
					fmt.Fprint(d.out, p.Text)
				}
			}
		}
		if ev.UsageMetadata != nil {
			usage = ev.UsageMetadata
		}
	}
	fmt.Fprintln(d.out)
	if usage == nil {
		return errors.New("the A2A reply carried no usage")
	}
	d.sayf("usage: prompt %d, candidates %d, total %d tokens", usage.PromptTokenCount, usage.CandidatesTokenCount, usage.TotalTokenCount)
	return nil
}

func (d *demo) showStatus(ctx context.Context) error {
	d.stepf("The operator collects the sidecar's /stats into the GooseAgent's status")
	key := client.ObjectKeyFromObject(d.agent)
	var a agentsv1alpha1.GooseAgent
	if err := poll(ctx, "sessions and tokens in status", func() (bool, error) {
		if err := d.env.Client.Get(ctx, key, &a); err != nil {
			return false, err
		}
		return a.Status.Sessions.Total >= 2 && a.Status.Tokens.Total > 0, nil
	}); err != nil {
		return err
	}
	if err := d.kubectl(ctx, "get", "gooseagents", "-o", "wide"); err != nil {
		return err
	}
	d.sayf("\nThe demo is done: %d sessions, %d tokens (input %d, output %d).",
		a.Status.Sessions.Total, a.Status.Tokens.Total, a.Status.Tokens.Input, a.Status.Tokens.Output)
	return nil
}

func freePort(ctx context.Context) (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("failed to find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
