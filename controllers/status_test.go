package controllers

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/internal/ssa"
)

func stsWith(replicas int32, st appsv1.StatefulSetStatus) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: appsv1.StatefulSetSpec{Replicas: &replicas}}
	s.Status = st
	return s
}

// desiredTyped is desiredStatus read as the status its apply configuration
// makes.
func desiredTyped(t *testing.T, a *agentsv1alpha1.GooseAgent, obs observation, now time.Time) (agentsv1alpha1.GooseAgentStatus, time.Duration) {
	t.Helper()
	ac, requeue := desiredStatus(a, obs, now)
	st, err := ssa.AsStatus(ac)
	if err != nil {
		t.Fatal(err)
	}
	return st, requeue
}

func TestDesiredStatus(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &agentsv1alpha1.GooseAgent{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Generation: 3}}
	done := appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, CurrentRevision: "r", UpdateRevision: "r"}
	type want struct{ ready, progressing, degraded string }
	for name, tc := range map[string]struct {
		obs  observation
		want want
	}{
		"blocked by a reference": {observation{blockedReason: agentsv1alpha1.ReasonReferenceNotFound, blockedMessage: "x"},
			want{"False/ReferenceNotFound", "False/ReferenceNotFound", "True/ReferenceNotFound"}},
		"no StatefulSet yet": {observation{}, want{"False/Reconciling", "True/Reconciling", "False/AsExpected"}},
		"rolled out":         {observation{sts: stsWith(2, done)}, want{"True/Available", "False/RolloutComplete", "False/AsExpected"}},
		"rolling, one ready": {observation{sts: stsWith(2, appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 2, ReadyReplicas: 1, UpdatedReplicas: 1, CurrentRevision: "r", UpdateRevision: "s"})},
			want{"True/Available", "True/RolloutInProgress", "False/AsExpected"}},
		"not observed yet": {observation{sts: stsWith(2, appsv1.StatefulSetStatus{ObservedGeneration: 1})},
			want{"False/PodsNotReady", "True/RolloutInProgress", "False/AsExpected"}},
		"scaled to zero": {observation{sts: stsWith(0, appsv1.StatefulSetStatus{ObservedGeneration: 2})},
			want{"False/ScaledToZero", "False/RolloutComplete", "False/AsExpected"}},
		"apply failed": {observation{sts: stsWith(2, done), applyErr: errors.New("boom")},
			want{"True/Available", "False/RolloutComplete", "True/ApplyFailed"}},
		"stdio runtime missing": {observation{sts: stsWith(2, done), runtimeMissing: "spec.extensions[fs].cmd npx: ..."},
			want{"True/Available", "False/RolloutComplete", "True/RuntimeMissing"}},
	} {
		t.Run(name, func(t *testing.T) {
			st, _ := desiredTyped(t, a, tc.obs, now)
			got := want{}
			for typ, dst := range map[string]*string{agentsv1alpha1.ConditionReady: &got.ready, agentsv1alpha1.ConditionProgressing: &got.progressing, agentsv1alpha1.ConditionDegraded: &got.degraded} {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil {
					t.Fatalf("no %s condition", typ)
				}
				if c.ObservedGeneration != 3 {
					t.Errorf("%s observedGeneration = %d", typ, c.ObservedGeneration)
				}
				*dst = string(c.Status) + "/" + c.Reason
			}
			if got != tc.want {
				t.Errorf("conditions = %+v, want %+v", got, tc.want)
			}
			if st.ObservedGeneration != 3 || st.Endpoints.REST != "http://a.ns.svc.cluster.local:8080" {
				t.Errorf("observedGeneration %d, endpoints %+v", st.ObservedGeneration, st.Endpoints)
			}
		})
	}
}

// TestProgressDeadline: a rollout stuck past the deadline turns Degraded, and
// until then the reconciler asks to be called back at the deadline.
func TestProgressDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &agentsv1alpha1.GooseAgent{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Generation: 1}}
	obs := observation{sts: stsWith(1, appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1})}
	first, requeue := desiredStatus(a, obs, start)
	if requeue != ProgressDeadline {
		t.Errorf("requeue = %s, want %s", requeue, ProgressDeadline)
	}
	a.Status, _ = desiredTyped(t, a, obs, start)
	again, requeue := desiredStatus(a, obs, start.Add(4*time.Minute))
	if requeue != ProgressDeadline-4*time.Minute {
		t.Errorf("requeue = %s", requeue)
	}
	if same, err := ssa.Unchanged(first, again); err != nil || !same {
		t.Errorf("status changed while nothing but time passed (err %v)", err)
	}
	st, _ := desiredTyped(t, a, obs, start.Add(ProgressDeadline+time.Second))
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue || c.Reason != agentsv1alpha1.ReasonPodsNotReady {
		t.Errorf("Degraded = %+v after the deadline", c)
	}
}

// TestDesiredStatusLeavesForeignFieldsOut: the stats collector's fields and
// conditions, already in status, are not part of what this reconciler applies
// (applying them would take them over under its field owner).
func TestDesiredStatusLeavesForeignFieldsOut(t *testing.T) {
	a := &agentsv1alpha1.GooseAgent{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Generation: 1}}
	a.Status.Tokens.Total = 42
	a.Status.StatsUpdatedAt = &metav1.Time{Time: time.Now()}
	meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionStatsAvailable, Status: metav1.ConditionTrue, Reason: "StatsCollected"})
	ac, _ := desiredStatus(a, observation{}, time.Now())
	raw, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokens", "sessions", "statsUpdatedAt", "budget"} {
		if _, ok := fields[f]; ok {
			t.Errorf("the reconciler applies status.%s, the stats collector's field", f)
		}
	}
	for _, c := range ac.Conditions {
		if *c.Type == agentsv1alpha1.ConditionStatsAvailable {
			t.Errorf("the reconciler applies the %s condition", *c.Type)
		}
	}
}
