package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/goose/rest"
	"github.com/adk2goose/goose-operator/sidecar/peering"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testToken = "s3cret-token"
	appName   = "goose"
)

// flavour starts a fake goose server of one protocol and a real client for it.
type flavour struct {
	name  string
	start func(t testing.TB, s goosetest.Script) goose.Backend
	// down returns a backend whose goose server is not running.
	down func(t testing.TB) goose.Backend
}

var flavours = []flavour{
	{
		name: "serve",
		start: func(t testing.TB, s goosetest.Script) goose.Backend {
			t.Helper()
			f := goosetest.NewServe(t, goosetest.WithServeScript(s))
			c, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		down: func(t testing.TB) goose.Backend {
			t.Helper()
			c, err := acp.New(acp.Config{URL: "http://" + deadAddr(t), DialTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
	},
	{
		name: "goosed",
		start: func(t testing.TB, s goosetest.Script) goose.Backend {
			t.Helper()
			f := goosetest.NewGoosed(goosetest.GoosedOptions{Script: s})
			c, err := rest.New(rest.Config{URL: f.URL, SecretKey: f.SecretKey})
			if err != nil {
				t.Fatal(err)
			}
			// Close the client first: it ends keep-alive connections the fake would wait for.
			t.Cleanup(f.Close)
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		down: func(t testing.TB) goose.Backend {
			t.Helper()
			c, err := rest.New(rest.Config{URL: "http://" + deadAddr(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
	},
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

type sidecar struct {
	t    testing.TB
	URL  string
	srv  *server.Server
	stop func()
	// client sends the requests; nil is httpClient.
	client *http.Client
}

func (s *sidecar) httpc() *http.Client {
	if s.client != nil {
		return s.client
	}
	return httpClient
}

type option func(*server.Config)

// startSidecar runs a real server on a loopback port, serving until stop.
func startSidecar(t testing.TB, b goose.Backend, dataDir string, opts ...option) *sidecar {
	t.Helper()
	cfg := server.Config{
		Backend: b, AppName: appName, DataDir: dataDir, AuthToken: testToken,
		StartOptions: goose.StartOptions{WorkingDir: "/tmp"},
		// adk2goose's default (its -start-goose-on-create flag).
		StartGooseOnCreate: true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	sc := servertest.Start(t, cfg)
	return &sidecar{t: t, URL: sc.URL, srv: sc.Server, stop: sc.Stop}
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// do sends a request with the token and returns status and body.
func (s *sidecar) do(method, path string, body any) (int, []byte) {
	s.t.Helper()
	return s.doWith(method, path, body, map[string]string{"Authorization": "Bearer " + testToken})
}

func (s *sidecar) doWith(method, path string, body any, hdr map[string]string) (int, []byte) {
	s.t.Helper()
	resp, out := s.exchange(method, path, body, hdr)
	return resp.StatusCode, out
}

// exchange sends a request (a string body as is, anything else as JSON)
// and returns the response, its body read whole.
func (s *sidecar) exchange(method, path string, body any, hdr map[string]string) (*http.Response, []byte) {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := s.httpc().Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp, out
}

// sseFrame is one /run_sse frame.
type sseFrame struct {
	Event string
	Data  map[string]any
}

// runSSE posts body to /run_sse and reads every frame until the stream ends.
func (s *sidecar) runSSE(body any) (int, []sseFrame) {
	s.t.Helper()
	j, _ := json.Marshal(body)
	if str, ok := body.(string); ok {
		j = []byte(str)
	}
	req, _ := http.NewRequestWithContext(s.t.Context(), http.MethodPost, s.URL+"/run_sse", bytes.NewReader(j))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-API-Key", testToken)
	resp, err := s.httpc().Do(req)
	if err != nil {
		s.t.Fatalf("run_sse: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		s.t.Logf("run_sse %d: %s", resp.StatusCode, b)
		return resp.StatusCode, nil
	}
	return resp.StatusCode, readSSE(s.t, resp.Body)
}

func readSSE(t testing.TB, r io.Reader) []sseFrame {
	t.Helper()
	var frames []sseFrame
	err := scanSSE(r, func(f sseFrame, err error) {
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	})
	if err != nil {
		t.Fatalf("read SSE: %v", err)
	}
	return frames
}

// scanSSE hands each frame of an SSE stream to each, in order, until the
// stream ends; a data line that is not JSON comes with an error.
func scanSSE(r io.Reader, each func(sseFrame, error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	ev := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			ev = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			var m map[string]any
			var err error
			if jerr := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(line, "data:"))), &m); jerr != nil {
				err = fmt.Errorf("bad SSE data %q: %w", line, jerr)
			}
			each(sseFrame{Event: ev, Data: m}, err)
			ev = ""
		}
	}
	return sc.Err()
}

func (s *sidecar) createSession(user, id string) {
	s.t.Helper()
	s.createSessionWith(user, id, nil)
}

// createSessionHere creates a session on this sidecar whatever its peers
// are: marked as sent by a peer (peering.HopHeader), as a create that
// another pod placed here arrives, the router serves it locally.
func (s *sidecar) createSessionHere(user, id string) {
	s.t.Helper()
	s.createSessionWith(user, id, map[string]string{peering.HopHeader: "1"})
}

// createSessionWith creates a session with the token and hdr.
func (s *sidecar) createSessionWith(user, id string, hdr map[string]string) {
	s.t.Helper()
	all := map[string]string{"Authorization": "Bearer " + testToken}
	maps.Copy(all, hdr)
	code, body := s.doWith(http.MethodPost, "/apps/"+appName+"/users/"+user+"/sessions/"+id, nil, all)
	if code != http.StatusOK {
		s.t.Fatalf("create session: %d %s", code, body)
	}
}

func runBody(user, session, text string, streaming bool) map[string]any {
	return map[string]any{
		"appName": appName, "userId": user, "sessionId": session, "streaming": streaming,
		"newMessage": map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}},
	}
}

func (s *sidecar) stats() server.Stats {
	s.t.Helper()
	code, body := s.do(http.MethodGet, "/stats", nil)
	if code != http.StatusOK {
		s.t.Fatalf("stats: %d %s", code, body)
	}
	var st server.Stats
	if err := json.Unmarshal(body, &st); err != nil {
		s.t.Fatal(err)
	}
	return st
}

// jpath digs into decoded JSON: jpath(m, "content", "parts", 0, "text").
func jpath(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}
