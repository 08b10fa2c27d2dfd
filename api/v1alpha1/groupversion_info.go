// Package v1alpha1 contains the GooseAgent API, group agents.adk2goose.dev.
// It depends only on k8s.io/api and k8s.io/apimachinery, so that clients can
// import it cheaply. Its server-side-apply configurations are generated into
// the applyconfiguration subpackage.
// +kubebuilder:object:generate=true
// +kubebuilder:ac:generate=true
// +groupName=agents.adk2goose.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "agents.adk2goose.dev", Version: "v1alpha1"}

	// SchemeGroupVersion is GroupVersion under the name generated code
	// (the apply configurations) expects.
	SchemeGroupVersion = GroupVersion

	// SchemeBuilder registers the types of this API with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &GooseAgent{}, &GooseAgentList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
