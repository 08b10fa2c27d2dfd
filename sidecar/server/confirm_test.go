package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"google.golang.org/adk/agent"
	remoteagent "google.golang.org/adk/agent/remoteagent/v2"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/internal/bearer"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/goose/rest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

const declinedPrefix = "The user has declined to run this tool"

// approvalScript: text, a tool goose asks about, text after it.
var approvalScript = goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
	{Text: "Let me delete it."},
	{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "removed", NeedsApproval: true}},
	{Text: "Done."},
	{Usage: &goosetest.UsageStep{Input: 30, Output: 6}},
}})

// slowAfterApproval keeps goose busy after the tool, so ending the reply
// after an answer is a cancel goose can see on both protocols.
var slowAfterApproval = goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
	{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "removed", NeedsApproval: true}},
	{Delay: time.Minute, Text: "never"},
}})

// decision is one answer the fake goose received.
type decision struct{ session, call, outcome string }

// observed is a fake goose's record of answers and cancels.
type observed struct {
	denied     string // the deny outcome on this protocol
	decisions  func() []decision
	cancels    func() []string // goose session ids
	gooseMode  func(id string) string
	flavorName string
}

func startObserved(t *testing.T, name string, s goosetest.Script) (goose.Backend, *observed) {
	t.Helper()
	if name == "serve" {
		f := goosetest.NewServe(t, goosetest.WithServeScript(s))
		c, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, &observed{
			denied: "reject_once", flavorName: name,
			decisions: func() []decision {
				var out []decision
				for _, p := range f.Permissions() {
					o := p.OptionID
					if p.Outcome != "selected" {
						o = p.Outcome
					}
					out = append(out, decision{p.SessionID, p.ToolCallID, o})
				}
				return out
			},
			cancels: func() []string {
				var out []string
				for _, c := range f.Cancels() {
					out = append(out, c.SessionID)
				}
				return out
			},
			gooseMode: func(id string) string { s, _ := f.Session(id); return s.Mode },
		}
	}
	f := goosetest.NewGoosed(goosetest.GoosedOptions{Script: s})
	c, err := rest.New(rest.Config{URL: f.URL, SecretKey: f.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	t.Cleanup(func() { _ = c.Close() })
	return c, &observed{
		denied: "deny_once", flavorName: name,
		decisions: func() []decision {
			var out []decision
			for _, c := range f.Confirmations() {
				out = append(out, decision{c.SessionID, c.ID, c.Action})
			}
			return out
		},
		cancels: func() []string {
			var out []string
			for _, c := range f.Cancels() {
				out = append(out, c.SessionID)
			}
			return out
		},
	}
}

func approveMode(c *server.Config) { c.StartOptions.Mode = "approve" }

// answerBody answers confirmation id in user "u"'s session sess.
func answerBody(sess, id string, response map[string]any) map[string]any {
	return map[string]any{
		"appName": appName, "userId": "u", "sessionId": sess, "streaming": true,
		"newMessage": map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": map[string]any{
			"id": id, "name": "adk_request_confirmation", "response": response,
		}}}},
	}
}

// confirmationFrame checks that a /run_sse ended with the ADK confirmation
// shape for goose's c1 call and returns the confirmation id.
func confirmationFrame(t *testing.T, frames []sseFrame) string {
	t.Helper()
	if len(frames) == 0 {
		t.Fatal("no frames")
	}
	last := frames[len(frames)-1].Data
	ids, _ := last["longRunningToolIds"].([]any)
	parts, _ := jpath(last, "content", "parts").([]any)
	if len(ids) != 1 || len(parts) == 0 || last["partial"] == true {
		t.Fatalf("last frame is not a long-running call: %v", last)
	}
	fc := jpath(parts[len(parts)-1], "functionCall")
	if jpath(fc, "name") != "adk_request_confirmation" || jpath(fc, "id") != ids[0] {
		t.Fatalf("confirmation call: %v", fc)
	}
	if jpath(fc, "args", "originalFunctionCall", "id") != "c1" || jpath(fc, "args", "originalFunctionCall", "name") != "shell" ||
		jpath(fc, "args", "originalFunctionCall", "args", "command") != "rm x" {
		t.Fatalf("originalFunctionCall: %v", jpath(fc, "args"))
	}
	if jpath(fc, "args", "toolConfirmation", "confirmed") != false || jpath(fc, "args", "toolConfirmation", "hint") == nil {
		t.Fatalf("toolConfirmation: %v", jpath(fc, "args"))
	}
	return ids[0].(string)
}

func (s *sidecar) history(user, sess string) (map[string]any, []any) {
	s.t.Helper()
	code, body := s.do(http.MethodGet, "/apps/"+appName+"/users/"+user+"/sessions/"+sess, nil)
	var m map[string]any
	if code != 200 || json.Unmarshal(body, &m) != nil {
		s.t.Fatalf("get session: %d %s", code, body)
	}
	evs, _ := m["events"].([]any)
	return m, evs
}

// eventKinds summarises persisted events: role (or "goose" for tool
// results) and part kinds.
func eventKinds(evs []any) string {
	var out []string
	for _, ev := range evs {
		role, _ := jpath(ev, "content", "role").(string)
		if jpath(ev, "author") == appName && role == "user" {
			role = "goose"
		}
		var parts []string
		ps, _ := jpath(ev, "content", "parts").([]any)
		for _, p := range ps {
			switch {
			case jpath(p, "functionCall") != nil:
				parts = append(parts, "call:"+jpath(p, "functionCall", "name").(string))
			case jpath(p, "functionResponse") != nil:
				parts = append(parts, "response:"+jpath(p, "functionResponse", "name").(string))
			case jpath(p, "text") != nil:
				parts = append(parts, "text")
			}
		}
		out = append(out, role+":"+strings.Join(parts, "+"))
	}
	return strings.Join(out, " ")
}

func TestRESTConfirmation(t *testing.T) {
	for _, fl := range flavours {
		for _, approve := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/approve=%v", fl.name, approve), func(t *testing.T) {
				b, obs := startObserved(t, fl.name, approvalScript)
				sc := startSidecar(t, b, t.TempDir(), approveMode)
				sc.createSession("u", "s")

				code, frames := sc.runSSE(runBody("u", "s", "delete x", true))
				if code != 200 {
					t.Fatal(code)
				}
				id := confirmationFrame(t, frames)
				if len(obs.decisions()) != 0 {
					t.Fatal("goose answered before the client")
				}
				state, _ := sc.history("u", "s")
				gooseID, _ := jpath(state, "state", gooseagent.SessionIDStateKey(appName)).(string)
				if obs.gooseMode != nil && obs.gooseMode(gooseID) != "approve" {
					t.Fatalf("goose session mode %q", obs.gooseMode(gooseID))
				}

				// The answer, in the web UI's form for the approval (extra
				// functionCallEventId, JSON in a "response" string).
				body := answerBody("s", id, map[string]any{"confirmed": false})
				if approve {
					body = answerBody("s", id, map[string]any{"response": `{"confirmed":true}`})
					body["functionCallEventId"] = "ev-1"
				}
				code, frames = sc.runSSE(body)
				if code != 200 {
					t.Fatal(code)
				}
				var result string
				for _, f := range frames {
					ps, _ := jpath(f.Data, "content", "parts").([]any)
					for _, p := range ps {
						if jpath(p, "functionResponse", "id") == "c1" {
							result, _ = jpath(p, "functionResponse", "response", "output").(string)
						}
					}
				}
				wantOutcome := obs.denied
				if approve {
					wantOutcome = "allow_once"
					if result != "removed" {
						t.Fatalf("tool result %q in %v", result, frames)
					}
				} else if !strings.HasPrefix(result, declinedPrefix) {
					t.Fatalf("tool result %q in %v", result, frames)
				}
				fin := frames[len(frames)-1].Data
				if jpath(fin, "content", "parts", 0, "text") != "Done." || fin["turnComplete"] != true || fin["errorCode"] != nil ||
					jpath(fin, "usageMetadata", "totalTokenCount") != 36.0 {
					t.Fatalf("final: %v", fin)
				}
				if got := obs.decisions(); len(got) != 1 || got[0] != (decision{gooseID, "c1", wantOutcome}) {
					t.Fatalf("goose received %v, want %s for %s/c1", got, wantOutcome, gooseID)
				}
				_, evs := sc.history("u", "s")
				want := "user:text model:text+call:shell model:call:adk_request_confirmation " +
					"user:response:adk_request_confirmation goose:response:shell model:text"
				if got := eventKinds(evs); got != want {
					t.Fatalf("history\n got %s\nwant %s", got, want)
				}
				if st := sc.stats(); st.Tokens.Total != 36 || st.Sessions.InFlight != 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

func TestRESTConfirmationRejectsBadAnswers(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b, obs := startObserved(t, fl.name, approvalScript)
			sc := startSidecar(t, b, t.TempDir(), approveMode)
			sc.createSession("u", "s")
			sc.createSession("u", "other")
			_, frames := sc.runSSE(runBody("u", "s", "delete x", true))
			id := confirmationFrame(t, frames)
			_, before := sc.history("u", "s")

			check := func(name string, body any, status int, want string) {
				t.Helper()
				for _, path := range []string{"/run_sse", "/run"} {
					code, resp := sc.do(http.MethodPost, path, body)
					var m map[string]string
					_ = json.Unmarshal(resp, &m)
					if code != status || !strings.Contains(m["error"], want) || m["code"] == "" {
						t.Errorf("%s %s: %d %s", name, path, code, resp)
					}
				}
			}
			check("unknown id", answerBody("s", "adk-nope", map[string]any{"confirmed": true}), http.StatusBadRequest, id)
			check("other session", answerBody("other", id, map[string]any{"confirmed": true}), http.StatusBadRequest, "awaits none")
			check("no decision", answerBody("s", id, map[string]any{"ok": 1}), http.StatusBadRequest, "confirmed")
			if _, after := sc.history("u", "s"); len(after) != len(before) {
				t.Fatalf("rejected answers reached the history: %d -> %d events", len(before), len(after))
			}
			if len(obs.decisions()) != 0 {
				t.Fatalf("goose was answered: %v", obs.decisions())
			}
			// Still pending: a good answer works, then the same id is stale.
			if code, frames := sc.runSSE(answerBody("s", id, map[string]any{"confirmed": true})); code != 200 ||
				jpath(frames[len(frames)-1].Data, "content", "parts", 0, "text") != "Done." {
				t.Fatalf("answer: %d %v", code, frames)
			}
			check("stale id", answerBody("s", id, map[string]any{"confirmed": true}), http.StatusConflict, "already answered")
		})
	}
}

// TestConcurrentAnswersToOneConfirmation: two answers to one confirmation
// sent at once (a client retrying, two tabs) reach goose and the session
// history once; the other gets 409. Found by the soak (make soak,
// seed 3405991518479366399, turn 41).
func TestConcurrentAnswersToOneConfirmation(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b, obs := startObserved(t, fl.name, approvalScript)
			sc := startSidecar(t, b, t.TempDir(), approveMode)
			sc.createSession("u", "s")
			_, frames := sc.runSSE(runBody("u", "s", "delete x", true))
			id := confirmationFrame(t, frames)

			codes := make(chan int, 2)
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					code, _ := sc.do(http.MethodPost, "/run_sse", answerBody("s", id, map[string]any{"confirmed": true}))
					codes <- code
				})
			}
			wg.Wait()
			close(codes)
			var got []int
			for c := range codes {
				got = append(got, c)
			}
			slices.Sort(got)
			if !slices.Equal(got, []int{http.StatusOK, http.StatusConflict}) {
				t.Fatalf("status codes %v, want one 200 and one 409", got)
			}
			if d := obs.decisions(); len(d) != 1 {
				t.Fatalf("goose received %v, want one answer", d)
			}
			_, evs := sc.history("u", "s")
			if n := strings.Count(eventKinds(evs), "user:response:adk_request_confirmation"); n != 1 {
				t.Fatalf("%d answers in the history, want 1: %s", n, eventKinds(evs))
			}
		})
	}
}

func TestConfirmationTimeout(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b, obs := startObserved(t, fl.name, slowAfterApproval)
			sc := startSidecar(t, b, t.TempDir(), approveMode, func(c *server.Config) { c.ConfirmationTimeout = 300 * time.Millisecond })
			sc.createSession("u", "s")
			_, frames := sc.runSSE(runBody("u", "s", "delete x", true))
			id := confirmationFrame(t, frames)
			start := time.Now()
			poll.Until(t, "goose told of the denial", func() bool {
				d := obs.decisions()
				return len(d) == 1 && d[0].outcome == obs.denied && len(obs.cancels()) == 1
			})
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Fatalf("denied after %v, before the timeout", d)
			}
			// The event saying why is written right after goose was told.
			poll.Until(t, "history says why", func() bool {
				_, evs := sc.history("u", "s")
				last := evs[len(evs)-1]
				msg, _ := jpath(last, "errorMessage").(string)
				return jpath(last, "errorCode") == gooseagent.ErrorCodeConfirmationTimeout && strings.Contains(msg, "timed out after 300ms")
			})
			code, resp := sc.do(http.MethodPost, "/run_sse", answerBody("s", id, map[string]any{"confirmed": true}))
			if code != http.StatusConflict || !strings.Contains(string(resp), "timed out") {
				t.Fatalf("late answer: %d %s", code, resp)
			}
			// The session carries on.
			if code, frames := sc.runSSE(runBody("u", "s", "hello", true)); code != 200 || confirmationFrame(t, frames) == id {
				t.Fatalf("next turn: %d %v", code, frames)
			}
		})
	}
}

func TestTwoSessionsAwaitingConfirmation(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b, obs := startObserved(t, fl.name, approvalScript)
			sc := startSidecar(t, b, t.TempDir(), approveMode)
			ids, goose := map[string]string{}, map[string]string{}
			for _, s := range []string{"s1", "s2"} {
				sc.createSession("u", s)
				_, frames := sc.runSSE(runBody("u", s, "delete x", true))
				ids[s] = confirmationFrame(t, frames)
				st, _ := sc.history("u", s)
				goose[s], _ = jpath(st, "state", gooseagent.SessionIDStateKey(appName)).(string)
			}
			if goose["s1"] == goose["s2"] || ids["s1"] == ids["s2"] {
				t.Fatalf("sessions share state: %v %v", goose, ids)
			}
			// Each session's id is only valid in its own session.
			if code, _ := sc.do(http.MethodPost, "/run", answerBody("s1", ids["s2"], map[string]any{"confirmed": true})); code != http.StatusBadRequest {
				t.Fatalf("cross-session answer: %d", code)
			}
			var wg sync.WaitGroup
			results := map[string]string{}
			var mu sync.Mutex
			for s, ok := range map[string]bool{"s1": false, "s2": true} {
				wg.Go(func() {
					_, frames := sc.runSSE(answerBody(s, ids[s], map[string]any{"confirmed": ok}))
					for _, f := range frames {
						if out, ok := jpath(f.Data, "content", "parts", 0, "functionResponse", "response", "output").(string); ok {
							mu.Lock()
							results[s] = out
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if results["s2"] != "removed" || !strings.HasPrefix(results["s1"], declinedPrefix) {
				t.Fatalf("results crossed: %v", results)
			}
			got := map[string]string{}
			for _, d := range obs.decisions() {
				got[d.session] = d.outcome
			}
			if len(got) != 2 || got[goose["s1"]] != obs.denied || got[goose["s2"]] != "allow_once" {
				t.Fatalf("goose received %v for %v", obs.decisions(), goose)
			}
		})
	}
}

// a2aHarness is adk-go's remoteagent as the root agent of a local runner,
// keeping one client session across turns (the HITL resume needs it).
type a2aHarness struct {
	t        *testing.T
	runner   *runner.Runner
	sessions session.Service
}

func newA2AHarness(t *testing.T, base string) *a2aHarness {
	t.Helper()
	hc := &http.Client{Transport: bearer.Transport{Token: testToken}}
	t.Cleanup(hc.CloseIdleConnections)
	remote, err := remoteagent.NewA2A(remoteagent.A2AConfig{
		Name: "goose_remote", Description: "goose behind adk2goose",
		AgentCardProvider: remoteagent.NewAgentCardProvider(base),
		ClientProvider:    remoteagent.NewA2AClientProvider(a2aclient.NewFactory(a2aclient.WithJSONRPCTransport(hc))),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &a2aHarness{t: t, sessions: session.InMemoryService()}
	if h.runner, err = runner.New(runner.Config{AppName: "client", Agent: remote, SessionService: h.sessions}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sessions.Create(t.Context(), &session.CreateRequest{AppName: "client", UserID: "u", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *a2aHarness) run(c *genai.Content, mode agent.StreamingMode) []*session.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 30*time.Second)
	defer cancel()
	var out []*session.Event
	for ev, err := range h.runner.Run(ctx, "u", "s", c, agent.RunConfig{StreamingMode: mode}) {
		if err != nil {
			h.t.Fatalf("remote run: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

func TestA2AConfirmation(t *testing.T) {
	for _, fl := range flavours {
		for _, mode := range []agent.StreamingMode{agent.StreamingModeSSE, agent.StreamingModeNone} {
			for _, approve := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/approve=%v", fl.name, mode, approve), func(t *testing.T) {
					b, obs := startObserved(t, fl.name, approvalScript)
					sc := startSidecar(t, b, t.TempDir(), approveMode)
					h := newA2AHarness(t, sc.URL)

					evs := h.run(genai.NewContentFromText("delete x", genai.RoleUser), mode)
					var conf *genai.FunctionCall
					for _, ev := range evs {
						if len(ev.LongRunningToolIDs) == 1 && ev.Content != nil {
							for _, p := range ev.Content.Parts {
								if p.FunctionCall != nil && p.FunctionCall.ID == ev.LongRunningToolIDs[0] {
									conf = p.FunctionCall
								}
							}
						}
						if ev.ErrorMessage != "" {
							t.Fatalf("error: %s", dumpEvents(evs))
						}
					}
					if conf == nil || conf.Name != "adk_request_confirmation" || jpath(conf.Args, "originalFunctionCall", "name") != "shell" {
						t.Fatalf("no input-required confirmation: %s", dumpEvents(evs))
					}

					answer := &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{
						ID: conf.ID, Name: conf.Name, Response: map[string]any{"confirmed": approve},
					}}}}
					evs = h.run(answer, mode)
					var result, text string
					for _, ev := range evs {
						if ev.ErrorMessage != "" {
							t.Fatalf("error: %s", dumpEvents(evs))
						}
						if ev.Partial || ev.Content == nil {
							continue
						}
						for _, p := range ev.Content.Parts {
							if p.FunctionResponse != nil && p.FunctionResponse.ID == "c1" {
								result, _ = p.FunctionResponse.Response["output"].(string)
							}
							if p.Text != "" && !p.Thought {
								text = p.Text
							}
						}
					}
					want := obs.denied
					if approve {
						want = "allow_once"
						if result != "removed" {
							t.Fatalf("tool result %q: %s", result, dumpEvents(evs))
						}
					} else if !strings.HasPrefix(result, declinedPrefix) {
						t.Fatalf("tool result %q: %s", result, dumpEvents(evs))
					}
					if text != "Done." {
						t.Fatalf("final text %q: %s", text, dumpEvents(evs))
					}
					if d := obs.decisions(); len(d) != 1 || d[0].call != "c1" || d[0].outcome != want {
						t.Fatalf("goose received %v, want %s", d, want)
					}
					// Answering the finished task again is an A2A error, not a hang.
					evs = h.run(answer, mode)
					if last := evs[len(evs)-1]; last.ErrorMessage == "" {
						t.Fatalf("stale answer accepted: %s", dumpEvents(evs))
					}
				})
			}
		}
	}
}

// a2aRaw is a bare a2a-go client, for what remoteagent does not expose
// (task ids, CancelTask, the event types on the wire).
func a2aRaw(t *testing.T, base string) *a2aclient.Client { return a2aAs(t, base, testToken) }

func TestA2ACancel(t *testing.T) {
	running := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "working"}, {Delay: time.Minute, Text: "never"}}})
	for _, fl := range flavours {
		t.Run(fl.name+"/running", func(t *testing.T) {
			b, obs := startObserved(t, fl.name, running)
			sc := startSidecar(t, b, t.TempDir())
			c := a2aRaw(t, sc.URL)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			taskc := make(chan a2a.TaskID, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				req := &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("go"))}
				for ev, err := range c.SendStreamingMessage(ctx, req) {
					if err != nil {
						return
					}
					if au, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok {
						select {
						case taskc <- au.TaskID:
						default:
						}
					}
				}
			}()
			var tid a2a.TaskID
			select {
			case tid = <-taskc:
			case <-time.After(10 * time.Second):
				t.Fatal("no streamed output")
			}
			task, err := c.CancelTask(t.Context(), &a2a.CancelTaskRequest{ID: tid})
			if err != nil || task.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("cancel: %v %+v", err, task)
			}
			poll.Until(t, "goose sees the cancel", func() bool { return len(obs.cancels()) == 1 })
			cancel()
			<-done
		})
		t.Run(fl.name+"/input-required", func(t *testing.T) {
			b, obs := startObserved(t, fl.name, slowAfterApproval)
			sc := startSidecar(t, b, t.TempDir(), approveMode)
			c := a2aRaw(t, sc.URL)
			req := &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("delete x"))}
			var final *a2a.TaskStatusUpdateEvent
			for ev, err := range c.SendStreamingMessage(t.Context(), req) {
				if err != nil {
					t.Fatal(err)
				}
				if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
					final = su
				}
			}
			if final == nil || final.Status.State != a2a.TaskStateInputRequired || final.Status.Message == nil ||
				final.Status.Message.Parts[0].Meta()["adk_is_long_running"] != true {
				t.Fatalf("final status %+v", final)
			}
			task, err := c.CancelTask(t.Context(), &a2a.CancelTaskRequest{ID: final.TaskID})
			for i := 0; err != nil && i < 50 && (strings.Contains(err.Error(), "queue is closed") ||
				strings.Contains(err.Error(), "cannot be canceled")); i++ {
				// a2a-go v2.3.1 still lists the execution for a moment after
				// its final event went out; a cancel in that gap is sent to
				// the finished execution and fails (queue closed, or "not
				// cancelable" input-required: local_manager.go's TODO), so a
				// client retries.
				time.Sleep(10 * time.Millisecond)
				task, err = c.CancelTask(t.Context(), &a2a.CancelTaskRequest{ID: final.TaskID})
			}
			if err != nil || task.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("cancel: %v %+v", err, task)
			}
			poll.Until(t, "goose told deny and cancel", func() bool {
				d := obs.decisions()
				return len(d) == 1 && d[0].outcome == obs.denied && len(obs.cancels()) == 1
			})
		})
	}
}

// A turn that another client of the goose session cancels ends in an error
// on both APIs, GOOSE_CANCELLED on ADK REST and a failed task on A2A, not in
// an answer made of what goose had said before.
func TestGooseCancelledByAnotherClient(t *testing.T) {
	running := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "working"}, {Delay: time.Minute, Text: "never"}}})
	f := goosetest.NewServe(t, goosetest.WithServeScript(running))
	c, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sc := startSidecar(t, c, t.TempDir())
	// cancelOnceRunning cancels the prompt goose is running as soon as there
	// is one, as a second client of the session would.
	cancelOnceRunning := func(ctx context.Context) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				for _, id := range f.SessionIDs() {
					if f.CancelRun(id) {
						return
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		return done
	}
	t.Run("adk rest", func(t *testing.T) {
		sc.createSession("u", "s1")
		cancelled := cancelOnceRunning(t.Context())
		status, frames := sc.runSSE(runBody("u", "s1", "go", true))
		<-cancelled
		if status != http.StatusOK || len(frames) == 0 {
			t.Fatalf("HTTP %d, %d frames", status, len(frames))
		}
		last := frames[len(frames)-1].Data
		msg, _ := last["errorMessage"].(string)
		if last["errorCode"] != gooseagent.ErrorCodeCancelled || !strings.Contains(msg, "another client") {
			t.Fatalf("the last event is not the cancel's error: %v", last)
		}
	})
	t.Run("a2a", func(t *testing.T) {
		cancelled := cancelOnceRunning(t.Context())
		req := &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("go"))}
		var final *a2a.TaskStatusUpdateEvent
		for ev, err := range a2aRaw(t, sc.URL).SendStreamingMessage(t.Context(), req) {
			if err != nil {
				t.Fatal(err)
			}
			if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
				final = su
			}
		}
		<-cancelled
		if final == nil || final.Status.State != a2a.TaskStateFailed || final.Status.Message == nil ||
			!strings.Contains(final.Status.Message.Parts[0].Text(), "another client") {
			t.Fatalf("final status %+v", final)
		}
	})
}

func TestRESTClientDisconnectCancelsGoose(t *testing.T) {
	slow := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{{Text: "a"}, {Delay: time.Minute, Text: "b"}}})
	for _, fl := range flavours {
		for _, phase := range []string{"first turn", "after approval"} {
			t.Run(fl.name+"/"+phase, func(t *testing.T) {
				script := slow
				if phase == "after approval" {
					script = slowAfterApproval
				}
				b, obs := startObserved(t, fl.name, script)
				sc := startSidecar(t, b, t.TempDir(), approveMode)
				sc.createSession("u", "s")
				body := runBody("u", "s", "x", true)
				if phase == "after approval" {
					_, frames := sc.runSSE(body)
					body = answerBody("s", confirmationFrame(t, frames), map[string]any{"confirmed": true})
				}
				j, _ := json.Marshal(body)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sc.URL+"/run_sse", strings.NewReader(string(j)))
				req.Header.Set("X-API-Key", testToken)
				resp, err := httpClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				buf := make([]byte, 1)
				if _, err := resp.Body.Read(buf); err != nil { // the stream is open and goose is busy
					t.Fatal(err)
				}
				start := time.Now()
				cancel()
				poll.Until(t, "goose sees the cancel", func() bool { return len(obs.cancels()) == 1 })
				t.Logf("cancel reached goose after %v", time.Since(start))
			})
		}
	}
}

func TestDrainCancelsPendingConfirmation(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b, obs := startObserved(t, fl.name, slowAfterApproval)
			dir := t.TempDir()
			sc := startSidecar(t, b, dir, approveMode)
			sc.createSession("u", "s")
			_, frames := sc.runSSE(runBody("u", "s", "delete x", true))
			confirmationFrame(t, frames)
			start := time.Now()
			sc.stop()
			if d := time.Since(start); d > time.Second {
				t.Fatalf("shutdown took %v", d)
			}
			// As adk2goose does after its server stopped. What the sidecar
			// sent before reaches goose ahead of the close; the fake records
			// it as it reads it, so the check waits for that.
			_ = b.Close()
			poll.Until(t, "goose to record the denial and the cancel", func() bool {
				d := obs.decisions()
				return len(d) == 1 && d[0].outcome == obs.denied && len(obs.cancels()) == 1
			})
			// The reason survives in the session.
			sc2 := startSidecar(t, b, dir)
			_, evs := sc2.history("u", "s")
			last := evs[len(evs)-1]
			if jpath(last, "errorCode") != gooseagent.ErrorCodeCancelled || !strings.Contains(jpath(last, "errorMessage").(string), "shutting down") {
				t.Fatalf("history: %s\n%v", eventKinds(evs), last)
			}
		})
	}
}

func TestA2AProgressIsStatusMessage(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{}`), Result: "ok"}},
		{Notify: &goosetest.NotifyStep{ToolCallID: "c1", Message: "compiling", Progress: 1, Total: 4}},
		{Text: "Built."},
	}})
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b, _ := startObserved(t, fl.name, script)
			sc := startSidecar(t, b, t.TempDir())
			c := a2aRaw(t, sc.URL)
			req := &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("build"))}
			var progress int
			for ev, err := range c.SendStreamingMessage(t.Context(), req) {
				if err != nil {
					t.Fatal(err)
				}
				switch e := ev.(type) {
				case *a2a.TaskStatusUpdateEvent:
					if e.Status.State == a2a.TaskStateWorking && e.Status.Message != nil &&
						strings.Contains(e.Status.Message.Parts[0].Text(), "compiling") {
						progress++
					}
				case *a2a.TaskArtifactUpdateEvent:
					for _, p := range e.Artifact.Parts {
						if strings.Contains(p.Text(), "compiling") {
							t.Fatalf("progress sent as an artifact: %+v", e)
						}
					}
				}
			}
			if progress != 1 {
				t.Fatalf("%d progress status messages", progress)
			}
			// adk-go's client shows it as a partial thought.
			h := newA2AHarness(t, sc.URL)
			found := false
			evs := h.run(genai.NewContentFromText("build", genai.RoleUser), agent.StreamingModeSSE)
			for _, ev := range evs {
				if ev.Partial && ev.Content != nil && ev.Content.Parts[0].Thought && strings.HasPrefix(ev.Content.Parts[0].Text, "[progress") && strings.Contains(ev.Content.Parts[0].Text, "compiling") {
					found = true
				}
			}
			if !found {
				t.Fatalf("remoteagent did not surface the progress: %s", dumpEvents(evs))
			}
		})
	}
}

// TestA2AConfirmationTimeout: after the timeout the task still says
// input-required in the A2A task store, but the answer is refused with a
// clear failed task rather than resuming anything.
func TestA2AConfirmationTimeout(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			b, obs := startObserved(t, fl.name, slowAfterApproval)
			sc := startSidecar(t, b, t.TempDir(), approveMode, func(c *server.Config) { c.ConfirmationTimeout = 200 * time.Millisecond })
			h := newA2AHarness(t, sc.URL)
			evs := h.run(genai.NewContentFromText("delete x", genai.RoleUser), agent.StreamingModeSSE)
			last := evs[len(evs)-1]
			if len(last.LongRunningToolIDs) != 1 {
				t.Fatalf("no confirmation: %s", dumpEvents(evs))
			}
			poll.Until(t, "goose told of the denial", func() bool {
				d := obs.decisions()
				return len(d) == 1 && d[0].outcome == obs.denied && len(obs.cancels()) == 1
			})
			answer := &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{
				ID: last.LongRunningToolIDs[0], Name: "adk_request_confirmation", Response: map[string]any{"confirmed": true},
			}}}}
			evs = h.run(answer, agent.StreamingModeSSE)
			if e := evs[len(evs)-1]; !strings.Contains(e.ErrorMessage, "no longer pending") || !strings.Contains(e.ErrorMessage, "timed out") {
				t.Fatalf("late answer: %s", dumpEvents(evs))
			}
			if len(obs.decisions()) != 1 {
				t.Fatalf("goose answered twice: %v", obs.decisions())
			}
		})
	}
}
