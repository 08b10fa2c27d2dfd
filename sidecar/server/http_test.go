package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/metricsdoc"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

func TestAuth(t *testing.T) {
	sc := startSidecar(t, flavours[0].start(t, goosetest.Echo), t.TempDir())
	protected := []struct{ method, path string }{
		{"GET", "/list-apps"}, {"GET", "/stats"}, {"GET", "/metrics"}, {"GET", "/version"},
		{"POST", "/apps/goose/users/u/sessions"}, {"GET", "/apps/goose/users/u/sessions"},
		{"GET", "/apps/goose/users/u/sessions/s"}, {"DELETE", "/apps/goose/users/u/sessions/s"},
		{"POST", "/run"}, {"POST", "/run_sse"}, {"POST", "/a2a/v1/invoke"}, {"POST", "/a2a/invoke"},
		{"GET", "/debug/trace/session/s"}, {"GET", "/nonexistent"},
	}
	for _, p := range protected {
		for name, hdr := range map[string]map[string]string{
			"missing":      nil,
			"wrong bearer": {"Authorization": "Bearer nope"},
			"wrong key":    {"X-API-Key": "nope"},
			"basic":        {"Authorization": "Basic " + testToken},
		} {
			code, body := sc.doWith(p.method, p.path, "{}", hdr)
			if code != http.StatusUnauthorized || !strings.Contains(string(body), `"error":"unauthorized"`) {
				t.Errorf("%s %s (%s): %d %s", p.method, p.path, name, code, body)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/health", "/.well-known/agent-card.json"} {
		if code, body := sc.doWith("GET", path, nil, nil); code != 200 {
			t.Errorf("open route %s: %d %s", path, code, body)
		}
	}
	// All three ways of presenting the token work.
	for name, req := range map[string]struct {
		path string
		hdr  map[string]string
	}{
		"bearer": {"/list-apps", map[string]string{"Authorization": "Bearer " + testToken}},
		"header": {"/list-apps", map[string]string{"X-API-Key": testToken}},
		"query":  {"/list-apps?api_key=" + testToken, nil},
	} {
		if code, body := sc.doWith("GET", req.path, nil, req.hdr); code != 200 {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
}

func TestRunBodiesOfRealClients(t *testing.T) {
	sc := startSidecar(t, flavours[1].start(t, goosetest.Echo), t.TempDir())
	sc.createSession("u", "s")
	// What the web UI and Python clients send: extra fields, snake_case.
	bodies := map[string]string{
		"web ui extra fields": `{"appName":"goose","userId":"u","sessionId":"s","newMessage":{"role":"user","parts":[{"text":"one"}]},"streaming":true,"stateDelta":null,"functionCallEventId":"e1","invocationId":"i1"}`,
		"python snake_case":   `{"app_name":"goose","user_id":"u","session_id":"s","new_message":{"role":"user","parts":[{"text":"two","thought_signature":null}]},"streaming":true,"state_delta":{"k":"v"},"requested_tool_confirmations":{}}`,
		"bare string message": `{"appName":"goose","userId":"u","sessionId":"s","newMessage":"three","streaming":"true"}`,
	}
	for name, body := range bodies {
		code, frames := sc.runSSE(body)
		if code != 200 || len(frames) == 0 || frames[len(frames)-1].Data["errorCode"] != nil ||
			!strings.HasPrefix(jpath(frames[len(frames)-1].Data, "content", "parts", 0, "text").(string), "echo: ") {
			t.Errorf("%s: %d %v", name, code, frames)
		}
	}
	// Bad requests get a 400 with a reason.
	for name, body := range map[string]string{
		"not json":        `{"appName":`,
		"array":           `[1,2]`,
		"missing session": `{"appName":"goose","userId":"u","newMessage":"x"}`,
		"bad parts":       `{"appName":"goose","userId":"u","sessionId":"s","newMessage":{"parts":"x"}}`,
	} {
		code, resp := sc.do(http.MethodPost, "/run", body)
		if code != http.StatusBadRequest || !strings.Contains(string(resp), "invalid run request") {
			t.Errorf("%s: %d %s", name, code, resp)
		}
	}
}

func TestCORS(t *testing.T) {
	sc := startSidecar(t, flavours[0].start(t, goosetest.Echo), t.TempDir(), func(c *server.Config) {
		c.CORSOrigins = []string{"http://ui.example:4200"}
	})
	req, _ := http.NewRequest(http.MethodOptions, sc.URL+"/run_sse", nil)
	req.Header.Set("Origin", "http://ui.example:4200")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "http://ui.example:4200" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	req, _ = http.NewRequest(http.MethodGet, sc.URL+"/list-apps", nil)
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("X-API-Key", testToken)
	resp, err = httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("foreign origin allowed: %v", resp.Header)
	}
}

func TestMetrics(t *testing.T) {
	sc := startSidecar(t, flavours[0].start(t, goosetest.Echo), t.TempDir())
	sc.createSession("u", "s")
	sc.runSSE(runBody("u", "s", "hello", true))
	code, body := sc.do(http.MethodGet, "/metrics", nil)
	if code != 200 {
		t.Fatal(code)
	}
	text := string(body)
	for _, want := range []string{
		`adk2goose_http_requests_total{code="200",method="POST",route="run_sse"} 1`,
		`adk2goose_stream_duration_seconds_count{route="run_sse"} 1`,
		`adk2goose_stream_time_to_first_event_seconds_count{route="run_sse"} 1`,
		`adk2goose_goose_tokens_total{kind="total"} 20`,
		`adk2goose_goose_turns_total{outcome="ok"} 1`,
		`adk2goose_open_streams{route="run_sse"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(text, `session="`) || strings.Contains(text, "/apps/goose/users") {
		t.Error("per-session label leaked into metrics")
	}
}

// The docs' metrics table names every series the sidecar serves, with
// its labels (its own and the budget's; not the Go runtime's).
func TestDocsNameEveryMetric(t *testing.T) {
	sc := startSidecar(t, flavours[0].start(t, goosetest.Echo), t.TempDir())
	metricsdoc.Check(t, "adk2goose_", server.MetricsOf(sc.srv))
}

// TestDrainEndsOpenStreams: on shutdown a stream that outlives the drain
// timeout ends with an error frame instead of hanging.
func TestDrainEndsOpenStreams(t *testing.T) {
	slow := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "a"}, {Delay: time.Minute, Text: "b"}}})
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b := fl.start(t, slow)
			sc := startSidecar(t, b, t.TempDir())
			sc.createSession("u", "s")
			frames := sc.openSSE(runBody("u", "s", "x", true))
			waitForText(t, frames, "a") // the first delta is out
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan struct{})
			go func() { sc.stop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("drain hung")
			}
			var got []sseFrame
			for f := range frames {
				got = append(got, f)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Fatalf("drain took %v", d)
			}
			if len(got) == 0 {
				t.Fatal("the stream ended without a frame after the drain")
			}
			last := got[len(got)-1]
			if msg, _ := last.Data["error"].(string); last.Event != "error" || !strings.Contains(msg, "shutting down") {
				t.Fatalf("frames %v", got)
			}
		})
	}
}
