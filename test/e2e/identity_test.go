package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// identityNS holds case 10-identity's agent and clients.
const identityNS = "e2e-identity"

// identity is case 10-identity: an agent in mode kubernetes with
// workspace.scope user, used by client pods that hold only a projected
// ServiceAccount token for its audience. A RoleBinding decides who gets in;
// the verified caller is the ADK user, for REST, A2A and the workspace; a
// review path that fails gives 503, never access; no token is logged.
func (e *env) identity(t *testing.T) {
	const name = "helper"
	ns := identityNS
	audience := "agents.adk2goose.dev/" + ns + "/" + name
	e.namespace(t, ns, nil)
	e.mustKubectl(t, fmt.Sprintf(`apiVersion: agents.adk2goose.dev/v1alpha1
kind: GooseAgent
metadata: {name: %s, namespace: %s}
spec:
  provider: {name: ollama, model: qwen3:8b, baseURL: http://ollama.ollama.svc.cluster.local:11434}
  workspace: {scope: user}
  sidecar:
    auth: {mode: kubernetes}
`, name, ns), "apply", "--server-side", "-f", "-")
	pods := e.waitAgentReady(t, ns, name, 1)
	url := e.agent(t, ns, name).Status.Endpoints.REST

	// What docs/identity.md tells a team to create: a Role granting use of
	// this agent, bound to alice and bob; mallory has no binding.
	for _, sa := range []string{"alice", "bob", "mallory"} {
		e.mustKubectl(t, "", "-n", ns, "create", "serviceaccount", sa)
	}
	e.mustKubectl(t, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: use-%[1]s, namespace: %[2]s}
rules:
- apiGroups: [agents.adk2goose.dev]
  resources: [gooseagents/invoke]
  resourceNames: [%[1]s]
  verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: team-uses-%[1]s, namespace: %[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: use-%[1]s}
subjects:
- {kind: ServiceAccount, name: alice, namespace: %[2]s}
- {kind: ServiceAccount, name: bob, namespace: %[2]s}
`, name, ns), "apply", "--server-side", "-f", "-")
	user := func(sa string) string { return "system:serviceaccount:" + ns + ":" + sa }
	clients := map[string]string{}
	for _, sa := range []string{"alice", "bob", "mallory"} {
		clients[sa] = e.tokenClientPod(t, ns, sa, audience)
	}
	const tokenFile = "/var/run/agent/token"
	as := func(sa string, args ...string) (turn, error) {
		t.Helper()
		return e.chat(t, ns, clients[sa], append([]string{args[0], "-url", url, "-token-file", tokenFile}, args[1:]...)...)
	}

	// Access: alice and bob chat over ADK REST and A2A through the Service.
	r, err := as("alice", "rest", "-app", name, "-user", user("alice"), "-session", "a1", "-create", "-text", "write plan.txt alice's secret plan")
	if err != nil || !strings.Contains(r.Text, "wrote plan.txt") {
		t.Fatalf("alice over REST: %+v %v", r, err)
	}
	if r, err := as("alice", "a2a", "-text", "hello over A2A"); err != nil || !strings.Contains(r.Text, "echo: hello over A2A") {
		t.Fatalf("alice over A2A: %+v %v", r, err)
	}
	if r, err := as("bob", "a2a", "-text", "bob over A2A"); err != nil || !strings.Contains(r.Text, "echo: bob over A2A") {
		t.Fatalf("bob over A2A: %+v %v", r, err)
	}

	// Workspaces: alice's file is in her other sessions, not in bob's.
	if r, err := as("alice", "rest", "-app", name, "-user", user("alice"), "-session", "a2", "-create", "-text", "read plan.txt"); err != nil ||
		!strings.Contains(r.Text, "plan.txt: alice's secret plan") {
		t.Fatalf("alice reads her file in another session: %+v %v", r, err)
	}
	if r, err := as("bob", "rest", "-app", name, "-user", user("bob"), "-session", "b1", "-create", "-text", "read plan.txt"); err != nil ||
		!strings.Contains(r.Text, "plan.txt: no such file") {
		t.Fatalf("bob's workspace: want no plan.txt, got %+v %v", r, err)
	}

	// Refusals.
	if _, err := as("alice", "rest", "-app", name, "-user", user("bob"), "-session", "b1", "-text", "read plan.txt"); err == nil ||
		!strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "may not act for ADK user") {
		t.Errorf("alice naming bob: want 403, got %v", err)
	}
	if _, err := as("alice", "get", "-url", url+"/apps/"+name+"/users/"+user("bob")+"/sessions"); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Errorf("alice listing bob's sessions: want 403, got %v", err)
	}
	if _, err := as("mallory", "rest", "-app", name, "-user", user("mallory"), "-session", "m1", "-create", "-text", "hi"); err == nil ||
		!strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), user("mallory")+" may not use gooseagents/invoke") {
		t.Errorf("mallory without a RoleBinding: want 403 naming the missing grant, got %v", err)
	}
	apiToken := strings.TrimSpace(e.mustKubectl(t, "", "-n", ns, "create", "token", "alice"))
	if _, err := e.chat(t, ns, clients["alice"], "get", "-url", url+"/list-apps", "-token", apiToken); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("a token for the API server's audience: want 401, got %v", err)
	}

	// Status: the two callers, counted once each.
	poll.Within(t, 2*time.Minute, "status.sessions.users 2", func() error {
		a := e.agent(t, ns, name)
		st, why := conditionStatus(a, "StatsAvailable")
		return notYet(a.Status.Sessions.Users == 2, fmt.Sprintf("users %d; StatsAvailable=%s %s", a.Status.Sessions.Users, st, why))
	})

	// The review path fails: the agent's auth-delegator binding is gone (the
	// manager, scaled to 0, cannot put it back). A token the sidecar has not
	// cached must get 503, never 200.
	binding := "adk2goose:" + ns + ":" + name
	e.mustKubectl(t, "", "-n", operatorNS, "scale", "deployment", managerDeploy, "--replicas=0")
	t.Cleanup(func() {
		e.mustKubectl(t, "", "-n", operatorNS, "scale", "deployment", managerDeploy, "--replicas=1")
		e.waitManager(t)
		poll.Within(t, time.Minute, "the manager restores the review binding", func() error {
			return e.c.Get(context.Background(), client.ObjectKey{Name: binding}, &rbacv1.ClusterRoleBinding{})
		})
	})
	poll.Within(t, 2*time.Minute, "no manager pod", func() error {
		var pl corev1.PodList
		if err := e.c.List(t.Context(), &pl, client.InNamespace(operatorNS), client.MatchingLabels{"app.kubernetes.io/component": "manager"}); err != nil {
			return err
		}
		return notYet(len(pl.Items) == 0, podsState(pl.Items))
	})
	e.mustKubectl(t, "", "delete", "clusterrolebinding", binding)
	var tokens []string
	var last error
	poll.Within(t, 2*time.Minute, "503 for an uncached token once the review binding is gone", func() error {
		fresh := strings.TrimSpace(e.mustKubectl(t, "", "-n", ns, "create", "token", "bob", "--audience", audience))
		tokens = append(tokens, fresh)
		// A 200 (the app list, which chat cannot decode as a turn) is
		// possible for a moment: the API server's authorizer may still hold
		// the binding after the delete. The next fresh token will tell.
		_, last = e.chat(t, ns, clients["bob"], "get", "-url", url+"/list-apps", "-token", fresh)
		if last == nil || !strings.Contains(last.Error(), "HTTP 503") || !strings.Contains(last.Error(), "identity check unavailable") {
			return fmt.Errorf("want 503 identity check unavailable, got %v", last)
		}
		return nil
	})
	// From now on, never 200.
	fresh := strings.TrimSpace(e.mustKubectl(t, "", "-n", ns, "create", "token", "alice", "--audience", audience))
	tokens = append(tokens, fresh)
	if _, err := e.chat(t, ns, clients["alice"], "get", "-url", url+"/list-apps", "-token", fresh); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Errorf("another uncached token during the outage: want 503, got %v (a decode error means 200)", err)
	}
	answer := last.Error()
	if i := strings.Index(answer, "HTTP 503"); i >= 0 {
		answer = answer[i:] // the command before it holds the token
	}
	t.Logf("outage answer: %s", answer)

	// No token in the sidecar's log: the projected ones, the API server's
	// and the fresh ones.
	for _, sa := range []string{"alice", "bob", "mallory"} {
		tokens = append(tokens, strings.TrimSpace(e.mustKubectl(t, "", "-n", ns, "exec", clients[sa], "--", "cat", tokenFile)))
	}
	tokens = append(tokens, apiToken)
	logs := e.mustKubectl(t, "", "-n", ns, "logs", pods[0].Name, "-c", "adk2goose")
	if !strings.Contains(logs, "unauthorized request") {
		t.Errorf("the sidecar logged no refusal, so the token check below proves nothing:\n%.3000s", logs)
	}
	for i, tok := range tokens {
		if tok == "" || strings.Contains(logs, tok) {
			t.Errorf("token %d is empty or appears in the sidecar's log", i)
		}
		// A JWT's signature alone would identify it too.
		if parts := strings.Split(tok, "."); len(parts) == 3 && strings.Contains(logs, parts[2]) {
			t.Errorf("the signature of token %d appears in the sidecar's log", i)
		}
	}
}

// tokenClientPod starts a client pod (the client image, restricted pod
// security) as ServiceAccount sa holding no API token, only a projected
// token for audience at /var/run/agent/token.
func (e *env) tokenClientPod(t *testing.T, ns, sa, audience string) string {
	t.Helper()
	name := "client-" + sa
	e.mustKubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  serviceAccountName: %s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: client
    image: %s
    imagePullPolicy: Never
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, readOnlyRootFilesystem: true}
    volumeMounts: [{name: agent-token, mountPath: /var/run/agent, readOnly: true}]
  volumes:
  - name: agent-token
    projected:
      sources:
      - serviceAccountToken: {audience: %s, expirationSeconds: 3600, path: token}
`, name, ns, sa, clientImage, audience), "apply", "--server-side", "-f", "-")
	poll.Within(t, 2*time.Minute, "client pod "+name+" ready", func() error {
		var p corev1.Pod
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		return notYet(podReady(&p), string(p.Status.Phase))
	})
	var p corev1.Pod
	if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.MountPath, "/var/run/secrets/kubernetes.io") {
				t.Fatalf("client pod %s mounts an API token at %s", name, m.MountPath)
			}
		}
	}
	return name
}
