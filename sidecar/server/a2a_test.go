package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"google.golang.org/adk/agent"
	remoteagent "google.golang.org/adk/agent/remoteagent/v2"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/internal/bearer"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// remoteRunner is a local ADK runner whose root agent is adk-go's A2A client
// (remoteagent v2) for the agent card at base, with session "s" of user "u"
// created. tr carries its requests; the sidecar token is added.
func remoteRunner(t *testing.T, base string, tr http.RoundTripper) *runner.Runner {
	t.Helper()
	hc := &http.Client{Transport: bearer.Transport{Token: testToken, Base: tr}}
	t.Cleanup(hc.CloseIdleConnections)
	remote, err := remoteagent.NewA2A(remoteagent.A2AConfig{
		Name:              "goose_remote",
		Description:       "goose behind adk2goose",
		AgentCardProvider: remoteagent.NewAgentCardProvider(base),
		ClientProvider:    remoteagent.NewA2AClientProvider(a2aclient.NewFactory(a2aclient.WithJSONRPCTransport(hc))),
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions := session.InMemoryService()
	r, err := runner.New(runner.Config{AppName: "client", Agent: remote, SessionService: sessions})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessions.Create(t.Context(), &session.CreateRequest{AppName: "client", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	return r
}

// remoteRun drives the sidecar with adk-go's own A2A client for one turn.
func remoteRun(t *testing.T, base, text string, mode agent.StreamingMode) []*session.Event {
	t.Helper()
	r := remoteRunner(t, base, http.DefaultTransport)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []*session.Event
	for ev, err := range r.Run(ctx, "u", "s", genai.NewContentFromText(text, genai.RoleUser), agent.RunConfig{StreamingMode: mode}) {
		if err != nil {
			t.Fatalf("remote run: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

func TestA2AWithADKClient(t *testing.T) {
	for _, fl := range flavours {
		for _, mode := range []agent.StreamingMode{agent.StreamingModeSSE, agent.StreamingModeNone} {
			t.Run(fl.name+"/"+string(mode), func(t *testing.T) {
				sc := startSidecar(t, fl.start(t, goosetest.Echo), t.TempDir())
				evs := remoteRun(t, sc.URL, "hello a2a", mode)
				var text string
				var usage *genai.GenerateContentResponseUsageMetadata
				partials := 0
				for _, ev := range evs {
					if ev.ErrorMessage != "" {
						t.Fatalf("error event: %s", ev.ErrorMessage)
					}
					if ev.Partial {
						partials++
						continue
					}
					if ev.UsageMetadata != nil {
						usage = ev.UsageMetadata
					}
					if ev.Content != nil {
						for _, p := range ev.Content.Parts {
							if p.Text != "" && !p.Thought {
								text = p.Text
							}
						}
					}
				}
				if text != "echo: hello a2a" {
					t.Fatalf("text %q in %s", text, dumpEvents(evs))
				}
				if usage == nil || usage.PromptTokenCount != 19 || usage.CandidatesTokenCount != 9 || usage.TotalTokenCount != 28 {
					t.Fatalf("usage %+v in %s", usage, dumpEvents(evs))
				}
				if mode == agent.StreamingModeSSE && partials == 0 {
					t.Fatalf("streaming produced no partial events: %s", dumpEvents(evs))
				}
				// A2A turns count in /stats like REST ones.
				if st := sc.stats(); st.Tokens.Total != 28 || st.Sessions.Total != 1 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

func TestA2AToolCalls(t *testing.T) {
	fl := flavours[0]
	sc := startSidecar(t, fl.start(t, toolScript), t.TempDir())
	evs := remoteRun(t, sc.URL, "look", agent.StreamingModeSSE)
	var call, resp bool
	for _, ev := range evs {
		if ev.Content == nil {
			continue
		}
		for _, p := range ev.Content.Parts {
			if p.FunctionCall != nil && p.FunctionCall.Name == "shell" {
				call = true
			}
			if p.FunctionResponse != nil && p.FunctionResponse.Response["output"] == "README.md" {
				resp = true
			}
		}
	}
	if !call || !resp {
		t.Fatalf("call=%v resp=%v: %s", call, resp, dumpEvents(evs))
	}
}

func TestA2AGooseDownFailsTask(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			sc := startSidecar(t, fl.down(t), t.TempDir())
			evs := remoteRun(t, sc.URL, "hi", agent.StreamingModeSSE)
			last := evs[len(evs)-1]
			if !strings.Contains(last.ErrorMessage, "goose") || !last.TurnComplete {
				t.Fatalf("want a failed turn, got %s", dumpEvents(evs))
			}
			// The raw 0.3 endpoint reports the FAILED state too.
			code, body := sc.do(http.MethodPost, "/a2a/invoke", map[string]any{
				"jsonrpc": "2.0", "id": 1, "method": "message/send",
				"params": map[string]any{"message": map[string]any{"kind": "message", "messageId": "m1", "role": "user",
					"parts": []any{map[string]any{"kind": "text", "text": "hi"}}}},
			})
			if code != 200 || !strings.Contains(string(body), `"state":"failed"`) {
				t.Fatalf("0.3 message/send: %d %s", code, body)
			}
		})
	}
}

func TestAgentCard(t *testing.T) {
	sc := startSidecar(t, flavours[0].start(t, goosetest.Echo), t.TempDir())
	code, body := sc.doWith(http.MethodGet, "/.well-known/agent-card.json", nil, nil)
	var card map[string]any
	if code != 200 || json.Unmarshal(body, &card) != nil {
		t.Fatalf("card: %d %s", code, body)
	}
	ifaces, _ := card["supportedInterfaces"].([]any)
	if len(ifaces) != 2 || jpath(ifaces[0], "url") != sc.URL+"/a2a/v1/invoke" || jpath(ifaces[0], "protocolVersion") != "1.0" ||
		jpath(ifaces[1], "url") != sc.URL+"/a2a/invoke" || jpath(ifaces[1], "protocolVersion") != "0.3" {
		t.Fatalf("1.0 interfaces: %s", body)
	}
	// 0.3 fields for older clients.
	if card["url"] != sc.URL+"/a2a/invoke" || card["protocolVersion"] != "0.3" || card["preferredTransport"] != "JSONRPC" {
		t.Fatalf("0.3 fields: %s", body)
	}
	if jpath(card, "capabilities", "streaming") != true || card["name"] != appName {
		t.Fatalf("card: %s", body)
	}
}

func dumpEvents(evs []*session.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		j, _ := json.Marshal(ev)
		b.Write(j)
		b.WriteString("\n")
	}
	return b.String()
}
