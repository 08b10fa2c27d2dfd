// Package ssa holds the server-side-apply steps both reconcilers share:
// telling whether a desired apply configuration differs from what a field
// owner last applied, and applying a GooseAgent status only when it does.
package ssa

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
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

// ApplyStatus server-side-applies status as fieldOwner's part of a's status,
// unless it makes the same status as what fieldOwner last applied, so that a
// no-op reconcile writes nothing. Each reconciler applies under its own field
// owner, so neither clobbers the other's fields; a field the owner applied
// before and leaves out now is removed. It returns whether it wrote.
func ApplyStatus(ctx context.Context, c client.Client, a *agentsv1alpha1.GooseAgent, fieldOwner string,
	status *agentsv1alpha1ac.GooseAgentStatusApplyConfiguration) (bool, error) {
	last, err := agentsv1alpha1ac.ExtractGooseAgentStatus(a, fieldOwner)
	if err != nil {
		return false, fmt.Errorf("failed to extract the applied status of %s: %w", fieldOwner, err)
	}
	// Compared as the statuses they make, not as apply configurations:
	// extraction reads the typed object, where a zero field left out by
	// omitempty cannot be told from an absent one.
	was, err := AsStatus(last.Status)
	if err != nil {
		return false, err
	}
	want, err := AsStatus(status)
	if err != nil {
		return false, err
	}
	if equality.Semantic.DeepEqual(was, want) {
		return false, nil
	}
	ac := agentsv1alpha1ac.GooseAgent(a.Name, a.Namespace).WithStatus(status)
	if err := c.Status().Apply(ctx, ac, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("failed to apply GooseAgent status: %w", err)
	}
	return true, nil
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
