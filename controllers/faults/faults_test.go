package faults_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/faults"
	"github.com/adk2goose/goose-operator/controllers/internal/fixtures"
	"github.com/adk2goose/goose-operator/controllers/internal/ssa"
	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/controllers/stats"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// The run of `make test`: short, and a seed known to pass, so that CI fails
// only for a change. `make test-faults` sets the FAULTS_* variables for a
// long run with a random seed.
const (
	defaultSeed     = 20261129
	defaultAgents   = 10
	defaultOps      = 40
	defaultRestarts = 1
)

type runConfig struct {
	seed                  uint64
	agents, ops, restarts int
	// converge bounds the wait for the invariants after the workload.
	converge time.Duration
}

func configFromEnv(t *testing.T) runConfig {
	t.Helper()
	c := runConfig{seed: defaultSeed, agents: defaultAgents, ops: defaultOps, restarts: defaultRestarts}
	num := func(name string, into *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a count", name, v)
			}
			*into = n
		}
	}
	num("FAULTS_AGENTS", &c.agents)
	num("FAULTS_OPS", &c.ops)
	num("FAULTS_RESTARTS", &c.restarts)
	switch v := os.Getenv("FAULTS_SEED"); v {
	case "":
	case "random":
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.seed = binary.LittleEndian.Uint64(b[:])
	default:
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FAULTS_SEED=%q: want a number or random", v)
		}
		c.seed = s
	}
	// The retry delay is capped at controllers.MaxRetryDelay; allow a few of
	// them plus the work itself.
	c.converge = 3*time.Minute + time.Duration(c.agents)*3*time.Second
	if v := os.Getenv("FAULTS_CONVERGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FAULTS_CONVERGE=%q: %v", v, err)
		}
		c.converge = d
	}
	return c
}

// TestOperatorUnderFaults runs a real manager against a real apiserver while
// its requests fail, conflict, lose their answers and stall, and the
// apiserver restarts under it; a seeded workload creates, changes and
// deletes agents meanwhile. Afterwards every invariant must hold: see check.
func TestOperatorUnderFaults(t *testing.T) {
	testenv.RequireAssets(t)
	rc := configFromEnv(t)
	t.Logf("seed %d: %d agents, %d ops, %d restarts (replay with make test-faults FAULTS_SEED=%d)", rc.seed, rc.agents, rc.ops, rc.restarts, rc.seed)
	ctrl.SetLogger(logr.Discard()) // the manager's logs would drown the test output
	if os.Getenv("TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}

	e, err := testenv.New(testenv.Restartable())
	testenv.SkipOrFail(t, err)
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("failed to stop envtest: %v", err)
		}
	})
	before := goleak.IgnoreCurrent()
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "faults-"}}
	if err := e.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	w := &workload{c: e.Client, ns: ns.Name, rng: mathrand.New(mathrand.NewPCG(rc.seed, 1)), names: rc.agents, exists: map[string]bool{}}
	if err := w.setUp(ctx); err != nil {
		t.Fatal(err)
	}

	inj := faults.NewInjector(rc.seed)
	stopManager := startManager(t, e.Config, inj)
	cl := &cluster{c: e.Client, ns: ns.Name, secrets: map[string]string{}}
	stopCluster := cl.run()

	w.run(t, ctx, rc.ops, rc.restarts, e)
	t.Logf("workload done: %s; faults so far: %s", w.summary(), inj)

	start := time.Now()
	var last []string
	err = waitFor(rc.converge, func() bool {
		last = check(ctx, e.Client, ns.Name, w, cl)
		return len(last) == 0
	})
	t.Logf("faults injected: %s; restarts: %d", inj, w.restarts)
	if err != nil {
		t.Errorf("seed %d: not converged %s after the workload; %d violation(s):\n%s", rc.seed, rc.converge, len(last), strings.Join(last, "\n"))
	} else {
		t.Logf("converged %s after the workload", time.Since(start).Round(time.Second))
	}
	stopCluster()
	stopManager()
	if t.Failed() {
		return
	}
	goleak.VerifyNone(t, before,
		// Idle connections to the apiserver close asynchronously.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
		// See TestManagerStopsCleanly in package controllers.
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/tools/events.(*eventBroadcasterImpl).StartRecordingToSinkWithContext.func1"),
		// envtest's wait on the restarted apiserver process; it ends with
		// the control plane.
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/internal/testing/process.(*State).Start.func1"),
	)
}

// waitFor calls cond until it holds or timeout passes. The run's wait is
// longer than poll's; the violations are reported by the caller.
func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}

// startManager runs the operator's two reconcilers, as cmd/manager does, on
// a manager whose every request passes through the injector.
func startManager(t *testing.T, base *rest.Config, inj *faults.Injector) (stop func()) {
	t.Helper()
	cfg := rest.CopyConfig(base)
	cfg.WrapTransport = inj.Wrap
	cfg.QPS, cfg.Burst = 200, 400
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controllers.CacheOptions(),
		Controller:             config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatal(err)
	}
	refs, err := references.ForManager(mgr)
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.GooseAgentReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		References:              refs,
		Recorder:                mgr.GetEventRecorder("goose-operator"),
		Defaults:                fixtures.Defaults,
		MaxConcurrentReconciles: 4,
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	sr := &stats.Reconciler{Client: mgr.GetClient(), References: refs, Collector: stats.New(stats.Options{}), Interval: 5 * time.Second}
	if err := sr.SetupWithManager(mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("manager stopped with error: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// The referenced objects that agents of the workload read.
const (
	providerSecret = "provider-key"
	providerKey    = "api-key"
)

// workload is the seeded sequence of creates, changes and deletes, and the
// model of which agents should exist when it is done.
type workload struct {
	c      client.Client
	ns     string
	rng    *mathrand.Rand
	names  int
	exists map[string]bool

	creates, changes, deletes, rotations, skipped, restarts int
}

func (w *workload) summary() string {
	return fmt.Sprintf("%d creates, %d changes, %d deletes, %d secret rotations, %d skipped", w.creates, w.changes, w.deletes, w.rotations, w.skipped)
}

func (w *workload) setUp(ctx context.Context) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: providerSecret, Namespace: w.ns}, StringData: map[string]string{providerKey: "sk-0"}}
	return w.c.Create(ctx, s)
}

func (w *workload) name(i int) string { return fmt.Sprintf("agent-%03d", i) }

// run applies ops operations, spread out a little, with restarts apiserver
// restarts at seeded points among them. The first agents are created first,
// so every name is used.
func (w *workload) run(t *testing.T, ctx context.Context, ops, restarts int, e *testenv.Env) {
	t.Helper()
	at := map[int]bool{}
	for len(at) < restarts && ops > 0 {
		at[w.rng.IntN(ops)] = true
	}
	for i := range ops {
		if at[i] {
			w.restart(t, e)
		}
		var err error
		switch n := w.rng.IntN(w.names); {
		case i < w.names && !w.exists[w.name(i)]:
			err = w.create(ctx, w.name(i))
		case !w.exists[w.name(n)]:
			err = w.create(ctx, w.name(n))
		case w.rng.IntN(20) == 0:
			err = w.rotate(ctx)
		case w.rng.IntN(4) == 0:
			err = w.delete(ctx, w.name(n))
		default:
			err = w.change(ctx, w.name(n), i)
		}
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		// Spread the ops so that reconciles overlap them.
		time.Sleep(time.Duration(w.rng.IntN(100)) * time.Millisecond)
	}
}

// restart stops the apiserver for a seeded 1–4 s and starts it again; the
// manager keeps running and sees connections refused meanwhile.
func (w *workload) restart(t *testing.T, e *testenv.Env) {
	t.Helper()
	if err := e.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second + time.Duration(w.rng.IntN(3000))*time.Millisecond)
	if err := e.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	w.restarts++
}

func (w *workload) create(ctx context.Context, name string) error {
	a := &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: agentsv1alpha1.GooseAgentSpec{
			Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"},
			Replicas: ptr.To(int32(1)),
		},
	}
	for range w.rng.IntN(3) {
		mutate(a, w.rng, w.creates)
	}
	err := w.c.Create(ctx, a)
	switch {
	case apierrors.IsAlreadyExists(err):
		// The same name deleted a moment ago and still held by the review
		// binding's finalizer: the operator has not removed it yet.
		w.skipped++
		return nil
	case err != nil:
		return fmt.Errorf("failed to create %s: %w", name, err)
	}
	w.exists[name] = true
	w.creates++
	return nil
}

func (w *workload) change(ctx context.Context, name string, op int) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		a := &agentsv1alpha1.GooseAgent{}
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name}, a); err != nil {
			return err
		}
		mutate(a, w.rng, op)
		return w.c.Update(ctx, a)
	})
	if err != nil {
		return fmt.Errorf("failed to change %s: %w", name, err)
	}
	w.changes++
	return nil
}

// mutate changes one thing of an agent's spec; each needs a different
// child to change, appear or go.
func mutate(a *agentsv1alpha1.GooseAgent, rng *mathrand.Rand, op int) {
	s := &a.Spec
	switch rng.IntN(5) {
	case 0: // the ConfigMap and the pod template's hash
		s.Instructions = fmt.Sprintf("Answer briefly (change %d).", op)
	case 1: // the StatefulSet
		s.Replicas = ptr.To(int32(1 + rng.IntN(3)))
	case 2: // a NetworkPolicy appears or is pruned
		if s.NetworkPolicy == nil {
			s.NetworkPolicy = &agentsv1alpha1.NetworkPolicySpec{}
		} else {
			s.NetworkPolicy = nil
		}
	case 3: // a ServiceAccount, the review binding and its finalizer
		if s.Sidecar.Auth.Mode == agentsv1alpha1.AuthModeKubernetes {
			s.Sidecar.Auth.Mode = ""
		} else {
			s.Sidecar.Auth.Mode = agentsv1alpha1.AuthModeKubernetes
		}
	case 4: // a referenced Secret
		if s.Provider.Name == "ollama" {
			s.Provider = agentsv1alpha1.ProviderSpec{Name: "anthropic", Model: "claude-sonnet-4-5",
				APIKeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: providerSecret, Key: providerKey}}
		} else {
			s.Provider = agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"}
		}
	}
}

func (w *workload) delete(ctx context.Context, name string) error {
	a := &agentsv1alpha1.GooseAgent{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}}
	if err := w.c.Delete(ctx, a); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to delete %s: %w", name, err)
	}
	w.exists[name] = false
	w.deletes++
	return nil
}

// rotate changes the referenced provider Secret: every agent reading it
// must roll.
func (w *workload) rotate(ctx context.Context) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: providerSecret}, s); err != nil {
			return err
		}
		s.Data[providerKey] = fmt.Appendf(nil, "sk-%d", w.rotations+1)
		return w.c.Update(ctx, s)
	})
	if err != nil {
		return fmt.Errorf("failed to rotate Secret %s: %w", providerSecret, err)
	}
	w.rotations++
	return nil
}

// cluster plays the parts of a cluster that envtest does not run, through
// a client without faults: the StatefulSet controller (status follows the
// spec at once) and the garbage collector (children of a deleted agent are
// deleted). It also watches the generated Secrets' values.
type cluster struct {
	c  client.Client
	ns string

	mu sync.Mutex
	// secrets holds each generated value first seen, by owner UID and key.
	secrets map[string]string
	changed []secretChange
}

// secretChange is a generated value seen to change.
type secretChange struct {
	owner types.UID
	msg   string
}

func (cl *cluster) run() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// Errors while the apiserver restarts are retried next round.
			_ = cl.statefulSets(ctx)
			_ = cl.collectGarbage(ctx)
			_ = cl.watchSecrets(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// statefulSets makes every StatefulSet's status say its pods are ready and
// up to date, as the StatefulSet controller would once they are.
func (cl *cluster) statefulSets(ctx context.Context) error {
	var list appsv1.StatefulSetList
	if err := cl.c.List(ctx, &list, client.InNamespace(cl.ns)); err != nil {
		return err
	}
	for i := range list.Items {
		s := &list.Items[i]
		want := ptr.Deref(s.Spec.Replicas, 1)
		rev := fmt.Sprintf("%s-%d", s.Name, s.Generation)
		st := appsv1.StatefulSetStatus{
			ObservedGeneration: s.Generation, Replicas: want, ReadyReplicas: want, CurrentReplicas: want,
			UpdatedReplicas: want, AvailableReplicas: want, CurrentRevision: rev, UpdateRevision: rev,
		}
		if equality.Semantic.DeepEqual(s.Status, st) {
			continue
		}
		s.Status = st
		if err := cl.c.Status().Update(ctx, s); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// collectGarbage deletes the children whose controlling agent is gone, as
// the garbage collector does after a background deletion.
func (cl *cluster) collectGarbage(ctx context.Context) error {
	children, err := listChildren(ctx, cl.c, cl.ns)
	if err != nil {
		return err
	}
	// Listed after the children: an owner of a listed child is in it unless
	// it is gone.
	live, err := liveAgents(ctx, cl.c, cl.ns)
	if err != nil {
		return err
	}
	for _, o := range children {
		ref := metav1.GetControllerOf(o)
		if ref == nil || live.byUID[ref.UID] != nil {
			continue
		}
		if err := cl.c.Delete(ctx, o, client.Preconditions{UID: ptr.To(o.GetUID())}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

// watchSecrets records the generated values of each agent's Secret and
// notes any that changed: they must be generated once per agent.
func (cl *cluster) watchSecrets(ctx context.Context) error {
	var list corev1.SecretList
	if err := cl.c.List(ctx, &list, client.InNamespace(cl.ns), client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
		return err
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, s := range list.Items {
		ref := metav1.GetControllerOf(&s)
		if ref == nil {
			continue
		}
		for _, k := range []string{render.KeyGooseSecret, render.KeyAuthToken} {
			v, ok := s.Data[k]
			if !ok {
				continue
			}
			id := string(ref.UID) + "/" + s.Name + "/" + k
			if was, seen := cl.secrets[id]; !seen {
				cl.secrets[id] = string(v)
			} else if was != string(v) {
				cl.changed = append(cl.changed, secretChange{owner: ref.UID, msg: fmt.Sprintf("Secret %s: generated %s changed for owner %s", s.Name, k, ref.UID)})
				cl.secrets[id] = string(v)
			}
		}
	}
	return nil
}

// secretChanges are the changes of live agents' generated values. A
// reconcile from a cache that has not seen an agent's deletion may apply
// its children again, under the dead owner, with new values; the garbage
// collector removes them, and no live agent ever uses them.
func (cl *cluster) secretChanges(live agents) []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []string
	for _, c := range cl.changed {
		if live.byUID[c.owner] != nil {
			out = append(out, c.msg)
		}
	}
	return out
}

type agents struct {
	byName map[string]*agentsv1alpha1.GooseAgent
	byUID  map[types.UID]*agentsv1alpha1.GooseAgent
}

func liveAgents(ctx context.Context, c client.Client, ns string) (agents, error) {
	var list agentsv1alpha1.GooseAgentList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return agents{}, err
	}
	out := agents{byName: map[string]*agentsv1alpha1.GooseAgent{}, byUID: map[types.UID]*agentsv1alpha1.GooseAgent{}}
	for i := range list.Items {
		a := &list.Items[i]
		out.byName[a.Name], out.byUID[a.UID] = a, a
	}
	return out, nil
}

// listChildren lists every object of a child kind labelled as the
// operator's in ns.
func listChildren(ctx context.Context, c client.Client, ns string) ([]client.Object, error) {
	var out []client.Object
	for _, o := range controllers.ChildObjects() {
		gvk, err := apiutil.GVKForObject(o, c.Scheme())
		if err != nil {
			return nil, err
		}
		l, err := c.Scheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err != nil {
			return nil, err
		}
		list, ok := l.(client.ObjectList)
		if !ok {
			return nil, fmt.Errorf("%T is no list", l)
		}
		if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			obj, ok := it.(client.Object)
			if !ok {
				return nil, fmt.Errorf("%T is no object", it)
			}
			obj.GetObjectKind().SetGroupVersionKind(gvk)
			out = append(out, obj)
		}
	}
	return out, nil
}

// check returns every invariant that does not hold now:
//   - each agent the workload left has status and conditions at its
//     generation, Ready and not Progressing or Degraded;
//   - each deleted agent is gone (no stuck finalizer), and a live one holds
//     only the review finalizer, and only in mode kubernetes;
//   - its children are exactly the render of its spec, each with one
//     controller owner reference, to a live agent;
//   - a review binding exists exactly for each live agent in mode
//     kubernetes (none left for deleted agents);
//   - no generated Secret value of a live agent ever changed.
func check(ctx context.Context, c client.Client, ns string, w *workload, cl *cluster) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	live, err := liveAgents(ctx, c, ns)
	if err != nil {
		return []string{err.Error()}
	}
	for i := range w.names {
		name := w.name(i)
		a := live.byName[name]
		switch {
		case !w.exists[name] && a != nil:
			add("%s: deleted, still there with finalizers %v", name, a.Finalizers)
		case w.exists[name] && a == nil:
			add("%s: missing", name)
		case a != nil:
			bad = append(bad, checkAgent(a)...)
		}
	}
	children, err := listChildren(ctx, c, ns)
	if err != nil {
		return append(bad, err.Error())
	}
	byOwner := map[types.UID][]client.Object{}
	for _, o := range children {
		id := o.GetObjectKind().GroupVersionKind().Kind + "/" + o.GetName()
		var ctl []metav1.OwnerReference
		for _, r := range o.GetOwnerReferences() {
			if ptr.Deref(r.Controller, false) {
				ctl = append(ctl, r)
			}
		}
		switch {
		case len(ctl) != 1:
			add("%s: %d controller owner references, want 1", id, len(ctl))
		case live.byUID[ctl[0].UID] == nil:
			add("%s: owner %s is gone (orphan)", id, ctl[0].UID)
		default:
			byOwner[ctl[0].UID] = append(byOwner[ctl[0].UID], o)
		}
	}
	for _, a := range live.byName {
		if a.DeletionTimestamp.IsZero() {
			bad = append(bad, checkChildren(ctx, c, a, byOwner[a.UID])...)
		}
	}
	bad = append(bad, checkReviewBindings(ctx, c, ns, live)...)
	return append(bad, cl.secretChanges(live)...)
}

func checkAgent(a *agentsv1alpha1.GooseAgent) []string {
	var bad []string
	if !a.DeletionTimestamp.IsZero() {
		return []string{a.Name + ": being deleted, but the workload did not delete it"}
	}
	if a.Status.ObservedGeneration != a.Generation {
		bad = append(bad, fmt.Sprintf("%s: status at generation %d, spec at %d", a.Name, a.Status.ObservedGeneration, a.Generation))
	}
	for _, want := range []struct {
		t string
		s metav1.ConditionStatus
	}{
		{agentsv1alpha1.ConditionReady, metav1.ConditionTrue},
		{agentsv1alpha1.ConditionProgressing, metav1.ConditionFalse},
		{agentsv1alpha1.ConditionDegraded, metav1.ConditionFalse},
	} {
		c := meta.FindStatusCondition(a.Status.Conditions, want.t)
		switch {
		case c == nil:
			bad = append(bad, fmt.Sprintf("%s: no %s condition", a.Name, want.t))
		case c.Status != want.s || c.ObservedGeneration != a.Generation:
			bad = append(bad, fmt.Sprintf("%s: %s=%s/%s at generation %d (spec at %d), want %s: %s",
				a.Name, want.t, c.Status, c.Reason, c.ObservedGeneration, a.Generation, want.s, c.Message))
		}
	}
	wantFinalizers := []string(nil)
	if render.IsKubernetesMode(a) {
		wantFinalizers = []string{controllers.ReviewFinalizer}
	}
	if !slices.Equal(a.Finalizers, wantFinalizers) {
		bad = append(bad, fmt.Sprintf("%s: finalizers %v, want %v", a.Name, a.Finalizers, wantFinalizers))
	}
	return bad
}

// checkChildren compares an agent's children with the render of its spec:
// the same set, and each carrying exactly the fields the operator applies.
func checkChildren(ctx context.Context, c client.Client, a *agentsv1alpha1.GooseAgent, live []client.Object) []string {
	fail := func(err error) []string { return []string{fmt.Sprintf("%s: %v", a.Name, err)} }
	var gen render.Generated
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: render.SecretName(a)}, s); err != nil {
		return fail(err)
	}
	gen.GooseSecretKey, gen.AuthToken = string(s.Data[render.KeyGooseSecret]), string(s.Data[render.KeyAuthToken])
	values, missing, err := render.Resolve(render.References(a), func(kind render.RefKind, name string) (map[string]string, bool, error) {
		var data map[string]string
		var err error
		switch kind {
		case render.KindSecret:
			o := &corev1.Secret{}
			if err = c.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, o); err == nil {
				data = map[string]string{}
				for k, v := range o.Data {
					data[k] = string(v)
				}
			}
		default:
			o := &corev1.ConfigMap{}
			if err = c.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, o); err == nil {
				data = o.Data
			}
		}
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return data, err == nil, err
	})
	if err != nil {
		return fail(err)
	}
	if len(missing) > 0 {
		return fail(fmt.Errorf("references missing: %v", missing))
	}
	d, err := render.Build(render.Inputs{Agent: a, Defaults: fixtures.Defaults, Generated: gen, Values: values})
	if err != nil {
		return fail(err)
	}
	liveByID := map[string]client.Object{}
	for _, o := range live {
		liveByID[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = o
	}
	var bad []string
	for _, want := range d.Objects() {
		r, ok := want.(interface {
			GetName() *string
			GetKind() *string
		})
		if !ok {
			return fail(fmt.Errorf("%T has no name", want))
		}
		id := ptr.Deref(r.GetKind(), "") + "/" + ptr.Deref(r.GetName(), "")
		o, ok := liveByID[id]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: %s missing", a.Name, id))
			continue
		}
		delete(liveByID, id)
		applied, err := controllers.ExtractApplied(o)
		if err != nil {
			return fail(err)
		}
		same, err := ssa.Unchanged(applied, want)
		if err != nil {
			return fail(err)
		}
		if !same {
			bad = append(bad, fmt.Sprintf("%s: %s differs from the render", a.Name, id))
		}
	}
	for id := range liveByID {
		bad = append(bad, fmt.Sprintf("%s: %s is not rendered (not pruned)", a.Name, id))
	}
	return bad
}

// checkReviewBindings: one ClusterRoleBinding per live agent in mode
// kubernetes, none for any other, and no RoleBinding of the operator's
// left for an agent that is gone.
func checkReviewBindings(ctx context.Context, c client.Client, ns string, live agents) []string {
	var bad []string
	want := map[string]bool{}
	for _, a := range live.byName {
		if a.DeletionTimestamp.IsZero() && render.IsKubernetesMode(a) {
			want[render.ReviewBindingName(a)] = true
		}
	}
	var crbs rbacv1.ClusterRoleBindingList
	if err := c.List(ctx, &crbs, client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
		return []string{err.Error()}
	}
	for _, b := range crbs.Items {
		if !strings.Contains(b.Name, ns) {
			continue // another test's
		}
		if !want[b.Name] {
			bad = append(bad, fmt.Sprintf("ClusterRoleBinding %s: left for an agent that is gone or left mode kubernetes", b.Name))
		}
		delete(want, b.Name)
	}
	for name := range want {
		bad = append(bad, fmt.Sprintf("ClusterRoleBinding %s: missing", name))
	}
	var rbs rbacv1.RoleBindingList
	if err := c.List(ctx, &rbs, client.InNamespace(ns), client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
		return append(bad, err.Error())
	}
	for _, b := range rbs.Items {
		if a := live.byName[b.Labels[render.LabelInstance]]; a == nil || !a.DeletionTimestamp.IsZero() {
			bad = append(bad, fmt.Sprintf("RoleBinding %s: left for an agent that is gone", b.Name))
		}
	}
	return bad
}
