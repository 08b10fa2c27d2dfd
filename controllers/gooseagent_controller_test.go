package controllers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/internal/fixtures"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

func loadCase(t testing.TB, name string) *fixtures.Case {
	t.Helper()
	c, err := fixtures.LoadFile(filepath.Join(fixtures.Dir(), "inputs", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func getAgent(t testing.TB, ns, name string) *agentsv1alpha1.GooseAgent {
	t.Helper()
	a := &agentsv1alpha1.GooseAgent{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, a); err != nil {
		t.Fatal(err)
	}
	return a
}

func getSTS(ns, name string) (*appsv1.StatefulSet, error) {
	s := &appsv1.StatefulSet{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s)
	return s, err
}

func waitSTS(t testing.TB, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	var sts *appsv1.StatefulSet
	poll.UntilNil(t, "StatefulSet "+name, func() (err error) {
		sts, err = getSTS(ns, name)
		return err
	})
	return sts
}

func podHash(t testing.TB, ns, name string) string {
	t.Helper()
	sts, err := getSTS(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return sts.Spec.Template.Annotations[render.ConfigHashAnnotation]
}

func waitHashChange(t testing.TB, ns, name, old, what string) string {
	t.Helper()
	var h string
	poll.UntilNil(t, "pod-template hash to change after "+what, func() error {
		sts, err := getSTS(ns, name)
		if err != nil {
			return err
		}
		if h = sts.Spec.Template.Annotations[render.ConfigHashAnnotation]; h == old || h == "" {
			return fmt.Errorf("hash still %s", old)
		}
		return nil
	})
	return h
}

// waitGooseEnv waits for the pod template's goose container to have env key
// set to want: a change there rolls the pods as a hash change does.
func waitGooseEnv(t testing.TB, ns, name, key, want string) {
	t.Helper()
	poll.UntilNil(t, "goose env "+key+"="+want, func() error {
		sts, err := getSTS(ns, name)
		if err != nil {
			return err
		}
		for _, c := range sts.Spec.Template.Spec.Containers {
			if c.Name != render.GooseContainer {
				continue
			}
			for _, e := range c.Env {
				if e.Name == key && e.Value == want {
					return nil
				}
			}
		}
		return fmt.Errorf("goose env has no %s=%s", key, want)
	})
}

func condition(a *agentsv1alpha1.GooseAgent, t string) *metav1.Condition {
	return meta.FindStatusCondition(a.Status.Conditions, t)
}

func waitCondition(t testing.TB, ns, name, typ string, status metav1.ConditionStatus, reason string) *agentsv1alpha1.GooseAgent {
	t.Helper()
	var a *agentsv1alpha1.GooseAgent
	poll.UntilNil(t, fmt.Sprintf("%s=%s/%s", typ, status, reason), func() error {
		a = getAgent(t, ns, name)
		c := condition(a, typ)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("condition %s is %+v", typ, c)
		}
		return nil
	})
	return a
}

// markReady plays the StatefulSet controller, which envtest does not run.
func markReady(t testing.TB, ns, name string) {
	t.Helper()
	poll.UntilNil(t, "StatefulSet status update", func() error {
		sts, err := getSTS(ns, name)
		if err != nil {
			return err
		}
		n := int32(1)
		if sts.Spec.Replicas != nil {
			n = *sts.Spec.Replicas
		}
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: n, AvailableReplicas: n,
			UpdatedReplicas: n, CurrentReplicas: n, CurrentRevision: "r1", UpdateRevision: "r1",
		}
		return env.Client.Status().Update(context.Background(), sts)
	})
}

// extractedYAML returns what the operator's field owner applied to each
// child of case c, in the order c renders them, as the golden YAML, with the
// live owner UID replaced by the fixed one of the golden files.
func extractedYAML(t testing.TB, c *fixtures.Case, a *agentsv1alpha1.GooseAgent) []byte {
	t.Helper()
	var objs []runtime.ApplyConfiguration
	for _, o := range renderCase(t, c, a).Objects() {
		gvk, name := gvkOf(t, o)
		obj, err := env.Scheme.New(gvk)
		if err != nil {
			t.Fatal(err)
		}
		live := obj.(client.Object)
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: a.Namespace, Name: name}, live); err != nil {
			t.Fatal(err)
		}
		if !metav1.IsControlledBy(live, a) {
			t.Errorf("%s %s has no controller owner reference to the GooseAgent", gvk.Kind, name)
		}
		ac, err := controllers.ExtractApplied(live)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, ac)
	}
	out, err := render.ToYAML(objs)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(out, []byte(a.UID), []byte(fixtures.UID))
}

// labelledChildren lists every child-kind object carrying the agent's
// instance label, as Kind/name.
func labelledChildren(t testing.TB, a *agentsv1alpha1.GooseAgent) []string {
	t.Helper()
	var out []string
	sel := client.MatchingLabels{render.LabelInstance: a.Name, render.LabelManagedBy: render.ManagedBy}
	for _, gvk := range childGVKs(t, env.Scheme) {
		l := newList(t, env.Scheme, gvk)
		if err := env.Client.List(context.Background(), l, client.InNamespace(a.Namespace), sel); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(l)
		for _, it := range items {
			out = append(out, gvk.Kind+"/"+it.(client.Object).GetName())
		}
	}
	sort.Strings(out)
	return out
}

// deleteAgentsAndChildren deletes every GooseAgent of ns and the children
// the operator made for them.
func deleteAgentsAndChildren(t testing.TB, ns string) {
	t.Helper()
	ctx := context.Background()
	sel := client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}
	lists := []client.ObjectList{&agentsv1alpha1.GooseAgentList{}}
	for _, gvk := range childGVKs(t, env.Scheme) {
		lists = append(lists, newList(t, env.Scheme, gvk))
	}
	for _, l := range lists {
		opts := []client.ListOption{client.InNamespace(ns)}
		if _, agents := l.(*agentsv1alpha1.GooseAgentList); !agents {
			opts = append(opts, sel)
		}
		if err := env.Client.List(ctx, l, opts...); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(l)
		for _, it := range items {
			o := it.(client.Object)
			if len(o.GetFinalizers()) > 0 { // the stopped manager no longer removes them
				patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
				o.SetFinalizers(nil)
				if err := env.Client.Patch(ctx, o, patch); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
			if err := env.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
}

// TestGoldenChildren: each fixture, created in a real apiserver, yields
// exactly the golden children, each owned by the agent, and a pod spec that
// passes the restricted Pod Security Standard.
func TestGoldenChildren(t *testing.T) {
	needEnv(t)
	ensureNamespace(t, "agents") // the fixtures' namespace, as in the golden files
	// Registered first, so it runs once the manager has stopped: envtest has
	// no garbage collector, and the next run (go test -count) creates the
	// same agents in the same namespace again.
	t.Cleanup(func() { deleteAgentsAndChildren(t, "agents") })
	// The parked case's Service points at the fixtures' activator pod.
	act := fixtures.Activator.Pods[0]
	ensureNamespace(t, act.Namespace)
	actLabels := map[string]string{"app": "golden-activator"}
	if p := (&corev1.Pod{}); env.Client.Get(context.Background(), client.ObjectKey{Namespace: act.Namespace, Name: act.Name}, p) != nil {
		readyPod(t, act.Namespace, act.Name, actLabels, act.IP, true)
	}
	startManager(t, harnessOpts{generate: fixtures.GenerateFixed,
		activator: &controllers.Activator{Namespace: act.Namespace, Selector: labels.SelectorFromSet(actLabels), Port: fixtures.Activator.Port}})
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			createCase(t, c, "agents")
			a := c.Agent
			sts := waitSTS(t, a.Namespace, render.StatefulSetName(a))
			if a.Spec.NetworkPolicy != nil {
				poll.UntilNil(t, "NetworkPolicy", func() error {
					return env.Client.Get(context.Background(), client.ObjectKey{Namespace: a.Namespace, Name: render.NetworkPolicyName(a)}, &networkingv1.NetworkPolicy{})
				})
			}
			parked := a.Spec.Idle != nil && a.Spec.Idle.Parked
			if parked {
				poll.UntilNil(t, "the activator's EndpointSlice", func() error {
					return env.Client.Get(context.Background(), client.ObjectKey{Namespace: a.Namespace, Name: render.ActivatorSliceName(a)}, &discoveryv1.EndpointSlice{})
				})
			}
			a = getAgent(t, a.Namespace, a.Name)
			want, err := os.ReadFile(fixtures.GoldenPath(c.Name))
			if err != nil {
				t.Fatal(err)
			}
			if got := extractedYAML(t, c, a); !bytes.Equal(got, want) {
				t.Errorf("applied children differ from the golden file (-want +got):\n%s", cmp.Diff(string(want), string(got)))
			}
			wantNames := []string{
				"ConfigMap/" + render.ConfigMapName(a), "Secret/" + render.SecretName(a),
				"Service/" + render.HeadlessServiceName(a), "Service/" + render.ServiceName(a),
				"StatefulSet/" + render.StatefulSetName(a),
			}
			if a.Spec.NetworkPolicy != nil {
				wantNames = append(wantNames, "NetworkPolicy/"+render.NetworkPolicyName(a))
			}
			if parked {
				wantNames = append(wantNames, "EndpointSlice/"+render.ActivatorSliceName(a))
			}
			if render.IsKubernetesMode(a) {
				wantNames = append(wantNames, "ServiceAccount/"+render.ServiceAccountName(a))
				crb := &rbacv1.ClusterRoleBinding{}
				poll.UntilNil(t, "review binding", func() error {
					return env.Client.Get(context.Background(), client.ObjectKey{Name: render.ReviewBindingName(a)}, crb)
				})
				if crb.RoleRef.Name != "system:auth-delegator" || len(crb.Subjects) != 1 || crb.Subjects[0].Name != render.ServiceAccountName(a) || crb.Subjects[0].Namespace != a.Namespace {
					t.Errorf("review binding %+v", crb)
				}
			}
			sort.Strings(wantNames)
			if diff := cmp.Diff(wantNames, labelledChildren(t, a)); diff != "" {
				t.Errorf("children (-want +got):\n%s", diff)
			}
			lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
			for _, res := range evaluator.EvaluatePod(lv, &sts.Spec.Template.ObjectMeta, &sts.Spec.Template.Spec) {
				if !res.Allowed {
					t.Errorf("pod spec violates restricted PSS: %s: %s", res.ForbiddenReason, res.ForbiddenDetail)
				}
			}
		})
	}
}

// TestPodSecurityCheckCanFail guards the PSS check above: a privileged
// variant of the same pod must be rejected.
func TestPodSecurityCheckCanFail(t *testing.T) {
	c := loadCase(t, "minimal")
	c.Agent.UID = fixtures.UID
	d, err := render.Build(render.Inputs{Agent: c.Agent, Defaults: fixtures.Defaults, Generated: fixtures.Generated, Values: map[render.Ref]string{}})
	if err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	if err := convertAC(d.StatefulSet, sts); err != nil {
		t.Fatal(err)
	}
	evaluator, _ := policy.NewEvaluator(policy.DefaultChecks(), nil)
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	ok := func() bool {
		for _, r := range evaluator.EvaluatePod(lv, &sts.Spec.Template.ObjectMeta, &sts.Spec.Template.Spec) {
			if !r.Allowed {
				return false
			}
		}
		return true
	}
	if !ok() {
		t.Fatal("rendered pod spec fails the restricted standard")
	}
	priv := true
	sts.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = &priv
	if ok() {
		t.Fatal("a privileged container passed the restricted check")
	}
}

// TestRolloutOnChange: a model change reaches the pod template's env;
// extension and referenced Secret changes each change its hash.
func TestRolloutOnChange(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "rollout")
	h := startManager(t, harnessOpts{})
	c := loadCase(t, "approve")
	createCase(t, c, ns)
	name := c.Agent.Name
	waitSTS(t, ns, name)
	ctx := context.Background()

	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) {
		a.Spec.Provider.Model = "gpt-4.1-mini"
	})
	waitGooseEnv(t, ns, name, "GOOSE_MODEL", "gpt-4.1-mini")
	h1 := podHash(t, ns, name)

	updateAgent(t, ns, name, func(a *agentsv1alpha1.GooseAgent) {
		a.Spec.Extensions = append(a.Spec.Extensions, agentsv1alpha1.ExtensionSpec{Name: "todo", Type: agentsv1alpha1.ExtensionPlatform})
	})
	h2 := waitHashChange(t, ns, name, h1, "an extension change")

	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openai"}, s); err != nil {
		t.Fatal(err)
	}
	s.Data["api-key"] = []byte("sk-rotated")
	if err := env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	h3 := waitHashChange(t, ns, name, h2, "an API-key Secret change")

	// A Secret the agent does not read changes nothing, even in a
	// reconcile that runs after it exists (references are read from the
	// apiserver, so there is no cache to wait for).
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns}, StringData: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	if h := podHash(t, ns, name); h != h3 {
		t.Errorf("hash changed after an unrelated Secret was created")
	}
}

// TestNoOpResyncZeroWrites: once converged, reconciling again writes nothing
// (counted at the reconciler's client) and records no Event.
func TestNoOpResyncZeroWrites(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "noop")
	h := startManager(t, harnessOpts{namespace: ns})
	ctx := context.Background()
	var names []string
	for _, n := range []string{"approve", "full", "goosed"} {
		c := loadCase(t, n)
		createCase(t, c, ns)
		names = append(names, c.Agent.Name)
	}
	if err := env.Client.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared-work", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resourceQty("1Gi")}}}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		waitSTS(t, ns, n)
		markReady(t, ns, n)
		waitCondition(t, ns, n, agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonAvailable)
	}
	resync := func() int64 {
		before := h.writes.Load()
		for _, n := range names {
			if _, err := h.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: n}}); err != nil {
				t.Fatal(err)
			}
		}
		return h.writes.Load() - before
	}
	// Converged once a full pass writes nothing and no reconcile (ours or
	// the manager's) recorded an Event meanwhile: the cache may lag a moment.
	var events int64
	poll.UntilNil(t, "convergence", func() error {
		before := h.events.n.Load()
		if w := resync(); w != 0 {
			return fmt.Errorf("%d writes", w)
		}
		if events = h.events.n.Load(); events != before {
			return fmt.Errorf("%d Events recorded meanwhile", events-before)
		}
		return nil
	})
	if events == 0 {
		t.Fatal("no Events recorded while the agents were created; the Event check below would be vacuous")
	}
	// They reach the API server (asynchronously).
	poll.UntilNil(t, "Events in the namespace", func() error {
		if countEvents(t, ns) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	for i := range 5 {
		if w := resync(); w != 0 {
			t.Fatalf("no-op resync %d made %d API writes, want 0", i, w)
		}
	}
	if e := h.events.n.Load(); e != events {
		t.Errorf("no-op resyncs recorded %d Events", e-events)
	}
	// The counter is live: a real change is a write. The running manager
	// may make it before a resync of ours looks (and then ours has nothing
	// left to write), so any write since the change counts.
	before := h.writes.Load()
	updateAgent(t, ns, names[0], func(a *agentsv1alpha1.GooseAgent) {
		a.Spec.Provider.Model = "changed"
	})
	poll.UntilNil(t, "a write after a spec change", func() error {
		resync()
		if h.writes.Load() == before {
			return fmt.Errorf("no writes")
		}
		return nil
	})
}

func countEvents(t testing.TB, ns string) int {
	t.Helper()
	l := &corev1.EventList{}
	if err := env.Client.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range l.Items {
		n += int(max(e.Count, 1))
	}
	return n
}

// TestChildRestored: a deleted child comes back; a hand edit is undone.
func TestChildRestored(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "restore")
	startManager(t, harnessOpts{})
	ctx := context.Background()
	c := loadCase(t, "approve")
	createCase(t, c, ns)
	a := c.Agent
	waitSTS(t, ns, a.Name)

	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.ServiceName(a)}, svc); err != nil {
		t.Fatal(err)
	}
	oldUID := svc.UID
	if err := env.Client.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, "Service to be recreated", func() error {
		s := &corev1.Service{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.ServiceName(a)}, s); err != nil {
			return err
		}
		if s.UID == oldUID {
			return fmt.Errorf("still the old Service")
		}
		return nil
	})

	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.ConfigMapName(a)}, cm); err != nil {
		t.Fatal(err)
	}
	want := cm.Data[render.KeyConfig]
	cm.Data[render.KeyConfig] = "GOOSE_MODEL: hacked\n"
	if err := env.Client.Update(ctx, cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, "ConfigMap edit to be undone", func() error {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.ConfigMapName(a)}, cm); err != nil {
			return err
		}
		if cm.Data[render.KeyConfig] != want {
			return fmt.Errorf("config.yaml is %q", cm.Data[render.KeyConfig])
		}
		return nil
	})

	sts, _ := getSTS(ns, a.Name)
	sts.Spec.Template.Spec.InitContainers[1].Image = "evil:latest"
	if err := env.Client.Update(ctx, sts, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, "StatefulSet edit to be undone", func() error {
		sts, err := getSTS(ns, a.Name)
		if err != nil {
			return err
		}
		if img := sts.Spec.Template.Spec.InitContainers[1].Image; img != fixtures.Defaults.SidecarImage {
			return fmt.Errorf("sidecar image is %s", img)
		}
		return nil
	})
}

// TestMissingReference: a missing Secret gives Ready=False/ReferenceNotFound
// without children; creating it recovers.
func TestMissingReference(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "missing")
	h := startManager(t, harnessOpts{})
	ctx := context.Background()
	c := loadCase(t, "openai")
	c.Secrets = nil
	createCase(t, c, ns)
	a := waitCondition(t, ns, c.Agent.Name, agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonReferenceNotFound)
	if msg := condition(a, agentsv1alpha1.ConditionReady).Message; !strings.Contains(msg, `Secret "openai" not found`) {
		t.Errorf("message %q does not name the missing Secret", msg)
	}
	if d := condition(a, agentsv1alpha1.ConditionDegraded); d == nil || d.Status != metav1.ConditionTrue {
		t.Errorf("Degraded = %+v, want True", d)
	}
	if _, err := getSTS(ns, c.Agent.Name); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet exists while a reference is missing (err %v)", err)
	}
	// No crash loop: reconciling a blocked agent returns no error and writes nothing.
	before := h.writes.Load()
	res, err := h.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a)})
	if err != nil || res.RequeueAfter != 0 {
		t.Errorf("Reconcile of a blocked agent = %+v, %v; want no requeue and no error", res, err)
	}
	if w := h.writes.Load() - before; w != 0 {
		t.Errorf("blocked reconcile made %d writes", w)
	}

	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "openai", Namespace: ns}, StringData: map[string]string{"api-key": "sk"}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitSTS(t, ns, c.Agent.Name)
	waitCondition(t, ns, c.Agent.Name, agentsv1alpha1.ConditionDegraded, metav1.ConditionFalse, agentsv1alpha1.ReasonAsExpected)
	markReady(t, ns, c.Agent.Name)
	a = waitCondition(t, ns, c.Agent.Name, agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonAvailable)
	if p := condition(a, agentsv1alpha1.ConditionProgressing); p.Status != metav1.ConditionFalse || p.Reason != agentsv1alpha1.ReasonRolloutComplete {
		t.Errorf("Progressing = %+v", p)
	}
	wantEP := fmt.Sprintf("http://%s.%s.svc.cluster.local:8080", a.Name, ns)
	if a.Status.Endpoints.REST != wantEP || a.Status.Endpoints.AgentCard != wantEP+"/.well-known/agent-card.json" {
		t.Errorf("endpoints = %+v", a.Status.Endpoints)
	}
	if a.Status.ObservedGeneration != a.Generation || a.Status.ReadyReplicas != 1 {
		t.Errorf("observedGeneration %d (generation %d), readyReplicas %d", a.Status.ObservedGeneration, a.Generation, a.Status.ReadyReplicas)
	}
}

// TestUnsetReplicasLeftAlone: with spec.replicas unset, an external scale
// survives later reconciles (the HPA case).
func TestUnsetReplicasLeftAlone(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "hpa")
	startManager(t, harnessOpts{})
	ctx := context.Background()
	c := loadCase(t, "openai")
	createCase(t, c, ns)
	sts := waitSTS(t, ns, c.Agent.Name)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
		t.Fatalf("new StatefulSet replicas = %v, want the apiserver default 1", sts.Spec.Replicas)
	}
	three := int32(3)
	sts.Spec.Replicas = &three
	if err := env.Client.Update(ctx, sts, client.FieldOwner("horizontal-pod-autoscaler")); err != nil {
		t.Fatal(err)
	}
	a := updateAgent(t, ns, c.Agent.Name, func(a *agentsv1alpha1.GooseAgent) {
		a.Spec.Provider.Model = "gpt-4.1"
	})
	waitGooseEnv(t, ns, a.Name, "GOOSE_MODEL", "gpt-4.1")
	sts, _ = getSTS(ns, a.Name)
	if *sts.Spec.Replicas != 3 {
		t.Errorf("replicas = %d after reconcile, want the externally set 3", *sts.Spec.Replicas)
	}
	// Setting spec.replicas takes control back.
	a = updateAgent(t, ns, a.Name, func(a *agentsv1alpha1.GooseAgent) {
		two := int32(2)
		a.Spec.Replicas = &two
	})
	poll.UntilNil(t, "replicas 2", func() error {
		sts, err := getSTS(ns, a.Name)
		if err != nil {
			return err
		}
		if *sts.Spec.Replicas != 2 {
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})
}

// TestGeneratedSecretSurvivesRestart: a new manager (with a different
// generator) keeps the generated key and token and the pod-template hash.
func TestGeneratedSecretSurvivesRestart(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "restart")
	ctx := context.Background()
	h1 := startManager(t, harnessOpts{})
	c := loadCase(t, "minimal")
	createCase(t, c, ns)
	waitSTS(t, ns, c.Agent.Name)
	key := client.ObjectKey{Namespace: ns, Name: render.SecretName(c.Agent)}
	s1 := &corev1.Secret{}
	if err := env.Client.Get(ctx, key, s1); err != nil {
		t.Fatal(err)
	}
	if len(s1.Data[render.KeyGooseSecret]) < 32 || len(s1.Data[render.KeyAuthToken]) < 32 {
		t.Fatalf("generated values too short: %q / %q", s1.Data[render.KeyGooseSecret], s1.Data[render.KeyAuthToken])
	}
	if string(s1.Data[render.KeyGooseSecret]) == string(s1.Data[render.KeyAuthToken]) {
		t.Fatal("goose secret key and auth token are equal")
	}
	hash := podHash(t, ns, c.Agent.Name)
	h1.stop()

	generated := 0
	h2 := startManager(t, harnessOpts{generate: func(p string) (string, error) {
		generated++
		return "would-be-new-" + p, nil
	}})
	if _, err := h2.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c.Agent)}); err != nil {
		t.Fatal(err)
	}
	s2 := &corev1.Secret{}
	if err := env.Client.Get(ctx, key, s2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s1.Data, s2.Data); diff != "" {
		t.Errorf("generated Secret changed across restart (-before +after):\n%s", diff)
	}
	if generated != 0 {
		t.Errorf("the restarted controller generated %d new values", generated)
	}
	if h := podHash(t, ns, c.Agent.Name); h != hash {
		t.Errorf("pod-template hash changed across restart")
	}

	// Deleting the Secret generates fresh values and rolls the pods.
	if err := env.Client.Delete(ctx, s2); err != nil {
		t.Fatal(err)
	}
	waitHashChange(t, ns, c.Agent.Name, hash, "the generated Secret was deleted")
}

// TestNetworkPolicyPruned: removing spec.networkPolicy deletes it.
func TestNetworkPolicyPruned(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "prune")
	startManager(t, harnessOpts{})
	ctx := context.Background()
	c := loadCase(t, "approve")
	createCase(t, c, ns)
	key := client.ObjectKey{Namespace: ns, Name: render.NetworkPolicyName(c.Agent)}
	poll.UntilNil(t, "NetworkPolicy", func() error { return env.Client.Get(ctx, key, &networkingv1.NetworkPolicy{}) })
	a := updateAgent(t, ns, c.Agent.Name, func(a *agentsv1alpha1.GooseAgent) {
		a.Spec.NetworkPolicy = nil
	})
	poll.UntilNil(t, "NetworkPolicy deletion", func() error {
		err := env.Client.Get(ctx, key, &networkingv1.NetworkPolicy{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %w)", err)
	})
	// The other children stay.
	if _, err := getSTS(ns, a.Name); err != nil {
		t.Errorf("StatefulSet gone after pruning: %v", err)
	}
}

// TestInvalidSpecBlocks: a spec the builder rejects is reported, not retried.
func TestInvalidSpecBlocks(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "invalid")
	startManager(t, harnessOpts{})
	c := loadCase(t, "minimal")
	c.Agent.Spec.PodTemplate.Env = []corev1.EnvVar{{Name: "GOOSE_SERVER__SECRET_KEY", Value: "x"}}
	createCase(t, c, ns)
	waitCondition(t, ns, c.Agent.Name, agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonInvalidSpec)
}

func convertAC(ac any, out any) error {
	b, err := json.Marshal(ac)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func resourceQty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// updateAgent changes an agent, retrying on conflicts with status writes.
func updateAgent(t testing.TB, ns, name string, mutate func(a *agentsv1alpha1.GooseAgent)) *agentsv1alpha1.GooseAgent {
	t.Helper()
	var a *agentsv1alpha1.GooseAgent
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		a = getAgent(t, ns, name)
		mutate(a)
		return env.Client.Update(context.Background(), a)
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}
