package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/internal/fixtures"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// fakeStats answers /stats as the sidecar does (sidecar/server.Stats: the
// sessions' in-flight count and lastTurnAt), with figures the test sets,
// and only with the agent's token.
type fakeStats struct {
	srv      *httptest.Server
	asked    atomic.Int64
	mu       sync.Mutex
	inFlight int
	lastTurn time.Time
}

func startFakeStats(t *testing.T) *fakeStats {
	f := &fakeStats{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+fixtures.Generated.AuthToken {
			http.Error(w, `{"error":"unauthenticated"}`, http.StatusUnauthorized)
			return
		}
		f.asked.Add(1)
		f.mu.Lock()
		body := map[string]any{"appName": "goose", "sessions": map[string]any{"total": 1, "active": 1, "inFlight": f.inFlight},
			"tokens": map[string]any{"input": 1, "output": 1, "total": 2}, "generatedAt": time.Now().UTC()}
		if !f.lastTurn.IsZero() {
			body["lastTurnAt"] = f.lastTurn
		}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeStats) set(inFlight int, lastTurn time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight, f.lastTurn = inFlight, lastTurn
}

func (f *fakeStats) url(*corev1.Pod, int32) string { return f.srv.URL + "/stats" }

// readyPod creates a pod and writes a ready status with ip, as the kubelet
// would (envtest has none). The addresses are never dialled: agent pods'
// /stats go to the fake, and the activator's are only written into slices
// (192.0.2.0/24, a documentation range: slices refuse loopback).
func readyPod(t *testing.T, ns, name string, l map[string]string, ip string, ready bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c:1"}}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	setPodReady(t, p, ip, ready)
	return p
}

func setPodReady(t *testing.T, p *corev1.Pod, ip string, ready bool) {
	t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func requestWake(t *testing.T, ns, name string, at time.Time) {
	t.Helper()
	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) {
		if a.Annotations == nil {
			a.Annotations = map[string]string{}
		}
		a.Annotations[agentsv1alpha1.WakeRequestedAtAnnotation] = at.UTC().Format(time.RFC3339Nano)
	})
}

// conditionIs is nil once the agent's condition typ has status s and reason.
func conditionIs(ns, name, typ string, s metav1.ConditionStatus, reason string) error {
	c, err := agentCondition(ns, name, typ)
	if err != nil {
		return err
	}
	if c.Status != s || c.Reason != reason {
		return fmt.Errorf("%s = %s/%s %q, want %s/%s", typ, c.Status, c.Reason, c.Message, s, reason)
	}
	return nil
}

func replicasOf(t *testing.T, ns, name string) *int32 {
	t.Helper()
	sts, err := getSTS(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return sts.Spec.Replicas
}

// syncWith changes the agent's description and waits until the reconciler
// has written status for that generation, so that whatever the test changed
// before has been seen.
func syncWith(t *testing.T, ns, name, description string) {
	t.Helper()
	gen := updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) { a.Spec.Description = description }).Generation
	poll.UntilNil(t, "status of generation "+fmt.Sprint(gen), func() error {
		if a := getAgent(t, ns, name); a.Status.ObservedGeneration < gen {
			return fmt.Errorf("observed generation %d", a.Status.ObservedGeneration)
		}
		return nil
	})
}

// TestIdleParksAndWakes: an agent with spec.idle.after is not parked while
// a turn runs, nor before `after` has passed since its last turn, then
// parked; its status goes through the park and a wake; a spec change while
// parked reaches the StatefulSet without waking it; a stale wake request is
// ignored.
func TestIdleParksAndWakes(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "idle")
	fake := startFakeStats(t)
	startManager(t, harnessOpts{generate: fixtures.GenerateFixed, statsURL: fake.url, idleRecheck: 500 * time.Millisecond})
	ctx := context.Background()
	const after = 10 * time.Second

	c := loadCase(t, "minimal")
	c.Agent.Spec.Idle = &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: after}}
	fake.set(1, time.Time{}) // a turn runs from the start
	createCase(t, c, ns)
	name := c.Agent.Name
	sts := waitSTS(t, ns, name)
	pod := readyPod(t, ns, name+"-0", sts.Spec.Template.Labels, "127.0.0.1", true)
	poll.UntilNil(t, "Parked=False/Awake", func() error {
		return conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionFalse, agentsv1alpha1.ReasonAwake)
	})

	// Past the deadline the pod is asked again and again; it has a turn
	// running, so the agent stays awake.
	poll.Until(t, "the pod to be asked three times at the deadline", func() bool { return fake.asked.Load() >= 3 })
	if err := conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionFalse, agentsv1alpha1.ReasonAwake); err != nil {
		t.Fatalf("parked while a turn runs: %v", err)
	}

	// The turn ends: the agent parks `after` later, not before.
	lastTurn := time.Now()
	fake.set(0, lastTurn)
	var parkedSeen time.Time
	poll.UntilNil(t, "Parked=True/Idle", func() error {
		if err := conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionTrue, agentsv1alpha1.ReasonIdle); err != nil {
			return err
		}
		parkedSeen = time.Now()
		return nil
	})
	a := getAgent(t, ns, name)
	if a.Status.Idle == nil || a.Status.Idle.ParkedAt == nil || a.Status.Idle.LastActivityAt == nil {
		t.Fatalf("status.idle = %+v", a.Status.Idle)
	}
	if parkedAt := a.Status.Idle.ParkedAt.Time; parkedAt.Before(lastTurn.Add(after).Truncate(time.Second)) || parkedSeen.Before(lastTurn.Add(after)) {
		t.Fatalf("parked at %v (seen %v), before the last turn %v + %s", parkedAt, parkedSeen, lastTurn, after)
	}
	if got := a.Status.Idle.LastActivityAt.Time; !got.Equal(lastTurn.Truncate(time.Second)) {
		t.Errorf("lastActivityAt = %v, want the last turn %v", got, lastTurn)
	}
	if err := conditionIs(ns, name, agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonParked); err != nil {
		t.Error(err)
	}
	if r := replicasOf(t, ns, name); r == nil || *r != 0 {
		t.Fatalf("parked StatefulSet replicas = %v, want 0", r)
	}
	// The StatefulSet controller would delete the pod.
	if err := env.Client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}

	// A stale wake request (before the park) and a spec change: the change
	// reaches the StatefulSet, the agent stays parked.
	requestWake(t, ns, name, a.Status.Idle.ParkedAt.Add(-time.Minute))
	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) { a.Spec.Provider.Model = "qwen3:32b" })
	poll.UntilNil(t, "the spec change to reach the StatefulSet", func() error {
		s, err := getSTS(ns, name)
		if err != nil {
			return err
		}
		for _, c := range s.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == "GOOSE_MODEL" && e.Value == "qwen3:32b" {
					return nil
				}
			}
		}
		return fmt.Errorf("no container has GOOSE_MODEL=qwen3:32b")
	})
	syncWith(t, ns, name, "after the stale wake")
	if err := conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionTrue, agentsv1alpha1.ReasonIdle); err != nil {
		t.Fatalf("a stale wake or a spec change woke the agent: %v", err)
	}
	if r := replicasOf(t, ns, name); r == nil || *r != 0 {
		t.Fatalf("replicas = %v after a spec change while parked, want 0", r)
	}

	// A wake request: Waking until a pod is ready, then Awake.
	requestWake(t, ns, name, time.Now())
	poll.UntilNil(t, "Parked=False/Waking", func() error {
		return conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionFalse, agentsv1alpha1.ReasonWaking)
	})
	a = getAgent(t, ns, name)
	if a.Status.Idle.ParkedAt != nil || a.Status.Idle.WokenAt == nil {
		t.Fatalf("status.idle after the wake = %+v", a.Status.Idle)
	}
	// Unset spec.replicas: the apiserver's default returns.
	if r := replicasOf(t, ns, name); r == nil || *r != 1 {
		t.Fatalf("replicas after the wake = %v, want 1", r)
	}
	fake.set(0, time.Now())
	sts = waitSTS(t, ns, name)
	pod = readyPod(t, ns, name+"-0", sts.Spec.Template.Labels, "127.0.0.1", true)
	serveFromPod(t, ns, name, pod)
	poll.UntilNil(t, "Parked=False/Awake", func() error {
		return conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionFalse, agentsv1alpha1.ReasonAwake)
	})
	if a := getAgent(t, ns, name); a.Status.Idle.ParkedAt != nil || a.Status.Idle.LastActivityAt.Before(a.Status.Idle.WokenAt) {
		t.Fatalf("status.idle when awake = %+v", a.Status.Idle)
	}
}

// TestManualParkIgnoresWakes: spec.idle.parked parks the agent, a wake
// request does not wake it, and clearing the field does.
func TestManualParkIgnoresWakes(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "park")
	fake := startFakeStats(t)
	startManager(t, harnessOpts{generate: fixtures.GenerateFixed, statsURL: fake.url})
	c := loadCase(t, "goosed") // spec.replicas: 2
	c.Agent.Spec.Idle = &agentsv1alpha1.IdleSpec{Parked: true}
	createCase(t, c, ns)
	name := c.Agent.Name
	poll.UntilNil(t, "Parked=True/ParkRequested", func() error {
		return conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionTrue, agentsv1alpha1.ReasonParkRequested)
	})
	if r := replicasOf(t, ns, name); r == nil || *r != 0 {
		t.Fatalf("replicas = %v, want 0", r)
	}
	requestWake(t, ns, name, time.Now().Add(time.Hour))
	syncWith(t, ns, name, "after a wake request")
	if err := conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionTrue, agentsv1alpha1.ReasonParkRequested); err != nil {
		t.Fatalf("a wake request woke a manually parked agent: %v", err)
	}
	if r := replicasOf(t, ns, name); r == nil || *r != 0 {
		t.Fatalf("replicas = %v, want 0", r)
	}

	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) { a.Spec.Idle.Parked = false })
	poll.UntilNil(t, "Parked=False/Waking", func() error {
		return conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionFalse, agentsv1alpha1.ReasonWaking)
	})
	if r := replicasOf(t, ns, name); r == nil || *r != 2 {
		t.Fatalf("replicas after unparking = %v, want spec.replicas 2", r)
	}
}

// TestParkedServicePointsAtTheActivator: while the agent is parked its
// Service has no selector and its endpoints are the activator's ready pods
// alone: the slices and Endpoints that Kubernetes' controllers wrote for the
// gone pod are deleted (they stop maintaining a selectorless Service), and
// nobody else's slice is. The slice follows the activator's pods. On waking
// the selector returns, and the slice goes once an agent pod is ready.
func TestParkedServicePointsAtTheActivator(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	actNS := newNamespace(t, "activator")
	actLabels := map[string]string{"app": "activator"}
	readyPod(t, actNS, "manager-a", actLabels, "192.0.2.5", true)
	notYet := readyPod(t, actNS, "manager-b", actLabels, "192.0.2.6", false)
	readyPod(t, actNS, "other", map[string]string{"app": "other"}, "192.0.2.7", true)

	ns := newNamespace(t, "parkedsvc")
	startManager(t, harnessOpts{generate: fixtures.GenerateFixed,
		activator: &controllers.Activator{Namespace: actNS, Selector: labels.SelectorFromSet(actLabels), Port: 8085}})
	c := loadCase(t, "minimal")
	c.Agent.Spec.Idle = &agentsv1alpha1.IdleSpec{}
	createCase(t, c, ns)
	name := c.Agent.Name
	waitSTS(t, ns, name)
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatal(err)
	}

	// What Kubernetes' controllers write for an awake agent's Service
	// (envtest runs none): each copies the Service's labels.
	stale := []client.Object{
		controllerEndpoints(svc),
		serviceSlice(svc, name+"-x7k2p", "endpointslice-controller.k8s.io"),
		serviceSlice(svc, name+"-mirror", "endpointslicemirroring-controller.k8s.io"),
	}
	someoneElses := serviceSlice(svc, name+"-manual", "someone-else")
	for _, o := range append(stale, someoneElses) {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) { a.Spec.Idle.Parked = true })
	poll.UntilNil(t, "the Service to lose its selector and point at the ready activator pod", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return err
		}
		if svc.Spec.Selector != nil {
			return fmt.Errorf("selector %v", svc.Spec.Selector)
		}
		return activatorSliceHolds(ns, name, "192.0.2.5")
	})
	for _, o := range stale {
		poll.UntilNil(t, fmt.Sprintf("%T %s to be deleted", o, o.GetName()), func() error {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(someoneElses), someoneElses); err != nil {
		t.Fatalf("a slice nobody's controller wrote was deleted: %v", err)
	}

	// The slice follows the activator's pods.
	setPodReady(t, notYet, "192.0.2.6", true)
	poll.UntilNil(t, "the slice to list the second activator pod", func() error { return activatorSliceHolds(ns, name, "192.0.2.5", "192.0.2.6") })

	// Wake: the selector returns at once; the slice stays until a pod is ready.
	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) { a.Spec.Idle.Parked = false })
	poll.UntilNil(t, "the selector to return", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return err
		}
		if !labels.Equals(svc.Spec.Selector, render.SelectorLabels(c.Agent)) {
			return fmt.Errorf("selector %v", svc.Spec.Selector)
		}
		return nil
	})
	if err := activatorSliceHolds(ns, name, "192.0.2.5", "192.0.2.6"); err != nil {
		t.Fatalf("the slice went before an agent pod was ready: %v", err)
	}
	sts := &appsv1.StatefulSet{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sts); err != nil {
		t.Fatal(err)
	}
	pod := readyPod(t, ns, name+"-0", sts.Spec.Template.Labels, "127.0.0.1", true)
	// Until the Service's own slice lists the ready pod, kube-proxy has
	// only the activator to send to: its slice stays.
	syncWith(t, ns, name, "a pod is ready, the Service does not reach it yet")
	if err := activatorSliceHolds(ns, name, "192.0.2.5", "192.0.2.6"); err != nil {
		t.Fatalf("the activator slice went before the Service reached the pod: %v", err)
	}
	if err := conditionIs(ns, name, agentsv1alpha1.ConditionParked, metav1.ConditionFalse, agentsv1alpha1.ReasonWaking); err != nil {
		t.Fatal(err)
	}
	serveFromPod(t, ns, name, pod)
	poll.UntilNil(t, "the activator slice to be deleted", func() error {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-activator"}, &discoveryv1.EndpointSlice{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("still there")
	})
}

// serviceSlice is a slice for svc as Kubernetes' EndpointSlice controllers
// write one: the Service's labels, its name and the writer's.
func serviceSlice(svc *corev1.Service, name, managedBy string) *discoveryv1.EndpointSlice {
	l := maps.Clone(svc.Labels)
	l[discoveryv1.LabelServiceName], l[discoveryv1.LabelManagedBy] = svc.Name, managedBy
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: svc.Namespace, Labels: l},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.9"}}},
	}
}

// serveFromPod plays the EndpointSlice controller once pod is ready: the
// agent's Service gets a slice that lists pod, ready (at a documentation
// address: the pods here have a loopback IP, which slices refuse).
func serveFromPod(t *testing.T, ns, name string, pod *corev1.Pod) {
	t.Helper()
	svc := &corev1.Service{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatal(err)
	}
	s := serviceSlice(svc, name+"-p0d5", "endpointslice-controller.k8s.io")
	s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.10"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name}}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// controllerEndpoints is svc's Endpoints as the endpoints controller writes
// it: the Service's labels and the controller's.
func controllerEndpoints(svc *corev1.Service) *corev1.Endpoints { //nolint:staticcheck // what the endpoints controller writes
	l := maps.Clone(svc.Labels)
	l["endpoints.kubernetes.io/managed-by"] = "endpoint-controller"
	return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: l}} //nolint:staticcheck // as above
}

// activatorSliceHolds is nil when the agent's activator slice lists exactly
// ips, ready, on port 8085 named like the Service's port.
func activatorSliceHolds(ns, name string, ips ...string) error {
	s := &discoveryv1.EndpointSlice{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-activator"}, s); err != nil {
		return err
	}
	var got []string
	for _, e := range s.Endpoints {
		if e.Conditions.Ready == nil || !*e.Conditions.Ready || e.TargetRef == nil {
			return fmt.Errorf("endpoint %+v is not ready or names no pod", e)
		}
		got = append(got, e.Addresses...)
	}
	slices.Sort(got)
	if !slices.Equal(got, ips) {
		return fmt.Errorf("slice lists %v, want %v", got, ips)
	}
	if len(s.Ports) != 1 || *s.Ports[0].Port != 8085 || *s.Ports[0].Name != render.PortName ||
		s.Labels[discoveryv1.LabelServiceName] != name || metav1.GetControllerOf(s) == nil {
		return fmt.Errorf("slice ports %+v labels %v", s.Ports, s.Labels)
	}
	return nil
}

// TestParkedEventOncePerPark: a reconcile that reads the agent from a cache
// that has not seen the status the last one wrote does not tell the same
// park again, nor write the status again with a later parkedAt. Here every
// read of the agent returns the copy from before its first status write, as
// a lagging cache would.
func TestParkedEventOncePerPark(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "parkevent")
	var mu sync.Mutex
	first := map[client.ObjectKey]*agentsv1alpha1.GooseAgent{}
	stale := func(c client.WithWatch) client.WithWatch {
		return interceptor.NewClient(c, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
				if err := c.Get(ctx, key, o, opts...); err != nil {
					return err
				}
				a, ok := o.(*agentsv1alpha1.GooseAgent)
				if !ok {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				if f, seen := first[key]; seen {
					f.DeepCopyInto(a)
				} else if len(a.Status.Conditions) == 0 {
					first[key] = a.DeepCopy()
				}
				return nil
			},
		})
	}
	h := startManager(t, harnessOpts{generate: fixtures.GenerateFixed, namespace: ns, wrap: stale})
	c := loadCase(t, "minimal")
	c.Agent.Spec.Idle = &agentsv1alpha1.IdleSpec{Parked: true}
	createCase(t, c, ns)
	poll.UntilNil(t, "Parked=True/ParkRequested", func() error {
		return conditionIs(ns, c.Agent.Name, agentsv1alpha1.ConditionParked, metav1.ConditionTrue, agentsv1alpha1.ReasonParkRequested)
	})
	poll.UntilNil(t, "a reconcile that writes nothing", func() error {
		before := h.writes.Load()
		if _, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c.Agent)}); err != nil {
			t.Fatal(err)
		}
		if n := h.writes.Load() - before; n != 0 {
			return fmt.Errorf("%d writes", n)
		}
		return nil
	})
	before := h.writes.Load()
	for range 3 {
		if _, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c.Agent)}); err != nil {
			t.Fatal(err)
		}
	}
	// Nor does it write the status again with a new parkedAt.
	if n := h.writes.Load() - before; n != 0 {
		t.Fatalf("%d writes from reconciles that read the stale copy, want 0", n)
	}
	if n := h.events.count(agentsv1alpha1.ReasonParked); n != 1 {
		t.Fatalf("%d Parked Events for one park, want 1", n)
	}
}
