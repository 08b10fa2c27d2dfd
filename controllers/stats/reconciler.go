package stats

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// FieldOwner owns status.sessions, status.tokens, status.statsUpdatedAt,
// status.budget and the StatsAvailable and BudgetExhausted conditions. The main reconciler owns the rest of status
// under its own field owner, so neither write clobbers the other.
const FieldOwner = "goose-operator-stats"

// DefaultInterval is how often each agent's sidecars are polled.
const DefaultInterval = 30 * time.Second

// maxStaleMessage bounds the StatsAvailable message (one line a pod).
const maxStaleMessage = 1024

// Reconciler keeps every GooseAgent's session and token figures current by
// polling its pods' sidecars every Interval.
type Reconciler struct {
	Client client.Client
	// References reads the sidecar token, remembered until its Secret changes.
	References *references.Tracker
	Collector  *Collector
	// Interval between polls of one agent. Default DefaultInterval.
	Interval time.Duration
	// PodURL builds a ready pod's /stats URL. Default: http://<podIP>:<port>/stats.
	PodURL func(pod *corev1.Pod, port int32) string
	// Metrics, when set, exports the figures (see NewMetrics).
	Metrics *Metrics
	// MaxConcurrentReconciles is the number of agents polled at once. Default 16.
	MaxConcurrentReconciles int
}

// SetupWithManager registers the reconciler. It reacts to agents being
// created and to spec changes; polling itself is driven by RequeueAfter, so
// its own status writes never trigger another poll.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	if r.Interval <= 0 {
		r.Interval = DefaultInterval
	}
	if r.PodURL == nil {
		r.PodURL = podURL
	}
	if r.MaxConcurrentReconciles <= 0 {
		r.MaxConcurrentReconciles = 16
	}
	return builder.ControllerManagedBy(mgr).
		Named("gooseagent-stats").
		For(&agentsv1alpha1.GooseAgent{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

func podURL(pod *corev1.Pod, port int32) string {
	return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))) + "/stats"
}

// Reconcile polls one agent and writes its figures when they changed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var a agentsv1alpha1.GooseAgent
	if err := r.Client.Get(ctx, req.NamespacedName, &a); err != nil {
		if apierrors.IsNotFound(err) {
			r.Collector.Forget(req.NamespacedName)
			r.Metrics.forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("failed to get GooseAgent: %w", err)
	}
	if !a.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	next := reconcile.Result{RequeueAfter: r.Interval}

	pods, err := r.pods(ctx, &a)
	if err != nil {
		return reconcile.Result{}, err
	}
	var res Result
	if readyPods(pods) == 0 {
		// No pod to ask, so no token to read: a new agent's Secret may not
		// exist yet, and that is no error.
		res = r.Collector.Collect(ctx, req.NamespacedName, "", pods)
	} else if token, err := r.token(ctx, &a); err != nil {
		// Without the token no pod can be asked; keep what status holds.
		res.Stale = []string{err.Error()}
	} else {
		res = r.Collector.Collect(ctx, req.NamespacedName, token, pods)
	}

	st := desired(&a, res, pods, time.Now())
	r.Metrics.observe(req.NamespacedName, st)
	if !changed(&a.Status, st) {
		return next, nil
	}
	if err := r.apply(ctx, &a, st); err != nil {
		return reconcile.Result{}, err
	}
	log.FromContext(ctx).V(1).Info("stats updated", "sessions", st.Sessions.Total, "tokens", st.Tokens.Total)
	return next, nil
}

// token reads the sidecar's inbound token from the agent's Secret.
func (r *Reconciler) token(ctx context.Context, a *agentsv1alpha1.GooseAgent) (string, error) {
	name, key := render.SecretName(a), render.KeyAuthToken
	if ref := a.Spec.Sidecar.Auth.TokenSecretRef; ref != nil {
		name, key = ref.Name, ref.Key
	}
	v, found, err := r.References.ReadKey(ctx, render.KindSecret, a.Namespace, name, key)
	if err != nil {
		return "", fmt.Errorf("failed to read sidecar token from Secret %s: %w", name, err)
	}
	if !found {
		return "", fmt.Errorf("failed to read sidecar token: Secret %s or its key %q not found", name, key)
	}
	t := strings.TrimSpace(v)
	if t == "" {
		return "", fmt.Errorf("failed to read sidecar token: Secret %s has no key %q", name, key)
	}
	return t, nil
}

// pods lists the agent's pods; only ready ones with an IP get a URL.
func (r *Reconciler) pods(ctx context.Context, a *agentsv1alpha1.GooseAgent) ([]Pod, error) {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(a.Namespace), client.MatchingLabels(render.SelectorLabels(a))); err != nil {
		return nil, fmt.Errorf("failed to list pods: %w", err)
	}
	port := render.Port(a)
	out := make([]Pod, 0, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		if !p.DeletionTimestamp.IsZero() && p.Status.PodIP == "" {
			continue
		}
		pod := Pod{Name: p.Name}
		if p.Status.PodIP != "" && podReady(p) {
			pod.URL = r.PodURL(p, port)
		}
		out = append(out, pod)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// readyPods counts the pods that can be asked.
func readyPods(pods []Pod) int {
	n := 0
	for _, p := range pods {
		if p.URL != "" {
			n++
		}
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// figures is the part of status this reconciler owns.
type figures struct {
	Sessions  agentsv1alpha1.SessionStats
	Tokens    agentsv1alpha1.TokenStats
	UpdatedAt *metav1.Time
	Condition metav1.Condition
	// Budget and BudgetCondition are nil without spec.budget.
	Budget          *agentsv1alpha1.BudgetStatus
	BudgetCondition *metav1.Condition
}

// desired computes the owned status from the collection. Figures never come
// from nowhere: when nothing is known (no pod ever answered since the
// operator started) the ones already in status stay. statsUpdatedAt moves
// only when a figure changes.
func desired(a *agentsv1alpha1.GooseAgent, res Result, pods []Pod, now time.Time) figures {
	f := figures{Sessions: a.Status.Sessions, Tokens: a.Status.Tokens, UpdatedAt: a.Status.StatsUpdatedAt}
	if res.Known {
		sessions := agentsv1alpha1.SessionStats{Total: res.Totals.SessionsTotal, Active: res.Totals.SessionsActive}
		tokens := agentsv1alpha1.TokenStats{Input: res.Totals.TokensInput, Output: res.Totals.TokensOutput, Total: res.Totals.TokensTotal}
		if sessions != f.Sessions || tokens != f.Tokens || f.UpdatedAt == nil {
			f.Sessions, f.Tokens = sessions, tokens
			f.UpdatedAt = &metav1.Time{Time: res.CollectedAt.Truncate(time.Second)}
		}
	}

	c := metav1.Condition{Type: agentsv1alpha1.ConditionStatsAvailable, ObservedGeneration: a.Generation}
	none := !res.Known && f.UpdatedAt == nil
	switch {
	case len(res.Stale) == 0 && len(pods) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, agentsv1alpha1.ReasonStatsCollected
		c.Message = fmt.Sprintf("collected from %d pod(s)", len(pods))
	case len(pods) == 0 && none:
		c.Status, c.Reason = metav1.ConditionFalse, agentsv1alpha1.ReasonStatsNotCollected
		c.Message = "not collected yet: the agent has no pods yet"
	case len(pods) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, agentsv1alpha1.ReasonStatsNotCollected
		c.Message = "the agent has no pods to collect from"
	case none && readyPods(pods) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, agentsv1alpha1.ReasonStatsNotCollected
		c.Message = fmt.Sprintf("not collected yet: waiting for a pod to become ready (0/%d ready)", len(pods))
	case none:
		c.Status, c.Reason = metav1.ConditionFalse, agentsv1alpha1.ReasonStatsNotCollected
		c.Message = staleMessage("no figures yet", res.Stale)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, agentsv1alpha1.ReasonStatsStale
		c.Message = staleMessage("figures may be out of date (last known values kept)", res.Stale)
	}
	// Keep the transition time when nothing but the time would change.
	conds := append([]metav1.Condition(nil), a.Status.Conditions...)
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	meta.SetStatusCondition(&conds, c)
	f.Condition = *meta.FindStatusCondition(conds, agentsv1alpha1.ConditionStatsAvailable)
	f.Budget, f.BudgetCondition = budgetFigures(a, res, now)
	return f
}

func staleMessage(head string, stale []string) string {
	msg := head + ": " + strings.Join(stale, "; ")
	if len(msg) > maxStaleMessage {
		msg = msg[:maxStaleMessage-3] + "..."
	}
	return msg
}

func changed(cur *agentsv1alpha1.GooseAgentStatus, f figures) bool {
	if cur.Sessions != f.Sessions || cur.Tokens != f.Tokens || budgetChanged(cur, f) {
		return true
	}
	if (cur.StatsUpdatedAt == nil) != (f.UpdatedAt == nil) ||
		(cur.StatsUpdatedAt != nil && !cur.StatsUpdatedAt.Equal(f.UpdatedAt)) {
		return true
	}
	old := meta.FindStatusCondition(cur.Conditions, agentsv1alpha1.ConditionStatsAvailable)
	return old == nil || old.Status != f.Condition.Status || old.Reason != f.Condition.Reason ||
		old.Message != f.Condition.Message || old.ObservedGeneration != f.Condition.ObservedGeneration
}

// apply server-side-applies the owned fields of status.
func (r *Reconciler) apply(ctx context.Context, a *agentsv1alpha1.GooseAgent, f figures) error {
	status := map[string]any{"conditions": []any{conditionApply(f.Condition)}}
	applyBudget(status, f)
	if f.UpdatedAt != nil {
		status["sessions"] = map[string]any{"total": f.Sessions.Total, "active": f.Sessions.Active}
		status["tokens"] = map[string]any{"input": f.Tokens.Input, "output": f.Tokens.Output, "total": f.Tokens.Total}
		status["statsUpdatedAt"] = f.UpdatedAt.UTC().Format(time.RFC3339)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": agentsv1alpha1.GroupVersion.String(),
		"kind":       "GooseAgent",
		"metadata":   map[string]any{"name": a.Name, "namespace": a.Namespace},
		"status":     status,
	}}
	if err := r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply GooseAgent stats: %w", err)
	}
	return nil
}
