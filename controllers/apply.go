package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	netv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/internal/ssa"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// FieldOwner is the server-side-apply field manager of every child.
const FieldOwner = "goose-operator"

// child pairs a desired apply configuration with its live type.
type child struct {
	desired runtime.ApplyConfiguration
	name    string
	newObj  func() client.Object
}

func (c child) kind() string {
	return strings.TrimPrefix(fmt.Sprintf("%T", c.newObj()), "*v1.")
}

func children(d *render.Desired) []child {
	out := []child{
		{d.Secret, *d.Secret.Name, func() client.Object { return &corev1.Secret{} }},
		{d.ConfigMap, *d.ConfigMap.Name, func() client.Object { return &corev1.ConfigMap{} }},
		{d.Service, *d.Service.Name, func() client.Object { return &corev1.Service{} }},
		{d.HeadlessService, *d.HeadlessService.Name, func() client.Object { return &corev1.Service{} }},
		{d.StatefulSet, *d.StatefulSet.Name, func() client.Object { return &appsv1.StatefulSet{} }},
	}
	if d.NetworkPolicy != nil {
		out = append(out, child{d.NetworkPolicy, *d.NetworkPolicy.Name, func() client.Object { return &networkingv1.NetworkPolicy{} }})
	}
	return out
}

// ExtractApplied returns the fields the operator's field owner last applied
// to a child, as an apply configuration comparable with the desired one.
func ExtractApplied(o client.Object) (runtime.ApplyConfiguration, error) {
	switch o := o.(type) {
	case *corev1.Secret:
		return corev1ac.ExtractSecret(o, FieldOwner)
	case *corev1.ConfigMap:
		return corev1ac.ExtractConfigMap(o, FieldOwner)
	case *corev1.Service:
		return corev1ac.ExtractService(o, FieldOwner)
	case *networkingv1.NetworkPolicy:
		return netv1ac.ExtractNetworkPolicy(o, FieldOwner)
	case *appsv1.StatefulSet:
		ac, err := appsv1ac.ExtractStatefulSet(o, FieldOwner)
		if err == nil && ac.Spec != nil {
			// Claim templates are an atomic list, so extraction returns them
			// whole, including the status the apiserver fills in.
			for i := range ac.Spec.VolumeClaimTemplates {
				ac.Spec.VolumeClaimTemplates[i].Status = nil
			}
		}
		return ac, err
	}
	return nil, fmt.Errorf("failed to extract applied fields: unsupported type %T", o)
}

// applyIfChanged applies c unless the live object already carries exactly
// the fields this owner would apply. That keeps a no-op resync free of
// writes, while a child deleted, or edited by hand (the edit moves field
// ownership away from this owner), differs and is applied again.
// It returns whether it applied and the live object (from the apply response
// when it applied).
func (r *GooseAgentReconciler) applyIfChanged(ctx context.Context, a *agentsv1alpha1.GooseAgent, c child) (bool, client.Object, error) {
	live := c.newObj()
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: c.name}, live)
	switch {
	case apierrors.IsNotFound(err):
		// Absent: apply it.
	case err != nil:
		return false, nil, fmt.Errorf("failed to get %s %s: %w", c.kind(), c.name, err)
	case !metav1.IsControlledBy(live, a):
		return false, nil, &foreignObjectError{kind: c.kind(), name: c.name}
	default:
		applied, err := ExtractApplied(live)
		if err != nil {
			return false, nil, fmt.Errorf("failed to extract applied fields of %s %s: %w", c.kind(), c.name, err)
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
		return false, nil, fmt.Errorf("failed to apply %s %s: %w", c.kind(), c.name, err)
	}
	// The apply response was decoded into the apply configuration; convert it
	// back so the caller sees the object as the server has it now.
	out := c.newObj()
	b, err := json.Marshal(c.desired)
	if err != nil {
		return true, nil, fmt.Errorf("failed to marshal applied %s %s: %w", c.kind(), c.name, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return true, nil, fmt.Errorf("failed to decode applied %s %s: %w", c.kind(), c.name, err)
	}
	return true, out, nil
}
