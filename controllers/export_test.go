package controllers

import "sigs.k8s.io/controller-runtime/pkg/client"

// ChildObjects returns an empty object of every child kind, in the order of
// childKinds, for the tests outside the package.
func ChildObjects() []client.Object {
	out := make([]client.Object, 0, len(childKinds))
	for _, k := range childKinds {
		out = append(out, k.newObject())
	}
	return out
}

// ChildVerbs are the verbs the manager needs on every child kind.
var ChildVerbs = childVerbs
