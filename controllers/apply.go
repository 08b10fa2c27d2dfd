package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/internal/ssa"
)

// FieldOwner is the server-side-apply field manager of every child.
const FieldOwner = "goose-operator"

// applyIfChanged applies c unless the live object already carries exactly
// the fields this owner would apply. That keeps a no-op resync free of
// writes, while a child deleted, or edited by hand (the edit moves field
// ownership away from this owner), differs and is applied again.
// It returns whether it applied and the live object (from the apply response
// when it applied).
func (r *GooseAgentReconciler) applyIfChanged(ctx context.Context, a *agentsv1alpha1.GooseAgent, c child) (bool, client.Object, error) {
	live := c.newObject()
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: c.name}, live)
	switch {
	case apierrors.IsNotFound(err):
		// Absent: apply it.
	case err != nil:
		return false, nil, fmt.Errorf("failed to get %s: %w", c.id(), err)
	case !metav1.IsControlledBy(live, a):
		return false, nil, &foreignObjectError{kind: c.gvk.Kind, name: c.name}
	default:
		applied, err := c.extract(live)
		if err != nil {
			return false, nil, fmt.Errorf("failed to extract applied fields of %s: %w", c.id(), err)
		}
		same, err := ssa.Unchanged(applied, c.desired)
		if err != nil {
			return false, nil, err
		}
		if same {
			return false, live, nil
		}
	}
	if err := r.Client.Apply(ctx, c.desired, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return false, nil, fmt.Errorf("failed to apply %s: %w", c.id(), err)
	}
	// The apply response was decoded into the apply configuration; convert it
	// back so the caller sees the object as the server has it now.
	out := c.newObject()
	b, err := json.Marshal(c.desired)
	if err != nil {
		return true, nil, fmt.Errorf("failed to marshal applied %s: %w", c.id(), err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return true, nil, fmt.Errorf("failed to decode applied %s: %w", c.id(), err)
	}
	return true, out, nil
}
