package stats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/controllers/stats"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest"
)

const token = "stats-token"

func TestMain(m *testing.M) { os.Exit(testenv.RunShared(m)) }

func sharedEnv(t *testing.T) *testenv.Env {
	t.Helper()
	return testenv.Shared(t)
}

// sidecar is a real adk2goose server (sidecar/server) on loopback, in front
// of a fake `goose serve`. Restarting it keeps its data directory.
type sidecar struct {
	t       *testing.T
	dataDir string
	backend goose.Backend
	mu      sync.Mutex
	url     string
	stop    func()
	// configure, when set, adjusts the server's config at every start.
	configure func(*server.Config)
}

func startSidecar(t *testing.T, fake *goosetest.Serve) *sidecar {
	t.Helper()
	b, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	s := &sidecar{t: t, dataDir: t.TempDir(), backend: b}
	s.start()
	t.Cleanup(s.halt)
	return s
}

func (s *sidecar) start() {
	cfg := server.Config{Backend: s.backend, AppName: "goose", DataDir: s.dataDir, AuthToken: token}
	if s.configure != nil {
		s.configure(&cfg)
	}
	sc := servertest.Start(s.t, cfg)
	s.mu.Lock()
	s.url, s.stop = sc.URL, sc.Stop
	s.mu.Unlock()
}

// halt stops the sidecar; its port then refuses connections.
func (s *sidecar) halt() {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (s *sidecar) statsURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url + "/stats"
}

// converse creates a session and runs one turn over the ADK REST API.
func (s *sidecar) converse(user, session, text string) {
	s.t.Helper()
	s.post("/apps/goose/users/"+user+"/sessions/"+session, nil)
	s.post("/run", map[string]any{
		"appName": "goose", "userId": user, "sessionId": session,
		"newMessage": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}},
	})
}

func (s *sidecar) post(path string, body any) {
	s.t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	s.mu.Lock()
	u := s.url
	s.mu.Unlock()
	req, _ := http.NewRequest(http.MethodPost, u+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("POST %s: %d %s", path, resp.StatusCode, out)
	}
}

// figures reads the sidecar's own /stats, the ground truth the status must sum.
func (s *sidecar) figures() server.Stats {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.statsURL(), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st server.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		s.t.Fatal(err)
	}
	return st
}

// fixture is an agent with two pods whose sidecars run in-process. envtest
// has no kubelet, so the test plays it: it creates the pods and marks them
// ready with an IP.
type fixture struct {
	t        *testing.T
	agent    *agentsv1alpha1.GooseAgent
	sidecars map[string]*sidecar
	applies  atomic.Int64
	rec      *stats.Reconciler
	reg      *prometheus.Registry
}

func newFixture(t *testing.T, replicas int) *fixture {
	t.Helper()
	env := sharedEnv(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "stats-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	a := &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "talker"},
		Spec:       agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"}},
	}
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	// The main reconciler generates this Secret; it is not running here.
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: render.SecretName(a)},
		Data:       map[string][]byte{render.KeyAuthToken: []byte(token)},
	}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, agent: a, sidecars: map[string]*sidecar{}, reg: prometheus.NewRegistry()}
	fake := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	for i := range replicas {
		name := fmt.Sprintf("%s-%d", a.Name, i)
		f.sidecars[name] = startSidecar(t, fake)
		f.createReadyPod(name)
	}
	counting, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	counted := interceptor.NewClient(counting, interceptor.Funcs{
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			f.applies.Add(1)
			return c.SubResource(sub).Apply(ctx, o, opts...)
		},
	})
	m, err := stats.NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.rec = &stats.Reconciler{
		Client:     counted,
		References: startReferences(t, counting),
		Collector:  stats.New(stats.Options{Timeout: time.Second}),
		Interval:   time.Minute,
		Metrics:    m,
		PodURL: func(p *corev1.Pod, _ int32) string {
			if s, ok := f.sidecars[p.Name]; ok {
				return s.statsURL()
			}
			return ""
		},
	}
	return f
}

// startReferences runs a reference tracker, as the manager would, until the
// test ends.
func startReferences(t *testing.T, direct client.Reader) *references.Tracker {
	t.Helper()
	env := sharedEnv(t)
	refs, err := references.New(env.Config, env.Scheme, direct)
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunSynced(t, refs)
	return refs
}

// newFixtureWithOneSession is a one-replica fixture after one conversation
// and one poll, and the status that poll wrote.
func newFixtureWithOneSession(t *testing.T) (*fixture, agentsv1alpha1.GooseAgentStatus) {
	t.Helper()
	f := newFixture(t, 1)
	f.sidecars["talker-0"].converse("alice", "s1", "hi")
	f.reconcile()
	st := f.status()
	if st.Sessions.Total != 1 {
		t.Fatalf("sessions %+v, want 1", st.Sessions)
	}
	return f, st
}

func (f *fixture) createReadyPod(name string) {
	f.createPod(name)
	f.setReady(name)
}

// createPod creates a pod as the StatefulSet does: scheduled nowhere yet,
// not ready.
func (f *fixture) createPod(name string) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.agent.Namespace, Name: name, Labels: render.SelectorLabels(f.agent)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "goose", Image: "goose"}}},
	}
	if err := sharedEnv(f.t).Client.Create(context.Background(), p); err != nil {
		f.t.Fatal(err)
	}
}

// setReady plays the kubelet: the pod runs, has an IP and is ready.
func (f *fixture) setReady(name string) {
	ctx := context.Background()
	p := &corev1.Pod{}
	if err := sharedEnv(f.t).Client.Get(ctx, client.ObjectKey{Namespace: f.agent.Namespace, Name: name}, p); err != nil {
		f.t.Fatal(err)
	}
	p.Status = corev1.PodStatus{
		PodIP:      "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := sharedEnv(f.t).Client.Status().Update(ctx, p); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) reconcile() reconcile.Result {
	f.t.Helper()
	res, err := f.rec.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(f.agent)})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func (f *fixture) status() agentsv1alpha1.GooseAgentStatus {
	f.t.Helper()
	var a agentsv1alpha1.GooseAgent
	if err := sharedEnv(f.t).Client.Get(context.Background(), client.ObjectKeyFromObject(f.agent), &a); err != nil {
		f.t.Fatal(err)
	}
	return a.Status
}

func (f *fixture) sum() (agentsv1alpha1.SessionStats, agentsv1alpha1.TokenStats) {
	var s agentsv1alpha1.SessionStats
	var tk agentsv1alpha1.TokenStats
	for _, sc := range f.sidecars {
		st := sc.figures()
		s.Total += int64(st.Sessions.Total)
		s.Active += int64(st.Sessions.Active)
		s.Users += int64(st.Users)
		tk.Input += st.Tokens.Input
		tk.Output += st.Tokens.Output
		tk.Total += st.Tokens.Total
	}
	return s, tk
}

func condition(st agentsv1alpha1.GooseAgentStatus) *metav1.Condition {
	return meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionStatsAvailable)
}

func TestStatusSumsReplicasAndSurvivesRestartsAndOutages(t *testing.T) {
	f := newFixture(t, 2)
	f.sidecars["talker-0"].converse("alice", "s1", "hello there")
	f.sidecars["talker-1"].converse("bob", "s2", "what is the weather")
	f.sidecars["talker-1"].converse("bob", "s3", "and tomorrow?")

	if res := f.reconcile(); res.RequeueAfter < 30*time.Second || res.RequeueAfter > 90*time.Second {
		t.Fatalf("requeue after %v, want the agent's slot within 0.5–1.5 intervals", res.RequeueAfter)
	}
	wantSessions, wantTokens := f.sum()
	st := f.status()
	if st.Sessions != wantSessions || st.Tokens != wantTokens {
		t.Fatalf("status sessions %+v tokens %+v, want the sum of both sidecars: %+v %+v", st.Sessions, st.Tokens, wantSessions, wantTokens)
	}
	if st.Sessions.Total != 3 || st.Sessions.Users != 2 || st.Tokens.Total == 0 || st.StatsUpdatedAt == nil {
		t.Fatalf("implausible figures: %+v", st)
	}
	if c := condition(st); c == nil || c.Status != metav1.ConditionTrue || c.Reason != agentsv1alpha1.ReasonStatsCollected {
		t.Fatalf("StatsAvailable = %+v, want True/StatsCollected", c)
	}
	if got := metricValue(t, f.reg, "goose_operator_agent_tokens", "total"); got != float64(wantTokens.Total) {
		t.Errorf("token metric %v, want %d", got, wantTokens.Total)
	}

	// Nothing changed: no status write.
	before := f.applies.Load()
	f.reconcile()
	f.reconcile()
	if n := f.applies.Load() - before; n != 0 {
		t.Fatalf("%d status writes when nothing changed, want 0", n)
	}

	// A sidecar restart (same data volume) does not reset the figures.
	f.sidecars["talker-0"].halt()
	f.sidecars["talker-0"].start()
	before = f.applies.Load()
	f.reconcile()
	if got := f.status(); got.Sessions != wantSessions || got.Tokens != wantTokens {
		t.Fatalf("after a sidecar restart: sessions %+v tokens %+v, want %+v %+v", got.Sessions, got.Tokens, wantSessions, wantTokens)
	}
	if n := f.applies.Load() - before; n != 0 {
		t.Fatalf("%d status writes after a restart that changed nothing, want 0", n)
	}

	// A conversation raises the figures at the next poll.
	f.sidecars["talker-0"].converse("carol", "s4", "one more")
	f.reconcile()
	raised := f.status()
	if raised.Sessions.Total != 4 || raised.Tokens.Total <= wantTokens.Total {
		t.Fatalf("after another conversation: %+v %+v, want 4 sessions and more than %d tokens", raised.Sessions, raised.Tokens, wantTokens.Total)
	}

	// An unreachable pod marks the figures stale without zeroing them.
	f.sidecars["talker-1"].halt()
	f.reconcile()
	stale := f.status()
	if stale.Sessions != raised.Sessions || stale.Tokens != raised.Tokens {
		t.Fatalf("an outage changed the figures: %+v %+v, want %+v %+v", stale.Sessions, stale.Tokens, raised.Sessions, raised.Tokens)
	}
	c := condition(stale)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != agentsv1alpha1.ReasonStatsStale || !strings.Contains(c.Message, "talker-1") {
		t.Fatalf("StatsAvailable = %+v, want False/StatsStale naming talker-1", c)
	}
	if got := metricValue(t, f.reg, "goose_operator_agent_stats_stale", ""); got != 1 {
		t.Errorf("stale metric %v, want 1", got)
	}

	// kubectl shows the collected figures.
	out, err := exec.Command(sharedEnv(t).Kubectl(), "--kubeconfig", sharedEnv(t).Kubeconfig, "-n", f.agent.Namespace,
		"get", "gooseagents", "-o", "wide").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl: %v\n%s", err, out)
	}
	cell := tableRow(string(out))
	if cell["SESSIONS"] != fmt.Sprint(raised.Sessions.Total) || cell["TOKENS"] != fmt.Sprint(raised.Tokens.Total) || cell["ACTIVE"] != fmt.Sprint(raised.Sessions.Active) {
		t.Fatalf("kubectl columns %v do not show the status figures %+v %+v:\n%s", cell, raised.Sessions, raised.Tokens, out)
	}
}

func TestMissingTokenKeepsFiguresAndSaysWhy(t *testing.T) {
	f, known := newFixtureWithOneSession(t)
	env := sharedEnv(t)
	if err := env.Client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: f.agent.Namespace, Name: render.SecretName(f.agent)}}); err != nil {
		t.Fatal(err)
	}
	// The token is remembered until the watch reports the deletion: poll
	// until it has, then check that the figures were kept.
	var st agentsv1alpha1.GooseAgentStatus
	poll.Until(t, "the stats to go stale", func() bool {
		f.reconcile()
		st = f.status()
		c := condition(st)
		return c != nil && c.Reason == agentsv1alpha1.ReasonStatsStale
	})
	if st.Sessions != known.Sessions || st.Tokens != known.Tokens {
		t.Fatalf("figures changed without a token: %+v %+v", st.Sessions, st.Tokens)
	}
	if c := condition(st); c == nil || c.Reason != agentsv1alpha1.ReasonStatsStale || !strings.Contains(c.Message, "sidecar token") {
		t.Fatalf("StatsAvailable = %+v, want StatsStale about the token", c)
	}
}

// TestNoWriteUntilAPodIsReady: a new agent, before its Secret and pods exist
// and while its pod starts, gets no status write at all (Ready already says
// why; StatsAvailable stays absent), and never an error about the Secret it
// does not need yet. Its first ready pod brings the first write.
func TestNoWriteUntilAPodIsReady(t *testing.T) {
	f := newFixture(t, 0)
	secret := &corev1.Secret{}
	env := sharedEnv(t)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.agent.Namespace, Name: render.SecretName(f.agent)}, secret); err != nil {
		t.Fatal(err)
	}
	// The main reconciler has not created the Secret yet.
	if err := env.Client.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	nothing := func(when string) {
		t.Helper()
		f.reconcile()
		if c := condition(f.status()); c != nil || f.applies.Load() != 0 {
			t.Fatalf("%s: %d status applies, StatsAvailable = %+v; want none", when, f.applies.Load(), c)
		}
	}
	nothing("no pods")
	fake := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	f.sidecars["talker-0"] = startSidecar(t, fake)
	f.createPod("talker-0")
	nothing("pod starting")

	secret.ResourceVersion = ""
	if err := env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	f.setReady("talker-0")
	f.reconcile()
	if c := condition(f.status()); c == nil || c.Status != metav1.ConditionTrue || c.Reason != agentsv1alpha1.ReasonStatsCollected || c.Message != "collected from 1 pod(s)" {
		t.Fatalf("pod ready: StatsAvailable = %+v, want collected from 1 pod(s)", c)
	}
	if n := f.applies.Load(); n != 1 {
		t.Fatalf("pod ready: %d status applies, want 1", n)
	}
}

// TestManagerPollsOnInterval runs the reconciler in a real manager: figures
// reach status within one interval of a conversation, with no other trigger.
func TestManagerPollsOnInterval(t *testing.T) {
	f := newFixture(t, 1)
	env := sharedEnv(t)
	skip := true // the controller name is registered once per process; -count=N runs it N times
	mgr, err := manager.New(env.Config, manager.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controllers.CacheOptions(), Controller: config.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	if f.rec.References, err = references.ForManager(mgr); err != nil {
		t.Fatal(err)
	}
	const interval = 300 * time.Millisecond
	f.rec.Client = mgr.GetClient()
	f.rec.Interval = interval
	if err := f.rec.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	waitFor := func(what string, ok func(agentsv1alpha1.GooseAgentStatus) bool) {
		t.Helper()
		poll.UntilNil(t, what, func() error {
			if st := f.status(); !ok(st) {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
	}
	waitFor("first collection", func(s agentsv1alpha1.GooseAgentStatus) bool { return condition(s) != nil })
	f.sidecars["talker-0"].converse("alice", "s1", "hello")
	waitFor("the conversation to show", func(s agentsv1alpha1.GooseAgentStatus) bool {
		return s.Sessions.Total == 1 && s.Tokens.Total > 0
	})
}

// tableRow maps kubectl's column names to the cells of its last row, by the
// header's column offsets (cells may be empty, so splitting on spaces fails).
func tableRow(out string) map[string]string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header, row := lines[0], lines[len(lines)-1]
	var starts []int
	for i := range header {
		if header[i] != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	cells := map[string]string{}
	for k, start := range starts {
		end := len(header)
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		name := strings.TrimSpace(header[start:end])
		if start < len(row) {
			cells[name] = strings.TrimSpace(row[start:min(end, len(row))])
		}
	}
	return cells
}

// metricValue reads a gauge (with the given direction label, when set).
func metricValue(t *testing.T, reg *prometheus.Registry, name, direction string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := direction == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "direction" && l.GetValue() == direction {
					match = true
				}
			}
			if match {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("metric %s{direction=%q} not found", name, direction)
	return 0
}

func (s *sidecar) baseURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// TestParkedAgentIsNotPolled: once a parked agent's pods are gone the
// reconciler stops polling it and keeps its last figures; while a pod is
// still there it polls on.
func TestParkedAgentIsNotPolled(t *testing.T) {
	f, figures := newFixtureWithOneSession(t)

	env := sharedEnv(t)
	ctx := context.Background()
	a := &agentsv1alpha1.GooseAgent{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.agent), a); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionParked, Status: metav1.ConditionTrue,
		Reason: agentsv1alpha1.ReasonParkRequested, Message: "parked by spec.idle.parked"})
	if err := env.Client.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if res := f.reconcile(); res.RequeueAfter == 0 {
		t.Fatal("parked with its pod still there: no next poll, want one")
	}
	f.sidecars["talker-0"].halt()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.agent.Namespace, Name: "talker-0"}}
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, "the pod to be gone", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err == nil {
			return fmt.Errorf("pod still there")
		}
		return nil
	})
	if res := f.reconcile(); res.RequeueAfter != 0 || res.Requeue { //nolint:staticcheck // Requeue is what a poll would set too
		t.Fatalf("parked without pods: next poll %+v, want none", res)
	}
	if st := f.status(); st.Sessions != figures.Sessions || st.Tokens != figures.Tokens {
		t.Fatalf("parked: figures %+v %+v, want the last ones %+v %+v", st.Sessions, st.Tokens, figures.Sessions, figures.Tokens)
	}
}
