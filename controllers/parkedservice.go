package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
// Endpoints, and nothing anybody else wrote. It returns how many it deleted.
//
// The cache tells whether there is anything to do: those controllers copy
// the Service's labels onto what they write, so their slices are in the
// cache's view of the operator's children, and the slice watch wakes the
// agent when one appears. Only then is the API server asked for the
// Endpoints, which the cache does not hold: a parked agent with nothing
// stale costs no request.
func (r *GooseAgentReconciler) removeStaleEndpoints(ctx context.Context, a *agentsv1alpha1.GooseAgent) (int, error) {
	stale, err := r.controllerSlices(ctx, a)
	if err != nil || len(stale) == 0 {
		return 0, err
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	// The Endpoints first: while it exists the mirroring controller may
	// write its slice again after the slices below are gone.
	n := 0
	ep := &corev1.Endpoints{} //nolint:staticcheck // the endpoints controller still writes them in v1.37, and kube-proxy sees them mirrored
	err = reader.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: render.ServiceName(a)}, ep)
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
	for i := range stale {
		s := &stale[i]
		if err := r.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return n, fmt.Errorf("failed to delete EndpointSlice %s: %w", s.Name, err)
		}
		n++
	}
	return n, nil
}

// controllerSlices are the slices Kubernetes' EndpointSlice and mirroring
// controllers wrote for the agent's Service, from the cache.
func (r *GooseAgentReconciler) controllerSlices(ctx context.Context, a *agentsv1alpha1.GooseAgent) ([]discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := r.listOfAgent(ctx, &list, a, client.MatchingLabels{discoveryv1.LabelServiceName: render.ServiceName(a)}); err != nil {
		return nil, fmt.Errorf("failed to list the Service's EndpointSlices: %w", err)
	}
	return slices.DeleteFunc(list.Items, func(s discoveryv1.EndpointSlice) bool { return !isControllerSlice(&s) }), nil
}

// isControllerSlice reports whether Kubernetes' EndpointSlice or mirroring
// controller wrote s.
func isControllerSlice(s *discoveryv1.EndpointSlice) bool {
	m := s.Labels[discoveryv1.LabelManagedBy]
	return m == sliceController || m == sliceMirroringController
}

// agentOfControllerSlice maps a slice that Kubernetes' controllers wrote for
// an agent's Service (it carries the Service's labels) to the agent, so a
// parked agent removes it as soon as it appears.
func agentOfControllerSlice(_ context.Context, o client.Object) []reconcile.Request {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok || !isControllerSlice(s) || s.Labels[render.LabelName] != render.AppName || s.Labels[render.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: s.Namespace, Name: s.Labels[render.LabelInstance]}}}
}

// serviceReachesAPod reports whether a slice Kubernetes wrote for the
// agent's Service lists one of the ready pods as ready: from
// then on kube-proxy sends the Service's traffic to that pod. A woken agent
// keeps the activator's slice until then, so no request meets a Service
// with no endpoint between the two.
func (r *GooseAgentReconciler) serviceReachesAPod(ctx context.Context, a *agentsv1alpha1.GooseAgent, ready map[string]bool) (bool, error) {
	ss, err := r.controllerSlices(ctx, a)
	if err != nil {
		return false, err
	}
	for _, s := range ss {
		for _, e := range s.Endpoints {
			// An unset ready condition means ready (discovery/v1).
			if (e.Conditions.Ready == nil || *e.Conditions.Ready) && e.TargetRef != nil && e.TargetRef.Kind == "Pod" && ready[e.TargetRef.Name] {
				return true, nil
			}
		}
	}
	return false, nil
}
