package ssa_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	agentsv1alpha1ac "github.com/adk2goose/goose-operator/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/internal/ssa"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunShared(m)) }

// Two field owners, as the reconcilers: one the rollout fields, one the figures.
const (
	mainOwner  = "test-main"
	statsOwner = "test-stats"
)

var since = metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))

func mainStatus(ready int32) *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration {
	status := metav1.ConditionFalse
	if ready > 0 {
		status = metav1.ConditionTrue
	}
	return agentsv1alpha1ac.GooseAgentStatus().
		WithObservedGeneration(1).
		// Zero: left out of the typed object by omitempty, so extraction
		// cannot see it; it must still count as unchanged.
		WithReplicas(0).
		WithReadyReplicas(ready).
		WithEndpoints(agentsv1alpha1ac.Endpoints().WithREST("http://a.ns.svc.cluster.local:8080")).
		WithConditions(ssa.Conditions([]metav1.Condition{{Type: agentsv1alpha1.ConditionReady, Status: status, Reason: "Test", LastTransitionTime: since}},
			agentsv1alpha1.ConditionReady)...)
}

// statsStatus is the stats owner's status: 3 sessions, none active.
func statsStatus() *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration {
	return agentsv1alpha1ac.GooseAgentStatus().
		WithSessions(agentsv1alpha1ac.SessionStats().WithTotal(3).WithActive(0)).
		WithStatsUpdatedAt(since).
		WithConditions(ssa.Conditions([]metav1.Condition{{Type: agentsv1alpha1.ConditionStatsAvailable, Status: metav1.ConditionTrue, Reason: "Test", Message: "ok", LastTransitionTime: since}},
			agentsv1alpha1.ConditionStatsAvailable)...)
}

// counting returns a client that counts status applies.
func counting(t testing.TB, n *atomic.Int64) client.Client {
	t.Helper()
	env := testenv.Shared(t)
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			n.Add(1)
			return c.SubResource(sub).Apply(ctx, o, opts...)
		},
	})
}

func newAgent(t testing.TB) *agentsv1alpha1.GooseAgent {
	t.Helper()
	env := testenv.Shared(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ssa-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	a := &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "a"},
		Spec:       agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"}},
	}
	if err := env.Client.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return a
}

func get(t testing.TB, a *agentsv1alpha1.GooseAgent) *agentsv1alpha1.GooseAgent {
	t.Helper()
	out := &agentsv1alpha1.GooseAgent{}
	if err := testenv.Shared(t).Client.Get(context.Background(), client.ObjectKeyFromObject(a), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestApplyStatusWritesOnlyChanges: each owner writes its status when it
// differs from what it last applied and never otherwise (no request, the
// resourceVersion stays); the other owner's fields are no change; a field
// left out is removed; a hand edit of an owned field is undone.
func TestApplyStatusWritesOnlyChanges(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	var writes atomic.Int64
	c := counting(t, &writes)
	a := newAgent(t)
	var s ssa.Status
	apply := func(owner string, st *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration, wantWrite bool) *agentsv1alpha1.GooseAgent {
		t.Helper()
		before, n := get(t, a), writes.Load()
		wrote, err := s.Apply(ctx, c, before, owner, st)
		if err != nil {
			t.Fatal(err)
		}
		after := get(t, a)
		switch {
		case wrote != wantWrite:
			t.Fatalf("%s: wrote = %v, want %v", owner, wrote, wantWrite)
		case !wantWrite && (writes.Load() != n || after.ResourceVersion != before.ResourceVersion):
			t.Fatalf("%s: an unchanged status made %d requests, resourceVersion %s -> %s", owner, writes.Load()-n, before.ResourceVersion, after.ResourceVersion)
		case wantWrite && writes.Load() != n+1:
			t.Fatalf("%s: %d requests, want 1", owner, writes.Load()-n)
		}
		return after
	}

	apply(mainOwner, mainStatus(0), true)
	apply(mainOwner, mainStatus(0), false)
	apply(statsOwner, statsStatus(), true)
	apply(statsOwner, statsStatus(), false)
	got := apply(mainOwner, mainStatus(0), false)
	if got.Status.Sessions.Total != 3 || got.Status.Endpoints.REST == "" || len(got.Status.Conditions) != 2 {
		t.Fatalf("the owners' fields did not add up: %+v", got.Status)
	}

	got = apply(mainOwner, mainStatus(1), true)
	if got.Status.ReadyReplicas != 1 || !meta.IsStatusConditionTrue(got.Status.Conditions, agentsv1alpha1.ConditionReady) || got.Status.Sessions.Total != 3 {
		t.Fatalf("after a change of the main owner: %+v", got.Status)
	}

	// Left out: the stats owner stops writing sessions.
	noSessions := statsStatus()
	noSessions.Sessions, noSessions.StatsUpdatedAt = nil, nil
	got = apply(statsOwner, noSessions, true)
	if got.Status.Sessions.Total != 0 || got.Status.StatsUpdatedAt != nil {
		t.Fatalf("sessions left out stayed: %+v", got.Status)
	}

	// A hand edit takes the field from the owner, who writes it back.
	edited := got.DeepCopy()
	edited.Status.ReadyReplicas = 5
	if err := env.Client.Status().Update(ctx, edited, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	got = apply(mainOwner, mainStatus(1), true)
	if got.Status.ReadyReplicas != 1 {
		t.Fatalf("the hand edit stayed: readyReplicas %d", got.Status.ReadyReplicas)
	}
}

// TestApplyStatusBeforeTheCacheCatchesUp: a reconcile that reads the agent
// from a cache that has not seen the last status write yet does not apply
// the same status again, but still applies a different one; once the object
// read is as new as the write, a hand edit is undone as before.
func TestApplyStatusBeforeTheCacheCatchesUp(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	var writes atomic.Int64
	c := counting(t, &writes)
	a := newAgent(t)
	var s ssa.Status
	stale := get(t, a) // the cache's copy, never updated in this test
	apply := func(what string, from *agentsv1alpha1.GooseAgent, st *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration, want bool) {
		t.Helper()
		n := writes.Load()
		wrote, err := s.Apply(ctx, c, from, mainOwner, st)
		if err != nil {
			t.Fatal(err)
		}
		if wrote != want || writes.Load()-n != map[bool]int64{false: 0, true: 1}[want] {
			t.Fatalf("%s: wrote %v with %d requests, want %v", what, wrote, writes.Load()-n, want)
		}
	}
	apply("first status", stale, mainStatus(0), true)
	apply("the same status from the stale copy", stale, mainStatus(0), false)
	apply("a new status from the stale copy", stale, mainStatus(1), true)
	apply("it again from the stale copy", stale, mainStatus(1), false)
	// What the owner last wrote, not what the stale copy shows.
	if prev, ok := s.Remembered(stale, mainOwner); !ok || prev.ReadyReplicas != 1 || len(prev.Conditions) == 0 {
		t.Fatalf("remembered status for the stale copy = %+v (%v), want the last write (readyReplicas 1)", prev, ok)
	}

	// A copy that shows a status, read before the next write: a reconcile
	// that wants that status back must write it, though its copy shows it.
	// Nothing would reconcile the agent again (status changes are filtered
	// out), so a skipped write would leave the other status for good, e.g.
	// Degraded/ApplyFailed after a failure that is over.
	shows1 := get(t, a)
	apply("a failure, from a current copy", shows1, mainStatus(0), true)
	apply("the failure over, from the copy before it", shows1, mainStatus(1), true)
	if got := get(t, a); got.Status.ReadyReplicas != 1 {
		t.Fatalf("the status after the failure was not written: readyReplicas %d", got.Status.ReadyReplicas)
	}

	// A hand edit after the cache caught up is undone.
	edited := get(t, a)
	edited.Status.ReadyReplicas = 5
	if err := env.Client.Status().Update(ctx, edited, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	apply("after a hand edit", get(t, a), mainStatus(1), true)
	if got := get(t, a); got.Status.ReadyReplicas != 1 {
		t.Fatalf("the hand edit stayed: readyReplicas %d", got.Status.ReadyReplicas)
	}
	apply("caught up", get(t, a), mainStatus(1), false)
	if prev, ok := s.Remembered(get(t, a), mainOwner); ok {
		t.Fatalf("remembered status %+v for a current copy, want none", prev)
	}
}

// TestConditionsPicksTypesInOrder: only the given types, in the given order.
func TestConditionsPicksTypesInOrder(t *testing.T) {
	conds := []metav1.Condition{
		{Type: "B", Status: metav1.ConditionTrue, Reason: "R", Message: "m", ObservedGeneration: 2, LastTransitionTime: since},
		{Type: "Other", Status: metav1.ConditionTrue, Reason: "R"},
		{Type: "A", Status: metav1.ConditionFalse, Reason: "S"},
	}
	got := ssa.Conditions(conds, "A", "B", "Missing")
	if len(got) != 2 || *got[0].Type != "A" || *got[1].Type != "B" {
		t.Fatalf("conditions %+v, want A then B", got)
	}
	st, err := ssa.AsStatus(agentsv1alpha1ac.GooseAgentStatus().WithConditions(got...))
	if err != nil {
		t.Fatal(err)
	}
	if b := meta.FindStatusCondition(st.Conditions, "B"); b == nil || !equality.Semantic.DeepEqual(*b, conds[0]) {
		t.Fatalf("B read back as %+v, want %+v", b, conds[0])
	}
}

// BenchmarkApplyStatusUnchanged is the cost of the no-op path every resync
// takes: extracting the owner's last applied status from managed fields and
// comparing. It never reaches the apiserver.
func BenchmarkApplyStatusUnchanged(b *testing.B) {
	env := testenv.Shared(b)
	ctx := context.Background()
	a := newAgent(b)
	var s ssa.Status
	if _, err := s.Apply(ctx, env.Client, get(b, a), mainOwner, mainStatus(1)); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Apply(ctx, env.Client, get(b, a), statsOwner, statsStatus()); err != nil {
		b.Fatal(err)
	}
	live := get(b, a)
	noWrites := interceptor.NewClient(nil, interceptor.Funcs{
		SubResourceApply: func(context.Context, client.Client, string, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
			b.Fatal("an unchanged status was written")
			return nil
		},
	})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Apply(ctx, noWrites, live, mainOwner, mainStatus(1)); err != nil {
			b.Fatal(err)
		}
	}
}
