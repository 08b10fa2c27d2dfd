package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// IndexAgent indexes the cached objects that belong to an agent (its
// children, its pods, the slices Kubernetes writes for its Services: all
// carry the instance label) by the agent's name. A reconcile then reads an
// agent's objects in time proportional to them, not to every object of the
// namespace: with a label selector alone the cache matches each object of
// the namespace, once per kind, per reconcile.
const IndexAgent = "agent"

// IndexByAgent registers IndexAgent for every child kind and for pods in
// the cache the reconciler's Client reads (SetupWithManager does it).
func IndexByAgent(ctx context.Context, idx client.FieldIndexer) error {
	objs := append(ChildObjects(), &corev1.Pod{})
	for _, o := range objs {
		if err := idx.IndexField(ctx, o, IndexAgent, instanceOf); err != nil {
			return fmt.Errorf("failed to index %T by agent: %w", o, err)
		}
	}
	return nil
}

func instanceOf(o client.Object) []string {
	if v := o.GetLabels()[render.LabelInstance]; v != "" {
		return []string{v}
	}
	return nil
}

// listOfAgent lists the cached objects of a's namespace indexed under a's
// name that match the labels; other applications may use the instance label
// too, so callers name the labels that make an object the agent's.
func (r *GooseAgentReconciler) listOfAgent(ctx context.Context, list client.ObjectList, a *agentsv1alpha1.GooseAgent, labels client.MatchingLabels) error {
	return r.Client.List(ctx, list, client.InNamespace(a.Namespace), client.MatchingFields{IndexAgent: a.Name}, labels)
}
