// Package controllers reconciles GooseAgents into goose server pods with the
// adk2goose sidecar, and collects their session and token statistics.
package controllers

// The manager's permissions, least privilege: the agent's children get the
// verbs beside childKinds (children.go); beyond them it only reads the Secrets
// and ConfigMaps a GooseAgent references (the child verbs cover its own
// generated ones), reads pods to find each ready replica's sidecar for
// /stats, and applies GooseAgent status. It patches a GooseAgent only for the
// review binding's finalizer (reviewbinding.go). No update: nothing is
// written with PUT.
// +kubebuilder:rbac:groups=agents.adk2goose.dev,resources=gooseagents,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=agents.adk2goose.dev,resources=gooseagents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.adk2goose.dev,resources=gooseagents/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
