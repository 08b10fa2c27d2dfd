package controllers

import (
	"context"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// RBAC lets only whoever holds a permission grant it, so the manager holds
// the review rights it binds to sidecars (system:auth-delegator's rules).
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ReviewFinalizer removes an agent's review binding with the agent: a
// cluster-scoped object cannot be owned by a namespaced one.
const ReviewFinalizer = "agents.adk2goose.dev/review-binding"

// reviewRole is the built-in ClusterRole granting create on tokenreviews
// and subjectaccessreviews, and nothing else.
const reviewRole = "system:auth-delegator"

// syncReviewBinding gives the sidecar of an agent in mode kubernetes the
// right to review its callers' tokens and access: a ClusterRoleBinding of
// system:auth-delegator to its ServiceAccount, removed (with the finalizer)
// once the agent is deleted or leaves the mode.
func (r *GooseAgentReconciler) syncReviewBinding(ctx context.Context, a *agentsv1alpha1.GooseAgent) error {
	if a.DeletionTimestamp.IsZero() && render.IsKubernetesMode(a) {
		if !controllerutil.ContainsFinalizer(a, ReviewFinalizer) {
			patch := finalizerPatch(a)
			controllerutil.AddFinalizer(a, ReviewFinalizer)
			if err := r.Client.Patch(ctx, a, patch); err != nil {
				return fmt.Errorf("failed to add the review binding's finalizer: %w", err)
			}
		}
		sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: render.SidecarServiceAccount(a), Namespace: a.Namespace}
		// Read past the cache, which does not hold cluster-wide bindings: a
		// converged agent costs a read, not a write, per reconcile.
		live := &rbacv1.ClusterRoleBinding{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: render.ReviewBindingName(a)}, live)
		switch {
		case err == nil && live.RoleRef.Name == reviewRole && slices.Equal(live.Subjects, []rbacv1.Subject{sa}):
			return nil
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("failed to get ClusterRoleBinding %s: %w", render.ReviewBindingName(a), err)
		}
		crb := rbacv1ac.ClusterRoleBinding(render.ReviewBindingName(a)).
			WithLabels(render.Labels(a)).
			WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(reviewRole)).
			WithSubjects(rbacv1ac.Subject().WithKind(sa.Kind).WithName(sa.Name).WithNamespace(sa.Namespace))
		if err := r.Client.Apply(ctx, crb, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("failed to apply ClusterRoleBinding %s: %w", render.ReviewBindingName(a), err)
		}
		return nil
	}
	if !controllerutil.ContainsFinalizer(a, ReviewFinalizer) {
		return nil
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: render.ReviewBindingName(a)}}
	if err := r.Client.Delete(ctx, crb); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete ClusterRoleBinding %s: %w", crb.Name, err)
	}
	patch := finalizerPatch(a)
	controllerutil.RemoveFinalizer(a, ReviewFinalizer)
	if err := r.Client.Patch(ctx, a, patch); err != nil {
		return fmt.Errorf("failed to remove the review binding's finalizer: %w", err)
	}
	return nil
}

// finalizerPatch is the patch of a change to a's finalizers. A merge patch
// replaces the whole list, so it carries a's resourceVersion: when another
// controller changed the finalizers since a was read, the apiserver answers
// Conflict and the reconcile is retried, instead of dropping theirs.
func finalizerPatch(a *agentsv1alpha1.GooseAgent) client.Patch {
	return client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
}
