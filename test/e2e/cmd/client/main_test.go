package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	remoteagent "google.golang.org/adk/agent/remoteagent/v2"
)

// cardServer serves an agent card whose one interface is at iface (with
// "{self}" replaced by the server's own URL).
func cardServer(t *testing.T, iface string) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent-card.json" {
			http.NotFound(w, r)
			return
		}
		card := a2a.AgentCard{Name: "goose", Description: "d", Version: "1",
			SupportedInterfaces: []*a2a.AgentInterface{{URL: strings.ReplaceAll(iface, "{self}", srv.URL), ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: "1.0"}}}
		_ = json.NewEncoder(w).Encode(card)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The provider accepts a plain-http card whose interfaces stay on the agent's
// own origin, and refuses one that points elsewhere.
func TestInClusterCardProvider(t *testing.T) {
	ok := cardServer(t, "{self}/a2a/v1/invoke")
	card, err := InClusterCardProvider(ok.URL)(t.Context())
	if err != nil || card.Name != "goose" {
		t.Fatalf("same-origin card: %v, %v", card, err)
	}
	elsewhere := cardServer(t, "http://collector.example:8080/a2a/v1/invoke")
	if _, err := InClusterCardProvider(elsewhere.URL)(t.Context()); err == nil || !strings.Contains(err.Error(), "is not on") {
		t.Fatalf("a card pointing elsewhere: want a refusal, got %v", err)
	}
}

// Why the provider exists: adk-go's own provider refuses plain http off
// loopback. Its check is by host name, so a loopback test server passes it;
// the e2e suite shows the refusal for a Service name (case 2).
func TestStockProviderAcceptsOnlyLoopbackHTTP(t *testing.T) {
	srv := cardServer(t, "{self}/a2a/v1/invoke")
	if _, err := remoteagent.NewAgentCardProvider(srv.URL)(t.Context()); err != nil {
		t.Fatalf("loopback: %v", err)
	}
	other := cardServer(t, "http://agent.agents.svc.cluster.local:8080/a2a/v1/invoke")
	_, err := remoteagent.NewAgentCardProvider(other.URL)(t.Context())
	if !errors.Is(err, remoteagent.ErrUntrustedCardInterface) {
		t.Fatalf("a plain-http Service URL in the card: want ErrUntrustedCardInterface, got %v", err)
	}
}

// A REST turn's tool calls are reported with their function responses' output
// or error; partial events and thoughts are not text.
func TestRunRESTCollectsTools(t *testing.T) {
	events := []string{
		`{"partial":true,"content":{"role":"model","parts":[{"text":"ignored"}]}}`,
		`{"content":{"role":"model","parts":[{"functionCall":{"id":"c1","name":"ext__ok","args":{"x":1}}},{"functionCall":{"id":"c2","name":"ext__bad"}}]}}`,
		`{"content":{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"ext__ok","response":{"output":"fine"}}}]}}`,
		`{"content":{"role":"user","parts":[{"functionResponse":{"id":"c2","name":"ext__bad","response":{"error":"boom"}}}]}}`,
		`{"content":{"role":"model","parts":[{"text":"thinking","thought":true},{"text":"done"}]},"usageMetadata":{"totalTokenCount":7}}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/run_sse" {
			http.NotFound(w, r)
			return
		}
		for _, e := range events {
			_, _ = w.Write([]byte("data: " + e + "\n\n"))
		}
	}))
	defer srv.Close()
	res, err := runREST(t.Context(), srv.Client(), srv.URL, "app", "u", "s", "hi")
	if err != nil {
		t.Fatal(err)
	}
	want := []ToolCall{{ID: "c1", Name: "ext__ok", Args: map[string]any{"x": 1.0}, Output: "fine"}, {ID: "c2", Name: "ext__bad", Error: "boom"}}
	if res.Text != "done" || res.TotalTokens != 7 || !reflect.DeepEqual(res.Tools, want) {
		t.Errorf("result %+v, want text done, 7 tokens and tools %+v", res, want)
	}
}
