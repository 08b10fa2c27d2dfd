package peering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestA2AKey(t *testing.T) {
	for body, want := range map[string]Key{
		// A2A 1.0 (a2a-go v2 JSON-RPC) and 0.3 messages name their context...
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","contextId":"c1","parts":[]}}}`:       {User: "A2A_USER_c1", Session: "c1"},
		`{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"kind":"message","contextId":"c1","taskId":"t"}}}`: {User: "A2A_USER_c1", Session: "c1"},
		// ...or only their task (an input-required answer).
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"taskId":"t1"}}}`: {Task: "t1"},
		// Task methods name the task by id, in both versions.
		`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t1"}}`:           {Task: "t1"},
		`{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{"id":"t1"}}`:        {Task: "t1"},
		`{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":"t1"}}`:   {Task: "t1"},
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t1"}}`:         {Task: "t1"},
		`{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"t1"}}`:      {Task: "t1"},
		`{"jsonrpc":"2.0","id":1,"method":"tasks/resubscribe","params":{"id":"t1"}}`: {Task: "t1"},
		// A new conversation, other methods and junk name nothing.
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m"}}}`: {},
		`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"id":"t1"}}`:                     {},
		`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":7}}`:                          {},
		`{"jsonrpc":"2.0","id":1,"method":"GetTask"}`:                                            {},
		`[{"method":"GetTask","params":{"id":"t1"}}]`:                                            {},
		`{`: {},
	} {
		got, ok := a2aKey(t.Context(), []byte(body))
		if got != want || ok != (want != Key{}) {
			t.Errorf("a2aKey(%s) = %+v %v, want %+v", body, got, ok, want)
		}
	}
}

// stubOwner owns a fixed set of sessions ("user/session") and tasks.
type stubOwner struct {
	sessions, tasks []string
	err             error
}

func (o stubOwner) OwnsSession(_ context.Context, user, session string) (bool, error) {
	return slices.Contains(o.sessions, user+"/"+session), o.err
}

func (o stubOwner) OwnsTask(_ context.Context, task string) (bool, error) {
	return slices.Contains(o.tasks, task), o.err
}

type runKeyCtx struct{}

// decodeRuns stands in for the sidecar's decoding of run bodies, which
// happens before the router: it puts the session a run names in the
// context, where runKey (Config.RunKey) finds it.
func decodeRuns(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/run" || req.URL.Path == "/run_sse" {
			b, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(b))
			var run struct{ UserID, SessionID string }
			if json.Unmarshal(b, &run) == nil && run.UserID != "" && run.SessionID != "" {
				req = req.WithContext(context.WithValue(req.Context(), runKeyCtx{}, Key{User: run.UserID, Session: run.SessionID}))
			}
		}
		next.ServeHTTP(w, req)
	})
}

func runKey(req *http.Request) (Key, bool) {
	k, ok := req.Context().Value(runKeyCtx{}).(Key)
	return k, ok
}

// pod is one sidecar's HTTP surface in miniature: the router in front of a
// handler that records what reached it and answers with its name, and the
// owner endpoint, on a real loopback server.
type pod struct {
	name string
	srv  *httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	path, body, hop, origin string
}

func startPod(t *testing.T, name string, owner Owner, peers Peers, mut ...func(*Config)) *pod {
	t.Helper()
	p := &pod{name: name}
	local := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		p.mu.Lock()
		p.seen = append(p.seen, seenRequest{req.URL.Path, string(b), req.Header.Get(HopHeader), req.Header.Get("Origin")})
		p.mu.Unlock()
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/sessions") {
			_ = json.NewEncoder(w).Encode([]map[string]string{{"id": "from-" + name}})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: served by "+name+"\n\n")
	})
	var routed http.Handler
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		routed.ServeHTTP(w, req)
	}))
	cfg := Config{
		AppName: "goose", A2APaths: []string{"/a2a/v1/invoke"}, Owner: owner, Peers: peers,
		// As the binary sets it: the URL its peers list it by.
		Self:  "http://" + p.srv.Listener.Addr().String(),
		Token: "tok", MaxBodyBytes: 1 << 10, RunKey: runKey, Logger: slog.New(slog.DiscardHandler),
	}
	for _, m := range mut {
		m(&cfg)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+OwnerPath, OwnerHandler(owner, cfg.Logger))
	mux.Handle("/", local)
	routed = decodeRuns(New(cfg).Wrap(mux))
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

func (p *pod) requests() []seenRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

func send(t *testing.T, url, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func static(urls ...string) Peers {
	return func(context.Context) ([]string, error) { return urls, nil }
}

func TestRouterForwardsToOwner(t *testing.T) {
	owner := startPod(t, "owner", stubOwner{sessions: []string{"u/s"}, tasks: []string{"t1"}}, static())
	bystander := startPod(t, "bystander", stubOwner{}, static())
	entry := startPod(t, "entry", stubOwner{}, static(bystander.srv.URL, owner.srv.URL))

	run := `{"appName":"goose","userId":"u","sessionId":"s","newMessage":{"parts":[{"text":"hi"}]}}`
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/run_sse", run},
		{http.MethodGet, "/apps/goose/users/u/sessions/s", ""},
		{http.MethodDelete, "/apps/goose/users/u/sessions/s", ""},
		{http.MethodPost, "/a2a/v1/invoke", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t1"}}`},
		{http.MethodPost, "/a2a/v1/invoke", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"taskId":"t1"}}}`},
	} {
		resp, body := send(t, entry.srv.URL, c.method, c.path, c.body, "Origin", "http://ui.example")
		if resp.StatusCode != http.StatusOK || body != "data: served by owner\n\n" {
			t.Fatalf("%s %s: %d %q", c.method, c.path, resp.StatusCode, body)
		}
	}
	got := owner.requests()
	if len(got) != 5 {
		t.Fatalf("owner got %d requests, want 5: %+v", len(got), got)
	}
	if got[0].body != run || got[0].hop != "1" || got[0].origin != "" {
		t.Fatalf("forwarded /run_sse: %+v (want the body intact, the hop header, no Origin)", got[0])
	}
	if n := len(entry.requests()) + len(bystander.requests()); n != 0 {
		t.Fatalf("%d requests served off the owner", n)
	}
}

func TestRouterServesLocally(t *testing.T) {
	owner := startPod(t, "owner", stubOwner{sessions: []string{"u/s"}, tasks: []string{"t1"}}, static())
	// Not knowing its own URL, it places no session (TestRouterPlacesNewSessions).
	entry := startPod(t, "entry", stubOwner{sessions: []string{"u/mine"}}, static(owner.srv.URL), func(c *Config) { c.Self = "" })
	for _, c := range []struct{ name, method, path, body string }{
		{"own session", http.MethodPost, "/run", `{"userId":"u","sessionId":"mine"}`},
		{"no pod has it", http.MethodPost, "/run", `{"userId":"u","sessionId":"new"}`},
		{"names no session", http.MethodPost, "/apps/goose/users/u/sessions", ""},
		{"new A2A conversation", http.MethodPost, "/a2a/v1/invoke", `{"method":"SendMessage","params":{"message":{"messageId":"m"}}}`},
		{"other app", http.MethodGet, "/apps/other/users/u/sessions/s", ""},
		{"preflight", http.MethodOptions, "/apps/goose/users/u/sessions/s", ""},
		{"A2A body over the limit", http.MethodPost, "/a2a/v1/invoke", `{"method":"GetTask","params":{"id":"t1"},"pad":"` + strings.Repeat("x", 2<<10) + `"}`},
		{"unparsable A2A body", http.MethodPost, "/a2a/v1/invoke", `{"method":"GetTask","params":{"id":`},
		{"run naming no session", http.MethodPost, "/run", `{"userId":`},
	} {
		resp, body := send(t, entry.srv.URL, c.method, c.path, c.body)
		if resp.StatusCode != http.StatusOK || body != "data: served by entry\n\n" {
			t.Errorf("%s: %d %q", c.name, resp.StatusCode, body)
		}
		if r := entry.requests(); len(r) == 0 || r[len(r)-1].body != c.body {
			t.Errorf("%s: the local handler did not get the body intact", c.name)
		}
	}
	// Without RunKey the router does not look into runs.
	plain := startPod(t, "plain", stubOwner{}, static(owner.srv.URL), func(c *Config) { c.RunKey = nil })
	if resp, body := send(t, plain.srv.URL, http.MethodPost, "/run", `{"userId":"u","sessionId":"s"}`); resp.StatusCode != http.StatusOK || body != "data: served by plain\n\n" {
		t.Errorf("run without RunKey: %d %q", resp.StatusCode, body)
	}
	// A request from a peer is served where it arrives, whatever it names.
	resp, body := send(t, entry.srv.URL, http.MethodGet, "/apps/goose/users/u/sessions/s", "", HopHeader, "1")
	if resp.StatusCode != http.StatusOK || body != "data: served by entry\n\n" {
		t.Fatalf("hop request: %d %q", resp.StatusCode, body)
	}
	if n := len(owner.requests()); n != 0 {
		t.Fatalf("owner got %d requests", n)
	}
}

func TestRouterUnavailable(t *testing.T) {
	// A peer that fails owner queries (500) and one that is gone.
	broken := startPod(t, "broken", stubOwner{err: errors.New("disk gone")}, static())
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	var outcomes []string
	var mu sync.Mutex
	record := func(c *Config) {
		c.Forwarded = func(o string) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }
	}
	for name, peers := range map[string]Peers{
		"broken peer":   static(broken.srv.URL),
		"gone peer":     static(gone.URL),
		"peers unknown": func(context.Context) ([]string, error) { return nil, errors.New("no DNS") },
	} {
		entry := startPod(t, "entry", stubOwner{}, peers, record)
		resp, body := send(t, entry.srv.URL, http.MethodPost, "/run_sse", `{"userId":"u","sessionId":"s"}`)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "session s") {
			t.Errorf("%s: %d Retry-After=%q %q", name, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if n := len(entry.requests()); n != 0 {
			t.Errorf("%s: served locally", name)
		}
	}
	if want := []string{"unavailable", "unavailable", "unavailable"}; !slices.Equal(outcomes, want) {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}

	// This pod cannot look in its own store: it serves the request, whose
	// handler will fail the same way and say so.
	entry := startPod(t, "entry", stubOwner{err: errors.New("disk gone")}, static(broken.srv.URL))
	if resp, body := send(t, entry.srv.URL, http.MethodPost, "/run", `{"userId":"u","sessionId":"s"}`); resp.StatusCode != http.StatusOK || body != "data: served by entry\n\n" {
		t.Fatalf("local lookup error: %d %q", resp.StatusCode, body)
	}
}

// TestRouterPlacesNewSessions: a request for a session no pod has reaches
// the pod place picks for its id, from whichever pod it enters, so that a
// new id sent to several pods at once is created on one.
func TestRouterPlacesNewSessions(t *testing.T) {
	var urls [3]string
	var mu sync.Mutex
	others := func(i int) Peers {
		return func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Concat(urls[:i], urls[i+1:]), nil
		}
	}
	var outcomes [3][]string
	var pods [3]*pod
	for i := range pods {
		pods[i] = startPod(t, fmt.Sprint("pod", i), stubOwner{}, others(i), func(c *Config) {
			c.Forwarded = func(o string) { mu.Lock(); outcomes[i] = append(outcomes[i], o); mu.Unlock() }
		})
		mu.Lock()
		urls[i] = pods[i].srv.URL
		mu.Unlock()
	}
	served := map[int]bool{}
	for n := range 12 {
		session := fmt.Sprint("new-", n)
		want := slices.Index(urls[:], placedOn(t, Key{User: "u", Session: session}, urls[:]))
		served[want] = true
		for i, entry := range pods {
			before := len(pods[want].requests())
			body := `{"userId":"u","sessionId":"` + session + `"}`
			resp, got := send(t, entry.srv.URL, http.MethodPost, "/run", body)
			if resp.StatusCode != http.StatusOK || got != "data: served by pod"+fmt.Sprint(want)+"\n\n" {
				t.Fatalf("%s entering pod %d: %d %q, want it served by pod %d", session, i, resp.StatusCode, got, want)
			}
			r := pods[want].requests()
			if len(r) != before+1 || r[len(r)-1].body != body || (r[len(r)-1].hop == "1") != (i != want) {
				t.Fatalf("%s entering pod %d: pod %d got %+v", session, i, want, r[before:])
			}
			mu.Lock()
			outcome := outcomes[i][len(outcomes[i])-1]
			mu.Unlock()
			if wantOutcome := map[bool]string{true: "local", false: "placed"}[i == want]; outcome != wantOutcome {
				t.Fatalf("%s entering pod %d: outcome %q, want %q", session, i, outcome, wantOutcome)
			}
		}
	}
	if len(served) < 2 {
		t.Fatalf("12 new sessions all placed on pods %v: place does not spread them", served)
	}
	// A task no pod has does not exist (pods name their tasks): it is
	// served where it lands, which answers that.
	for i, entry := range pods {
		resp, got := send(t, entry.srv.URL, http.MethodPost, "/a2a/v1/invoke", `{"method":"GetTask","params":{"id":"t-new"}}`)
		if resp.StatusCode != http.StatusOK || got != "data: served by pod"+fmt.Sprint(i)+"\n\n" {
			t.Fatalf("unknown task entering pod %d: %d %q", i, resp.StatusCode, got)
		}
	}
}

// placedOn is the pod (of pods) place picks for k, asked as each pod would
// ask it, failing t unless every pod picks the same.
func placedOn(t *testing.T, k Key, pods []string) string {
	t.Helper()
	var picked string
	for i, self := range pods {
		var peers []*url.URL
		for _, p := range slices.Concat(pods[:i], pods[i+1:]) {
			u, err := url.Parse(p)
			if err != nil {
				t.Fatal(err)
			}
			peers = append(peers, u)
		}
		got := self
		if u := place(k, self, peers); u != nil {
			got = u.String()
		}
		if i > 0 && got != picked {
			t.Fatalf("%v: pod %s places it on %s, pod %s on %s", k, pods[0], picked, self, got)
		}
		picked = got
	}
	return picked
}

// TestPlace: every pod picks the same pod for a new session, the picks
// spread over the pods, and a pod that goes moves only the sessions it had
// been picked for.
func TestPlace(t *testing.T) {
	// Loopback URLs: only hashed here, never dialled.
	pods := []string{"http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003", "http://127.0.0.1:8004"}
	const sessions = 400
	count := map[string]int{}
	for n := range sessions {
		k := Key{User: "u", Session: fmt.Sprint("s", n)}
		on := placedOn(t, k, pods)
		count[on]++
		if after := placedOn(t, k, pods[:3]); on != pods[3] && after != on {
			t.Fatalf("%v moved from %s to %s when %s went", k, on, after, pods[3])
		}
	}
	for _, p := range pods {
		// 100 each on average; a fixed hash makes this exact run to run.
		if count[p] < 70 || count[p] > 130 {
			t.Fatalf("sessions per pod %v: uneven", count)
		}
	}
	// A pod that does not know its URL places nothing: served where it
	// lands (nil).
	var peers []*url.URL
	for _, p := range pods[1:] {
		u, _ := url.Parse(p)
		peers = append(peers, u)
	}
	for n := range 20 {
		k := Key{User: "u", Session: fmt.Sprint("s", n)}
		if u := place(k, "", peers); u != nil {
			t.Fatalf("place(%v) with no self = %s, want nil", k, u)
		}
	}
	// The user is part of the id: the same session id of another user is
	// placed on its own.
	differ := 0
	for n := range 50 {
		if placedOn(t, Key{User: "a", Session: fmt.Sprint(n)}, pods) != placedOn(t, Key{User: "b", Session: fmt.Sprint(n)}, pods) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("users a and b get every session id placed alike: the user is not hashed")
	}
}

func TestSessionListMerges(t *testing.T) {
	a := startPod(t, "a", stubOwner{}, static())
	b := startPod(t, "b", stubOwner{}, static())
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	entry := startPod(t, "entry", stubOwner{}, static(a.srv.URL, b.srv.URL))
	resp, body := send(t, entry.srv.URL, http.MethodGet, "/apps/goose/users/u/sessions", "")
	var list []struct{ ID string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	var ids []string
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"from-a", "from-b", "from-entry"}) || resp.Header.Get(PartialHeader) != "" {
		t.Fatalf("merged list %v, %s=%q", ids, PartialHeader, resp.Header.Get(PartialHeader))
	}
	// The peers were asked with the caller's credentials and the hop header.
	if r := a.requests(); len(r) != 1 || r[0].hop != "1" {
		t.Fatalf("peer a saw %+v", r)
	}

	partial := startPod(t, "entry", stubOwner{}, static(a.srv.URL, gone.URL))
	resp, body = send(t, partial.srv.URL, http.MethodGet, "/apps/goose/users/u/sessions", "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get(PartialHeader) != "1" || !strings.Contains(body, "from-a") {
		t.Fatalf("list with a peer gone: %d %s=%q %s", resp.StatusCode, PartialHeader, resp.Header.Get(PartialHeader), body)
	}
}

func TestOwnerHandler(t *testing.T) {
	h := OwnerHandler(stubOwner{sessions: []string{"u/s"}, tasks: []string{"t"}}, slog.New(slog.DiscardHandler))
	broken := OwnerHandler(stubOwner{err: errors.New("disk gone")}, slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		h     http.Handler
		query string
		want  int
	}{
		{h, "user=u&session=s", http.StatusOK},
		{h, "user=u&session=other", http.StatusNotFound},
		{h, "user=other&session=s", http.StatusNotFound},
		{h, "task=t", http.StatusOK},
		{h, "task=other", http.StatusNotFound},
		{h, "session=s", http.StatusBadRequest},
		{h, "", http.StatusBadRequest},
		{broken, "task=t", http.StatusInternalServerError},
	} {
		w := httptest.NewRecorder()
		c.h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, OwnerPath+"?"+c.query, nil))
		if w.Code != c.want {
			t.Errorf("?%s: %d, want %d", c.query, w.Code, c.want)
		}
	}
}

// TestDNSPeers resolves through the system resolver's hosts file only.
func TestDNSPeers(t *testing.T) {
	got, err := DNSPeers("localhost", 8080, "127.0.0.1")(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got, "http://127.0.0.1:8080") {
		t.Fatalf("peers %v include this pod", got)
	}
	all, err := DNSPeers("localhost", 8080, "")(t.Context())
	if err != nil || !slices.Contains(all, "http://127.0.0.1:8080") {
		t.Fatalf("peers %v, %v: want 127.0.0.1:8080 among them", all, err)
	}
}
