package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// configHashAnnotation is the pod-template annotation that rolls the pods
// when a referenced Secret or ConfigMap changes.
const configHashAnnotation = "agents.adk2goose.dev/config-hash"

// adkSessionEvents reads an ADK session through the Service and counts its events.
func (e *env) adkSessionEvents(t *testing.T, ns, pod, url, tok, app, sid string) int {
	t.Helper()
	var out string
	var err error
	// As chat does: kube-proxy may not have programmed the Service's
	// endpoints yet (after a wake, the pod's replace the activator's).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out, err = e.kubectl(t, "", "-n", ns, "exec", pod, "--", "client", "get", "-token", tok,
			"-url", url+"/apps/"+app+"/users/e2e/sessions/"+sid)
		if err == nil || !dialFailed(err) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("failed to read ADK session %s: %v", sid, err)
	}
	var s struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("failed to decode ADK session %s: %v", out, err)
	}
	return len(s.Events)
}

// secretRoll is case 3: a new value in the provider Secret rolls the pods
// and the conversation continues in the same goose session after the roll.
func (e *env) secretRoll(t *testing.T, pod string) {
	const name = "openai-coder"
	before := e.waitAgentReady(t, samplesNS, name, 1)[0]
	var sts appsv1.StatefulSet
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: samplesNS, Name: name}, &sts); err != nil {
		t.Fatal(err)
	}
	hash := sts.Spec.Template.Annotations[configHashAnnotation]
	if hash == "" {
		t.Fatalf("the pod template has no %s annotation", configHashAnnotation)
	}
	url, tok := e.agent(t, samplesNS, name).Status.Endpoints.REST, e.token(t, samplesNS, name)
	r1, err := e.chat(t, samplesNS, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "case3", "-create", "-text", "before the roll")
	if err != nil {
		t.Fatal(err)
	}

	e.mustKubectl(t, `{"stringData":{"api-key":"sk-e2e-rotated"}}`, "-n", samplesNS, "patch", "secret", "openai", "--type=merge", "--patch-file=/dev/stdin")
	poll.Within(t, time.Minute, "the pod template hash changes", func() error {
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: samplesNS, Name: name}, &sts); err != nil {
			return err
		}
		h := sts.Spec.Template.Annotations[configHashAnnotation]
		return notYet(h != hash, "hash still "+h)
	})
	poll.Within(t, 3*time.Minute, "a new pod replaces the old one and is Ready", func() error {
		pods, err := e.agentPods(t, samplesNS, name)
		if err != nil || len(pods) != 1 {
			return fmt.Errorf("%d pods (%v)", len(pods), err)
		}
		p := pods[0]
		return notYet(p.UID != before.UID && podReady(&p) && p.Annotations[configHashAnnotation] == sts.Spec.Template.Annotations[configHashAnnotation],
			e.podSummary(t, samplesNS, name))
	})
	e.waitAgentReady(t, samplesNS, name, 1)
	r2, err := e.chat(t, samplesNS, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "case3", "-text", "after the roll")
	if err != nil {
		t.Fatalf("the conversation did not continue after the roll: %v", err)
	}
	if r2.gooseSession() != r1.gooseSession() {
		t.Errorf("goose session %q after the roll, %q before: the conversation restarted", r2.gooseSession(), r1.gooseSession())
	}
	if n := e.adkSessionEvents(t, samplesNS, pod, url, tok, name, "case3"); n < 4 {
		t.Errorf("the ADK session holds %d events after two turns, want at least 4", n)
	}
}

// podDeletion is case 4: a deleted pod's replacement mounts the same claim;
// the session and the status totals are intact.
func (e *env) podDeletion(t *testing.T, pod string) {
	const name = "reviewer"
	before := e.waitAgentReady(t, samplesNS, name, 1)[0]
	url, tok := e.agent(t, samplesNS, name).Status.Endpoints.REST, e.token(t, samplesNS, name)
	r1, err := e.chat(t, samplesNS, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "case4", "-create", "-text", "first turn")
	if err != nil {
		t.Fatal(err)
	}
	var sessions, tokens int64
	poll.Within(t, 2*time.Minute, "status counts the first turn", func() error {
		a := e.agent(t, samplesNS, name)
		sessions, tokens = a.Status.Sessions.Total, a.Status.Tokens.Total
		return notYet(sessions == 1 && tokens >= r1.TotalTokens && tokens > 0, fmt.Sprintf("sessions %d tokens %d", sessions, tokens))
	})
	var claim corev1.PersistentVolumeClaim
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: samplesNS, Name: "data-" + name + "-0"}, &claim); err != nil {
		t.Fatal(err)
	}

	// A turn still running when the pod is deleted finishes: goose's
	// preStop hook has the sidecar drain before goose gets its SIGTERM
	// (goose serve would end the turn at once).
	type slowResult struct {
		r   turn
		err error
	}
	slow := make(chan slowResult, 1)
	go func() {
		r, err := e.chatOnce(t, samplesNS, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "case4", "-text", "slow 8")
		slow <- slowResult{r, err}
	}()
	poll.Within(t, time.Minute, "the slow turn runs", func() error {
		n := e.metric(t, pod, before.Status.PodIP, tok, inFlightRE)
		return notYet(n == 1, fmt.Sprintf("%d goose replies in flight", n))
	})
	if err := e.c.Delete(t.Context(), &before); err != nil {
		t.Fatal(err)
	}
	var sr slowResult
	select {
	case sr = <-slow:
	case <-time.After(2 * time.Minute):
		t.Fatal("the slow turn did not end")
	}
	if sr.err != nil || !strings.Contains(sr.r.Text, "tick 8 slow done") {
		t.Fatalf("the turn running when its pod was deleted: %q, %v; want its whole answer", sr.r.Text, sr.err)
	}
	var after corev1.Pod
	poll.Within(t, 3*time.Minute, "a new pod is Ready", func() error {
		pods, err := e.agentPods(t, samplesNS, name)
		if err != nil || len(pods) != 1 {
			return fmt.Errorf("%d pods (%v)", len(pods), err)
		}
		after = pods[0]
		return notYet(after.UID != before.UID && podReady(&after), e.podSummary(t, samplesNS, name))
	})
	mounted := ""
	for _, v := range after.Spec.Volumes {
		if v.Name == "data" && v.PersistentVolumeClaim != nil {
			mounted = v.PersistentVolumeClaim.ClaimName
		}
	}
	var claimAfter corev1.PersistentVolumeClaim
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: samplesNS, Name: mounted}, &claimAfter); err != nil {
		t.Fatalf("the new pod's claim %q: %v", mounted, err)
	}
	if claimAfter.UID != claim.UID || claimAfter.Spec.VolumeName != claim.Spec.VolumeName {
		t.Errorf("the new pod mounts claim %s (volume %s), the old one %s (volume %s)", claimAfter.UID, claimAfter.Spec.VolumeName, claim.UID, claim.Spec.VolumeName)
	}
	r2, err := e.chat(t, samplesNS, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "case4", "-text", "second turn")
	if err != nil {
		t.Fatalf("the session did not survive the pod's deletion: %v", err)
	}
	if r2.gooseSession() != r1.gooseSession() {
		t.Errorf("goose session %q after the deletion, %q before", r2.gooseSession(), r1.gooseSession())
	}
	// The status is written only when it changes, so the new pod's figures
	// show once the second turn counts: the first turn's tokens must still be
	// in them, and no session added.
	poll.Within(t, 2*time.Minute, "status keeps the totals across the pod's deletion", func() error {
		a := e.agent(t, samplesNS, name)
		want := tokens + sr.r.TotalTokens + r2.TotalTokens
		return notYet(a.Status.Sessions.Total == sessions && a.Status.Tokens.Total == want,
			fmt.Sprintf("sessions %d tokens %d; want %d and %d+%d+%d", a.Status.Sessions.Total, a.Status.Tokens.Total, sessions, tokens, sr.r.TotalTokens, r2.TotalTokens))
	})
	if n := e.adkSessionEvents(t, samplesNS, pod, url, tok, name, "case4"); n < 6 {
		t.Errorf("the ADK session holds %d events after three turns, want at least 6", n)
	}
}

var (
	forwardedRE = regexp.MustCompile(`(?m)^adk2goose_peer_lookups_total\{outcome="forwarded"\} (\d+)`)
	inFlightRE  = regexp.MustCompile(`(?m)^adk2goose_goose_replies_in_flight (\d+)`)
)

// forwarded reads how many requests a pod's sidecar forwarded to a peer.
func (e *env) forwarded(t *testing.T, clientPod, podIP, tok string) int {
	t.Helper()
	return e.metric(t, clientPod, podIP, tok, forwardedRE)
}

// metric reads the value re captures from a pod's sidecar's metrics; 0
// when they do not have it.
func (e *env) metric(t *testing.T, clientPod, podIP, tok string, re *regexp.Regexp) int {
	t.Helper()
	out, err := e.kubectl(t, "", "-n", samplesNS, "exec", clientPod, "--", "client", "get", "-token", tok, "-url", "http://"+podIP+":8080/metrics")
	if err != nil {
		t.Fatalf("failed to read the sidecar's metrics: %v", err)
	}
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// twoReplicas is case 5: with replicas 2, the turns of one session reach
// both pods through the Service and land in one goose session.
func (e *env) twoReplicas(t *testing.T, pod string) {
	const name = "pair"
	e.mustKubectl(t, `apiVersion: agents.adk2goose.dev/v1alpha1
kind: GooseAgent
metadata: {name: pair, namespace: `+samplesNS+`}
spec:
  provider: {name: openai, model: gpt-4o, apiKeySecretRef: {name: openai, key: api-key}}
  replicas: 2
`, "apply", "--server-side", "-f", "-")
	pods := e.waitAgentReady(t, samplesNS, name, 2)
	url, tok := e.agent(t, samplesNS, name).Status.Endpoints.REST, e.token(t, samplesNS, name)
	if _, err := e.chat(t, samplesNS, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "case5", "-create", "-text", "turn 0"); err != nil {
		t.Fatal(err)
	}
	hosts, sessions := map[string]int{}, map[string]int{}
	turns := 0
	for i := 1; i <= 40; i++ {
		r, err := e.chat(t, samplesNS, pod, "rest", "-url", url, "-token", tok, "-app", name, "-session", "case5", "-text", fmt.Sprintf("turn %d", i))
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		turns++
		hosts[r.gooseHost()]++
		sessions[r.gooseSession()]++
		if i >= 4 && e.forwarded(t, pod, pods[0].Status.PodIP, tok)+e.forwarded(t, pod, pods[1].Status.PodIP, tok) > 0 {
			break
		}
	}
	fw := []int{e.forwarded(t, pod, pods[0].Status.PodIP, tok), e.forwarded(t, pod, pods[1].Status.PodIP, tok)}
	t.Logf("%d turns: answered by goose in %v, goose sessions %v; forwarded by %s %d, by %s %d",
		turns, hosts, sessions, pods[0].Name, fw[0], pods[1].Name, fw[1])
	if len(hosts) != 1 || len(sessions) != 1 {
		t.Errorf("the turns of one session reached goose in %v, sessions %v: want one pod, one goose session", hosts, sessions)
	}
	if fw[0]+fw[1] == 0 {
		t.Errorf("after %d turns no sidecar forwarded a turn: the Service never sent one to the non-owner", turns)
	}
	for owner := range hosts {
		for i, p := range pods {
			if p.Name == owner && fw[i] > 0 {
				t.Errorf("the owner %s forwarded %d turns of its own session", owner, fw[i])
			}
		}
	}

	// The same new session id sent to both pods at once is created on one:
	// each pod places it on the pod its id hashes to (its own URL from
	// POD_IP, its peers' from the headless Service), which answers the
	// second create 409.
	const ids = 30 // without placement, 10 of 30 ids were created on both pods
	out := e.mustKubectl(t, "", "-n", samplesNS, "exec", pod, "--", "client", "create-at-once", "-token", tok, "-app", name,
		"-urls", "http://"+pods[0].Status.PodIP+":8080,http://"+pods[1].Status.PodIP+":8080", "-session", "race", "-n", strconv.Itoa(ids))
	var codes map[string][]int
	if err := json.Unmarshal([]byte(out), &codes); err != nil || len(codes) != ids {
		t.Fatalf("create-at-once printed %q (%v): want the codes of %d ids", out, err, ids)
	}
	for id, c := range codes {
		if slices.Sort(c); !slices.Equal(c, []int{http.StatusOK, http.StatusConflict}) {
			t.Errorf("session %s sent to both pods at once: %v, want one 200 and one 409", id, c)
		}
	}
}

// restricted is case 6: in a namespace enforcing the restricted Pod Security
// Standard the agent's pods are admitted by the real admission plugin.
func (e *env) restricted(t *testing.T) {
	const ns, name = "e2e-restricted", "locked-down"
	e.namespace(t, ns, map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"})
	// The plugin really enforces here: a pod without a security context is refused.
	_, err := e.kubectl(t, `apiVersion: v1
kind: Pod
metadata: {name: unrestricted, namespace: `+ns+`}
spec:
  containers: [{name: c, image: `+clientImage+`, imagePullPolicy: Never}]
`, "apply", "--server-side", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), "violates PodSecurity \"restricted") {
		t.Fatalf("a pod without a security context in a restricted namespace: want a PodSecurity rejection, got %v", err)
	}
	e.mustKubectl(t, "", "-n", ns, "create", "secret", "generic", "openai", "--from-literal=api-key=sk-e2e")
	e.mustKubectl(t, `apiVersion: agents.adk2goose.dev/v1alpha1
kind: GooseAgent
metadata: {name: `+name+`, namespace: `+ns+`}
spec:
  provider: {name: openai, model: gpt-4o, apiKeySecretRef: {name: openai, key: api-key}}
`, "apply", "--server-side", "-f", "-")
	e.waitAgentReady(t, ns, name, 1)
	if out, _ := e.kubectl(t, "", "-n", ns, "get", "events", "--field-selector", "reason=FailedCreate", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("FailedCreate events in %s: %s", ns, out)
	}
}
