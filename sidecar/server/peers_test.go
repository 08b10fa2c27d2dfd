package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/adk/agent"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/peering"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// replicaSet is two sidecars of one agent, each over its own fake goose
// serve (a pod's goose), behind a round-robin TCP balancer as kube-proxy
// spreads a Service's connections. Clients through it open a connection per
// request, so consecutive requests reach alternate pods.
type replicaSet struct {
	pods   [2]*sidecar
	gooses [2]*goosetest.Serve
	lbURL  string
	lbSc   *sidecar // requests through the balancer
}

// startReplicaSet starts the pods; each of configure, if any, adjusts pod
// i's server config.
func startReplicaSet(t *testing.T, configure ...func(i int, cfg *server.Config)) *replicaSet {
	t.Helper()
	rs := &replicaSet{}
	var mu sync.Mutex
	urls := map[int]string{}
	peersOf := func(self int) peering.Peers {
		return func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return []string{urls[1-self]}, nil
		}
	}
	rs.lbURL = startTCPBalancer(t, func(n int) string {
		mu.Lock()
		defer mu.Unlock()
		return strings.TrimPrefix(urls[n%2], "http://")
	})
	for i := range rs.pods {
		rs.gooses[i] = goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
		c, err := acp.New(acp.Config{URL: rs.gooses[i].URL, SecretKey: rs.gooses[i].Secret, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		rs.pods[i] = startSidecar(t, c, t.TempDir(), func(cfg *server.Config) {
			cfg.Peers = peersOf(i)
			cfg.PublicBaseURL = rs.lbURL
			for _, f := range configure {
				f(i, cfg)
			}
		})
		mu.Lock()
		urls[i] = rs.pods[i].URL
		mu.Unlock()
	}
	noReuse := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	rs.lbSc = &sidecar{t: t, URL: rs.lbURL, client: noReuse}
	return rs
}

// startTCPBalancer relays the n-th accepted connection to target(n).
func startTCPBalancer(t *testing.T, target func(n int) string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	wg.Go(func() {
		for n := 0; ; n++ {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target(n))
			if err != nil {
				_ = in.Close()
				continue
			}
			track(in, true)
			track(out, true)
			relay := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			var pair sync.WaitGroup
			pair.Go(func() { relay(out, in) })
			pair.Go(func() { relay(in, out) })
			wg.Go(func() {
				pair.Wait()
				_ = in.Close()
				_ = out.Close()
				track(in, false)
				track(out, false)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// owner returns the index of the only fake goose that got prompts, and the
// goose session ids they went to.
func (rs *replicaSet) owner(t *testing.T, wantPrompts int) (int, map[string]bool) {
	t.Helper()
	got := [2][]goosetest.ServePrompt{rs.gooses[0].Prompts(), rs.gooses[1].Prompts()}
	for i := range got {
		if len(got[i]) == wantPrompts && len(got[1-i]) == 0 {
			ids := map[string]bool{}
			for _, p := range got[i] {
				ids[p.SessionID] = true
			}
			return i, ids
		}
	}
	t.Fatalf("prompts per pod %d and %d, want all %d on one pod", len(got[0]), len(got[1]), wantPrompts)
	return 0, nil
}

func (rs *replicaSet) metric(t *testing.T, pod int, series string) string {
	t.Helper()
	_, body := rs.pods[pod].do(http.MethodGet, "/metrics", nil)
	for line := range strings.SplitSeq(string(body), "\n") {
		if after, ok := strings.CutPrefix(line, series+" "); ok {
			return after
		}
	}
	return ""
}

// TestReplicasRESTConversation: a conversation whose requests the Service
// spreads over two pods stays on the pod that created its session, and
// every pod lists every pod's sessions.
func TestReplicasRESTConversation(t *testing.T) {
	rs := startReplicaSet(t)
	lb := rs.lbSc
	lb.createSession("u", "conv")
	for i := range 3 {
		code, frames := lb.runSSE(runBody("u", "conv", fmt.Sprintf("turn %d", i), true))
		if code != http.StatusOK {
			t.Fatalf("turn %d: %d", i, code)
		}
		var text string
		for _, f := range frames {
			if jpath(f.Data, "partial") != true {
				if s, ok := jpath(f.Data, "content", "parts", 0, "text").(string); ok {
					text = s
				}
			}
		}
		if want := fmt.Sprintf("echo: turn %d", i); text != want {
			t.Fatalf("turn %d: reply %q, want %q", i, text, want)
		}
	}
	own, gooseSessions := rs.owner(t, 3)
	if len(gooseSessions) != 1 {
		t.Fatalf("the conversation used goose sessions %v, want one", gooseSessions)
	}
	other := 1 - own
	// The balancer sent the create to pod 0 and turn i to pod (i+1)%2. A
	// create on pod 0 that its id places on pod 1 was sent there; the turns
	// that reached the pod without the session were forwarded.
	lookups := func(pod int, outcome string) string {
		return rs.metric(t, pod, `adk2goose_peer_lookups_total{outcome="`+outcome+`"}`)
	}
	wantCreate, wantForwarded := "local", "2" // turns 0 and 2 on pod 1
	if own == 1 {
		wantCreate, wantForwarded = "placed", "1" // turn 1 on pod 0
	}
	if got := lookups(0, wantCreate); got != "1" {
		t.Fatalf("create on pod 0 with the session placed on pod %d: %s lookups %q, want 1", own, wantCreate, got)
	}
	if got := lookups(other, "forwarded"); got != wantForwarded {
		t.Fatalf("forwarded lookups on the other pod: %q, want %s", got, wantForwarded)
	}

	// Reads through the pod without the session are forwarded too.
	code, body := rs.pods[other].do(http.MethodGet, "/apps/goose/users/u/sessions/conv", nil)
	var sess struct {
		Events []any `json:"events"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &sess) != nil || len(sess.Events) != 6 {
		t.Fatalf("GET the session through the other pod: %d, %d events: %s", code, len(sess.Events), body)
	}

	// A session created on the other pod; both pods list both.
	rs.pods[other].createSessionHere("u", "second")
	for i, p := range rs.pods {
		code, body := p.do(http.MethodGet, "/apps/goose/users/u/sessions", nil)
		var list []struct {
			ID string `json:"id"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list) != 2 {
			t.Fatalf("pod %d lists %d: %s", i, code, body)
		}
		if ids := list[0].ID + "," + list[1].ID; ids != "conv,second" && ids != "second,conv" {
			t.Fatalf("pod %d lists %s", i, ids)
		}
	}

	// Each pod counts only its own sessions, so the operator's sum is right.
	if a, b := rs.pods[own].stats().Sessions.Total, rs.pods[other].stats().Sessions.Total; a != 1 || b != 1 {
		t.Fatalf("sessions per pod %d and %d, want 1 and 1", a, b)
	}

	// A run on a session no pod has: adkrest's 404, from the pod its id
	// places it on.
	if code, _ := rs.pods[other].runSSE(runBody("u", "nowhere", "hi", true)); code != http.StatusNotFound {
		t.Fatalf("run on an unknown session: %d, want 404", code)
	}

	// The owner gone: the other pod must not start a second copy of the
	// conversation; it says to retry. Its list is partial, and says so.
	rs.pods[own].stop()
	if code, _ := rs.pods[other].runSSE(runBody("u", "conv", "again", true)); code != http.StatusServiceUnavailable {
		t.Fatalf("run with the owner down: %d, want 503", code)
	}
	resp := rs.pods[other].get(t, "/apps/goose/users/u/sessions")
	if resp.StatusCode != http.StatusOK || resp.Header.Get(peering.PartialHeader) != "1" {
		t.Fatalf("list with a peer down: %d, %s=%q", resp.StatusCode, peering.PartialHeader, resp.Header.Get(peering.PartialHeader))
	}
}

// TestReplicasCreateANewIDOnce: the same new session id sent to both pods
// at once (a client retrying through the Service, two tabs of the web UI)
// is created once. Both pods place it on the pod its id hashes to, which
// takes the creates one at a time and answers the second 409; before, each
// pod found no pod with the id and created its own copy.
func TestReplicasCreateANewIDOnce(t *testing.T) {
	rs := startReplicaSet(t)
	const ids = 20
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range ids {
		for _, p := range rs.pods {
			wg.Go(func() {
				code, body := p.do(http.MethodPost, fmt.Sprintf("/apps/goose/users/u/sessions/new-%d", i), nil)
				if code != http.StatusOK && !strings.Contains(string(body), "Session already exists") {
					t.Errorf("create new-%d: %d %s", i, code, body)
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if codes[http.StatusOK] != ids || codes[http.StatusConflict] != ids {
		t.Fatalf("creates answered %v, want %d of 200 and %d of 409", codes, ids, ids)
	}
	for i := range ids {
		var on []int
		for j, p := range rs.pods {
			if code, _ := p.do(http.MethodGet, peering.OwnerPath+fmt.Sprintf("?user=u&session=new-%d", i), nil); code == http.StatusOK {
				on = append(on, j)
			}
		}
		if len(on) != 1 {
			t.Fatalf("new-%d is on pods %v, want one", i, on)
		}
	}
}

// TestReplicasA2AConversation: adk-go's A2A client keeps one contextId for a
// conversation; its turns reach the pod that has the context, whichever pod
// the Service picks, and tasks are found through any pod.
func TestReplicasA2AConversation(t *testing.T) {
	rs := startReplicaSet(t)
	// A connection per request, so the balancer alternates pods.
	r := remoteRunner(t, rs.lbURL, &http.Transport{DisableKeepAlives: true})
	contexts := map[string]bool{}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		var text string
		for ev, err := range r.Run(ctx, "u", "s", genai.NewContentFromText(fmt.Sprintf("a2a turn %d", i), genai.RoleUser), agent.RunConfig{}) {
			if err != nil {
				cancel()
				t.Fatalf("turn %d: %v", i, err)
			}
			if ev.ErrorMessage != "" {
				cancel()
				t.Fatalf("turn %d: error event %s", i, ev.ErrorMessage)
			}
			for k, v := range ev.CustomMetadata {
				if c, ok := v.(string); ok && strings.HasSuffix(k, "context_id") {
					contexts[c] = true
				}
			}
			if ev.Content != nil && !ev.Partial {
				for _, p := range ev.Content.Parts {
					if p.Text != "" {
						text = p.Text
					}
				}
			}
		}
		cancel()
		if want := fmt.Sprintf("echo: a2a turn %d", i); text != want {
			t.Fatalf("turn %d: reply %q, want %q", i, text, want)
		}
	}
	own, gooseSessions := rs.owner(t, 3)
	if len(gooseSessions) != 1 {
		t.Fatalf("the conversation used goose sessions %v, want one", gooseSessions)
	}

	// The balancer spread the turns: the pod without the context forwarded.
	other := 1 - own
	if got := rs.metric(t, other, `adk2goose_peer_lookups_total{outcome="forwarded"}`); got == "" || got == "0" {
		t.Fatalf("forwarded lookups on the other pod: %q", got)
	}

	// Its tasks, asked for through the pod without them (A2A 0.3 wire).
	if len(contexts) != 1 {
		t.Fatalf("the client saw A2A contexts %v, want one", contexts)
	}
	var contextID string
	for c := range contexts {
		contextID = c
	}
	task := rs.pods[other].a2aSend(t, contextID)
	code, body := rs.pods[other].do(http.MethodPost, server.A2APathV03, map[string]any{
		"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": map[string]any{"id": task},
	})
	if code != http.StatusOK || !strings.Contains(string(body), `"id":"`+task+`"`) || strings.Contains(string(body), `"error"`) {
		t.Fatalf("tasks/get through the other pod: %d %s", code, body)
	}
	if n := len(rs.gooses[own].Prompts()); n != 4 || len(rs.gooses[other].Prompts()) != 0 {
		t.Fatalf("after a 0.3 message to the other pod: prompts %d on the owner, %d elsewhere", n, len(rs.gooses[other].Prompts()))
	}
}

// a2aSend sends one A2A 0.3 message in contextID and returns its task id.
func (s *sidecar) a2aSend(t *testing.T, contextID string) string {
	t.Helper()
	code, body := s.do(http.MethodPost, server.A2APathV03, map[string]any{
		"jsonrpc": "2.0", "id": 1, "method": "message/send",
		"params": map[string]any{"message": map[string]any{
			"kind": "message", "messageId": "m-0.3", "role": "user", "contextId": contextID,
			"parts": []any{map[string]any{"kind": "text", "text": "over 0.3"}},
		}},
	})
	var rpc struct {
		Result struct {
			ID        string `json:"id"`
			ContextID string `json:"contextId"`
		} `json:"result"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &rpc) != nil || rpc.Result.ID == "" || rpc.Result.ContextID != contextID {
		t.Fatalf("message/send in context %s: %d %s", contextID, code, body)
	}
	return rpc.Result.ID
}

// get sends an authenticated GET and returns the response, body closed.
func (s *sidecar) get(t *testing.T, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}

// TestReplicasEveryTokenForm: a request authenticated by any accepted token
// form reaches the pod that owns its session, whose own auth check then
// passes (the api_key query parameter is stripped before forwarding, so the
// hop must authenticate itself).
func TestReplicasEveryTokenForm(t *testing.T) {
	rs := startReplicaSet(t)
	rs.pods[0].createSessionHere("u", "owned-by-0")
	via := rs.pods[1]
	forms := []struct {
		name  string
		hdr   map[string]string
		query string
	}{
		{"bearer", map[string]string{"Authorization": "Bearer " + testToken}, ""},
		{"x-api-key", map[string]string{"X-API-Key": testToken}, ""},
		{"api_key query", nil, "?api_key=" + testToken},
	}
	for i, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			code, body := via.doWith(http.MethodGet, "/apps/goose/users/u/sessions/owned-by-0"+f.query, nil, f.hdr)
			if code != http.StatusOK || !strings.Contains(string(body), `"id":"owned-by-0"`) {
				t.Fatalf("GET session through the other pod: %d %s", code, body)
			}
			code, body = via.doWith(http.MethodPost, "/run_sse"+f.query, runBody("u", "owned-by-0", fmt.Sprint("form ", i), true), f.hdr)
			if code != http.StatusOK || !strings.Contains(string(body), fmt.Sprintf(`"text":"echo: form %d"`, i)) {
				t.Fatalf("/run_sse through the other pod: %d %s", code, body)
			}
			code, body = via.doWith(http.MethodPost, server.A2APathV03+f.query, map[string]any{
				"jsonrpc": "2.0", "id": 1, "method": "message/send",
				"params": map[string]any{"message": map[string]any{
					"kind": "message", "messageId": fmt.Sprint("m", i), "role": "user", "contextId": "ctx-on-0",
					"parts": []any{map[string]any{"kind": "text", "text": "a2a"}},
				}},
			}, f.hdr)
			if code != http.StatusOK || strings.Contains(string(body), `"error"`) {
				t.Fatalf("A2A message through the other pod: %d %s", code, body)
			}
			resp := listVia(t, via, f.hdr, f.query)
			if resp.partial != "" || !resp.ids["owned-by-0"] {
				t.Fatalf("session list through the other pod: partial %q, ids %v", resp.partial, resp.ids)
			}
		})
	}
	// Every REST turn was served on pod 0. The first A2A message created
	// its context on the pod its id places it on (no pod had it), and
	// every later one was served in that context's goose session.
	rest, a2a := map[int]int{}, map[string]int{}
	for i, g := range rs.gooses {
		for _, p := range g.Prompts() {
			if p.Text == "a2a" {
				a2a[fmt.Sprint(i, "/", p.SessionID)]++
			} else {
				rest[i]++
			}
		}
	}
	if rest[0] != len(forms) || rest[1] != 0 {
		t.Fatalf("REST prompts per pod %v, want %d on the session's owner, pod 0", rest, len(forms))
	}
	if len(a2a) != 1 || slices.Collect(maps.Values(a2a))[0] != len(forms) {
		t.Fatalf("A2A prompts by pod/goose session %v, want %d in one", a2a, len(forms))
	}
	// A wrong key is still refused at the first pod, whatever the hop does.
	if code, _ := via.doWith(http.MethodGet, "/apps/goose/users/u/sessions/owned-by-0?api_key=wrong", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("wrong api_key: %d, want 401", code)
	}
}

type listed struct {
	partial string
	ids     map[string]bool
}

func listVia(t *testing.T, s *sidecar, hdr map[string]string, query string) listed {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/apps/goose/users/u/sessions"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l []struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list: %d %v", resp.StatusCode, err)
	}
	out := listed{partial: resp.Header.Get(peering.PartialHeader), ids: map[string]bool{}}
	for _, e := range l {
		out.ids[e.ID] = true
	}
	return out
}
