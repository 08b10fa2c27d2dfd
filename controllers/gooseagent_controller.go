package controllers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	agentsv1alpha1ac "github.com/adk2goose/goose-operator/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/internal/retry"
	"github.com/adk2goose/goose-operator/controllers/internal/ssa"
	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// Field indexes from a GooseAgent to the Secrets and ConfigMaps it reads, so a
// changed Secret finds its agents without listing them all.
const (
	IndexSecretRefs    = "spec.secretRefs"
	IndexConfigMapRefs = "spec.configMapRefs"
)

// GooseAgentReconciler turns GooseAgents into their children and reports
// readiness. It only orchestrates: the children come from render.Build.
type GooseAgentReconciler struct {
	// Client reads from the manager's cache, which IndexByAgent indexes,
	// and writes to the apiserver.
	Client client.Client
	// APIReader reads the apiserver directly; used once per agent when the
	// cache has not seen the generated Secret yet, so a key is never
	// generated twice.
	APIReader client.Reader
	// References reads the Secrets and ConfigMaps agents reference (values
	// from the apiserver, changes from metadata-only watches).
	References *references.Tracker
	Recorder   events.EventRecorder
	Defaults   render.Defaults
	// GenerateToken returns a new random secret for a purpose (a key of the
	// generated Secret). Nil uses 32 random bytes, hex-encoded.
	GenerateToken func(purpose string) (string, error)
	// Now is the clock; nil uses time.Now.
	Now func() time.Time
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int

	status ssa.Status
	// Activity asks an agent's pods whether they are idle, for spec.idle;
	// nil parks agents only by spec.idle.parked.
	Activity ActivityReader
	// IdleRecheck is how soon an agent due to be parked is asked again while
	// a turn runs or a pod does not answer (default DefaultIdleRecheck).
	IdleRecheck time.Duration
	// Activator, when set, is where a parked agent's Service points.
	Activator *Activator

	// activatorPods reads the activator's pods (a cache of their own, set
	// up by SetupWithManager).
	activatorPods client.Reader
}

func (r *GooseAgentReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func randomToken(string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("failed to read random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// SetupWithManager registers the field indexes and the watches.
func (r *GooseAgentReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := IndexByAgent(ctx, idx); err != nil {
		return err
	}
	for key, kind := range map[string]render.RefKind{IndexSecretRefs: render.KindSecret, IndexConfigMapRefs: render.KindConfigMap} {
		if err := idx.IndexField(ctx, &agentsv1alpha1.GooseAgent{}, key, func(o client.Object) []string {
			a, ok := o.(*agentsv1alpha1.GooseAgent)
			if !ok {
				return nil
			}
			return render.ReferencedNames(a, kind)
		}); err != nil {
			return fmt.Errorf("failed to index GooseAgents by %s: %w", key, err)
		}
	}
	opts := controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1), RateLimiter: retry.Limiter()}
	// Referenced Secrets and ConfigMaps are watched by metadata only; their
	// values are read when an agent is rendered (package references).
	secrets, err := r.References.Source(render.KindSecret, r.agentsReferencing(IndexSecretRefs))
	if err != nil {
		return err
	}
	configMaps, err := r.References.Source(render.KindConfigMap, r.agentsReferencing(IndexConfigMapRefs))
	if err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		// Status-only updates (ours, the stats collector's) must not loop
		// back; a wake request changes only an annotation.
		For(&agentsv1alpha1.GooseAgent{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, wakeRequested)))
	for _, k := range childKinds {
		b = b.Owns(k.newObject())
	}
	if r.Activator != nil {
		// The activator's pods live in the manager's namespace, outside the
		// agent-pod filter of the main cache: they get a cache of their own.
		c, err := cache.New(mgr.GetConfig(), cache.Options{
			Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
			DefaultNamespaces:    map[string]cache.Config{r.Activator.Namespace: {}},
			DefaultLabelSelector: r.Activator.Selector,
		})
		if err != nil {
			return fmt.Errorf("failed to make the activator pods' cache: %w", err)
		}
		if err := mgr.Add(c); err != nil {
			return fmt.Errorf("failed to add the activator pods' cache: %w", err)
		}
		r.activatorPods = c
		b = b.WatchesRawSource(source.Kind(c, &corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(r.agentsOnActivator)))
	}
	return b.
		WatchesRawSource(secrets).
		WatchesRawSource(configMaps).
		// Pods belong to the StatefulSet, not the agent: their labels name it.
		// The cache holds only agent pods (CacheOptions).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(agentOfPod)).
		// The slices Kubernetes' controllers write for an agent's Service
		// carry its labels, so the cache holds them (parkedservice.go).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(agentOfControllerSlice)).
		WithOptions(opts).
		Named("gooseagent").
		Complete(r)
}

// agentOfPod maps an agent pod to its GooseAgent by the instance label.
func agentOfPod(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[render.LabelName] != render.AppName || l[render.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: l[render.LabelInstance]}}}
}

// agentsReferencing maps a Secret or ConfigMap to the agents that read it.
func (r *GooseAgentReconciler) agentsReferencing(index string) handler.TypedMapFunc[*metav1.PartialObjectMetadata, reconcile.Request] {
	return func(ctx context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
		var list agentsv1alpha1.GooseAgentList
		if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "failed to list GooseAgents referencing object", "index", index, "name", o.GetName())
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return reqs
	}
}

// Reconcile brings one GooseAgent's children and status to the desired state.
func (r *GooseAgentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := &agentsv1alpha1.GooseAgent{}
	if err := r.Client.Get(ctx, req.NamespacedName, a); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := r.syncReviewBinding(ctx, a); err != nil {
		return ctrl.Result{}, err
	}
	if !a.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // children go with it through owner references
	}
	r.catchUp(a)

	// The cache holds only agent pods (CacheOptions).
	var pods corev1.PodList
	if err := r.listOfAgent(ctx, &pods, a, render.SelectorLabels(a)); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list pods: %w", err)
	}
	reachable, err := r.reachable(ctx, a, pods.Items)
	if err != nil {
		return ctrl.Result{}, err
	}
	idle, err := r.decideIdle(ctx, a, reachable, readyAt(pods.Items))
	if err != nil {
		return ctrl.Result{}, err
	}
	obs := observation{idle: idle}
	desired, err := r.desired(ctx, a, &obs)
	if err != nil {
		return ctrl.Result{}, err
	}
	var applied, pruned []string
	if desired != nil {
		applied, pruned, err = r.applyChildren(ctx, a, desired, &obs)
		if err != nil {
			obs.applyErr = err
		}
	}
	if obs.sts == nil {
		sts := &appsv1.StatefulSet{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: render.StatefulSetName(a)}, sts)
		switch {
		case err == nil && metav1.IsControlledBy(sts, a):
			obs.sts = sts
		case err != nil && !apierrors.IsNotFound(err):
			return ctrl.Result{}, fmt.Errorf("failed to get StatefulSet: %w", err)
		}
	}

	if obs.sts != nil {
		obs.pods = classifyPods(pods.Items)
	}
	if idle.parked && desired != nil && obs.applyErr == nil {
		n, err := r.removeStaleEndpoints(ctx, a)
		if err != nil {
			obs.applyErr = err
		}
		if n > 0 {
			// The mirroring controller may write its slice once more from
			// the Endpoints just deleted: look again shortly.
			idle.requeue = time.Second
		}
	}

	st, requeue := desiredStatus(a, obs, r.now())
	if idle.requeue > 0 && (requeue == 0 || idle.requeue < requeue) {
		requeue = idle.requeue
	}
	if err := r.recordEvents(a, st, applied, pruned, obs); err != nil {
		return ctrl.Result{}, err
	}
	if _, err := r.status.Apply(ctx, r.Client, a, FieldOwner, st); err != nil {
		return ctrl.Result{}, err
	}
	if obs.applyErr != nil {
		return ctrl.Result{}, obs.applyErr
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// catchUp puts this reconciler's last status write into a when the cache
// does not hold it yet, so the reconcile decides from it: the time it
// parked, when a condition changed, whether a transition was already told
// by an Event.
func (r *GooseAgentReconciler) catchUp(a *agentsv1alpha1.GooseAgent) {
	last, ok := r.status.Remembered(a, FieldOwner)
	if !ok {
		return
	}
	a.Status.Idle = last.Idle
	for _, c := range last.Conditions {
		meta.RemoveStatusCondition(&a.Status.Conditions, c.Type)
		a.Status.Conditions = append(a.Status.Conditions, c)
	}
}

// reachable reports whether the agent's Service reaches a ready pod, for
// telling when a woken agent is awake. A pod still stopping from the park
// does not count.
func (r *GooseAgentReconciler) reachable(ctx context.Context, a *agentsv1alpha1.GooseAgent, pods []corev1.Pod) (bool, error) {
	ready := map[string]bool{}
	for i := range pods {
		if p := &pods[i]; p.DeletionTimestamp.IsZero() && isPodReady(p) {
			ready[p.Name] = true
		}
	}
	if len(ready) == 0 || a.Spec.Idle == nil {
		return len(ready) > 0, nil
	}
	return r.serviceReachesAPod(ctx, a, ready)
}

// desired resolves the inputs and renders the children. A nil result with a
// nil error means the agent is blocked (reason recorded in obs).
func (r *GooseAgentReconciler) desired(ctx context.Context, a *agentsv1alpha1.GooseAgent, obs *observation) (*render.Desired, error) {
	values, missing, err := render.Resolve(render.References(a), r.lookup(ctx, a.Namespace))
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		obs.blockedReason, obs.blockedMessage = agentsv1alpha1.ReasonReferenceNotFound, render.MissingMessage(missing)
		return nil, nil
	}
	gen, err := r.generated(ctx, a)
	if err != nil {
		if _, ok := errors.AsType[*foreignObjectError](err); ok {
			obs.applyErr = err
			return nil, nil
		}
		return nil, err
	}
	in := render.Inputs{Agent: a, Defaults: r.Defaults, Generated: gen, Values: values, Parked: obs.idle.parked}
	if r.Activator != nil && obs.idle.servesActivator() {
		if in.Activator, err = r.activatorInputs(ctx); err != nil {
			return nil, err
		}
	}
	d, err := render.Build(in)
	if render.IsInvalidSpec(err) {
		obs.blockedReason, obs.blockedMessage = agentsv1alpha1.ReasonInvalidSpec, err.Error()
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to render children: %w", err)
	}
	obs.runtimeMissing = render.MissingRuntimes(a)
	return d, nil
}

func (r *GooseAgentReconciler) lookup(ctx context.Context, ns string) render.Lookup {
	return func(kind render.RefKind, name string) (map[string]string, bool, error) {
		return r.References.Read(ctx, kind, ns, name)
	}
}

// foreignObjectError: a child's name is taken by an object this agent does
// not control. The operator does not take it over.
type foreignObjectError struct{ kind, name string }

func (e *foreignObjectError) Error() string {
	return fmt.Sprintf("%s %s exists and is not controlled by this GooseAgent", e.kind, e.name)
}

// generated returns the generated secret values, reusing those already in the
// agent's Secret so they stay stable across reconciles and restarts.
func (r *GooseAgentReconciler) generated(ctx context.Context, a *agentsv1alpha1.GooseAgent) (render.Generated, error) {
	key := client.ObjectKey{Namespace: a.Namespace, Name: render.SecretName(a)}
	s := &corev1.Secret{}
	err := r.Client.Get(ctx, key, s)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, key, s)
	}
	found := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return render.Generated{}, fmt.Errorf("failed to get Secret %s: %w", key.Name, err)
	}
	if found && !metav1.IsControlledBy(s, a) {
		return render.Generated{}, &foreignObjectError{kind: "Secret", name: key.Name}
	}
	gen := r.GenerateToken
	if gen == nil {
		gen = randomToken
	}
	get := func(k string) (string, error) {
		if v := string(s.Data[k]); found && v != "" {
			return v, nil
		}
		v, err := gen(k)
		if err != nil {
			return "", fmt.Errorf("failed to generate %s: %w", k, err)
		}
		return v, nil
	}
	var g render.Generated
	if g.GooseSecretKey, err = get(render.KeyGooseSecret); err != nil {
		return g, err
	}
	if a.Spec.Sidecar.Auth.TokenSecretRef == nil {
		if g.AuthToken, err = get(render.KeyAuthToken); err != nil {
			return g, err
		}
	}
	return g, nil
}

// applyChildren applies the rendered children, records the live
// StatefulSet in obs, and prunes the children no longer rendered (e.g. the
// NetworkPolicy after spec.networkPolicy is removed). It returns the
// children it applied and deleted.
func (r *GooseAgentReconciler) applyChildren(ctx context.Context, a *agentsv1alpha1.GooseAgent, d *render.Desired, obs *observation) (applied, pruned []string, err error) {
	kinds, err := resolveKinds(r.Client.Scheme())
	if err != nil {
		return nil, nil, err
	}
	cs, err := children(kinds, d.Objects())
	if err != nil {
		return nil, nil, err
	}
	for _, c := range cs {
		did, live, err := r.applyIfChanged(ctx, a, c)
		if err != nil {
			return applied, nil, err
		}
		if did {
			applied = append(applied, c.id())
		}
		if sts, ok := live.(*appsv1.StatefulSet); ok {
			obs.sts = sts
		}
	}
	want := map[string]bool{}
	for _, c := range cs {
		want[c.id()] = true
	}
	pruned, err = r.prune(ctx, a, kinds, want)
	return applied, pruned, err
}

// prune deletes the children of a whose id is not in want.
func (r *GooseAgentReconciler) prune(ctx context.Context, a *agentsv1alpha1.GooseAgent, kinds []resolvedKind, want map[string]bool) ([]string, error) {
	sel := client.MatchingLabels{render.LabelInstance: a.Name, render.LabelManagedBy: render.ManagedBy}
	var pruned []string
	for _, k := range kinds {
		list, err := k.newList(r.Client.Scheme())
		if err != nil {
			return pruned, err
		}
		if err := r.listOfAgent(ctx, list, a, sel); err != nil {
			return pruned, fmt.Errorf("failed to list %s children: %w", k.gvk.Kind, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return pruned, fmt.Errorf("failed to read %s children: %w", k.gvk.Kind, err)
		}
		for _, it := range items {
			o, ok := it.(client.Object)
			if !ok || !metav1.IsControlledBy(o, a) {
				continue
			}
			c := child{resolvedKind: k, name: o.GetName()}
			if want[c.id()] {
				continue
			}
			if err := r.Client.Delete(ctx, o, client.Preconditions{UID: new(o.GetUID())}); client.IgnoreNotFound(err) != nil {
				return pruned, fmt.Errorf("failed to delete %s: %w", c.id(), err)
			}
			pruned = append(pruned, c.id())
		}
	}
	return pruned, nil
}

// recordEvents emits Events for transitions only, so a no-op resync emits none.
func (r *GooseAgentReconciler) recordEvents(a *agentsv1alpha1.GooseAgent, status *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration, applied, pruned []string, obs observation) error {
	if r.Recorder == nil {
		return nil
	}
	st, err := ssa.AsStatus(status)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, "Applied", "Apply", "applied %s", strings.Join(applied, ", "))
	}
	if len(pruned) > 0 {
		r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, "Pruned", "Delete", "deleted %s", strings.Join(pruned, ", "))
	}
	if obs.applyErr != nil {
		r.Recorder.Eventf(a, nil, corev1.EventTypeWarning, agentsv1alpha1.ReasonApplyFailed, "Apply", "%s", obs.applyErr.Error())
	}
	old := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionReady)
	cur := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionReady)
	if cur == nil || (old != nil && old.Status == cur.Status && old.Reason == cur.Reason) {
		return nil
	}
	switch {
	case cur.Status == metav1.ConditionTrue:
		r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, "Ready", "Reconcile", "%s", cur.Message)
	case cur.Reason == agentsv1alpha1.ReasonParked:
		r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, agentsv1alpha1.ReasonParked, "Park", "%s", cur.Message)
	case cur.Reason == agentsv1alpha1.ReasonReferenceNotFound || cur.Reason == agentsv1alpha1.ReasonInvalidSpec:
		r.Recorder.Eventf(a, nil, corev1.EventTypeWarning, cur.Reason, "Reconcile", "%s", cur.Message)
	case old != nil && old.Status == metav1.ConditionTrue:
		r.Recorder.Eventf(a, nil, corev1.EventTypeWarning, "NotReady", "Reconcile", "%s: %s", cur.Reason, cur.Message)
	}
	return nil
}
