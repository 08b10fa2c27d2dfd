package server_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/adk2goose/goose-operator/internal/bearer"
	"github.com/adk2goose/goose-operator/internal/testing/syncbuf"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/peering"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/workspace"
)

// tokenVerifier stands in for the Kubernetes and OIDC verifiers (tested
// against a real API server and issuer in package identity): each token is
// one caller.
type tokenVerifier map[string]identity.Caller

func (v tokenVerifier) Verify(r *http.Request) (identity.Caller, error) {
	if c, ok := v[identity.BearerToken(r)]; ok {
		return c, nil
	}
	return identity.Caller{}, fmt.Errorf("%w: unknown token", identity.ErrUnauthenticated)
}

func (tokenVerifier) Challenge() string { return `Bearer realm="test"` }

func (tokenVerifier) Scheme() identity.Scheme { return identity.Scheme{Description: "test tokens"} }

// Callers of the identity tests; user ids as Kubernetes names them.
const (
	aliceToken = "alice-token"
	bobToken   = "bob-token"
	rootToken  = "root-token"
	alice      = "system:serviceaccount:team:alice"
	bob        = "system:serviceaccount:team:bob"
)

var testCallers = tokenVerifier{
	aliceToken: {User: alice, Groups: []string{"system:serviceaccounts"}},
	bobToken:   {User: bob, Groups: []string{"system:serviceaccounts"}},
	rootToken:  {User: "root", Groups: []string{"admins"}},
}

func withIdentity(c *server.Config) {
	c.Identity = testCallers
	c.AdminGroups = []string{"admins"}
}

func bearerOf(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// sessionOf is a session as its owner (or an admin) reads it.
func (s *sidecar) sessionOf(token, user, id string) map[string]any {
	s.t.Helper()
	code, body := s.doWith(http.MethodGet, "/apps/"+appName+"/users/"+url.PathEscape(user)+"/sessions/"+id, nil, bearerOf(token))
	if code != http.StatusOK {
		s.t.Fatalf("get %s/%s: %d %s", user, id, code, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		s.t.Fatal(err)
	}
	return m
}

func a2aAs(t *testing.T, base, token string) *a2aclient.Client {
	t.Helper()
	hc := &http.Client{Transport: bearer.Transport{Token: token}}
	t.Cleanup(hc.CloseIdleConnections)
	card, err := agentcard.NewResolver(hc).Resolve(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(t.Context(), card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// TestCrossUserMatrix: with verified identities, alice reaches none of
// bob's sessions, events, state, artifacts, traces, workspace files or A2A
// tasks, on any route, while bob and an admin still do.
func TestCrossUserMatrix(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspace")
	f := shellGoose(t)
	ws := newWorkspaces(t, root, workspace.ScopeUser)
	sc := startSidecar(t, acpClient(t, f), t.TempDir(), withIdentity, func(c *server.Config) { c.Workspaces = ws })

	bobPath := "/apps/" + appName + "/users/" + url.PathEscape(bob) + "/sessions"
	code, body := sc.doWith(http.MethodPost, bobPath+"/s1", map[string]any{"state": map[string]any{"secret": "bob's"}}, bearerOf(bobToken))
	if code != http.StatusOK {
		t.Fatalf("bob creates his session: %d %s", code, body)
	}
	code, body = sc.doWith(http.MethodPost, "/run", runBody(bob, "s1", "write secret.txt=bob's", false), bearerOf(bobToken))
	if code != http.StatusOK {
		t.Fatalf("bob runs: %d %s", code, body)
	}
	bobEvents := len(sc.sessionOf(bobToken, bob, "s1")["events"].([]any))
	bobA2A := a2aAs(t, sc.URL, bobToken)
	res, err := bobA2A.SendMessage(t.Context(), &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("pwd"))})
	if err != nil {
		t.Fatal(err)
	}
	bobTask, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("bob's A2A message gave %T", res)
	}

	// Every route, as alice, about bob's things.
	run := runBody(bob, "s1", "cat secret.txt", false)
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, bobPath, nil},
		{http.MethodGet, bobPath + "/s1", nil},
		{http.MethodPost, bobPath + "/s2", nil},
		{http.MethodPost, bobPath, map[string]any{}},
		{http.MethodPatch, bobPath + "/s1", map[string]any{"stateDelta": map[string]any{"secret": "alice's"}}},
		{http.MethodDelete, bobPath + "/s1", nil},
		{http.MethodGet, bobPath + "/s1/artifacts", nil},
		{http.MethodGet, bobPath + "/s1/artifacts/secret.txt", nil},
		{http.MethodGet, bobPath + "/s1/artifacts/secret.txt/versions/0", nil},
		{http.MethodGet, bobPath + "/s1/events/e1/graph", nil},
		{http.MethodGet, "/users/" + url.PathEscape(bob) + "/sessions/s1/events/e1/graph", nil},
		{http.MethodGet, "/dev/apps/" + appName + "/users/" + url.PathEscape(bob) + "/sessions/s1", nil},
		{http.MethodPost, "/run", run},
		{http.MethodPost, "/run_sse", run},
		{http.MethodGet, "/debug/trace/session/s1", nil},
		{http.MethodGet, "/debug/trace/e1", nil},
		{http.MethodGet, "/apps/" + appName + "/eval_sets", nil},
		{http.MethodGet, "/peer/v1/owner?user=" + url.QueryEscape(bob) + "&session=s1", nil},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			for _, hdr := range []map[string]string{
				bearerOf(aliceToken),
				// A client cannot name the caller the way peer pods do.
				{"Authorization": "Bearer " + aliceToken, identity.HeaderUser: bob, identity.HeaderGroup: "admins"},
			} {
				resp, out := sc.exchange(tc.method, tc.path, tc.body, hdr)
				var e map[string]string
				if resp.StatusCode != http.StatusForbidden || json.Unmarshal(out, &e) != nil || e["error"] == "" {
					t.Fatalf("alice got %d %s, want 403 with a JSON reason", resp.StatusCode, out)
				}
			}
		})
	}

	// alice's own session of the same id is hers alone: no history, no
	// state, and a workspace without bob's file.
	alicePath := "/apps/" + appName + "/users/" + url.PathEscape(alice) + "/sessions"
	if code, body := sc.doWith(http.MethodPost, alicePath+"/s1", nil, bearerOf(aliceToken)); code != http.StatusOK {
		t.Fatalf("alice creates her session: %d %s", code, body)
	}
	mine := sc.sessionOf(aliceToken, alice, "s1")
	if n := len(mine["events"].([]any)); n != 0 {
		t.Fatalf("alice's new session has %d events", n)
	}
	if st, _ := mine["state"].(map[string]any); st["secret"] != nil {
		t.Fatalf("alice's session has bob's state: %v", st)
	}
	code, body = sc.doWith(http.MethodPost, "/run", runBody(alice, "s1", "ls", false), bearerOf(aliceToken))
	if code != http.StatusOK || strings.Contains(string(body), "secret.txt") {
		t.Fatalf("alice's ls: %d %s", code, body)
	}
	if ws.Path(alice, "s1") == ws.Path(bob, "s1") {
		t.Fatal("alice and bob share a workspace directory")
	}
	code, body = sc.doWith(http.MethodGet, alicePath, nil, bearerOf(aliceToken))
	if code != http.StatusOK || strings.Contains(string(body), bob) {
		t.Fatalf("alice's session list: %d %s", code, body)
	}

	// A2A: bob's task is not found for alice, her list holds none of his,
	// and his context id gives her a conversation of her own.
	aliceA2A := a2aAs(t, sc.URL, aliceToken)
	if _, err := aliceA2A.GetTask(t.Context(), &a2a.GetTaskRequest{ID: bobTask.ID}); err == nil {
		t.Fatal("alice got bob's task")
	}
	if _, err := aliceA2A.CancelTask(t.Context(), &a2a.CancelTaskRequest{ID: bobTask.ID}); err == nil {
		t.Fatal("alice cancelled bob's task")
	}
	if _, err := aliceA2A.SendMessage(t.Context(), &a2a.SendMessageRequest{Message: &a2a.Message{
		ID: a2a.NewMessageID(), Role: a2a.MessageRoleUser, TaskID: bobTask.ID, Parts: []*a2a.Part{a2a.NewTextPart("ls")},
	}}); err == nil {
		t.Fatal("alice continued bob's task")
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("ls"))
	msg.ContextID = bobTask.ContextID
	res, err = aliceA2A.SendMessage(t.Context(), &a2a.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(res); strings.Contains(string(got), "secret.txt") {
		t.Fatalf("alice's A2A turn in bob's context saw his files: %s", got)
	}
	list, err := aliceA2A.ListTasks(t.Context(), &a2a.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range list.Tasks {
		if task.ID == bobTask.ID {
			t.Fatal("alice's task list holds bob's task")
		}
	}
	if _, err := bobA2A.GetTask(t.Context(), &a2a.GetTaskRequest{ID: bobTask.ID}); err != nil {
		t.Fatalf("bob cannot get his own task: %v", err)
	}

	// Nothing alice did reached bob's session; an admin may read it.
	after := sc.sessionOf(rootToken, bob, "s1")
	if n := len(after["events"].([]any)); n != bobEvents {
		t.Fatalf("bob's session has %d events, had %d", n, bobEvents)
	}
	if st, _ := after["state"].(map[string]any); st["secret"] != "bob's" {
		t.Fatalf("bob's state changed: %v", st)
	}
	if _, err := a2aAs(t, sc.URL, rootToken).GetTask(t.Context(), &a2a.GetTaskRequest{ID: bobTask.ID}); err != nil {
		t.Fatalf("an admin cannot get bob's task: %v", err)
	}

	// Two users used the agent; the metric counts them without naming them.
	if n := sc.stats().Users; n != 2 {
		t.Fatalf("stats count %d users, want 2", n)
	}
	code, body = sc.doWith(http.MethodGet, "/metrics", nil, bearerOf(aliceToken))
	if code != http.StatusOK || !strings.Contains(string(body), "\nadk2goose_users 2\n") || strings.Contains(string(body), alice) {
		t.Fatalf("metrics: %d, adk2goose_users missing or a user named:\n%s", code, body)
	}
}

// downVerifier is a verifier whose authority cannot be reached.
type downVerifier struct{ tokenVerifier }

func (downVerifier) Verify(*http.Request) (identity.Caller, error) {
	return identity.Caller{}, fmt.Errorf("%w: TokenReview failed", identity.ErrUnavailable)
}

// TestIdentityRefusals: no token or an unknown one gets 401 with a
// challenge, an unreachable authority 503 with Retry-After; each with a
// JSON reason, and the token in neither the answer nor the log.
func TestIdentityRefusals(t *testing.T) {
	const secret = "a-token-that-must-not-leak"
	for _, tc := range []struct {
		name     string
		verifier identity.Verifier
		hdr      map[string]string
		status   int
		header   string
	}{
		{"no token", testCallers, nil, http.StatusUnauthorized, "WWW-Authenticate"},
		{"unknown token", testCallers, bearerOf(secret), http.StatusUnauthorized, "WWW-Authenticate"},
		{"authority down", downVerifier{testCallers}, bearerOf(secret), http.StatusServiceUnavailable, "Retry-After"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			sc := startSidecar(t, flavours[0].start(t, nil), t.TempDir(), func(c *server.Config) {
				c.Identity = tc.verifier
				c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			})
			resp, out := sc.exchange(http.MethodGet, "/list-apps", nil, tc.hdr)
			var e map[string]string
			if resp.StatusCode != tc.status || resp.Header.Get(tc.header) == "" || json.Unmarshal(out, &e) != nil || e["error"] == "" {
				t.Fatalf("%d %s=%q %s", resp.StatusCode, tc.header, resp.Header.Get(tc.header), out)
			}
			if !strings.Contains(logs.String(), "unauthorized request") {
				t.Fatalf("the refusal was not logged, so the check below would be vacuous:\n%s", logs.String())
			}
			if strings.Contains(string(out), secret) || strings.Contains(logs.String(), secret) {
				t.Fatalf("the token leaked:\n%s\n%s", out, logs.String())
			}
		})
	}
}

// TestIdentityAcrossReplicas: a request another pod serves runs there as
// the caller this pod verified, carried in a form only peers can send.
func TestIdentityAcrossReplicas(t *testing.T) {
	rs := startReplicaSet(t, func(_ int, c *server.Config) { withIdentity(c) })
	owner, other := rs.pods[0], rs.pods[1]
	alicePath := "/apps/" + appName + "/users/" + url.PathEscape(alice) + "/sessions"

	// An A2A context that pod 0 has, continued through pod 1: it must run
	// as alice in her session there, not as a user made from the context.
	a0 := a2aAs(t, owner.URL, aliceToken)
	res, err := a0.SendMessage(t.Context(), &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("one"))})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	before := len(owner.sessionOf(aliceToken, alice, task.ContextID)["events"].([]any))
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("two"))
	msg.ContextID = task.ContextID
	// Straight to pod 1: a client of the card would go through the balancer.
	if out := other.rpc(aliceToken, "SendMessage", &a2a.SendMessageRequest{Message: msg}); out["error"] != nil {
		t.Fatalf("alice's message through the other pod: %v", out["error"])
	}
	if after := len(owner.sessionOf(aliceToken, alice, task.ContextID)["events"].([]any)); after <= before {
		t.Fatalf("the forwarded message did not reach alice's session on its pod: %d events, had %d", after, before)
	}
	if out := other.rpc(aliceToken, "GetTask", &a2a.GetTaskRequest{ID: task.ID}); out["error"] != nil {
		t.Fatalf("alice cannot get her task through the other pod: %v", out["error"])
	}
	if out := other.rpc(bobToken, "GetTask", &a2a.GetTaskRequest{ID: task.ID}); out["error"] == nil {
		t.Fatalf("bob got alice's task through the other pod: %v", out["result"])
	}

	// A REST session on pod 0, read through pod 1.
	if code, body := owner.doWith(http.MethodPost, alicePath+"/r1", nil, bearerOf(aliceToken)); code != http.StatusOK {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := other.doWith(http.MethodGet, alicePath+"/r1", nil, bearerOf(aliceToken)); code != http.StatusOK {
		t.Fatalf("alice through the other pod: %d %s", code, body)
	}
	// bob cannot pose as alice with the headers peers use, even marked as
	// a hop, on either pod.
	for _, p := range rs.pods {
		code, body := p.doWith(http.MethodGet, alicePath+"/r1", nil, map[string]string{
			"Authorization": "Bearer " + bobToken, peering.HopHeader: "1", identity.HeaderUser: alice,
		})
		if code != http.StatusForbidden {
			t.Fatalf("bob with a forged hop: %d %s", code, body)
		}
	}
}

// rpc sends one A2A 1.0 JSON-RPC call to this pod and returns the answer.
func (s *sidecar) rpc(token, method string, params any) map[string]any {
	s.t.Helper()
	code, body := s.doWith(http.MethodPost, server.A2APathV1, map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, bearerOf(token))
	var out map[string]any
	if code != http.StatusOK || json.Unmarshal(body, &out) != nil {
		s.t.Fatalf("%s: %d %s", method, code, body)
	}
	return out
}

// oidcVerifier is tokenVerifier declaring an OIDC issuer.
type oidcVerifier struct{ tokenVerifier }

func (oidcVerifier) Scheme() identity.Scheme {
	return identity.Scheme{OpenIDConnectURL: "https://issuer.example/.well-known/openid-configuration"}
}

// TestAgentCardDeclaresScheme: in an identity mode the card names its
// scheme, readable by A2A 1.0 clients (a2a-go v2, adk-go) and 0.3 ones.
func TestAgentCardDeclaresScheme(t *testing.T) {
	for _, tc := range []struct {
		name     string
		verifier identity.Verifier
		check    func(a2a.SecurityScheme) bool
	}{
		{"bearer", testCallers, func(s a2a.SecurityScheme) bool {
			h, ok := s.(a2a.HTTPAuthSecurityScheme)
			return ok && strings.EqualFold(h.Scheme, "bearer")
		}},
		{"oidc", oidcVerifier{testCallers}, func(s a2a.SecurityScheme) bool {
			o, ok := s.(a2a.OpenIDConnectSecurityScheme)
			return ok && strings.HasPrefix(o.OpenIDConnectURL, "https://issuer.example/")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := startSidecar(t, flavours[0].start(t, nil), t.TempDir(), func(c *server.Config) { c.Identity = tc.verifier })
			card, err := agentcard.NewResolver(http.DefaultClient).Resolve(t.Context(), sc.URL)
			if err != nil {
				t.Fatalf("an A2A 1.0 client cannot read the card: %v", err)
			}
			if len(card.SecuritySchemes) != 1 || len(card.SecurityRequirements) != 1 {
				t.Fatalf("card schemes %v, requirements %v", card.SecuritySchemes, card.SecurityRequirements)
			}
			for name, s := range card.SecuritySchemes {
				if !tc.check(s) {
					t.Fatalf("scheme %s = %#v", name, s)
				}
				if _, ok := card.SecurityRequirements[0][name]; !ok {
					t.Fatalf("requirements %v do not name scheme %s", card.SecurityRequirements, name)
				}
			}
			code, raw := sc.doWith(http.MethodGet, "/.well-known/agent-card.json", nil, nil)
			if code != http.StatusOK {
				t.Fatalf("card: %d", code)
			}
			v03, err := a2av0.NewAgentCardParser()(raw)
			if err != nil {
				t.Fatalf("an A2A 0.3 client cannot read the card: %v", err)
			}
			if len(v03.SecuritySchemes) != 1 {
				t.Fatalf("0.3 schemes %v", v03.SecuritySchemes)
			}
			var fields map[string]any
			if err := json.Unmarshal(raw, &fields); err != nil || fields["security"] == nil {
				t.Fatalf("the card lacks A2A 0.3's security: %s", raw)
			}
		})
	}
}

// TestWhoAmI: GET /whoami names the verified caller as its ADK user, behind
// the same authentication as every route; in mode token nobody is verified,
// and a peer's hop answers as the caller it carries.
func TestWhoAmI(t *testing.T) {
	whoami := func(t *testing.T, sc *sidecar, hdr map[string]string) (int, identity.WhoAmI, []byte) {
		t.Helper()
		code, body := sc.doWith(http.MethodGet, identity.WhoAmIPath, nil, hdr)
		var w identity.WhoAmI
		if code == http.StatusOK {
			if err := json.Unmarshal(body, &w); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
		}
		return code, w, body
	}
	sc := startSidecar(t, flavours[0].start(t, nil), t.TempDir(), withIdentity)
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want identity.WhoAmI
	}{
		{"alice", bearerOf(aliceToken), identity.WhoAmI{Verified: true, User: alice, Groups: []string{"system:serviceaccounts"}}},
		{"admin", bearerOf(rootToken), identity.WhoAmI{Verified: true, User: "root", Groups: []string{"admins"}, Admin: true}},
		{"peer hop", map[string]string{"Authorization": "Bearer " + testToken, identity.HeaderUser: bob}, identity.WhoAmI{Verified: true, User: bob}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got, body := whoami(t, sc, tc.hdr)
			if code != http.StatusOK || got.User != tc.want.User || got.Verified != tc.want.Verified || got.Admin != tc.want.Admin ||
				strings.Join(got.Groups, ",") != strings.Join(tc.want.Groups, ",") {
				t.Fatalf("%d %s, want %+v", code, body, tc.want)
			}
		})
	}
	for _, hdr := range []map[string]string{nil, bearerOf("nobody's-token")} {
		if code, _, body := whoami(t, sc, hdr); code != http.StatusUnauthorized {
			t.Fatalf("an unknown caller: %d %s, want 401", code, body)
		}
	}

	tokenMode := startSidecar(t, flavours[0].start(t, nil), t.TempDir())
	if code, got, body := whoami(t, tokenMode, bearerOf(testToken)); code != http.StatusOK || got.Verified || got.User != "" {
		t.Fatalf("mode token: %d %s, want an unverified answer naming no user", code, body)
	}
	if code, _, body := whoami(t, tokenMode, bearerOf("wrong")); code != http.StatusUnauthorized {
		t.Fatalf("mode token, wrong token: %d %s, want 401", code, body)
	}
}
