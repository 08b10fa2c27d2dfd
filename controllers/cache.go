package controllers

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/adk2goose/goose-operator/controllers/render"
)

// CacheOptions scopes the manager's cache to the objects the operator
// manages. Pods, Secrets and ConfigMaps exist in large numbers in a cluster
// and are not the operator's business unless they belong to an agent: the
// cache holds only those carrying the agent labels. Secrets and ConfigMaps
// that agents reference (API keys, instructions) are followed through package
// references instead, so no other application's values sit in memory.
func CacheOptions() cache.Options {
	agentPods := labels.SelectorFromSet(labels.Set{render.LabelName: render.AppName})
	children := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedBy})
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:       {Label: agentPods},
			&corev1.Secret{}:    {Label: children},
			&corev1.ConfigMap{}: {Label: children},
			// The activator's slices of parked agents, and those Kubernetes'
			// controllers write for agents' Services (they copy its labels);
			// every Service has some.
			&discoveryv1.EndpointSlice{}: {Label: children},
		},
		DefaultTransform: keepOwnManagedFields,
	}
}

// keepOwnManagedFields drops the managed-fields entries of every field
// manager but the operator's own (FieldOwner and the stats reconciler's
// FieldOwner+"-stats"): the reconcilers read only theirs, to tell what they
// applied last, and the others (kubelet, controllers, kubectl) can be most
// of an object's size in the cache.
func keepOwnManagedFields(in any) (any, error) {
	o, ok := in.(client.Object)
	if !ok {
		return in, nil
	}
	mf := o.GetManagedFields()
	kept := mf[:0]
	for _, e := range mf {
		if strings.HasPrefix(e.Manager, FieldOwner) {
			kept = append(kept, e)
		}
	}
	if len(kept) < len(mf) {
		o.SetManagedFields(kept)
	}
	return o, nil
}
