// Package ssa holds the server-side-apply steps both reconcilers share:
// telling whether a desired apply configuration differs from what a field
// owner last applied, and applying a GooseAgent status only when it does
// (Status).
package ssa

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	agentsv1alpha1ac "github.com/adk2goose/goose-operator/api/v1alpha1/applyconfiguration/api/v1alpha1"
)

// Unchanged compares what a field owner last applied (extracted from the
// live object's managed fields) with what it would apply now. It compares
// their JSON forms, which ignores the difference between absent and empty
// collections that a Go-level comparison would see.
func Unchanged(applied, desired any) (bool, error) {
	var av, dv any
	for _, p := range []struct {
		in  any
		out *any
	}{{applied, &av}, {desired, &dv}} {
		raw, err := json.Marshal(p.in)
		if err != nil {
			return false, fmt.Errorf("failed to marshal apply configuration: %w", err)
		}
		if err := json.Unmarshal(raw, p.out); err != nil {
			return false, fmt.Errorf("failed to unmarshal apply configuration: %w", err)
		}
	}
	return equality.Semantic.DeepEqual(av, dv), nil
}

// Status server-side-applies one reconciler's part of GooseAgent statuses,
// only when it changed, so that a no-op reconcile writes nothing. Each
// reconciler applies under its own field owner, so neither clobbers the
// other's fields; a field the owner applied before and leaves out now is
// removed.
//
// A reconcile may read an agent from a cache that has not seen this owner's
// last write yet. Status remembers each write and the resourceVersion it
// made, and compares against that memory until the cache holds that version
// or a newer one; from then on it compares against what the object says, so
// a hand edit of the owner's fields is still undone. Its zero value is ready
// to use; it must not be copied.
type Status struct {
	mu   sync.Mutex
	last map[statusKey]written
}

type statusKey struct {
	agent      types.NamespacedName
	fieldOwner string
}

// written is a status applied and the resourceVersion the apply made.
type written struct {
	status          agentsv1alpha1.GooseAgentStatus
	resourceVersion string
}

// Apply applies status as fieldOwner's part of a's status unless it makes
// the same status as what fieldOwner last applied. It returns whether it
// wrote.
func (s *Status) Apply(ctx context.Context, c client.Client, a *agentsv1alpha1.GooseAgent, fieldOwner string,
	status *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration) (bool, error) {
	sent, err := AsStatus(status)
	if err != nil {
		return false, err
	}
	want := *sent.DeepCopy()
	key := statusKey{agent: types.NamespacedName{Namespace: a.Namespace, Name: a.Name}, fieldOwner: fieldOwner}
	was, remembered, err := s.lastApplied(key, a, fieldOwner)
	if err != nil {
		return false, err
	}
	if remembered {
		// The desired conditions' transition times came from the stale
		// copy; where a condition did not change since the remembered
		// write, the time of that write is the true one.
		keepTransitionTimes(&want, was)
	}
	if equality.Semantic.DeepEqual(was, want) {
		return false, nil
	}
	ac := agentsv1alpha1ac.GooseAgent(a.Name, a.Namespace).WithStatus(status)
	if err := c.Status().Apply(ctx, ac, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("failed to apply GooseAgent status: %w", err)
	}
	// The apply response was decoded into ac.
	if rv := ptr.Deref(ac.ResourceVersion, ""); rv != "" {
		s.mu.Lock()
		if s.last == nil {
			s.last = map[statusKey]written{}
		}
		s.last[key] = written{status: sent, resourceVersion: rv}
		s.mu.Unlock()
	}
	return true, nil
}

// Remembered is the status fieldOwner last applied to a when the copy a is
// older than that write (ok is true); ok is false when a is as new as this
// owner's last write, or newer. A reconciler that decides from its previous
// status (a transition time, an Event) overlays it on a stale copy.
func (s *Status) Remembered(a *agentsv1alpha1.GooseAgent, fieldOwner string) (agentsv1alpha1.GooseAgentStatus, bool) {
	w, ok := s.remembered(statusKey{agent: types.NamespacedName{Namespace: a.Namespace, Name: a.Name}, fieldOwner: fieldOwner}, a)
	if !ok {
		return agentsv1alpha1.GooseAgentStatus{}, false
	}
	return *w.status.DeepCopy(), true
}

// remembered is the write remembered for key while a is older than it. Once
// a is as new (the cache caught up), or the versions cannot be compared, the
// memory is dropped: the object is the truth again.
func (s *Status) remembered(key statusKey, a *agentsv1alpha1.GooseAgent) (written, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.last[key]
	if !ok {
		return written{}, false
	}
	if cmp, err := resourceversion.CompareResourceVersion(a.ResourceVersion, w.resourceVersion); err == nil && cmp < 0 {
		return w, true
	}
	delete(s.last, key)
	return written{}, false
}

// lastApplied is the status fieldOwner last applied to a: the one
// remembered while a is older than that write (remembered is true), else
// the one a holds.
func (s *Status) lastApplied(key statusKey, a *agentsv1alpha1.GooseAgent, fieldOwner string) (st agentsv1alpha1.GooseAgentStatus, remembered bool, err error) {
	if w, ok := s.remembered(key, a); ok {
		return w.status, true, nil
	}
	last, err := agentsv1alpha1ac.ExtractGooseAgentStatus(a, fieldOwner)
	if err != nil {
		return st, false, fmt.Errorf("failed to extract the applied status of %s: %w", fieldOwner, err)
	}
	// Compared as the statuses they make, not as apply configurations:
	// extraction reads the typed object, where a zero field left out by
	// omitempty cannot be told from an absent one.
	st, err = AsStatus(last.Status)
	return st, false, err
}

// keepTransitionTimes gives each condition of want that has the same type
// and status as one of was the transition time of that one.
func keepTransitionTimes(want *agentsv1alpha1.GooseAgentStatus, was agentsv1alpha1.GooseAgentStatus) {
	for i := range want.Conditions {
		c := &want.Conditions[i]
		if old := meta.FindStatusCondition(was.Conditions, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
}

// Forget drops what Status remembers of an agent that is gone.
func (s *Status) Forget(agent types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.last {
		if k.agent == agent {
			delete(s.last, k)
		}
	}
}

// Conditions returns the conditions of the given types, in that order, as
// apply configurations; types absent from conds are left out.
func Conditions(conds []metav1.Condition, types ...string) []*metav1ac.ConditionApplyConfiguration {
	var out []*metav1ac.ConditionApplyConfiguration
	for _, t := range types {
		for _, c := range conds {
			if c.Type != t {
				continue
			}
			out = append(out, metav1ac.Condition().
				WithType(c.Type).
				WithStatus(c.Status).
				WithReason(c.Reason).
				WithMessage(c.Message).
				WithObservedGeneration(c.ObservedGeneration).
				WithLastTransitionTime(c.LastTransitionTime))
		}
	}
	return out
}

// AsStatus reads an apply configuration as the status it makes: the fields
// it leaves out are zero, and times have the apiserver's precision (seconds).
func AsStatus(status *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration) (agentsv1alpha1.GooseAgentStatus, error) {
	var st agentsv1alpha1.GooseAgentStatus
	raw, err := json.Marshal(status)
	if err != nil {
		return st, fmt.Errorf("failed to marshal status apply configuration: %w", err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("failed to read status apply configuration: %w", err)
	}
	return st, nil
}
