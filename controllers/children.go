package controllers

import (
	"fmt"
	"reflect"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	netv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// The permissions of the child kinds below, one marker a kind (controller-gen
// reads markers only from comments apart from a declaration's doc).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;patch;delete

// childKinds are the kinds of object the operator makes for an agent, and
// the one place a kind is added (besides the render.Desired field that
// renders it): the reconciler applies, prunes and watches exactly these
// kinds, and TestChildKinds fails until the marker above grants the kind
// childVerbs in the generated role (make manifests).
var childKinds = []childKind{
	kindOf(corev1ac.ExtractSecret),
	kindOf(corev1ac.ExtractConfigMap),
	kindOf(corev1ac.ExtractServiceAccount),
	kindOf(corev1ac.ExtractService),
	kindOf(extractStatefulSet),
	kindOf(netv1ac.ExtractNetworkPolicy),
	kindOf(discoveryv1ac.ExtractEndpointSlice),
}

// childVerbs are what the manager needs on every child kind: server-side
// apply (patch, and create because an apply may create), pruning (delete)
// and the cache's list and watch.
var childVerbs = []string{"get", "list", "watch", "create", "patch", "delete"}

// childKind is one kind of child object.
type childKind struct {
	// newObject returns an empty object of the kind; its Go type names the
	// kind in the scheme.
	newObject func() client.Object
	// extract returns the fields FieldOwner last applied to a live object
	// of the kind, as an apply configuration comparable with the desired one.
	extract func(client.Object) (runtime.ApplyConfiguration, error)
}

// kindOf makes the entry of a kind from client-go's extractor for it.
func kindOf[T any, PT interface {
	*T
	client.Object
}, AC runtime.ApplyConfiguration](extract func(PT, string) (AC, error)) childKind {
	return childKind{
		newObject: func() client.Object { return PT(new(T)) },
		extract: func(o client.Object) (runtime.ApplyConfiguration, error) {
			typed, ok := o.(PT)
			if !ok {
				return nil, fmt.Errorf("failed to extract applied fields: got a %T, want a %T", o, PT(nil))
			}
			ac, err := extract(typed, FieldOwner)
			if err != nil {
				return nil, err
			}
			return ac, nil
		},
	}
}

func extractStatefulSet(o *appsv1.StatefulSet, fieldOwner string) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	ac, err := appsv1ac.ExtractStatefulSet(o, fieldOwner)
	if err == nil && ac.Spec != nil {
		// Claim templates are an atomic list, so extraction returns them
		// whole, including the status the apiserver fills in.
		for i := range ac.Spec.VolumeClaimTemplates {
			ac.Spec.VolumeClaimTemplates[i].Status = nil
		}
	}
	return ac, err
}

// ExtractApplied returns the fields the operator's field owner last applied
// to a child, as an apply configuration comparable with the desired one.
func ExtractApplied(o client.Object) (runtime.ApplyConfiguration, error) {
	for _, k := range childKinds {
		if reflect.TypeOf(k.newObject()) == reflect.TypeOf(o) {
			return k.extract(o)
		}
	}
	return nil, fmt.Errorf("failed to extract applied fields: %T is not a child kind", o)
}

// ChildObjects returns an empty object of every child kind, in the order of
// childKinds, for checks outside the package (tests, hack tools).
func ChildObjects() []client.Object {
	out := make([]client.Object, 0, len(childKinds))
	for _, k := range childKinds {
		out = append(out, k.newObject())
	}
	return out
}

// resolvedKind is a child kind with its GroupVersionKind from the scheme.
type resolvedKind struct {
	childKind
	gvk schema.GroupVersionKind
}

// newList returns an empty list of the kind.
func (k resolvedKind) newList(s *runtime.Scheme) (client.ObjectList, error) {
	o, err := s.New(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
	if err != nil {
		return nil, fmt.Errorf("failed to make a %s list: %w", k.gvk.Kind, err)
	}
	list, ok := o.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("failed to make a %s list: %T is no list", k.gvk.Kind, o)
	}
	return list, nil
}

func resolveKinds(s *runtime.Scheme) ([]resolvedKind, error) {
	out := make([]resolvedKind, 0, len(childKinds))
	for _, k := range childKinds {
		gvk, err := apiutil.GVKForObject(k.newObject(), s)
		if err != nil {
			return nil, fmt.Errorf("failed to look up a child kind: %w", err)
		}
		out = append(out, resolvedKind{childKind: k, gvk: gvk})
	}
	return out, nil
}

// child is one rendered child with its kind.
type child struct {
	resolvedKind
	desired runtime.ApplyConfiguration
	name    string
}

// id names the child in Events and errors, e.g. "Service/talker".
func (c child) id() string { return c.gvk.Kind + "/" + c.name }

// rendered is what client.Apply needs of an apply configuration, and what
// every client-go and generated one has.
type rendered interface {
	runtime.ApplyConfiguration
	GetName() *string
	GetKind() *string
	GetAPIVersion() *string
}

// children pairs each rendered object with its child kind. An object of a
// kind missing from childKinds is an error: it would be applied but never
// watched or pruned.
func children(kinds []resolvedKind, objs []runtime.ApplyConfiguration) ([]child, error) {
	out := make([]child, 0, len(objs))
	for _, o := range objs {
		r, ok := o.(rendered)
		if !ok {
			return nil, fmt.Errorf("failed to read rendered child: %T has no name or kind", o)
		}
		gvk := schema.FromAPIVersionAndKind(ptr.Deref(r.GetAPIVersion(), ""), ptr.Deref(r.GetKind(), ""))
		name := ptr.Deref(r.GetName(), "")
		i := slices.IndexFunc(kinds, func(k resolvedKind) bool { return k.gvk == gvk })
		if i < 0 {
			return nil, fmt.Errorf("failed to read rendered child %s/%s: kind %s is not in childKinds", gvk.Kind, name, gvk)
		}
		out = append(out, child{resolvedKind: kinds[i], desired: o, name: name})
	}
	return out, nil
}
