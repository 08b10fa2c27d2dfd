package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// park is case 11: an agent with idle.after 10s parks (no pod, its Service
// pointed at the activator in the manager's pods); a request without the
// token gets 401 and wakes nothing; a chat wakes it and gets its answer,
// with the turn from before parking still in the session; parked again, 100
// turns sent at once during the wake all answer.
func (e *env) park(t *testing.T) {
	const ns, name = "e2e-park", "sleeper"
	e.namespace(t, ns, nil)
	// The client first: the agent may park 10 s after it is created.
	pod := e.clientPod(t, ns)
	e.mustKubectl(t, `apiVersion: agents.adk2goose.dev/v1alpha1
kind: GooseAgent
metadata: {name: `+name+`, namespace: `+ns+`}
spec:
  provider: {name: ollama, model: qwen3:8b}
  idle: {after: 10s}
`, "apply", "--server-side", "-f", "-")
	e.waitAgentReady(t, ns, name, 1)
	url, tok := e.agent(t, ns, name).Status.Endpoints.REST, e.token(t, ns, name)
	first, err := e.chat(t, ns, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "kept", "-create", "-text", "before parking")
	if err != nil || !strings.Contains(first.Text, "echo: before parking") {
		t.Fatalf("the turn before parking: %+v %v", first, err)
	}

	e.waitParked(t, ns, name)
	wakeBefore := e.agent(t, ns, name).Annotations["agents.adk2goose.dev/wake-requested-at"]
	if _, err := e.chatOnce(t, ns, pod, "rest", "-url", url, "-app", name, "-session", "nope", "-create"); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("a request without the token to the parked agent: want HTTP 401, got %v", err)
	}
	if a := e.agent(t, ns, name); a.Annotations["agents.adk2goose.dev/wake-requested-at"] != wakeBefore {
		t.Errorf("an unauthenticated request asked for a wake: %v (before it: %q)", a.Annotations, wakeBefore)
	}

	w := e.watchWake(t, ns, name)
	start := time.Now()
	r, err := e.chat(t, ns, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "kept", "-text", "after parking")
	answered := time.Since(start)
	if err != nil || !strings.Contains(r.Text, "echo: after parking") {
		t.Fatalf("the chat that wakes the agent: %+v %v", r, err)
	}
	w.report(t, start, answered)
	if n := e.adkSessionEvents(t, ns, pod, url, tok, name, "kept"); n < 4 {
		t.Errorf("session kept has %d events after the wake, want the turns from before and after parking (4)", n)
	}

	e.waitParked(t, ns, name)
	out, err := e.kubectl(t, "", "-n", ns, "exec", pod, "--", "client", "turns-at-once", "-n", "100",
		"-url", url, "-token", tok, "-app", name, "-session", "burst", "-text", "burst")
	if err != nil {
		t.Fatalf("100 turns during a wake: %v", err)
	}
	var burst struct {
		Answered int      `json:"answered"`
		Failed   []string `json:"failed"`
		AnswerMS []int64  `json:"answerMs"`
	}
	if err := json.Unmarshal([]byte(out), &burst); err != nil {
		t.Fatalf("failed to decode %q: %v", out, err)
	}
	if burst.Answered != 100 {
		t.Fatalf("%d of 100 turns during a wake answered; failures: %v", burst.Answered, burst.Failed)
	}
	t.Logf("100 turns during a wake: answers at min %d ms, median %d ms, max %d ms after the first request",
		burst.AnswerMS[0], burst.AnswerMS[50], burst.AnswerMS[99])
	if pods, _ := e.agentPods(t, ns, name); len(pods) != 1 {
		t.Errorf("the burst woke %d pods, want 1", len(pods))
	}
}

// waitParked waits for the agent to park: the conditions, no pod, the
// StatefulSet at 0, the Service without a selector and its activator slice
// listing the manager's ready pods. Other slices of the Service are logged.
func (e *env) waitParked(t *testing.T, ns, name string) {
	t.Helper()
	poll.Within(t, 2*time.Minute, "GooseAgent "+name+" parked with no pod", func() error {
		a := e.agent(t, ns, name)
		if st, why := conditionStatus(a, "Parked"); st != "True" {
			return fmt.Errorf("Parked=%s %s", st, why)
		}
		if st, why := conditionStatus(a, "Ready"); st != "False" || !strings.HasPrefix(why, "Parked:") {
			return fmt.Errorf("Ready=%s %s", st, why)
		}
		var sts appsv1.StatefulSet
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &sts); err != nil {
			return err
		}
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 0 {
			return fmt.Errorf("StatefulSet replicas %v", sts.Spec.Replicas)
		}
		pods, err := e.agentPods(t, ns, name)
		if err != nil {
			return err
		}
		return notYet(len(pods) == 0, e.podSummary(t, ns, name))
	})
	var svc corev1.Service
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector != nil {
		t.Errorf("the parked agent's Service has a selector: %v", svc.Spec.Selector)
	}
	var managers corev1.PodList
	if err := e.c.List(t.Context(), &managers, client.InNamespace(operatorNS), client.MatchingLabels{"app.kubernetes.io/component": "manager"}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range managers.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			want = append(want, p.Status.PodIP)
		}
	}
	slices.Sort(want)
	poll.Within(t, time.Minute, "the activator slice to list the manager's ready pods", func() error {
		var s discoveryv1.EndpointSlice
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name + "-activator"}, &s); err != nil {
			return err
		}
		var got []string
		for _, ep := range s.Endpoints {
			got = append(got, ep.Addresses...)
		}
		slices.Sort(got)
		return notYet(slices.Equal(got, want) && len(s.Ports) == 1 && *s.Ports[0].Port == 8085, fmt.Sprintf("slice %v ports %v, want %v on 8085", got, s.Ports, want))
	})
	// A slice left by Kubernetes' controllers would send some connections
	// to the pod that is gone.
	poll.Within(t, time.Minute, "no other slice on the parked Service", func() error {
		var slicesOf discoveryv1.EndpointSliceList
		if err := e.c.List(t.Context(), &slicesOf, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
			return err
		}
		var others []string
		for _, s := range slicesOf.Items {
			if s.Name != name+"-activator" {
				others = append(others, s.Name+" (managed by "+s.Labels[discoveryv1.LabelManagedBy]+")")
			}
		}
		return notYet(len(others) == 0, strings.Join(others, ", "))
	})
}

// wakeWatch records when each step of a wake was first seen.
type wakeWatch struct {
	mu    sync.Mutex
	steps map[string]time.Time
	order []string
	stop  func()
}

// watchWake polls the agent's StatefulSet and pod every 20 ms until stopped.
func (e *env) watchWake(t *testing.T, ns, name string) *wakeWatch {
	w := &wakeWatch{steps: map[string]time.Time{}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	see := func(step string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.steps[step]; !ok {
			w.steps[step] = time.Now()
			w.order = append(w.order, step)
		}
	}
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var sts appsv1.StatefulSet
			if e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &sts) == nil && sts.Spec.Replicas != nil && *sts.Spec.Replicas > 0 {
				see("StatefulSet replicas 1 written")
			}
			pods, err := e.agentPods(t, ns, name)
			if err != nil || len(pods) == 0 {
				continue
			}
			p := pods[0]
			see("pod created")
			running := len(p.Status.ContainerStatuses) > 0
			for _, cs := range p.Status.ContainerStatuses {
				running = running && cs.State.Running != nil
			}
			if running {
				see("all containers running")
			}
			if podReady(&p) {
				see("pod Ready")
			}
		}
	})
	w.stop = func() { close(done); wg.Wait() }
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			w.stop()
		}
	})
	return w
}

func (w *wakeWatch) report(t *testing.T, start time.Time, answered time.Duration) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, s := range w.order {
		fmt.Fprintf(&b, "\n  %-32s %6d ms", s, w.steps[s].Sub(start).Milliseconds())
	}
	fmt.Fprintf(&b, "\n  %-32s %6d ms (kubectl exec included)", "answer at the client", answered.Milliseconds())
	if c, ok := w.steps["pod created"]; ok {
		if r, ok := w.steps["pod Ready"]; ok {
			fmt.Fprintf(&b, "\n  %-32s %6d ms", "the pod's own start", r.Sub(c).Milliseconds())
		}
	}
	t.Logf("wake-time breakdown, from the request:%s", b.String())
}
