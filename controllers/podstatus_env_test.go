package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// TestPodProblemsReachConditions: envtest runs no kubelet, so the test plays
// it, writing an agent pod's status as the kubelet would for a pull failure,
// then for a running pod, and waits for the agent's conditions to follow.
func TestPodProblemsReachConditions(t *testing.T) {
	e := needEnv(t)
	ns := newNamespace(t, "podproblem")
	startManager(t, harnessOpts{})
	ctx := context.Background()
	c := loadCase(t, "minimal")
	createCase(t, c, ns)
	sts := waitSTS(t, ns, c.Agent.Name)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: sts.Name + "-0", Namespace: ns, Labels: sts.Spec.Template.Labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: render.GooseContainer, Image: "ghcr.io/aaif-goose/goose:v0.0.0"}}},
	}
	if err := e.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: render.GooseContainer, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "ImagePullBackOff", Message: `Back-off pulling image "ghcr.io/aaif-goose/goose:v0.0.0"`,
		}},
	}}
	if err := e.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	condition := func(typ string) (*metav1.Condition, error) { return agentCondition(ns, c.Agent.Name, typ) }
	poll.UntilNil(t, "Ready=False/ImagePullFailed naming the container", func() error {
		for _, typ := range []string{agentsv1alpha1.ConditionReady, agentsv1alpha1.ConditionDegraded} {
			cond, err := condition(typ)
			if err != nil {
				return err
			}
			if cond.Reason != agentsv1alpha1.ReasonImagePullFailed || !strings.Contains(cond.Message, "container goose: ImagePullBackOff") {
				return fmt.Errorf("%s = %s/%s %q", typ, cond.Status, cond.Reason, cond.Message)
			}
		}
		return nil
	})

	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	if err := e.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, "Degraded=False once the pod runs", func() error {
		cond, err := condition(agentsv1alpha1.ConditionDegraded)
		if err != nil {
			return err
		}
		if cond.Status != metav1.ConditionFalse {
			return fmt.Errorf("Degraded = %s/%s %q", cond.Status, cond.Reason, cond.Message)
		}
		return nil
	})
}

// TestRuntimeMissingReachesConditions: a stdio extension run by npx with no
// runtime providing npx (the official image has no node) is reported.
func TestRuntimeMissingReachesConditions(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "runtime")
	startManager(t, harnessOpts{})
	c := loadCase(t, "minimal")
	c.Agent.Spec.Extensions = []agentsv1alpha1.ExtensionSpec{{Name: "filesystem", Type: agentsv1alpha1.ExtensionStdio, Cmd: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem"}}}
	createCase(t, c, ns)
	poll.UntilNil(t, "Degraded=True/RuntimeMissing naming the extension", func() error {
		cond, err := agentCondition(ns, c.Agent.Name, agentsv1alpha1.ConditionDegraded)
		if err != nil {
			return err
		}
		if cond.Reason != agentsv1alpha1.ReasonRuntimeMissing || !strings.Contains(cond.Message, "spec.extensions[filesystem].cmd npx") {
			return fmt.Errorf("Degraded = %+v", cond)
		}
		return nil
	})
}

// agentCondition reads one condition of an agent from the apiserver.
func agentCondition(ns, name, typ string) (*metav1.Condition, error) {
	a := &agentsv1alpha1.GooseAgent{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, a); err != nil {
		return nil, err
	}
	cond := meta.FindStatusCondition(a.Status.Conditions, typ)
	if cond == nil {
		return nil, fmt.Errorf("no %s condition", typ)
	}
	return cond, nil
}
