package controllers

import (
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	agentsv1alpha1ac "github.com/adk2goose/goose-operator/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/internal/ssa"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// ProgressDeadline is how long a rollout may leave pods unready before the
// agent reports Degraded (like a Deployment's progressDeadlineSeconds).
const ProgressDeadline = 10 * time.Minute

// observation is what the reconciler learned in one pass.
type observation struct {
	// blocked, when set, says why no child was applied: reason is
	// ReferenceNotFound or InvalidSpec.
	blockedReason, blockedMessage string
	// applyErr is set when applying a child failed.
	applyErr error
	// sts is the live StatefulSet, nil when it does not exist (yet).
	sts *appsv1.StatefulSet
	// pods is why an agent pod cannot start or keep running, nil when none.
	pods *podProblem
	// runtimeMissing names stdio extensions whose runtime the pod lacks.
	runtimeMissing string
	// idle is whether the agent is parked (spec.idle).
	idle idleDecision
}

// desiredStatus computes the reconciler's part of the status from the
// previous status and what was observed, as the apply configuration to write
// (under FieldOwner, only when it changed). It also returns, when the rollout
// is under way, how long until the progress deadline must be checked again.
// now is passed in so the function stays pure.
func desiredStatus(a *agentsv1alpha1.GooseAgent, obs observation, now time.Time) (*agentsv1alpha1ac.GooseAgentStatusApplyConfiguration, time.Duration) {
	// The previous conditions carry their transition times forward.
	conds := slices.Clone(a.Status.Conditions)
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&conds, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: a.Generation,
			LastTransitionTime: metav1.NewTime(now),
		})
	}
	var replicas, ready int32
	if obs.sts != nil {
		replicas, ready = obs.sts.Status.Replicas, obs.sts.Status.ReadyReplicas
	}
	owned := []string{agentsv1alpha1.ConditionReady, agentsv1alpha1.ConditionProgressing, agentsv1alpha1.ConditionDegraded}
	if obs.idle.enabled {
		parked := metav1.ConditionFalse
		if obs.idle.parked {
			parked = metav1.ConditionTrue
		}
		set(agentsv1alpha1.ConditionParked, parked, obs.idle.reason, obs.idle.message)
		owned = append(owned, agentsv1alpha1.ConditionParked)
	}
	status := func(requeue time.Duration) (*agentsv1alpha1ac.GooseAgentStatusApplyConfiguration, time.Duration) {
		st := agentsv1alpha1ac.GooseAgentStatus().
			WithObservedGeneration(a.Generation).
			WithReplicas(replicas).
			WithReadyReplicas(ready).
			WithEndpoints(agentsv1alpha1ac.Endpoints().WithREST(render.RESTEndpoint(a)).WithAgentCard(render.AgentCardEndpoint(a))).
			WithConditions(ssa.Conditions(conds, owned...)...)
		if obs.idle.enabled {
			st.WithIdle(idleStatus(obs.idle.status))
		}
		return st, requeue
	}

	if obs.blockedReason != "" {
		set(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, obs.blockedReason, obs.blockedMessage)
		set(agentsv1alpha1.ConditionProgressing, metav1.ConditionFalse, obs.blockedReason, obs.blockedMessage)
		set(agentsv1alpha1.ConditionDegraded, metav1.ConditionTrue, obs.blockedReason, obs.blockedMessage)
		return status(0)
	}

	var requeue time.Duration
	sts := obs.sts
	switch sts {
	case nil:
		msg := "waiting for the StatefulSet to be created"
		set(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonReconciling, msg)
		set(agentsv1alpha1.ConditionProgressing, metav1.ConditionTrue, agentsv1alpha1.ReasonReconciling, msg)
	default:
		want := int32(1)
		if sts.Spec.Replicas != nil {
			want = *sts.Spec.Replicas
		}
		s := sts.Status
		counts := fmt.Sprintf("%d/%d replicas ready, %d updated", s.ReadyReplicas, want, s.UpdatedReplicas)
		switch {
		case obs.idle.parked:
			set(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonParked, "parked: "+obs.idle.message)
		case want == 0:
			set(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonScaledToZero, "the StatefulSet is scaled to zero")
		case s.ReadyReplicas > 0:
			set(agentsv1alpha1.ConditionReady, metav1.ConditionTrue, agentsv1alpha1.ReasonAvailable, counts)
		case obs.pods != nil:
			set(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, obs.pods.reason, counts+"; "+obs.pods.message)
		default:
			set(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonPodsNotReady, counts)
		}
		rolling := s.ObservedGeneration < sts.Generation ||
			s.UpdatedReplicas != want || s.Replicas != want || s.ReadyReplicas != want ||
			(s.UpdateRevision != "" && s.CurrentRevision != s.UpdateRevision)
		if want == 0 {
			rolling = s.ObservedGeneration < sts.Generation || s.Replicas != 0
		}
		if rolling {
			set(agentsv1alpha1.ConditionProgressing, metav1.ConditionTrue, agentsv1alpha1.ReasonRolloutInProgress, counts)
			// The transition time survives while the rollout keeps going,
			// so it marks when the rollout started.
			since := meta.FindStatusCondition(conds, agentsv1alpha1.ConditionProgressing).LastTransitionTime.Time
			if left := since.Add(ProgressDeadline).Sub(now); left > 0 {
				requeue = left
			} else if obs.applyErr == nil && obs.pods == nil {
				set(agentsv1alpha1.ConditionDegraded, metav1.ConditionTrue, agentsv1alpha1.ReasonPodsNotReady,
					fmt.Sprintf("rollout not finished after %s: %s", ProgressDeadline, counts))
				return status(0)
			}
		} else {
			set(agentsv1alpha1.ConditionProgressing, metav1.ConditionFalse, agentsv1alpha1.ReasonRolloutComplete, counts)
		}
	}
	switch {
	case obs.applyErr != nil:
		set(agentsv1alpha1.ConditionDegraded, metav1.ConditionTrue, agentsv1alpha1.ReasonApplyFailed, obs.applyErr.Error())
		if sts == nil {
			set(agentsv1alpha1.ConditionReady, metav1.ConditionFalse, agentsv1alpha1.ReasonApplyFailed, obs.applyErr.Error())
		}
	case obs.pods != nil:
		set(agentsv1alpha1.ConditionDegraded, metav1.ConditionTrue, obs.pods.reason, obs.pods.message)
	case obs.runtimeMissing != "":
		set(agentsv1alpha1.ConditionDegraded, metav1.ConditionTrue, agentsv1alpha1.ReasonRuntimeMissing, obs.runtimeMissing)
	default:
		set(agentsv1alpha1.ConditionDegraded, metav1.ConditionFalse, agentsv1alpha1.ReasonAsExpected, "")
	}
	return status(requeue)
}

// idleStatus is status.idle as an apply configuration, its times to the
// second as the API server keeps them.
func idleStatus(s agentsv1alpha1.IdleStatus) *agentsv1alpha1ac.IdleStatusApplyConfiguration {
	out := agentsv1alpha1ac.IdleStatus()
	if s.LastActivityAt != nil {
		out.WithLastActivityAt(metav1.NewTime(s.LastActivityAt.Truncate(time.Second)))
	}
	if s.ParkedAt != nil {
		out.WithParkedAt(metav1.NewTime(s.ParkedAt.Truncate(time.Second)))
	}
	if s.WokenAt != nil {
		out.WithWokenAt(metav1.NewTime(s.WokenAt.Truncate(time.Second)))
	}
	return out
}
