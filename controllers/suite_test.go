package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/internal/fixtures"
	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/stats"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// env is the control plane shared by the envtest tests of this package; nil
// when KUBEBUILDER_ASSETS is unset (the tests then skip, except under CI).
var (
	env    *testenv.Env
	envErr error
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // manager logs would drown the test output
	if os.Getenv("TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	env, envErr = testenv.New()
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop envtest:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func needEnv(t testing.TB) *testenv.Env {
	t.Helper()
	testenv.SkipOrFail(t, envErr)
	return env
}

// writeCounter counts the API writes a manager's client makes. It wraps the
// client the reconciler uses, so every Create/Update/Patch/Apply/Delete,
// status writes included, passes through it.
type writeCounter struct{ n atomic.Int64 }

func (w *writeCounter) Load() int64 { return w.n.Load() }

func (w *writeCounter) wrap(c client.WithWatch) client.WithWatch {
	inc := func() { w.n.Add(1) }
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			inc()
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			inc()
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			inc()
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			inc()
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			inc()
			return c.Delete(ctx, o, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteAllOfOption) error {
			inc()
			return c.DeleteAllOf(ctx, o, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, o, so client.Object, opts ...client.SubResourceCreateOption) error {
			inc()
			return c.SubResource(sub).Create(ctx, o, so, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			inc()
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			inc()
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			inc()
			return c.SubResource(sub).Apply(ctx, o, opts...)
		},
	})
}

// eventCounter counts the Events the reconciler asks to record. The
// recorder sends them to the API server asynchronously; counting the calls
// lets a test check what the reconciler did without waiting on that.
type eventCounter struct {
	events.EventRecorder
	n        atomic.Int64
	mu       sync.Mutex
	byReason map[string]int
}

func (c *eventCounter) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	c.n.Add(1)
	c.mu.Lock()
	if c.byReason == nil {
		c.byReason = map[string]int{}
	}
	c.byReason[reason]++
	c.mu.Unlock()
	c.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// count is how many Events of reason were recorded.
func (c *eventCounter) count(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byReason[reason]
}

// harness is one running manager with the GooseAgent controller.
type harness struct {
	r      *controllers.GooseAgentReconciler
	cache  cache.Cache
	writes *writeCounter
	events *eventCounter
	stop   func()
}

type harnessOpts struct {
	generate    func(string) (string, error)
	concurrency int
	// wrap, when set, wraps the manager's client (inside the write counter).
	wrap func(client.WithWatch) client.WithWatch
	// stats also runs the stats reconciler, as cmd/manager does.
	stats bool
	// config is the manager's client configuration; the envtest admin's
	// when nil.
	config *rest.Config
	// activity, activator and idleRecheck set the reconciler's fields of
	// the same names (parking).
	activator   *controllers.Activator
	idleRecheck time.Duration
	// statsURL, when set, makes the reconciler ask the agents' pods for
	// their activity through the stats reconciler, at this URL a pod.
	statsURL func(pod *corev1.Pod, port int32) string
	// namespace, when set, is the only namespace the manager sees: tests
	// that count its writes must not count those for the agents other
	// tests (or other -count runs) left in the shared control plane.
	namespace string
}

func startManager(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	e := needEnv(t)
	w := &writeCounter{}
	skip := true
	cfg := e.Config
	if o.config != nil {
		cfg = o.config
	}
	cacheOpts := controllers.CacheOptions()
	if o.namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOpts,
		// Several managers run in one test binary, one after another.
		Controller: config.Controller{SkipNameValidation: &skip},
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, opts) // reads from the cache like the default client
			if err != nil {
				return nil, err
			}
			if o.wrap != nil {
				c = o.wrap(c)
			}
			return w.wrap(c), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	refs, err := references.ForManager(mgr)
	if err != nil {
		t.Fatal(err)
	}
	ev := &eventCounter{EventRecorder: mgr.GetEventRecorder("goose-operator")}
	r := &controllers.GooseAgentReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		References:              refs,
		Recorder:                ev,
		Defaults:                fixtures.Defaults,
		GenerateToken:           o.generate,
		MaxConcurrentReconciles: max(o.concurrency, 2),
		Activator:               o.activator,
		IdleRecheck:             o.idleRecheck,
	}
	if o.statsURL != nil {
		r.Activity = &stats.Reconciler{Client: mgr.GetClient(), References: refs, Collector: stats.New(stats.Options{}), PodURL: o.statsURL}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	if o.stats {
		sr := &stats.Reconciler{Client: mgr.GetClient(), References: refs, Collector: stats.New(stats.Options{})}
		if err := sr.SetupWithManager(mgr); err != nil {
			cancel()
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager stopped with error: %v", err)
		}
	}
	t.Cleanup(stop)
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return &harness{r: r, cache: mgr.GetCache(), writes: w, events: ev, stop: stop}
}

// newNamespace creates a namespace for one test.
func newNamespace(t testing.TB, prefix string) string {
	t.Helper()
	e := needEnv(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// ensureNamespace creates a fixed namespace unless it exists.
func ensureNamespace(t testing.TB, name string) {
	t.Helper()
	e := needEnv(t)
	err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// createCase creates a fixture's agent and referenced objects in ns.
func createCase(t testing.TB, c *fixtures.Case, ns string) {
	t.Helper()
	e := needEnv(t)
	ctx := context.Background()
	for _, s := range c.Secrets {
		s = s.DeepCopy()
		s.Namespace = ns
		if err := e.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, cm := range c.ConfigMaps {
		cm = cm.DeepCopy()
		cm.Namespace = ns
		if err := e.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	a := c.Agent.DeepCopy()
	a.Namespace = ns
	if err := e.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	c.Agent = a
}

// TestManagerStopsCleanly: a stopped manager with the controller leaves no
// goroutine behind (beyond those already running before it started).
func TestManagerStopsCleanly(t *testing.T) {
	needEnv(t)
	before := goleak.IgnoreCurrent()
	h := startManager(t, harnessOpts{})
	h.stop()
	// Idle HTTP/2 connections to the apiserver close asynchronously.
	goleak.VerifyNone(t, before,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
		// controller-runtime wraps metadata-only watches (package references)
		// in apimachinery's watch.Filter, whose loop cannot stop while it is
		// blocked handing an event to a reflector that already stopped
		// (informers.go newGVKFixupWatcher; filter.go loop). It ends with the
		// process; one per watch with an event in flight at shutdown.
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"),
		// The event broadcaster is shared per manager process and stops lazily.
		goleak.IgnoreAnyFunction("k8s.io/client-go/tools/events.(*eventBroadcasterImpl).StartRecordingToSinkWithContext.func1"),
	)
}
