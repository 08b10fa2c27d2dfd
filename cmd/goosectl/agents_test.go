package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

func TestParseAgentCmd(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseAgentCmd("get", []string{"-n", "team", "coder", "--context", "prod"}, true, &stderr)
	if err != nil || o.name != "coder" || o.namespace != "team" || o.context != "prod" {
		t.Fatalf("%+v %v", o, err)
	}
	if _, err := parseAgentCmd("park", nil, true, &stderr); err == nil || !strings.Contains(err.Error(), "NAME is required") {
		t.Fatalf("park without NAME: %v", err)
	}
	if _, err := parseAgentCmd("list", []string{"coder"}, false, &stderr); err == nil {
		t.Fatal("list took a NAME")
	}
	if o, err := parseAgentCmd("list", []string{"-A"}, false, &stderr); err != nil || !o.allNamespaces {
		t.Fatalf("list -A: %+v %v", o, err)
	}
}

// TestAgentCommandsAgainstAPIServer: list and get show the parked state, its
// reason and since when, the last activity and the figures; park sets
// spec.idle.parked and wake clears it and asks for a wake.
func TestAgentCommandsAgainstAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	c := env.Client
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agents-"}}
	must(t, c.Create(ctx, nsObj))
	ns := nsObj.Name
	kube := []string{"-n", ns, "--kubeconfig", env.Kubeconfig}
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := dispatch(ctx, append(args, kube...), uiEnv{stdout: &stdout, stderr: &stderr}); err != nil {
			t.Fatalf("goosectl %v: %v (%s)", args, err, stderr.String())
		}
		return stdout.String()
	}

	now := time.Now()
	parked := &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idler"},
		Spec: agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"},
			Idle: &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: 10 * time.Minute}}},
	}
	awake := &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "busy"},
		Spec:       agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"}},
	}
	must(t, c.Create(ctx, parked))
	must(t, c.Create(ctx, awake))
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d).Truncate(time.Second)} }
	parked.Status = agentsv1alpha1.GooseAgentStatus{
		Conditions: []metav1.Condition{
			{Type: agentsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.ReasonParked, Message: "parked: no turn on any replica for 10m0s", LastTransitionTime: *at(5 * time.Minute)},
			{Type: agentsv1alpha1.ConditionParked, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.ReasonIdle, Message: "no turn on any replica for 10m0s", LastTransitionTime: *at(5 * time.Minute)},
		},
		Sessions: agentsv1alpha1.SessionStats{Total: 7, Active: 0, Users: 2},
		Tokens:   agentsv1alpha1.TokenStats{Input: 900, Output: 334, Total: 1234},
		Idle:     &agentsv1alpha1.IdleStatus{ParkedAt: at(5 * time.Minute), LastActivityAt: at(15 * time.Minute)},
	}
	must(t, c.Status().Update(ctx, parked))
	awake.Status = agentsv1alpha1.GooseAgentStatus{Conditions: []metav1.Condition{
		{Type: agentsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.ReasonAvailable, Message: "1/1 replicas ready", LastTransitionTime: *at(time.Hour)},
	}}
	must(t, c.Status().Update(ctx, awake))

	out := run("list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("list:\n%s", out)
	}
	for _, want := range [][]string{
		{"busy", "True", "Available", "-", "0", "0"},
		{"idler", "False", "Parked", "yes", "(Idle)", "5m", "ago", "15m", "ago", "7", "1234"},
	} {
		if !hasRow(lines, want) {
			t.Errorf("list has no row with %v:\n%s", want, out)
		}
	}
	out = run("get", "idler")
	for _, want := range []string{"Ready:", "False (Parked) parked: no turn", "Parked:", "yes (Idle): no turn on any replica for 10m0s",
		"parked after 10m0s without a turn", "Parked at:", "(5m", "Last active:", "(15m", "7 (0 active, 2 users)", "1234 (input 900, output 334)"} {
		if !strings.Contains(out, want) {
			t.Errorf("get has no %q:\n%s", want, out)
		}
	}

	run("park", "busy")
	got := &agentsv1alpha1.GooseAgent{}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(awake), got))
	if got.Spec.Idle == nil || !got.Spec.Idle.Parked {
		t.Fatalf("after park spec.idle = %+v", got.Spec.Idle)
	}
	before := time.Now()
	run("wake", "busy")
	must(t, c.Get(ctx, client.ObjectKeyFromObject(awake), got))
	if got.Spec.Idle == nil || got.Spec.Idle.Parked {
		t.Fatalf("after wake spec.idle = %+v", got.Spec.Idle)
	}
	req, err := time.Parse(time.RFC3339Nano, got.Annotations[agentsv1alpha1.WakeRequestedAtAnnotation])
	if err != nil || req.Before(before) {
		t.Fatalf("wake request %q (%v), want a time after %v", got.Annotations[agentsv1alpha1.WakeRequestedAtAnnotation], err, before)
	}
	// An agent parked for idleness gets the request and keeps its spec.
	gen := parked.Generation
	run("wake", "idler")
	must(t, c.Get(ctx, client.ObjectKeyFromObject(parked), got))
	if got.Generation != gen || got.Annotations[agentsv1alpha1.WakeRequestedAtAnnotation] == "" {
		t.Fatalf("wake of an idle-parked agent: generation %d→%d, annotations %v", gen, got.Generation, got.Annotations)
	}

	var stdout, stderr bytes.Buffer
	err = dispatch(ctx, append([]string{"get", "nope"}, kube...), uiEnv{stdout: &stdout, stderr: &stderr})
	if err == nil || !strings.Contains(err.Error(), `GooseAgent "nope" not found`) {
		t.Fatalf("get nope: %v", err)
	}
}

// hasRow reports whether a line starts with want[0] and holds fields
// beginning with those of want, in order (ages move while the test runs).
func hasRow(lines []string, want []string) bool {
	for _, l := range lines {
		f := strings.Fields(l)
		i := 0
		for _, w := range f {
			if i < len(want) && strings.HasPrefix(w, want[i]) {
				i++
			}
		}
		if i == len(want) && f[0] == want[0] {
			return true
		}
	}
	return false
}
