package activator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunShared(m)) }

const testToken = "activator-test-token"

// shared is the manager whose cache, client and reference tracker every
// test's activator uses, as the activator uses the operator's manager's.
var shared struct {
	once sync.Once
	mgr  manager.Manager
	refs *references.Tracker
	err  error
}

func sharedManager(t testing.TB) (manager.Manager, *references.Tracker) {
	t.Helper()
	env := testenv.Shared(t)
	shared.once.Do(func() {
		ctrl.SetLogger(logr.Discard())
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
			Scheme:                 env.Scheme,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Cache:                  controllers.CacheOptions(),
		})
		if err != nil {
			shared.err = err
			return
		}
		if shared.refs, err = references.ForManager(mgr); err != nil {
			shared.err = err
			return
		}
		if shared.err = indexFields(context.Background(), mgr.GetFieldIndexer()); shared.err != nil {
			return
		}
		// Runs until the test binary exits.
		go func() { _ = mgr.Start(context.Background()) }()
		// Every informer the activator reads, and every runnable, runs before
		// the first test takes its goroutine snapshot (noLeaks).
		for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Service{}, &agentsv1alpha1.GooseAgent{}} {
			if _, shared.err = mgr.GetCache().GetInformer(context.Background(), obj); shared.err != nil {
				return
			}
		}
		if !mgr.GetCache().WaitForCacheSync(context.Background()) || !shared.refs.WaitForCacheSync(context.Background()) {
			shared.err = fmt.Errorf("the manager's caches did not sync")
		}
		<-mgr.Elected()
		shared.mgr = mgr
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.mgr, shared.refs
}

// noLeaks checks, at the very end of the test, that the test left no
// goroutine behind: the activator's, the sidecar's and the clients'. The
// shared manager's are there before and stay. HTTP/2 connections to the API
// server are not counted: the manager's client may open one meanwhile, and
// the activator keeps the review clients of the last agents called (both
// on purpose, and such a connection reads for good).
func noLeaks(t testing.TB) {
	opts := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop")}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

var namespaces atomic.Int64

// fixture is a parked agent in a namespace of its own, a real adk2goose
// serving its sessions on loopback (the pod to be), and an activator.
type fixture struct {
	t   testing.TB
	env *testenv.Env
	ns  string
	// name is the agent's, unique across the tests' namespaces (a Host
	// of the bare name must find one agent), and the sidecar's app name.
	name  string
	agent *agentsv1alpha1.GooseAgent
	side  *servertest.Sidecar
	act   *Activator
	url   string // the activator's base URL
	// wakes counts the activator's wake writes.
	wakes atomic.Int64
}

type fixtureOptions struct {
	script goosetest.Script
	spec   func(*agentsv1alpha1.GooseAgentSpec)
	// identity makes the sidecar's verifier for the agent's namespace.
	identity func(ns, name string) identity.Verifier
	cfg      func(*Config)
}

func newFixture(t testing.TB, o fixtureOptions) *fixture {
	t.Helper()
	mgr, refs := sharedManager(t)
	noLeaks(t)
	env := testenv.Shared(t)
	n := namespaces.Add(1)
	f := &fixture{t: t, env: env, ns: fmt.Sprintf("activator-%d", n), name: fmt.Sprintf("helper%d", n)}
	ctx := t.Context()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}); err != nil {
		t.Fatal(err)
	}

	if o.script == nil {
		o.script = goosetest.Echo
	}
	fake := goosetest.NewServe(t, goosetest.WithServeScript(o.script))
	b, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var verifier identity.Verifier
	if o.identity != nil {
		verifier = o.identity(f.ns, f.name)
	}
	f.side = servertest.Start(t, server.Config{
		Backend: b, AppName: f.name, DataDir: t.TempDir(), AuthToken: testToken, Identity: verifier,
	})
	_, port, err := net.SplitHostPort(f.side.Addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)

	f.agent = &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name},
		Spec: agentsv1alpha1.GooseAgentSpec{
			Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "m"},
			Sidecar:  agentsv1alpha1.SidecarSpec{Port: int32(p)},
			Idle:     &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: time.Minute}},
		},
	}
	if o.spec != nil {
		o.spec(&f.agent.Spec)
	}
	if err := env.Client.Create(ctx, f.agent); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: render.SecretName(f.agent), Labels: render.Labels(f.agent)},
		Data:       map[string][]byte{render.KeyAuthToken: []byte(testToken)},
	}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// The agent and its token must be in the manager's cache before it is
	// called (else the activator answers AUTH_UNAVAILABLE).
	poll.UntilNil(t, "the agent and its token in the cache", func() error {
		if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(f.agent), &agentsv1alpha1.GooseAgent{}); err != nil {
			return err
		}
		if tok, err := refs.SidecarToken(ctx, f.agent); err != nil || tok != testToken {
			return fmt.Errorf("token %q: %v", tok, err)
		}
		return nil
	})

	cfg := Config{
		Addr:        "127.0.0.1:0",
		Client:      patchCounter{Client: mgr.GetClient(), n: &f.wakes},
		Cache:       mgr.GetCache(),
		Tokens:      refs,
		REST:        env.Config,
		CardVersion: "test",
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	f.act, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.act.Start(actx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("activator: %v", err)
		}
	})
	select {
	case <-f.act.Listening():
	case err := <-done:
		t.Fatalf("activator did not start: %v", err)
	}
	f.url = "http://" + f.act.Addr().String()
	return f
}

// host is the agent Service's in-cluster name, as clients call it.
func (f *fixture) host() string {
	return fmt.Sprintf("%s.%s.svc.cluster.local:%d", f.name, f.ns, f.agent.Spec.Sidecar.Port)
}

// startPodOnWake plays the reconciler: once the activator has asked for a
// wake, it creates the agent's pod and makes it ready at the sidecar's
// address, as the StatefulSet and the kubelet would.
func (f *fixture) startPodOnWake() {
	t := f.t
	wc, err := client.NewWithWatch(f.env.Config, client.Options{Scheme: f.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &agentsv1alpha1.GooseAgentList{}, client.InNamespace(f.ns))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			ga, ok := ev.Object.(*agentsv1alpha1.GooseAgent)
			if ok && ga.Annotations[agentsv1alpha1.WakeRequestedAtAnnotation] != "" {
				w.Stop()
				// A test that ends right after its wake cancels ctx: no pod is
				// wanted then.
				if err := f.startPod(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("failed to start the pod: %v", err)
				}
				return
			}
		}
	}()
}

func (f *fixture) startPod(ctx context.Context) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name + "-0", Labels: render.SelectorLabels(f.agent)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "goose", Image: "goose"}}},
	}
	if err := f.env.Client.Create(ctx, p); err != nil {
		return err
	}
	p.Status = corev1.PodStatus{
		PodIP:      "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	return f.env.Client.Status().Update(ctx, p)
}

// send sends a request to the activator for host, with the token unless
// token is empty, and returns the response with its body read whole.
func (f *fixture) send(method, host, path, token, body string) (*http.Response, []byte) {
	f.t.Helper()
	resp, err := f.do(method, host, path, token, body)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp, b
}

func (f *fixture) do(method, host, path, token, body string) (*http.Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(f.t.Context(), method, f.url+path, rd)
	if err != nil {
		return nil, err
	}
	req.Host = host
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return testClient.Do(req)
}

// testClient closes its connections after each request, so no idle one
// outlives a test.
var testClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}

// createSession makes a session on the sidecar itself: its volume kept
// it while the agent was parked.
func (f *fixture) createSession(user, id string) {
	f.t.Helper()
	req, _ := http.NewRequestWithContext(f.t.Context(), http.MethodPost, f.side.URL+"/apps/"+f.name+"/users/"+user+"/sessions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := testClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("create session: %d", resp.StatusCode)
	}
}

func (f *fixture) runBody(user, session, text string) string {
	b, _ := json.Marshal(map[string]any{
		"appName": f.name, "userId": user, "sessionId": session, "streaming": true,
		"newMessage": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}},
	})
	return string(b)
}

func a2aBody(method, text string) string {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": 1, "method": method,
		"params": map[string]any{"message": map[string]any{"kind": "message", "messageId": "m-" + text, "role": "user",
			"parts": []any{map[string]any{"kind": "text", "text": text}}}},
	})
	return string(b)
}

// sseTexts is the text of every SSE data frame, in order.
func sseTexts(t testing.TB, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			out = append(out, strings.TrimSpace(d))
		}
	}
	return out
}

// wantError checks a JSON error answer of the activator.
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, code string, retryAfter bool) {
	t.Helper()
	var e struct{ Error, Code, Detail string }
	if resp.StatusCode != status || json.Unmarshal(body, &e) != nil || e.Code != code || e.Error == "" {
		t.Fatalf("%s: %d %s; want %d with code %s", what, resp.StatusCode, body, status, code)
	}
	if got := resp.Header.Get("Retry-After") != ""; got != retryAfter {
		t.Fatalf("%s: Retry-After %q; want one: %v", what, resp.Header.Get("Retry-After"), retryAfter)
	}
}

// TestBurstWakesOnce: 100 concurrent first requests to a parked agent are
// held, wake it exactly once, and each gets its own right answer from the
// pod once it is ready.
func TestBurstWakesOnce(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	const n = 100
	for i := range n {
		f.createSession("u", fmt.Sprintf("s%d", i))
	}
	f.startPodOnWake()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			text := fmt.Sprintf("message number %d", i)
			resp, err := f.do(http.MethodPost, f.host(), "/run_sse", testToken, f.runBody("u", fmt.Sprintf("s%d", i), text))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				errs <- err
				return
			}
			if resp.StatusCode != http.StatusOK || !strings.Contains(strings.Join(sseTexts(t, b), "\n"), `"text":"echo: `+text[:len(text)/2]+`"`) {
				errs <- fmt.Errorf("request %d: %d %s", i, resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := f.wakes.Load(); got != 1 {
		t.Fatalf("%d wakes; want exactly 1 for the burst", got)
	}
}

// TestA2AIsHeldAndAnswered: an A2A message to a parked agent is held
// until the pod is ready and answered by it.
func TestA2AIsHeldAndAnswered(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.startPodOnWake()
	resp, body := f.send(http.MethodPost, f.host(), server.A2APathV03, testToken, a2aBody("message/send", "hello there"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"state":"completed"`) || !strings.Contains(string(body), "echo: hello") {
		t.Fatalf("A2A message/send: %d %s", resp.StatusCode, body)
	}
	if got := f.wakes.Load(); got != 1 {
		t.Fatalf("%d wakes; want 1", got)
	}
}

// TestStreamsAreFlushedEventByEvent: once the pod answers, each event of a
// /run_sse and an A2A stream reaches the client while goose is still
// working on the next: a tool call that holds the reply until the client
// has seen the text before it.
func TestStreamsAreFlushedEventByEvent(t *testing.T) {
	release := make(chan struct{}, 2)
	script := func(_, text string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{
			{Text: "before the tool: " + text},
			{Tool: &goosetest.ToolStep{ID: "t-" + text, Name: "shell", Arguments: json.RawMessage(`{}`), Run: func() (string, bool) {
				<-release
				return "done", false
			}}},
			{Text: "after the tool"},
		}}
	}
	f := newFixture(t, fixtureOptions{script: script})
	f.createSession("u", "s")
	f.startPodOnWake()
	for _, tc := range []struct{ name, path, body string }{
		{"run_sse", "/run_sse", f.runBody("u", "s", "rest")},
		{"A2A message/stream", server.A2APathV03, a2aBody("message/stream", "a2a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := f.do(http.MethodPost, f.host(), tc.path, testToken, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<22)
			sawFirst := false
			var rest strings.Builder
			for sc.Scan() {
				line := sc.Text()
				if !sawFirst && strings.Contains(line, "before the tool") {
					// goose waits in the tool until now: this event came alone.
					sawFirst = true
					release <- struct{}{}
				}
				if sawFirst {
					rest.WriteString(line + "\n")
				}
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			if !sawFirst || !strings.Contains(rest.String(), "after the tool") {
				t.Fatalf("first event seen: %v; the rest:\n%s", sawFirst, rest.String())
			}
		})
	}
}

// TestBoundAndTimeout: beyond the per-agent bound a request gets 503 with
// Retry-After at once; the held ones get the same after the hold timeout
// when no pod becomes ready.
func TestBoundAndTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.MaxHeld, c.HoldTimeout = 2, timeout }})
	type answer struct {
		resp *http.Response
		body []byte
		err  error
	}
	answers := make(chan answer, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := f.do(http.MethodGet, f.host(), "/list-apps", testToken, "")
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers <- answer{resp, b, err}
		})
	}
	poll.Until(t, "two requests held", func() bool { return f.act.heldFor(f.agent) == 2 })
	resp, body := f.send(http.MethodGet, f.host(), "/list-apps", testToken, "")
	wantError(t, "the third request", resp, body, http.StatusServiceUnavailable, codeHoldFull, true)
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil {
			t.Fatal(a.err)
		}
		wantError(t, "a held request", a.resp, a.body, http.StatusServiceUnavailable, codeWakeTimeout, true)
	}
	if got := f.wakes.Load(); got != 1 {
		t.Fatalf("%d wakes; want 1", got)
	}
	if got := f.act.heldFor(f.agent); got != 0 {
		t.Fatalf("%d requests still counted as held", got)
	}
}

// TestNothingWakesTheAgentButAnAuthenticatedRequest: requests without
// credentials or with wrong ones, the probes, the agent card, preflights
// and hosts naming no agent are answered without a wake; each name of the
// agent's Service reaches it.
func TestNothingWakesTheAgentButAnAuthenticatedRequest(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := t.Context()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name, Labels: render.Labels(f.agent)},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: render.PortName, Port: 8080, TargetPort: intstr.FromString(render.PortName)}}},
	}
	if err := f.env.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}

	for _, host := range []string{
		f.name, f.name + ":8080", f.name + "." + f.ns, f.name + "." + f.ns + ".svc:8080",
		f.host(), f.name + "." + f.ns + ".svc.cluster.local.", svc.Spec.ClusterIP + ":8080",
	} {
		var resp *http.Response
		var body []byte
		poll.UntilNil(t, "host "+host+" reaches the agent", func() error {
			resp, body = f.send(http.MethodGet, host, "/healthz", "", "")
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			return nil
		})
	}
	for _, host := range []string{"nobody", "nobody." + f.ns, f.name + ".elsewhere.svc", "198.18.0.1", f.name + ".example.com", ""} {
		resp, body := f.send(http.MethodPost, host, "/run_sse", testToken, f.runBody("u", "s", "hi"))
		wantError(t, "host "+host, resp, body, http.StatusNotFound, codeUnknownAgent, false)
	}

	resp, body := f.send(http.MethodPost, f.host(), "/run_sse", "", f.runBody("u", "s", "hi"))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(http.MethodPost, f.host(), "/run_sse", "wrong", f.runBody("u", "s", "hi"))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(http.MethodGet, f.host(), "/list-apps?api_key=wrong", "", "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong api_key: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(http.MethodGet, f.host(), "/readyz", "", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "parked") {
		t.Fatalf("readyz: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(http.MethodOptions, f.host(), "/run_sse", "", "")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("preflight: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(http.MethodGet, f.host(), "/.well-known/agent-card.json", "", "")
	var card struct {
		Name string `json:"name"`
		URL  string `json:"url"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &card) != nil || card.Name != f.name ||
		card.URL != render.RESTEndpoint(f.agent)+server.A2APathV03 {
		t.Fatalf("card: %d %s", resp.StatusCode, body)
	}

	if got := f.wakes.Load(); got != 0 {
		t.Fatalf("%d wakes; want none", got)
	}
	var ga agentsv1alpha1.GooseAgent
	if err := f.env.Client.Get(ctx, client.ObjectKeyFromObject(f.agent), &ga); err != nil {
		t.Fatal(err)
	}
	if v, ok := ga.Annotations[agentsv1alpha1.WakeRequestedAtAnnotation]; ok {
		t.Fatalf("the agent was asked to wake at %s", v)
	}

	// The token in the api_key query parameter wakes it, and reaches the
	// pod too.
	f.startPodOnWake()
	resp, body = f.send(http.MethodGet, f.host(), "/list-apps?api_key="+testToken, "", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), f.name) {
		t.Fatalf("list-apps with api_key: %d %s", resp.StatusCode, body)
	}
	if got := f.wakes.Load(); got != 1 {
		t.Fatalf("%d wakes; want 1", got)
	}
}

// TestManuallyParkedAgentIsNotWoken: spec.idle.parked refuses requests with
// 503 and never wakes the agent.
func TestManuallyParkedAgentIsNotWoken(t *testing.T) {
	f := newFixture(t, fixtureOptions{spec: func(s *agentsv1alpha1.GooseAgentSpec) { s.Idle.Parked = true }})
	resp, body := f.send(http.MethodPost, f.host(), "/run_sse", testToken, f.runBody("u", "s", "hi"))
	wantError(t, "run on a manually parked agent", resp, body, http.StatusServiceUnavailable, codeParked, true)
	if got := f.wakes.Load(); got != 0 {
		t.Fatalf("%d wakes; want none", got)
	}
}

// heldFor is how many requests the activator holds for ga.
func (a *Activator) heldFor(ga *agentsv1alpha1.GooseAgent) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := a.holds[client.ObjectKeyFromObject(ga)]; h != nil {
		return h.held
	}
	return 0
}

// TestKubernetesModeWakesOnlyCallersAllowedToUseTheAgent: in the
// kubernetes auth mode the activator reviews tokens as the sidecar does: no
// token (401) and a caller RBAC does not let use the agent (403) wake
// nothing; an allowed caller wakes it and is answered by the pod, which
// checks the caller again.
func TestKubernetesModeWakesOnlyCallersAllowedToUseTheAgent(t *testing.T) {
	env := testenv.Shared(t)
	f := newFixture(t, fixtureOptions{
		spec: func(s *agentsv1alpha1.GooseAgentSpec) {
			s.Sidecar.Auth.Mode = agentsv1alpha1.AuthModeKubernetes
		},
		identity: func(ns, name string) identity.Verifier {
			v, err := identity.NewKubernetes(identity.KubernetesConfig{
				REST: env.Config, Audience: agentsv1alpha1.GroupVersion.Group + "/" + ns + "/" + name, Namespace: ns, Agent: name,
			})
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
	})
	audience := render.Audience(f.agent)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, sa := range []string{"alice", "mallory"} {
		if _, err := cs.CoreV1().ServiceAccounts(f.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "use-helper"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{identity.RBACGroup}, Resources: []string{identity.RBACResource + "/" + identity.RBACSubresource},
			ResourceNames: []string{f.name}, Verbs: []string{identity.RBACVerb},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-uses-helper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "use-helper"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "alice", Namespace: f.ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer must know the binding before anyone asks: a denial is
	// cached.
	alice := "system:serviceaccount:" + f.ns + ":alice"
	poll.UntilNil(t, "alice may use the agent", func() error {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: alice, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + f.ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: f.ns, Group: identity.RBACGroup, Resource: identity.RBACResource, Subresource: identity.RBACSubresource,
				Name: f.name, Verb: identity.RBACVerb,
			},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("not yet: %+v", sar.Status)
		}
		return nil
	})
	token := func(sa string) string {
		exp := int64(3600)
		tr, err := cs.CoreV1().ServiceAccounts(f.ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	resp, body := f.send(http.MethodGet, f.host(), "/list-apps", "", "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(http.MethodGet, f.host(), "/list-apps", token("mallory"), "")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("mallory: %d %s", resp.StatusCode, body)
	}
	if got := f.wakes.Load(); got != 0 {
		t.Fatalf("%d wakes before an allowed caller; want none", got)
	}
	f.startPodOnWake()
	resp, body = f.send(http.MethodGet, f.host(), "/list-apps", token("alice"), "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), f.name) {
		t.Fatalf("alice: %d %s", resp.StatusCode, body)
	}
	if got := f.wakes.Load(); got != 1 {
		t.Fatalf("%d wakes; want 1", got)
	}
}

// TestOIDCModeRefusesWithoutAToken: in the oidc mode a request without a
// bearer token (the shared token is the pods' own) gets the verifier's 401
// with its challenge and wakes nothing. The issuer is never reached: a
// token-less request is refused before discovery.
func TestOIDCModeRefusesWithoutAToken(t *testing.T) {
	f := newFixture(t, fixtureOptions{spec: func(s *agentsv1alpha1.GooseAgentSpec) {
		s.Sidecar.Auth.Mode = agentsv1alpha1.AuthModeOIDC
		s.Sidecar.Auth.OIDC = &agentsv1alpha1.OIDCAuth{IssuerURL: "https://issuer.invalid", Audience: "helper"}
	}})
	resp, body := f.send(http.MethodPost, f.host(), "/run_sse", "", f.runBody("u", "s", "hi"))
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no token: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	resp, body = f.send(http.MethodGet, f.host(), "/.well-known/agent-card.json", "", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "https://issuer.invalid") {
		t.Fatalf("card: %d %s", resp.StatusCode, body)
	}
	if got := f.wakes.Load(); got != 0 {
		t.Fatalf("%d wakes; want none", got)
	}
}

// patchCounter counts the GooseAgent patches, the activator's wakes, on
// their way to the API server.
type patchCounter struct {
	client.Client
	n *atomic.Int64
}

func (c patchCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if _, ok := obj.(*agentsv1alpha1.GooseAgent); ok {
		c.n.Add(1)
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}
