package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/stats"
)

// activityFunc is an ActivityReader that counts its calls.
type activityFunc struct {
	act   stats.Activity
	err   error
	calls int
}

func (f *activityFunc) Activity(context.Context, *agentsv1alpha1.GooseAgent) (stats.Activity, error) {
	f.calls++
	return f.act, f.err
}

// TestDecideIdle walks the parking decision through its cases with a fixed
// clock: the pods are asked only once the deadline has passed, and the agent
// is parked only when no turn runs, every pod answered and none ran since.
func TestDecideIdle(t *testing.T) {
	created := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	after := 10 * time.Minute
	mt := func(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }
	agent := func(idle *agentsv1alpha1.IdleSpec, st *agentsv1alpha1.IdleStatus, parkedReason string) *agentsv1alpha1.GooseAgent {
		a := &agentsv1alpha1.GooseAgent{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		a.Spec.Idle, a.Status.Idle = idle, st
		if parkedReason != "" {
			a.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionParked, Reason: parkedReason}}
		}
		return a
	}
	idleAfter := &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: after}}
	for _, c := range []struct {
		name       string
		a          *agentsv1alpha1.GooseAgent
		now        time.Time
		activity   *activityFunc
		podReady   bool
		readySince time.Time
		wantParked bool
		wantReason string
		wantAsked  int
		wantAfter  time.Duration
	}{
		{name: "no spec.idle", a: agent(nil, nil, ""), now: created.Add(time.Hour), activity: &activityFunc{}},
		{name: "before the deadline: no question, a timer",
			a: agent(idleAfter, nil, ""), now: created.Add(4 * time.Minute), activity: &activityFunc{}, podReady: true,
			wantReason: agentsv1alpha1.ReasonAwake, wantAfter: 6 * time.Minute},
		{name: "at the deadline, a turn runs",
			a: agent(idleAfter, nil, ""), now: created.Add(after), activity: &activityFunc{act: stats.Activity{InFlight: 1}}, podReady: true,
			wantReason: agentsv1alpha1.ReasonAwake, wantAsked: 1, wantAfter: DefaultIdleRecheck},
		{name: "at the deadline, a pod does not answer",
			a: agent(idleAfter, nil, ""), now: created.Add(after), activity: &activityFunc{act: stats.Activity{Unanswered: []string{"a-1: not ready"}}}, podReady: true,
			wantReason: agentsv1alpha1.ReasonAwake, wantAsked: 1, wantAfter: DefaultIdleRecheck},
		{name: "at the deadline, the pods cannot be asked",
			a: agent(idleAfter, nil, ""), now: created.Add(after), activity: &activityFunc{err: errors.New("no token")}, podReady: true,
			wantReason: agentsv1alpha1.ReasonAwake, wantAsked: 1, wantAfter: DefaultIdleRecheck},
		{name: "at the deadline, a turn ended since",
			a: agent(idleAfter, nil, ""), now: created.Add(after), activity: &activityFunc{act: stats.Activity{LastTurnAt: created.Add(7 * time.Minute)}}, podReady: true,
			wantReason: agentsv1alpha1.ReasonAwake, wantAsked: 1, wantAfter: 7 * time.Minute},
		{name: "at the deadline, idle: parked",
			a: agent(idleAfter, nil, ""), now: created.Add(after), activity: &activityFunc{}, podReady: true,
			wantParked: true, wantReason: agentsv1alpha1.ReasonIdle, wantAsked: 1},
		{name: "past the deadline, no pod ready yet: not idle, no question",
			a: agent(idleAfter, nil, ""), now: created.Add(2 * after), activity: &activityFunc{},
			wantReason: agentsv1alpha1.ReasonAwake},
		{name: "past the deadline, a pod ready since later: the time runs from then",
			a: agent(idleAfter, nil, ""), now: created.Add(after + time.Minute), activity: &activityFunc{}, podReady: true, readySince: created.Add(3 * time.Minute),
			wantReason: agentsv1alpha1.ReasonAwake, wantAfter: 2 * time.Minute},
		{name: "parked by hand",
			a: agent(&agentsv1alpha1.IdleSpec{Parked: true}, nil, ""), now: created, activity: &activityFunc{},
			wantParked: true, wantReason: agentsv1alpha1.ReasonParkRequested},
		{name: "parked, no wake request",
			a: agent(idleAfter, &agentsv1alpha1.IdleStatus{ParkedAt: mt(created.Add(time.Hour))}, agentsv1alpha1.ReasonIdle), now: created.Add(2 * time.Hour), activity: &activityFunc{},
			wantParked: true, wantReason: agentsv1alpha1.ReasonIdle},
		{name: "parked by hand, then cleared: waking",
			a: agent(&agentsv1alpha1.IdleSpec{}, &agentsv1alpha1.IdleStatus{ParkedAt: mt(created)}, agentsv1alpha1.ReasonParkRequested), now: created.Add(time.Hour), activity: &activityFunc{},
			wantReason: agentsv1alpha1.ReasonWaking},
		{name: "parked, spec.idle.after removed: waking, a pod already ready",
			a: agent(&agentsv1alpha1.IdleSpec{}, &agentsv1alpha1.IdleStatus{ParkedAt: mt(created)}, agentsv1alpha1.ReasonIdle), now: created.Add(time.Hour), activity: &activityFunc{}, podReady: true,
			wantReason: agentsv1alpha1.ReasonAwake},
		{name: "waking, no pod ready yet",
			a:   agent(idleAfter, &agentsv1alpha1.IdleStatus{WokenAt: mt(created.Add(time.Hour)), LastActivityAt: mt(created.Add(time.Hour))}, agentsv1alpha1.ReasonWaking),
			now: created.Add(time.Hour + time.Minute), activity: &activityFunc{},
			wantReason: agentsv1alpha1.ReasonWaking},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &GooseAgentReconciler{Now: func() time.Time { return c.now }, Activity: c.activity}
			var readyAt *metav1.Time
			if c.podReady {
				readyAt = &metav1.Time{Time: c.readySince}
			}
			d, err := r.decideIdle(t.Context(), c.a, c.podReady, readyAt)
			if err != nil {
				t.Fatal(err)
			}
			if d.parked != c.wantParked || d.reason != c.wantReason || c.activity.calls != c.wantAsked || d.requeue != c.wantAfter {
				t.Fatalf("parked %v reason %q asked %d requeue %v, want %v %q %d %v (%s)",
					d.parked, d.reason, c.activity.calls, d.requeue, c.wantParked, c.wantReason, c.wantAsked, c.wantAfter, d.message)
			}
			if d.parked != (d.status.ParkedAt != nil) && d.enabled {
				t.Errorf("parked %v but status.idle.parkedAt %v", d.parked, d.status.ParkedAt)
			}
		})
	}
}

// TestWakeRequests: a request at or after the park wakes an agent parked for
// idleness, an older one is stale, and nothing wakes an agent parked by hand.
func TestWakeRequests(t *testing.T) {
	parkedAt := time.Date(2026, 12, 3, 10, 0, 7, 0, time.UTC) // kept to the second
	for _, c := range []struct {
		name    string
		reason  string
		manual  bool
		request string
		wake    bool
	}{
		{"no request", agentsv1alpha1.ReasonIdle, false, "", false},
		{"stale request", agentsv1alpha1.ReasonIdle, false, "2026-12-03T10:00:06.999999999Z", false},
		{"request in the second of the park", agentsv1alpha1.ReasonIdle, false, "2026-12-03T10:00:07.25Z", true},
		{"request after the park", agentsv1alpha1.ReasonIdle, false, "2026-12-03T10:05:00Z", true},
		{"request that is no time", agentsv1alpha1.ReasonIdle, false, "soon", false},
		{"parked by hand, request after", agentsv1alpha1.ReasonParkRequested, true, "2026-12-03T11:00:00Z", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &agentsv1alpha1.GooseAgent{}
			a.Spec.Idle = &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: time.Minute}, Parked: c.manual}
			a.Status.Idle = &agentsv1alpha1.IdleStatus{ParkedAt: &metav1.Time{Time: parkedAt}}
			a.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionParked, Status: metav1.ConditionTrue, Reason: c.reason}}
			if c.request != "" {
				a.Annotations = map[string]string{agentsv1alpha1.WakeRequestedAtAnnotation: c.request}
			}
			r := &GooseAgentReconciler{Now: func() time.Time { return parkedAt.Add(time.Hour) }}
			d, err := r.decideIdle(t.Context(), a, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if woke := !d.parked; woke != c.wake {
				t.Fatalf("woke %v, want %v (%s %s)", woke, c.wake, d.reason, d.message)
			}
		})
	}
}

// readyAt is the earliest Ready transition of the pods that are ready and
// not being deleted.
func TestReadyAt(t *testing.T) {
	at := func(m int) metav1.Time { return metav1.NewTime(time.Date(2026, 12, 4, 10, m, 0, 0, time.UTC)) }
	pod := func(status corev1.ConditionStatus, since metav1.Time, deleting bool) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(0)},
			{Type: corev1.PodReady, Status: status, LastTransitionTime: since},
		}}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: since.Time}
		}
		return p
	}
	pods := []corev1.Pod{
		pod(corev1.ConditionFalse, at(1), false),
		pod(corev1.ConditionTrue, at(3), false),
		pod(corev1.ConditionTrue, at(2), true),
		pod(corev1.ConditionTrue, at(5), false),
		{}, // no conditions yet
	}
	if got := readyAt(pods); got == nil || !got.Equal(&metav1.Time{Time: at(3).Time}) {
		t.Fatalf("readyAt = %v, want %v", got, at(3))
	}
	if got := readyAt(pods[:1]); got != nil {
		t.Fatalf("readyAt with no ready pod = %v, want nil", got)
	}
}
