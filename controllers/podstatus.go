package controllers

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
)

// podProblem is why an agent's pod cannot start or keep running, as a fixed
// condition reason and a message naming the pod and container.
type podProblem struct{ reason, message string }

// maxPodMessage bounds the kubelet's and scheduler's text in a condition.
const maxPodMessage = 1024

// waitingReasons maps the kubelet's container waiting reasons that need a
// user's attention to condition reasons. Others (ContainerCreating,
// PodInitializing) are normal progress.
var waitingReasons = map[string]string{
	"ErrImagePull":               agentsv1alpha1.ReasonImagePullFailed,
	"ImagePullBackOff":           agentsv1alpha1.ReasonImagePullFailed,
	"InvalidImageName":           agentsv1alpha1.ReasonImagePullFailed,
	"ErrImageNeverPull":          agentsv1alpha1.ReasonImagePullFailed,
	"CrashLoopBackOff":           agentsv1alpha1.ReasonCrashLoopBackOff,
	"CreateContainerConfigError": agentsv1alpha1.ReasonContainerCreateFailed,
	"CreateContainerError":       agentsv1alpha1.ReasonContainerCreateFailed,
	"RunContainerError":          agentsv1alpha1.ReasonContainerCreateFailed,
}

// classifyPods returns the first problem among the agent's pods, in pod name
// order, or nil when every pod is running or making normal progress. It is
// pure: the reconciler lists the pods.
func classifyPods(pods []corev1.Pod) *podProblem {
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range sorted {
		if p := classifyPod(&sorted[i]); p != nil {
			return p
		}
	}
	return nil
}

func classifyPod(p *corev1.Pod) *podProblem {
	if p.DeletionTimestamp != nil {
		return nil // going away; its replacement is judged instead
	}
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
			continue
		}
		reason := agentsv1alpha1.ReasonUnschedulable
		// The scheduler's VolumeBinding plugin reports claims it cannot bind
		// ("pod has unbound immediate PersistentVolumeClaims", "didn't find
		// available persistent volumes to bind").
		if m := strings.ToLower(c.Message); strings.Contains(m, "persistentvolumeclaim") || strings.Contains(m, "persistent volumes") {
			reason = agentsv1alpha1.ReasonVolumeClaimUnbound
		}
		return &podProblem{reason: reason, message: clip(fmt.Sprintf("pod %s: %s", p.Name, c.Message))}
	}
	statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		reason, ok := waitingReasons[w.Reason]
		if !ok {
			continue
		}
		msg := fmt.Sprintf("pod %s: container %s: %s", p.Name, cs.Name, w.Reason)
		if w.Message != "" {
			msg += ": " + w.Message
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			msg += fmt.Sprintf("; last exit code %d (%s)", t.ExitCode, t.Reason)
			if t.Message != "" {
				msg += ": " + t.Message
			}
		}
		return &podProblem{reason: reason, message: clip(msg)}
	}
	return nil
}

func clip(s string) string {
	if len(s) <= maxPodMessage {
		return s
	}
	return s[:maxPodMessage-3] + "..."
}
