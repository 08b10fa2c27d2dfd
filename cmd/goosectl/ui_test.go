package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/syncbuf"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest"
)

func TestParseUI(t *testing.T) {
	o, err := parseUI([]string{"coder"}, io.Discard)
	if err != nil || o.name != "coder" || o.port != 8000 || o.namespace != "" || o.noBrowser {
		t.Fatalf("%v %+v", err, o)
	}
	// Flags on either side of NAME, single or double dash, as with kubectl.
	o, err = parseUI([]string{"-n", "team", "coder", "--port", "0", "--no-browser", "--context=dev", "--kubeconfig", "/k", "--token-file", "/t"}, io.Discard)
	if err != nil || o.name != "coder" || o.namespace != "team" || o.port != 0 || !o.noBrowser || o.context != "dev" ||
		o.kubeconfig != "/k" || o.credential.tokenFile != "/t" {
		t.Fatalf("%v %+v", err, o)
	}
	if o, err = parseUI([]string{"coder", "--namespace", "x"}, io.Discard); err != nil || o.namespace != "x" {
		t.Fatalf("%v %+v", err, o)
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no name":      {nil, "NAME is required"},
		"two names":    {[]string{"a", "b"}, `got ["a" "b"]`},
		"both tokens":  {[]string{"a", "--token", "x", "--token-file", "y"}, "exclusive"},
		"bad port":     {[]string{"a", "--port", "70000"}, "out of range"},
		"unknown flag": {[]string{"a", "--nope"}, "nope"},
	} {
		if _, err := parseUI(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var usage strings.Builder
	if _, err := parseUI([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) || !strings.Contains(usage.String(), "goosectl ui NAME") {
		t.Fatalf("help: %v %q", err, usage.String())
	}
	if err := runUI(t.Context(), []string{"--help"}, uiEnv{stdout: io.Discard, stderr: io.Discard}); err != nil {
		t.Fatalf("help is not an error: %v", err)
	}
}

func TestUIBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	err = runUI(t.Context(), []string{"a", "--port", strconv.Itoa(port), "--kubeconfig", "/nonexistent"}, uiEnv{stdout: io.Discard, stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "--port") {
		t.Fatalf("%v", err)
	}
}

func TestOpenBrowserWithoutDisplay(t *testing.T) {
	if err := openBrowser(t.Context(), "http://127.0.0.1:1/ui/", func(string) string { return "" }); err != nil && !errors.Is(err, errNoOpener) {
		// On macOS and Windows an opener exists without DISPLAY; elsewhere none must be tried.
		t.Fatalf("%v", err)
	}
}

// tcpForwarder stands in for the API server's pods/portforward, which needs
// a kubelet: it records which pod and port were asked for and relays a
// loopback port to target (an in-process sidecar).
type tcpForwarder struct {
	target string
	mu     sync.Mutex
	asked  []string
}

func (f *tcpForwarder) Forward(ctx context.Context, pod *corev1.Pod, port int32) (string, <-chan error, error) {
	f.mu.Lock()
	f.asked = append(f.asked, pod.Namespace+"/"+pod.Name+":"+strconv.Itoa(int(port)))
	f.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	go func() {
		<-ctx.Done()
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				break
			}
			out, err := net.Dial("tcp", f.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			track(in)
			track(out)
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); _ = in.Close() }()
		}
		wg.Wait()
		done <- nil
	}()
	return ln.Addr().String(), done, nil
}

func (f *tcpForwarder) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// startSidecar runs a real adk2goose server over a fake `goose serve`.
func startSidecar(t *testing.T, token string) string {
	t.Helper()
	f := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	b, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return servertest.Start(t, server.Config{Backend: b, AppName: "coder", DataDir: t.TempDir(), AuthToken: token}).Addr
}

// uiRun is one `goosectl ui` invocation running in the background.
type uiRun struct {
	origin string
	out    *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan error
}

func startUI(t *testing.T, fwd podForwarder, args ...string) (*uiRun, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &uiRun{out: &syncbuf.Buffer{}, cancel: cancel, done: make(chan error, 1)}
	serving := make(chan string, 1)
	env := uiEnv{
		stdout: r.out, stderr: r.out,
		newForwarder: func(*rest.Config) (podForwarder, error) { return fwd, nil },
		openBrowser:  func(context.Context, string) error { t.Error("opened a browser despite --no-browser"); return nil },
		onServing:    func(o string) { serving <- o },
	}
	go func() { r.done <- runUI(ctx, append(args, "--port", "0", "--no-browser"), env) }()
	select {
	case r.origin = <-serving:
		return r, nil
	case err := <-r.done:
		cancel()
		return nil, err
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("goosectl ui neither served nor failed")
		return nil, nil
	}
}

func (r *uiRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("ui returned %v after Ctrl-C", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("ui did not stop")
	}
}

func TestUIAgainstAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	c := env.Client
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ui-"}}
	must(t, c.Create(ctx, nsObj))
	ns := nsObj.Name
	kube := []string{"-n", ns, "--kubeconfig", env.Kubeconfig}
	const token = "tok-from-secret"
	fwd := &tcpForwarder{target: startSidecar(t, token)}

	expectErr := func(t *testing.T, want string, args ...string) {
		t.Helper()
		r, err := startUI(t, fwd, append(args, kube...)...)
		if err == nil {
			r.stop(t)
			t.Fatalf("served; want an error containing %q", want)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not contain %q", err, want)
		}
	}

	t.Run("unknown agent", func(t *testing.T) {
		expectErr(t, `GooseAgent "nope" not found in namespace "`+ns+`"`, "nope")
	})

	agent := &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder"},
		Spec:       agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"}},
	}
	must(t, c.Create(ctx, agent))
	t.Run("no service yet", func(t *testing.T) {
		expectErr(t, "GooseAgent "+ns+"/coder is not ready: its Service \"coder\" does not exist yet", "coder")
	})

	sel := map[string]string{"app.kubernetes.io/instance": "coder"}
	must(t, c.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{
			{Name: "metrics", Port: 9000},
			{Name: "http", Port: 8080, TargetPort: intstr.FromString("http")},
		}},
	}))
	pod := func(name string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: sel},
			Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "goose", Image: "goose", Ports: []corev1.ContainerPort{{Name: "goose", ContainerPort: 3284}}},
				{Name: "adk2goose", Image: "adk2goose", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9090}}},
			}},
		}
		must(t, c.Create(ctx, p))
		return p
	}
	// envtest has no kubelet: pod status is whatever we write.
	setReady := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		must(t, c.Status().Update(ctx, p))
	}
	p1 := pod("coder-1")
	meta.SetStatusCondition(&agent.Status.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: agentsv1alpha1.ReasonPodsNotReady, Message: "0/1 pods ready", ObservedGeneration: agent.Generation})
	must(t, c.Status().Update(ctx, agent))
	t.Run("pod not ready", func(t *testing.T) {
		expectErr(t, "GooseAgent "+ns+"/coder is not ready: none of its 1 pods", "coder")
		expectErr(t, "(Ready=False PodsNotReady: 0/1 pods ready)", "coder")
	})

	setReady(p1)
	setReady(pod("coder-0"))
	pod("coder-2") // not ready: never chosen
	t.Run("no secret", func(t *testing.T) {
		expectErr(t, "Secret "+ns+"/coder-adk2goose key auth-token, which holds the agent's token, does not exist; pass the token with --token-file", "coder")
	})
	must(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coder-adk2goose"},
		Data:       map[string][]byte{"auth-token": []byte(token + "\n"), "goose-secret-key": []byte("other")},
	}))

	t.Run("chat through the UI", func(t *testing.T) {
		before := len(fwd.calls())
		r, err := startUI(t, fwd, append([]string{"coder"}, kube...)...)
		if err != nil {
			t.Fatal(err)
		}
		// The lowest-named ready pod, at the container port the Service's
		// "http" port names.
		if got := fwd.calls()[before:]; len(got) != 1 || got[0] != ns+"/coder-0:9090" {
			t.Fatalf("forwarded to %v", got)
		}
		if out := r.out.String(); !strings.Contains(out, r.origin+"/ui/") || !strings.Contains(out, "app coder") {
			t.Fatalf("output:\n%s", out)
		}
		chat(t, r.origin)
		r.stop(t)
	})

	// A user who may read agents, services and pods but not secrets.
	must(t, c.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{agentsv1alpha1.GroupVersion.Group}, Resources: []string{"gooseagents"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"services", "pods"}, Verbs: []string{"get", "list"}},
		},
	}))
	must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice", APIGroup: "rbac.authorization.k8s.io"}},
	}))
	// The Role is in force once the authorizer has it; under load that is
	// after the create returned.
	env.WaitForAccess(t, "alice", ns,
		testenv.Access{Group: agentsv1alpha1.GroupVersion.Group, Resource: "gooseagents", Verb: "get", Allowed: true},
		testenv.Access{Resource: "services", Verb: "get", Allowed: true},
		testenv.Access{Resource: "pods", Verb: "list", Allowed: true},
		testenv.Access{Resource: "secrets", Verb: "get", Allowed: false})
	alice := impersonatingKubeconfig(t, env.Kubeconfig, "alice")
	asAlice := []string{"-n", ns, "--kubeconfig", alice}
	t.Run("secret forbidden", func(t *testing.T) {
		r, err := startUI(t, fwd, append([]string{"coder"}, asAlice...)...)
		if err == nil {
			r.stop(t)
			t.Fatal("served without the token")
		}
		for _, want := range []string{"may not read Secret " + ns + "/coder-adk2goose key auth-token", "--token-file"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q lacks %q", err, want)
			}
		}
	})
	t.Run("token file instead", func(t *testing.T) {
		tf := filepath.Join(t.TempDir(), "token")
		must(t, os.WriteFile(tf, []byte(token), 0o600))
		r, err := startUI(t, fwd, append([]string{"coder", "--token-file", tf}, asAlice...)...)
		if err != nil {
			t.Fatal(err)
		}
		chat(t, r.origin)
		r.stop(t)
	})

	t.Run("tokenSecretRef with a wrong token", func(t *testing.T) {
		must(t, c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"},
			Data:       map[string][]byte{"tok": []byte("not-the-token")},
		}))
		must(t, c.Get(ctx, client.ObjectKeyFromObject(agent), agent))
		agent.Spec.Sidecar.Auth.TokenSecretRef = &agentsv1alpha1.SecretKeyRef{Name: "mine", Key: "tok"}
		must(t, c.Update(ctx, agent))
		expectErr(t, "the agent rejected the token (token from Secret "+ns+"/mine key tok)", "coder")
	})
}

// chat does what the bundled UI does on first use, through the UI server.
func chat(t *testing.T, origin string) {
	t.Helper()
	chatAs(t, origin, "user")
}

// chatAs is chat as ADK user, the UI's userId.
func chatAs(t *testing.T, origin, user string) {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	send := func(method, path, body string) (*http.Response, error) {
		req, _ := http.NewRequest(method, origin+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", origin)
		return hc.Do(req)
	}
	read := func(resp *http.Response, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", resp.Request.URL.Path, resp.StatusCode, b)
		}
		return string(b)
	}
	var cfg struct {
		BackendURL string `json:"backendUrl"`
	}
	must(t, json.Unmarshal([]byte(read(send("GET", "/ui/assets/config/runtime-config.json", ""))), &cfg))
	if cfg.BackendURL != origin+"/api" {
		t.Fatalf("backendUrl %q", cfg.BackendURL)
	}
	if apps := read(send("GET", "/api/list-apps?relative_path=./", "")); strings.TrimSpace(apps) != `["coder"]` {
		t.Fatalf("apps %s", apps)
	}
	var sess struct{ ID string }
	must(t, json.Unmarshal([]byte(read(send("POST", "/api/apps/coder/users/"+url.PathEscape(user)+"/sessions", "null"))), &sess))
	resp, err := send("POST", "/api/run_sse", `{"appName":"coder","userId":"`+user+`","sessionId":"`+sess.ID+
		`","newMessage":{"role":"user","parts":[{"text":"ping pong"}]},"streaming":true}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// goose's two deltas come as one partial event each; then the final
	// event.
	var texts []string
	var streamed, final strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			var ev struct {
				Partial bool
				Content struct{ Parts []struct{ Text string } }
			}
			must(t, json.Unmarshal([]byte(d), &ev))
			if len(ev.Content.Parts) > 0 {
				text := ev.Content.Parts[0].Text
				texts = append(texts, text)
				if ev.Partial && final.Len() == 0 {
					streamed.WriteString(text)
				} else {
					final.WriteString(text)
				}
			}
		}
	}
	if resp.StatusCode != http.StatusOK || streamed.String() != "echo: ping pong" || final.String() != "echo: ping pong" {
		t.Fatalf("run_sse %d frames %q", resp.StatusCode, texts)
	}
}

// impersonatingKubeconfig copies a kubeconfig so that it acts as user.
func impersonatingKubeconfig(t *testing.T, path, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, clientcmd.WriteToFile(*cfg, out))
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
