package controllers

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
)

func podWith(name string, mutate func(*corev1.PodStatus)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
	mutate(&p.Status)
	return p
}

func waiting(container, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: container, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func unschedulable(msg string) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}
}

// The kubelet's and scheduler's words, as they appear in pod status.
func TestClassifyPods(t *testing.T) {
	crash := waiting("goose", "CrashLoopBackOff", "back-off 5m0s restarting failed container=goose")
	crash.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "no GOOSE_SERVER__SECRET_KEY"}
	for name, tc := range map[string]struct {
		pods          []corev1.Pod
		reason        string
		msgContaining []string
	}{
		"running": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{{Name: "goose", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		})}},
		"still creating is progress": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{waiting("goose", "ContainerCreating", "")}
		})}},
		"image pull back-off": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{waiting("goose", "ImagePullBackOff", `Back-off pulling image "ghcr.io/aaif-goose/goose:v0"`)}
		})}, reason: agentsv1alpha1.ReasonImagePullFailed, msgContaining: []string{"pod a-0", "container goose", "ImagePullBackOff", "ghcr.io/aaif-goose/goose:v0"}},
		"sidecar image in an init container": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.InitContainerStatuses = []corev1.ContainerStatus{waiting("adk2goose", "ErrImagePull", "not found")}
		})}, reason: agentsv1alpha1.ReasonImagePullFailed, msgContaining: []string{"container adk2goose", "ErrImagePull: not found"}},
		"crash loop with the last exit": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{crash}
		})}, reason: agentsv1alpha1.ReasonCrashLoopBackOff, msgContaining: []string{"container goose", "last exit code 1 (Error): no GOOSE_SERVER__SECRET_KEY"}},
		"missing secret key": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{waiting("goose", "CreateContainerConfigError", `secret "openai" not found`)}
		})}, reason: agentsv1alpha1.ReasonContainerCreateFailed, msgContaining: []string{`secret "openai" not found`}},
		"unschedulable": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.Conditions = []corev1.PodCondition{unschedulable("0/3 nodes are available: 3 Insufficient cpu.")}
		})}, reason: agentsv1alpha1.ReasonUnschedulable, msgContaining: []string{"pod a-0: 0/3 nodes are available: 3 Insufficient cpu."}},
		"unbound claim": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.Conditions = []corev1.PodCondition{unschedulable("0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available")}
		})}, reason: agentsv1alpha1.ReasonVolumeClaimUnbound, msgContaining: []string{"unbound immediate PersistentVolumeClaims"}},
		"no volume to bind": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.Conditions = []corev1.PodCondition{unschedulable("0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind.")}
		})}, reason: agentsv1alpha1.ReasonVolumeClaimUnbound},
		"first pod by name wins": {pods: []corev1.Pod{
			podWith("a-1", func(s *corev1.PodStatus) { s.ContainerStatuses = []corev1.ContainerStatus{crash} }),
			podWith("a-0", func(s *corev1.PodStatus) {
				s.ContainerStatuses = []corev1.ContainerStatus{waiting("goose", "ImagePullBackOff", "x")}
			}),
		}, reason: agentsv1alpha1.ReasonImagePullFailed, msgContaining: []string{"pod a-0"}},
		"a terminating pod is skipped": {pods: []corev1.Pod{func() corev1.Pod {
			p := podWith("a-0", func(s *corev1.PodStatus) { s.ContainerStatuses = []corev1.ContainerStatus{crash} })
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			return p
		}()}},
		"a huge message is clipped": {pods: []corev1.Pod{podWith("a-0", func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{waiting("goose", "ErrImagePull", strings.Repeat("x", 5000))}
		})}, reason: agentsv1alpha1.ReasonImagePullFailed},
	} {
		t.Run(name, func(t *testing.T) {
			p := classifyPods(tc.pods)
			if tc.reason == "" {
				if p != nil {
					t.Fatalf("problem %+v, want none", p)
				}
				return
			}
			if p == nil || p.reason != tc.reason {
				t.Fatalf("problem %+v, want reason %s", p, tc.reason)
			}
			if len(p.message) > maxPodMessage {
				t.Errorf("message of %d bytes", len(p.message))
			}
			for _, s := range tc.msgContaining {
				if !strings.Contains(p.message, s) {
					t.Errorf("message %q lacks %q", p.message, s)
				}
			}
		})
	}
}

// A pod problem makes the agent Degraded with its reason, and not Ready
// when no replica is ready; a ready replica keeps Ready true.
func TestDesiredStatusReportsPodProblems(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &agentsv1alpha1.GooseAgent{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Generation: 3}}
	problem := &podProblem{reason: agentsv1alpha1.ReasonImagePullFailed, message: "pod a-0: container goose: ImagePullBackOff"}
	none := appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1}
	st, _ := desiredTyped(t, a, observation{sts: stsWith(1, none), pods: problem}, now)
	ready := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionReady)
	degraded := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionDegraded)
	if ready.Status != metav1.ConditionFalse || ready.Reason != agentsv1alpha1.ReasonImagePullFailed || !strings.Contains(ready.Message, "container goose") {
		t.Errorf("Ready = %+v", ready)
	}
	if degraded.Status != metav1.ConditionTrue || degraded.Reason != agentsv1alpha1.ReasonImagePullFailed || degraded.Message != problem.message {
		t.Errorf("Degraded = %+v", degraded)
	}
	// Past the progress deadline the pod's own reason still wins.
	a2 := a.DeepCopy()
	a2.Status = st
	st, _ = desiredTyped(t, a2, observation{sts: stsWith(1, none), pods: problem}, now.Add(2*ProgressDeadline))
	if d := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionDegraded); d.Reason != agentsv1alpha1.ReasonImagePullFailed {
		t.Errorf("Degraded past the deadline = %+v", d)
	}
	oneReady := appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 2, ReadyReplicas: 1, UpdatedReplicas: 2}
	st, _ = desiredTyped(t, a, observation{sts: stsWith(2, oneReady), pods: problem}, now)
	if r := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionReady); r.Status != metav1.ConditionTrue {
		t.Errorf("Ready with one ready replica = %+v", r)
	}
	if d := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionDegraded); d.Reason != agentsv1alpha1.ReasonImagePullFailed {
		t.Errorf("Degraded with one bad replica = %+v", d)
	}
}
