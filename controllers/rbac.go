// Package controllers reconciles GooseAgents into goose server pods with the
// adk2goose sidecar, and collects their session and token statistics.
package controllers

// The manager's permissions, least privilege: it server-side-applies the
// agent's children (patch, plus create because an apply may create), prunes
// them (delete), only reads the Secrets and ConfigMaps a GooseAgent references
// (the Secret and ConfigMap verbs cover its own generated children), and reads
// pods to find each ready replica's sidecar for /stats. No update: nothing is
// written with PUT.
// +kubebuilder:rbac:groups=agents.adk2goose.dev,resources=gooseagents,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.adk2goose.dev,resources=gooseagents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.adk2goose.dev,resources=gooseagents/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
