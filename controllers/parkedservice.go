package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// The Endpoints of a parked agent's Service (a comment of its own: controller-gen
// reads markers apart from a declaration's doc).
// +kubebuilder:rbac:groups="",resources=endpoints,verbs=get;delete

// The endpoints a parked agent's Service must lose: Kubernetes' controllers
// stop maintaining a Service once it has no selector (v1.37
// endpointslice_controller.go and endpoints_controller.go return early), so
// what they wrote for the pod that is gone stays, and the Endpoints object is
// mirrored into yet another slice. kube-proxy would then split the Service
// between the activator and a dead address.
const (
	endpointsManagedBy       = "endpoints.kubernetes.io/managed-by"
	endpointsController      = "endpoint-controller"
	sliceController          = "endpointslice-controller.k8s.io"
	sliceMirroringController = "endpointslicemirroring-controller.k8s.io"
)

// removeStaleEndpoints deletes, for a parked agent's Service, the slices of
// the EndpointSlice and mirroring controllers and the endpoints controller's
// Endpoints, and nothing anybody else wrote. They are read from the API
// server: the cache holds only the operator's own slices. It returns how
// many it deleted.
func (r *GooseAgentReconciler) removeStaleEndpoints(ctx context.Context, a *agentsv1alpha1.GooseAgent) (int, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	// The Endpoints first: while it exists the mirroring controller may
	// write its slice again after the slices below are gone.
	n := 0
	ep := &corev1.Endpoints{} //nolint:staticcheck // the endpoints controller still writes them in v1.37, and kube-proxy sees them mirrored
	err := reader.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: render.ServiceName(a)}, ep)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return n, fmt.Errorf("failed to get the Service's Endpoints: %w", err)
	case ep.Labels[endpointsManagedBy] == endpointsController:
		if err := r.Client.Delete(ctx, ep, client.Preconditions{UID: &ep.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return n, fmt.Errorf("failed to delete Endpoints %s: %w", ep.Name, err)
		}
		n++
	}
	var slices discoveryv1.EndpointSliceList
	if err := reader.List(ctx, &slices, client.InNamespace(a.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: render.ServiceName(a)}); err != nil {
		return n, fmt.Errorf("failed to list the Service's EndpointSlices: %w", err)
	}
	for i := range slices.Items {
		s := &slices.Items[i]
		if m := s.Labels[discoveryv1.LabelManagedBy]; m != sliceController && m != sliceMirroringController {
			continue
		}
		if err := r.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return n, fmt.Errorf("failed to delete EndpointSlice %s: %w", s.Name, err)
		}
		n++
	}
	return n, nil
}
