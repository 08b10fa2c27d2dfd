package webui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/internal/webui"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "ui-test-token"

// startSidecar runs a real adk2goose server over a fake `goose serve`.
func startSidecar(t *testing.T, script goosetest.Script) *url.URL {
	t.Helper()
	f := goosetest.NewServe(t, goosetest.WithServeScript(script))
	b, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sc := servertest.Start(t, server.Config{Backend: b, AppName: "goose", DataDir: t.TempDir(), AuthToken: token})
	u, err := url.Parse(sc.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// startUI serves the UI handler on a loopback port, as `goosectl ui` does.
func startUI(t *testing.T, backend *url.URL) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	origin := "http://" + ts.Listener.Addr().String()
	h, err := webui.NewHandler(webui.Config{Origin: origin, Backend: backend, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = h
	ts.Start()
	t.Cleanup(ts.Close)
	return origin
}

var client = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func do(t *testing.T, method, u string, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestServesBundleAndConfig(t *testing.T) {
	backend, _ := url.Parse("http://127.0.0.1:1")
	origin := startUI(t, backend)

	resp, body := do(t, "GET", origin+"/ui/assets/config/runtime-config.json", "", nil)
	var cfg struct {
		BackendURL string `json:"backendUrl"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &cfg) != nil || cfg.BackendURL != origin+"/api" {
		t.Fatalf("runtime config %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, "GET", origin+"/", "", nil); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("/ -> %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body = do(t, "GET", origin+"/ui/", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<base href="/ui/"`) || !strings.Contains(body, "main-ORIYWHAC.js") {
		t.Fatalf("index %d %.300s", resp.StatusCode, body)
	}
	// The v1.7.0 bundle's entry script, from adk-go's embedded copy.
	resp, body = do(t, "GET", origin+"/ui/main-ORIYWHAC.js", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "getApiServerBaseUrl") {
		t.Fatalf("main.js %d (%d bytes)", resp.StatusCode, len(body))
	}
}

// TestProxyHeadersAndPaths checks exactly what reaches the backend.
func TestProxyHeadersAndPaths(t *testing.T) {
	type seen struct {
		path, query string
		hdr         http.Header
	}
	got := make(chan seen, 1)
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone()}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rec.Close()
	backend, _ := url.Parse(rec.URL)
	origin := startUI(t, backend)

	resp, _ := do(t, "GET", origin+"/api/apps/goose/users/u%2F1/sessions?relative_path=./&api_key=leak", "", map[string]string{
		"Authorization": "Bearer browser-supplied", "X-API-Key": "k", "Cookie": "c=1", "Origin": origin,
		"Sec-Fetch-Site": "same-origin",
	})
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := <-got
	if s.path != "/apps/goose/users/u%2F1/sessions" || s.query != "relative_path=.%2F" {
		t.Fatalf("mapped to %s ? %s", s.path, s.query)
	}
	if a := s.hdr.Values("Authorization"); len(a) != 1 || a[0] != "Bearer "+token {
		t.Fatalf("authorization %q", a)
	}
	for _, h := range []string{"X-Api-Key", "Cookie", "Origin"} {
		if v := s.hdr.Get(h); v != "" {
			t.Errorf("%s forwarded: %q", h, v)
		}
	}
}

func TestGuard(t *testing.T) {
	var hits sync.Map
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.URL.Path, true)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rec.Close()
	backend, _ := url.Parse(rec.URL)
	origin := startUI(t, backend)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(origin, "http://"))

	for name, c := range map[string]struct {
		method, path string
		hdr          map[string]string
		want         int
	}{
		"rebound host":        {"POST", "/api/run_sse", map[string]string{"Host": "evil.example:" + port}, http.StatusMisdirectedRequest},
		"foreign origin":      {"POST", "/api/run_sse", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		"other local origin":  {"POST", "/api/run_sse", map[string]string{"Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		"cross-site fetch":    {"GET", "/api/list-apps", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		"same-site fetch":     {"GET", "/api/list-apps", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		"dot-dot into api":    {"POST", "/ui/../api/run_sse", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		"cross-site UI link":  {"GET", "/ui/", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusOK},
		"localhost redirects": {"GET", "/ui/", map[string]string{"Host": "localhost:" + port}, http.StatusTemporaryRedirect},
		"same origin":         {"POST", "/api/same", map[string]string{"Origin": origin, "Sec-Fetch-Site": "same-origin"}, 204},
	} {
		resp, body := do(t, c.method, origin+c.path, "", c.hdr)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	if _, ok := hits.Load("/run_sse"); ok {
		t.Error("a refused request reached the backend")
	}
	if _, ok := hits.Load("/same"); !ok {
		t.Error("the same-origin request did not reach the backend")
	}
	resp, _ := do(t, "GET", origin+"/ui/x", "", map[string]string{"Host": "localhost:" + port})
	if loc := resp.Header.Get("Location"); loc != origin+"/ui/x" {
		t.Errorf("redirect to %q", loc)
	}
}

func TestBackendDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	_ = ln.Close()
	origin := startUI(t, &url.URL{Scheme: "http", Host: dead})
	resp, body := do(t, "GET", origin+"/api/list-apps", "", nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "port-forward") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestDrivesRealSidecar does what the bundled UI does, through the UI server
// to a real adk2goose sidecar: list apps, create a session, stream a run.
func TestDrivesRealSidecar(t *testing.T) {
	const gap = time.Second
	backend := startSidecar(t, goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "Hello"},
		{Delay: gap, Text: ", world"},
		{Usage: &goosetest.UsageStep{Input: 7, Output: 3}},
	}}))
	origin := startUI(t, backend)
	browser := map[string]string{"Origin": origin, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}

	// Without the proxy the sidecar refuses the browser: the token matters.
	if resp, _ := do(t, "GET", backend.String()+"/list-apps", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("sidecar without token: %d", resp.StatusCode)
	}
	resp, body := do(t, "GET", origin+"/api/list-apps?relative_path=./", "", nil)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(body) != `["goose"]` {
		t.Fatalf("list-apps %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, "POST", origin+"/api/apps/goose/users/user/sessions", "null", browser)
	var sess struct{ ID string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &sess) != nil || sess.ID == "" {
		t.Fatalf("create session %d %s", resp.StatusCode, body)
	}

	run := `{"appName":"goose","userId":"user","sessionId":"` + sess.ID +
		`","newMessage":{"role":"user","parts":[{"text":"hi"}]},"streaming":true,"stateDelta":null}`
	req, _ := http.NewRequest(http.MethodPost, origin+"/api/run_sse", strings.NewReader(run))
	for k, v := range browser {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	sresp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	if sresp.StatusCode != http.StatusOK || !strings.HasPrefix(sresp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(sresp.Body)
		t.Fatalf("run_sse %d %s %s", sresp.StatusCode, sresp.Header.Get("Content-Type"), b)
	}
	type frame struct {
		at   time.Duration
		data map[string]any
	}
	var frames []frame
	sc := bufio.NewScanner(sresp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// The UI keeps only data: lines (adk-wire §4.2).
		if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("frame %q: %v", d, err)
			}
			frames = append(frames, frame{time.Since(start), m})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	text := func(f frame) string {
		parts, _ := f.data["content"].(map[string]any)["parts"].([]any)
		if len(parts) == 0 {
			return ""
		}
		s, _ := parts[0].(map[string]any)["text"].(string)
		return s
	}
	if len(frames) != 3 || text(frames[0]) != "Hello" || frames[0].data["partial"] != true ||
		text(frames[1]) != ", world" || frames[1].data["partial"] != true ||
		text(frames[2]) != "Hello, world" || frames[2].data["partial"] == true {
		t.Fatalf("frames: %+v", frames)
	}
	// Each frame crossed the proxy when the sidecar sent it: the first one
	// arrived a whole scripted delay before the rest, not with them.
	if d := frames[1].at - frames[0].at; d < gap*3/4 {
		t.Fatalf("first frame at %v, second at %v: the proxy buffered", frames[0].at, frames[1].at)
	}

	// What the UI does when the stream ends, then reloading the session.
	if resp, body := do(t, "GET", origin+"/api/debug/trace/session/"+sess.ID, "", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("trace %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, "GET", origin+"/api/apps/goose/users/user/sessions/"+sess.ID, "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Hello, world") {
		t.Fatalf("get session %d %s", resp.StatusCode, body)
	}
	client.CloseIdleConnections()
}

// TestTokenFunc: with TokenFunc each request carries the token it gives
// now (a renewed one as soon as it changes), and a request it has none for
// gets 502 without reaching the sidecar.
func TestTokenFunc(t *testing.T) {
	var mu sync.Mutex
	current, failure := "first", error(nil)
	got := make(chan string, 4)
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rec.Close()
	backend, _ := url.Parse(rec.URL)
	ts := httptest.NewUnstartedServer(nil)
	origin := "http://" + ts.Listener.Addr().String()
	h, err := webui.NewHandler(webui.Config{Origin: origin, Backend: backend, TokenFunc: func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return current, failure
	}})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = h
	ts.Start()
	defer ts.Close()

	for _, want := range []string{"first", "renewed"} {
		mu.Lock()
		current = want
		mu.Unlock()
		if resp, body := do(t, "GET", origin+"/api/list-apps", "", nil); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if a := <-got; a != "Bearer "+want {
			t.Fatalf("authorization %q, want the token of now, %q", a, want)
		}
	}
	mu.Lock()
	failure = errors.New("TokenRequest refused")
	mu.Unlock()
	resp, body := do(t, "GET", origin+"/api/list-apps", "", nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "TokenRequest refused") || len(got) != 0 {
		t.Fatalf("%d %s (%d requests reached the sidecar)", resp.StatusCode, body, len(got))
	}
}
