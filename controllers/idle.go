package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/controllers/stats"
)

// ActivityReader asks an agent's pods what they are doing now. The stats
// reconciler is one: it already knows how to reach each pod's /stats.
type ActivityReader interface {
	Activity(ctx context.Context, a *agentsv1alpha1.GooseAgent) (stats.Activity, error)
}

// Activator says where the activator runs: the ready pods in Namespace that
// Selector matches (the manager's own pods), listening on Port. A parked
// agent's Service is pointed there.
type Activator struct {
	Namespace string
	Selector  labels.Selector
	Port      int32
}

// DefaultIdleRecheck is how soon an agent due to be parked is asked again
// when a turn was running or a pod did not answer.
const DefaultIdleRecheck = 15 * time.Second

// idleDecision is whether the agent is parked, and the Parked condition and
// status.idle that say so. Without spec.idle it is the zero value: awake,
// no condition, no status.idle.
type idleDecision struct {
	enabled         bool
	parked          bool
	reason, message string
	status          agentsv1alpha1.IdleStatus
	// requeue is when to look again: the idle deadline, or a recheck.
	requeue time.Duration
}

// decideIdle parks or wakes the agent. It asks the pods only when the idle
// deadline has passed, so an awake agent costs one timer, not a poll.
// reachable says whether the agent's Service reaches a ready pod now,
// readyAt since when one of its pods has been ready (nil: none is).
func (r *GooseAgentReconciler) decideIdle(ctx context.Context, a *agentsv1alpha1.GooseAgent, reachable bool, readyAt *metav1.Time) (idleDecision, error) {
	spec := a.Spec.Idle
	if spec == nil {
		return idleDecision{}, nil
	}
	now := r.now()
	d := idleDecision{enabled: true}
	if a.Status.Idle != nil {
		d.status = *a.Status.Idle.DeepCopy()
	}
	st := &d.status
	wasParked := st.ParkedAt != nil
	prev := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionParked)

	if spec.Parked {
		if !wasParked {
			st.ParkedAt = &metav1.Time{Time: now}
		}
		d.parked, d.reason, d.message = true, agentsv1alpha1.ReasonParkRequested, "parked by spec.idle.parked"
		return d, nil
	}
	if wasParked {
		wake, why := wakeReason(a, prev)
		if wake == "" {
			d.parked, d.reason = true, agentsv1alpha1.ReasonIdle
			d.message = fmt.Sprintf("no turn on any replica for %s", spec.After.Duration)
			return d, nil
		}
		log.FromContext(ctx).Info("waking the agent", "why", why)
		st.ParkedAt = nil
		st.WokenAt = &metav1.Time{Time: now}
		st.LastActivityAt = st.WokenAt
		d.reason, d.message = waking(now, reachable)
		return d, nil
	}

	d.reason, d.message = agentsv1alpha1.ReasonAwake, "spec.idle.after is unset: parked only by spec.idle.parked"
	if prev != nil && prev.Reason == agentsv1alpha1.ReasonWaking && !reachable {
		d.reason, d.message = agentsv1alpha1.ReasonWaking, prev.Message
	}
	if spec.After == nil {
		return d, nil
	}
	after := spec.After.Duration
	if d.reason == agentsv1alpha1.ReasonAwake {
		d.message = fmt.Sprintf("parks after %s without a turn", after)
	}
	if readyAt == nil {
		// No turn can run before a pod is ready (the agent is starting, or
		// failing): it is not idle, and its idle time starts once a pod is.
		// The pod's readiness reconciles the agent again.
		return d, nil
	}
	last := latest(st.LastActivityAt, st.WokenAt, &a.CreationTimestamp, readyAt)
	if deadline := last.Add(after); now.Before(deadline) {
		st.LastActivityAt = &metav1.Time{Time: last}
		d.requeue = deadline.Sub(now)
		return d, nil
	}
	// The deadline passed as far as status knows: ask every pod now.
	recheck := r.IdleRecheck
	if recheck <= 0 {
		recheck = DefaultIdleRecheck
	}
	if r.Activity == nil {
		return d, nil // nothing can tell whether a turn runs: never parked for idleness
	}
	act, err := r.Activity.Activity(ctx, a)
	if err != nil {
		log.FromContext(ctx).Info("not parking: failed to ask the pods", "error", err.Error())
		d.requeue = recheck
		return d, nil
	}
	if act.LastTurnAt.After(last) {
		last = act.LastTurnAt
	}
	st.LastActivityAt = &metav1.Time{Time: last}
	switch deadline := last.Add(after); {
	case len(act.Unanswered) > 0:
		log.FromContext(ctx).V(1).Info("not parking: a pod did not answer", "pods", act.Unanswered)
		d.requeue = recheck
	case act.InFlight > 0:
		d.requeue = recheck
	case now.Before(deadline):
		d.requeue = deadline.Sub(now)
	default:
		st.ParkedAt = &metav1.Time{Time: now}
		d.parked, d.reason = true, agentsv1alpha1.ReasonIdle
		d.message = fmt.Sprintf("no turn on any replica for %s", after)
		log.FromContext(ctx).Info("parking the idle agent", "lastActivity", last, "after", after)
	}
	return d, nil
}

// wakeReason says why an agent parked for idleness wakes, or "" when it
// stays parked. An agent parked by hand wakes once spec.idle.parked is
// cleared; one parked for idleness on a wake request newer than its park, or
// when spec.idle.after is removed.
func wakeReason(a *agentsv1alpha1.GooseAgent, prev *metav1.Condition) (string, string) {
	if prev != nil && prev.Reason == agentsv1alpha1.ReasonParkRequested {
		return "unparked", "spec.idle.parked was cleared"
	}
	if a.Spec.Idle.After == nil {
		return "unparked", "spec.idle.after was removed"
	}
	at, ok := WakeRequestedAt(a)
	// parkedAt is kept to the second, so a request in the second of the
	// park wakes the agent rather than waiting for a timeout.
	if ok && !at.Before(a.Status.Idle.ParkedAt.Time) {
		return "requested", "wake requested at " + at.Format(time.RFC3339Nano)
	}
	return "", ""
}

func waking(now time.Time, reachable bool) (string, string) {
	if reachable {
		return agentsv1alpha1.ReasonAwake, "woken at " + now.UTC().Format(time.RFC3339)
	}
	return agentsv1alpha1.ReasonWaking, "woken at " + now.UTC().Format(time.RFC3339) + ": waiting for the Service to reach a ready pod"
}

// WakeRequestedAt reads the wake request annotation; false when it is
// absent or not an RFC 3339 time.
func WakeRequestedAt(a *agentsv1alpha1.GooseAgent) (time.Time, bool) {
	v, ok := a.Annotations[agentsv1alpha1.WakeRequestedAtAnnotation]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// latest returns the latest of the times that are set.
func latest(ts ...*metav1.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t != nil && t.After(out) {
			out = t.Time
		}
	}
	return out
}

// wakeRequested passes updates that change the wake request annotation,
// which changes no generation.
var wakeRequested = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		k := agentsv1alpha1.WakeRequestedAtAnnotation
		return e.ObjectOld.GetAnnotations()[k] != e.ObjectNew.GetAnnotations()[k]
	},
}

// servesActivator reports whether the agent's Service must point at the
// activator: while it is parked, and after a wake until a pod is ready.
func (d idleDecision) servesActivator() bool {
	return d.parked || d.reason == agentsv1alpha1.ReasonWaking
}

// activatorInputs lists the activator's ready pods for the agent's slice.
func (r *GooseAgentReconciler) activatorInputs(ctx context.Context) (*render.Activator, error) {
	var pods corev1.PodList
	if err := r.activatorPods.List(ctx, &pods, client.InNamespace(r.Activator.Namespace), client.MatchingLabelsSelector{Selector: r.Activator.Selector}); err != nil {
		return nil, fmt.Errorf("failed to list activator pods: %w", err)
	}
	act := &render.Activator{Port: r.Activator.Port}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.PodIP == "" || !p.DeletionTimestamp.IsZero() || !isPodReady(p) {
			continue
		}
		act.Pods = append(act.Pods, render.ActivatorPod{Namespace: p.Namespace, Name: p.Name, IP: p.Status.PodIP})
	}
	return act, nil
}

// readyAt is when the first of the ready pods became ready (its Ready
// condition's transition); nil when none is ready.
func readyAt(pods []corev1.Pod) *metav1.Time {
	var at *metav1.Time
	for i := range pods {
		p := &pods[i]
		if !p.DeletionTimestamp.IsZero() || !isPodReady(p) {
			continue
		}
		if c := readyCondition(p); at == nil || c.LastTransitionTime.Before(at) {
			at = c.LastTransitionTime.DeepCopy()
		}
	}
	return at
}

func isPodReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

// readyCondition is the pod's Ready condition; nil before the kubelet set it.
func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady {
			return c
		}
	}
	return nil
}

// agentsOnActivator maps a change of an activator pod to the agents whose
// Service points at the activator, so their slices follow its pods: those
// with an activator slice, and those whose status or spec says parked or
// waking (a park whose slice the cache has not seen yet).
func (r *GooseAgentReconciler) agentsOnActivator(ctx context.Context, _ *corev1.Pod) []reconcile.Request {
	keys := map[client.ObjectKey]bool{}
	var slices discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &slices, client.MatchingLabels{discoveryv1.LabelManagedBy: render.SliceManagedBy}); err != nil {
		log.FromContext(ctx).Error(err, "failed to list activator slices for an activator pod change")
	}
	for _, s := range slices.Items {
		if owner := metav1.GetControllerOf(&s); owner != nil && owner.Kind == "GooseAgent" {
			keys[client.ObjectKey{Namespace: s.Namespace, Name: owner.Name}] = true
		}
	}
	var list agentsv1alpha1.GooseAgentList
	if err := r.Client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "failed to list GooseAgents for an activator pod change")
	}
	for i := range list.Items {
		a := &list.Items[i]
		c := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionParked)
		if (c != nil && (c.Status == metav1.ConditionTrue || c.Reason == agentsv1alpha1.ReasonWaking)) ||
			(a.Spec.Idle != nil && a.Spec.Idle.Parked) {
			keys[client.ObjectKeyFromObject(a)] = true
		}
	}
	reqs := make([]reconcile.Request, 0, len(keys))
	for k := range keys {
		reqs = append(reqs, reconcile.Request{NamespacedName: k})
	}
	return reqs
}
