package stats

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	agentsv1alpha1ac "github.com/adk2goose/goose-operator/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/internal/retry"
	"github.com/adk2goose/goose-operator/controllers/internal/ssa"
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

	status ssa.Status
}

// SetupWithManager registers the reconciler. It reacts to agents being
// created, to spec changes and to a park or a wake; polling itself is driven
// by RequeueAfter, so its own status writes never trigger another poll.
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
		For(&agentsv1alpha1.GooseAgent{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, parkChanged))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles, RateLimiter: retry.Limiter()}).
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
			r.status.Forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("failed to get GooseAgent: %w", err)
	}
	if !a.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	next := reconcile.Result{RequeueAfter: untilSlot(time.Now(), r.Interval, req.NamespacedName)}

	pods, err := r.pods(ctx, &a)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(pods) == 0 && isParked(&a) {
		// A parked agent has nothing to poll until it wakes, which changes
		// its Parked condition (parkChanged) and brings it back here. Status
		// keeps the last figures; this pass writes only that no pod answers.
		next = reconcile.Result{}
	}
	if readyPods(pods) == 0 && neverWritten(&a) {
		// Nothing to say yet: Ready already says why there is no pod to ask,
		// and a write now would be one more per agent at a cold start.
		return next, nil
	}
	var res Result
	if readyPods(pods) == 0 {
		// No pod to ask, so no token to read: a new agent's Secret may not
		// exist yet, and that is no error.
		res = r.Collector.Collect(ctx, req.NamespacedName, "", pods)
	} else if token, err := r.References.SidecarToken(ctx, &a); err != nil {
		// Without the token no pod can be asked; keep what status holds.
		res.Stale = []string{err.Error()}
	} else {
		res = r.Collector.Collect(ctx, req.NamespacedName, token, pods)
	}

	desired := desiredStatus(&a, res, pods, time.Now())
	st, err := ssa.AsStatus(desired)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.Metrics.observe(req.NamespacedName, st)
	wrote, err := r.status.Apply(ctx, r.Client, &a, FieldOwner, desired)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to write stats: %w", err)
	}
	if wrote {
		log.FromContext(ctx).V(1).Info("stats updated", "sessions", st.Sessions.Total, "tokens", st.Tokens.Total)
	}
	return next, nil
}

// untilSlot is the time from now until the agent's next poll. Each agent
// polls at a fixed offset within the interval, drawn from its name, so
// that agents created (or a manager started) at once spread their polls
// over the interval instead of asking every pod in one burst. The next poll
// is between half an interval and one and a half away; from the second on,
// exactly an interval apart.
func untilSlot(now time.Time, interval time.Duration, agent types.NamespacedName) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(agent.Namespace + "/" + agent.Name))
	offset := time.Duration(h.Sum64() % uint64(interval))
	slot := now.Truncate(interval).Add(offset)
	for slot.Before(now.Add(interval / 2)) {
		slot = slot.Add(interval)
	}
	return slot.Sub(now)
}

// neverWritten reports an agent whose status holds nothing of this
// reconciler's: no figures and no StatsAvailable condition.
// isParked reports whether the agent's Parked condition is true.
func isParked(a *agentsv1alpha1.GooseAgent) bool {
	return meta.IsStatusConditionTrue(a.Status.Conditions, agentsv1alpha1.ConditionParked)
}

// parkChanged passes updates that park or wake an agent: polling stops
// while it is parked and starts again when it wakes.
var parkChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*agentsv1alpha1.GooseAgent)
		n, okNew := e.ObjectNew.(*agentsv1alpha1.GooseAgent)
		return okOld && okNew && isParked(o) != isParked(n)
	},
}

func neverWritten(a *agentsv1alpha1.GooseAgent) bool {
	return a.Status.StatsUpdatedAt == nil && a.Status.Budget == nil &&
		meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionStatsAvailable) == nil
}

// Activity is what an agent's pods are doing now, for parking it.
type Activity struct {
	// LastTurnAt is when the last turn on any pod ended; zero before the first.
	LastTurnAt time.Time
	// InFlight counts the turns running now.
	InFlight int64
	// Unanswered says, one entry a pod, why a pod did not answer now; a pod
	// that is not ready does not answer.
	Unanswered []string
}

// Activity asks every pod of the agent for its stats now (the figures it
// gets count for the next status write too).
func (r *Reconciler) Activity(ctx context.Context, a *agentsv1alpha1.GooseAgent) (Activity, error) {
	pods, err := r.pods(ctx, a)
	if err != nil {
		return Activity{}, err
	}
	if len(pods) == 0 {
		return Activity{}, nil
	}
	token, err := r.References.SidecarToken(ctx, a)
	if err != nil {
		return Activity{}, err
	}
	res := r.Collector.Collect(ctx, client.ObjectKeyFromObject(a), token, pods)
	return Activity{LastTurnAt: res.Totals.LastTurnAt, InFlight: res.Totals.InFlight, Unanswered: res.Stale}, nil
}

// pods lists the agent's pods; only ready ones with an IP get a URL.
func (r *Reconciler) pods(ctx context.Context, a *agentsv1alpha1.GooseAgent) ([]Pod, error) {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(a.Namespace), client.MatchingLabels(render.SelectorLabels(a))); err != nil {
		return nil, fmt.Errorf("failed to list pods: %w", err)
	}
	port := render.Port(a)
	urlOf := r.PodURL
	if urlOf == nil {
		urlOf = podURL
	}
	out := make([]Pod, 0, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		if !p.DeletionTimestamp.IsZero() && p.Status.PodIP == "" {
			continue
		}
		pod := Pod{Name: p.Name}
		if p.Status.PodIP != "" && podReady(p) {
			pod.URL = urlOf(p, port)
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

// desiredStatus computes the owned part of status from the collection, as
// the apply configuration to write (under FieldOwner, only when it changed).
// Figures never come from nowhere: when nothing is known (no pod ever
// answered since the operator started) the ones already in status stay, and
// until there are any, none is written. statsUpdatedAt moves only when a
// figure changes.
func desiredStatus(a *agentsv1alpha1.GooseAgent, res Result, pods []Pod, now time.Time) *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration {
	sessions, tokens, updatedAt := a.Status.Sessions, a.Status.Tokens, a.Status.StatsUpdatedAt
	if res.Known {
		got := agentsv1alpha1.SessionStats{Total: res.Totals.SessionsTotal, Active: res.Totals.SessionsActive, Users: res.Totals.Users}
		gotTokens := agentsv1alpha1.TokenStats{Input: res.Totals.TokensInput, Output: res.Totals.TokensOutput, Total: res.Totals.TokensTotal}
		if got != sessions || gotTokens != tokens || updatedAt == nil {
			sessions, tokens = got, gotTokens
			updatedAt = &metav1.Time{Time: res.CollectedAt.Truncate(time.Second)}
		}
	}

	c := metav1.Condition{Type: agentsv1alpha1.ConditionStatsAvailable, ObservedGeneration: a.Generation}
	none := !res.Known && updatedAt == nil
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
	conds := slices.Clone(a.Status.Conditions)
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	meta.SetStatusCondition(&conds, c)
	owned := []string{agentsv1alpha1.ConditionStatsAvailable}
	budget, budgetCondition := budgetStatus(a, res, now)
	if budgetCondition != nil {
		meta.SetStatusCondition(&conds, *budgetCondition)
		owned = append(owned, agentsv1alpha1.ConditionBudgetExhausted)
	}

	st := agentsv1alpha1ac.GooseAgentStatus().WithConditions(ssa.Conditions(conds, owned...)...)
	if updatedAt != nil {
		st.WithSessions(agentsv1alpha1ac.SessionStats().WithTotal(sessions.Total).WithActive(sessions.Active).WithUsers(sessions.Users)).
			WithTokens(tokenStats(tokens)).
			WithStatsUpdatedAt(*updatedAt)
	}
	if budget != nil {
		st.WithBudget(budget)
	}
	return st
}

func tokenStats(t agentsv1alpha1.TokenStats) *agentsv1alpha1ac.TokenStatsApplyConfiguration {
	return agentsv1alpha1ac.TokenStats().WithInput(t.Input).WithOutput(t.Output).WithTotal(t.Total)
}

func staleMessage(head string, stale []string) string {
	msg := head + ": " + strings.Join(stale, "; ")
	if len(msg) > maxStaleMessage {
		msg = msg[:maxStaleMessage-3] + "..."
	}
	return msg
}
