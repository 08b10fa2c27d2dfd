package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/adk2goose/goose-operator/internal/webui"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest/ttfestages"
)

var (
	traceOnce     sync.Once
	traceExporter *tracetest.InMemoryExporter
	traceProvider *sdktrace.TracerProvider
)

// tracing returns the process's TracerProvider, recording into memory. It
// is also the global one, as in adk2goose: adk-go binds its tracer to the
// first global provider, so there is one for all tests. The recorded spans
// are cleared for each test (none runs in parallel): the tests send fixed
// trace ids, which a repeated run (-count) would otherwise find twice.
func tracing() (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	traceOnce.Do(func() {
		traceExporter = tracetest.NewInMemoryExporter()
		traceProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(traceExporter))
		otel.SetTracerProvider(traceProvider)
	})
	traceExporter.Reset()
	return traceProvider, traceExporter
}

// spansOf returns the ended spans of one trace.
func spansOf(exp *tracetest.InMemoryExporter, id trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// tree renders spans as an indented tree, children by start time; a span
// whose parent is not among them is a root, shown with its parent's id.
func tree(spans tracetest.SpanStubs) string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	known := map[trace.SpanID]bool{}
	for _, s := range spans {
		known[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if known[s.Parent.SpanID()] {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), s.Name)
		if depth == 0 {
			fmt.Fprintf(&b, " (parent %s)", s.Parent.SpanID())
		}
		for _, a := range s.Attributes {
			switch a.Key {
			case "gen_ai.tool.name", "adk2goose.approval.decision", "adk2goose.awaiting_confirmation":
				fmt.Fprintf(&b, " %s=%s", a.Key, a.Value.String())
			}
		}
		for _, e := range s.Events {
			fmt.Fprintf(&b, " [%s]", e.Name)
		}
		b.WriteString("\n")
		kids := children[s.SpanContext.SpanID()]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime.Before(kids[j].StartTime) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].StartTime.Before(roots[j].StartTime) })
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

// TestTraceOfATurnWithApproval: a client's traceparent is the parent of the
// sidecar's span; under it adk-go's invoke_agent span holds the goose
// session, the goose prompt, the tool call and, under the tool call, the
// wait for the client's approval, which the next request (same trace,
// another client span) answers. The ADK web UI's trace endpoint returns the
// session's spans.
func TestTraceOfATurnWithApproval(t *testing.T) {
	tp, exp := tracing()
	script := func(_, _ string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{
			{Text: "let me check"},
			{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "removed", NeedsApproval: true}},
			{Text: "it is gone"},
			{Usage: &goosetest.UsageStep{Input: 10, Output: 5}},
		}}
	}
	fake := goosetest.NewServe(t, goosetest.WithServeScript(script))
	b, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sc := startSidecar(t, b, t.TempDir(), approveMode, func(c *server.Config) { c.TracerProvider = tp })
	sc.createSession("u", "traced")

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	first, second := "b7ad6b7169203331", "00f067aa0ba902b7"
	frames := sc.runSSEWith(runBody("u", "traced", "remove x", true), "00-"+traceID+"-"+first+"-01")
	id := confirmationFrame(t, frames)
	frames = sc.runSSEWith(answerBody("traced", id, map[string]any{"confirmed": true}), "00-"+traceID+"-"+second+"-01")
	if !strings.Contains(mustJSON(t, frames), "it is gone") {
		t.Fatalf("answer: %v", frames)
	}

	tid, _ := trace.TraceIDFromHex(traceID)
	spans := spansOf(exp, tid)
	got := tree(spans)
	t.Logf("span tree:\n%s", got)
	want := `POST /run_sse (parent ` + first + `)
  invoke_agent goose
    goose.session
    goose.prompt adk2goose.awaiting_confirmation=true [first_event]
      goose.tool_call gen_ai.tool.name=shell
        goose.approval_wait gen_ai.tool.name=shell adk2goose.approval.decision=allow_once
POST /run_sse (parent ` + second + `)
  invoke_agent goose
    goose.prompt adk2goose.awaiting_confirmation=false [first_event]
`
	if got != want {
		t.Fatalf("span tree:\n%s\nwant:\n%s", got, want)
	}
	// goose continues the trace from session/prompt's _meta.traceparent,
	// whose parent is the goose.prompt span.
	var prompt trace.SpanID
	for _, s := range spans {
		if s.Name == gooseagent.SpanPrompt && prompt == (trace.SpanID{}) {
			prompt = s.SpanContext.SpanID()
		}
	}
	if p := fake.Prompts(); len(p) != 1 || p[0].Traceparent != "00-"+traceID+"-"+prompt.String()+"-01" {
		t.Fatalf("goose got prompts %+v, want one with traceparent 00-%s-%s-01", p, traceID, prompt)
	}

	// The web UI's trace view, as `goosectl ui` serves it: adk-go's UI asks
	// its backendUrl (the goosectl proxy, which adds the token) for the
	// session's spans from adkrest's debug store, fed by the same provider.
	backend, _ := url.Parse(sc.URL)
	ui, err := webui.NewHandler(webui.Config{Origin: "http://127.0.0.1:8000", Backend: backend, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	ui.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "http://127.0.0.1:8000"+webui.APIPrefix+"/dev/apps/goose/debug/trace/session/traced", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("trace view: %d %s", rec.Code, rec.Body)
	}
	var view []struct {
		Name    string `json:"name"`
		TraceID string `json:"trace_id"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &view); err != nil {
		t.Fatalf("trace view: %v: %s", err, rec.Body)
	}
	names := map[string]bool{}
	for _, s := range view {
		names[s.Name] = true
	}
	for _, name := range []string{"POST /run_sse", "invoke_agent goose", gooseagent.SpanSession, gooseagent.SpanPrompt, gooseagent.SpanToolCall, gooseagent.SpanApprovalWait} {
		if !names[name] {
			t.Errorf("the session's trace view lacks %s: %s", name, rec.Body)
		}
	}
}

// TestPromptSpanTimesTheFirstEvent: the goose.prompt span says when the
// turn's first event went out (its first_event event, stamped then, though
// the span is given it as it ends) and how long after the turn began
// (adk2goose.time_to_first_event_ms).
func TestPromptSpanTimesTheFirstEvent(t *testing.T) {
	tp, exp := tracing()
	const gap = 200 * time.Millisecond // between the first delta and the end; a loaded machine only makes it longer
	script := func(_, _ string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "first"}, {Delay: gap, Text: " and last"}}}
	}
	fake := goosetest.NewServe(t, goosetest.WithServeScript(script))
	b, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sc := startSidecar(t, b, t.TempDir(), func(c *server.Config) { c.TracerProvider = tp })
	sc.createSession("u", "timed")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	if frames := sc.runSSEWith(runBody("u", "timed", "hi", true), "00-"+traceID+"-00f067aa0ba902b7-01"); !strings.Contains(mustJSON(t, frames), "and last") {
		t.Fatalf("run: %v", frames)
	}
	tid, _ := trace.TraceIDFromHex(traceID)
	var prompt *tracetest.SpanStub
	for _, s := range spansOf(exp, tid) {
		if s.Name == gooseagent.SpanPrompt {
			prompt = &s
		}
	}
	if prompt == nil {
		t.Fatalf("no %s span in %s", gooseagent.SpanPrompt, tree(spansOf(exp, tid)))
	}
	var first time.Time
	for _, e := range prompt.Events {
		if e.Name == "first_event" {
			first = e.Time
		}
	}
	// The first event goes out a little after goose sends the first delta,
	// and the span ends soon after the last: a quarter of the gap is a
	// bound that a loaded machine keeps, and an event stamped as the span
	// ends breaks.
	if first.IsZero() || first.Before(prompt.StartTime) || first.After(prompt.EndTime.Add(-gap/4)) {
		t.Errorf("first_event at %v, want it within the span (%v to %v) and at least %v before its end",
			first, prompt.StartTime, prompt.EndTime, gap/4)
	}
	var ms float64
	for _, a := range prompt.Attributes {
		if a.Key == gooseagent.AttrTimeToFirstEventMS {
			ms = a.Value.AsFloat64()
		}
	}
	// The turn began before its prompt span did.
	if sincePrompt := float64(first.Sub(prompt.StartTime)) / float64(time.Millisecond); ms <= 0 || ms < sincePrompt {
		t.Errorf("time_to_first_event_ms = %v, want it at least the %v ms from the span's start to its first_event", ms, sincePrompt)
	}
}

// runSSEWith is runSSE with a traceparent header.
func (s *sidecar) runSSEWith(body any, traceparent string) []sseFrame {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(s.t.Context(), http.MethodPost, s.URL+"/run_sse", strings.NewReader(mustJSON(s.t, body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Traceparent", traceparent)
	resp, err := s.httpc().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("run_sse: %d", resp.StatusCode)
	}
	return readSSE(s.t, resp.Body)
}

// TestTraceFollowsPeerForwarding: a turn for a session another pod owns is
// forwarded under a peer_forward span, and the owner continues the trace.
func TestTraceFollowsPeerForwarding(t *testing.T) {
	tp, exp := tracing()
	var mu sync.Mutex
	urls := [2]string{}
	pods := [2]*sidecar{}
	for i := range pods {
		pods[i] = startSidecar(t, flavours[0].start(t, goosetest.Echo), t.TempDir(), func(c *server.Config) {
			c.TracerProvider = tp
			c.Peers = func(context.Context) ([]string, error) {
				mu.Lock()
				defer mu.Unlock()
				return []string{urls[1-i]}, nil
			}
		})
		mu.Lock()
		urls[i] = pods[i].URL
		mu.Unlock()
	}
	pods[0].createSessionHere("u", "owned")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	frames := pods[1].runSSEWith(runBody("u", "owned", "hello", true), "00-"+traceID+"-00f067aa0ba902b7-01")
	if !strings.Contains(mustJSON(t, frames), "echo: ") {
		t.Fatalf("forwarded turn: %v", frames)
	}
	tid, _ := trace.TraceIDFromHex(traceID)
	got := tree(spansOf(exp, tid))
	t.Logf("span tree:\n%s", got)
	want := `POST /run_sse (parent 00f067aa0ba902b7)
  adk2goose.peer_forward
    POST /run_sse
      invoke_agent goose
        goose.session
        goose.prompt adk2goose.awaiting_confirmation=false [first_event]
`
	if got != want {
		t.Fatalf("span tree:\n%s\nwant:\n%s", got, want)
	}
}

// TestTraceOfAnA2AMessage: an A2A message's traceparent is the parent too;
// adk-go's executor runs the turn under the request's span.
func TestTraceOfAnA2AMessage(t *testing.T) {
	tp, exp := tracing()
	sc := startSidecar(t, flavours[0].start(t, goosetest.Echo), t.TempDir(), func(c *server.Config) { c.TracerProvider = tp })
	const traceID = "5bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, sc.URL+server.A2APathV1, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tid, _ := trace.TraceIDFromHex(traceID)
	got := tree(spansOf(exp, tid))
	t.Logf("span tree:\n%s", got)
	for _, want := range []string{"POST " + server.A2APathV1 + " (parent 00f067aa0ba902b7)\n", "\n  invoke_agent goose\n", "\n    goose.prompt "} {
		if !strings.Contains(got, want) {
			t.Fatalf("span tree lacks %q:\n%s", want, got)
		}
	}
}

// The web UI's trace view keeps the newest DebugTraces turns' traces: an
// older session's are gone, the newest session's are there.
func TestTraceViewKeepsTheNewestTraces(t *testing.T) {
	tp, _ := tracing()
	i := slices.IndexFunc(flavours, func(f flavour) bool { return f.name == "goosed" })
	sc := startSidecar(t, flavours[i].start(t, goosetest.Echo), t.TempDir(), func(c *server.Config) {
		c.TracerProvider, c.DebugTraces = tp, 2
	})
	view := func(session string) []string {
		code, body := sc.do(http.MethodGet, "/dev/apps/"+appName+"/debug/trace/session/"+session, nil)
		if code != http.StatusOK {
			t.Fatalf("trace view of %s: %d %s", session, code, body)
		}
		var spans []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(body, &spans); err != nil {
			t.Fatalf("trace view of %s: %v: %s", session, err, body)
		}
		names := make([]string, len(spans))
		for i, s := range spans {
			names[i] = s.Name
		}
		return names
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		sc.createSession("u", id)
		if code, _ := sc.runSSE(runBody("u", id, "hi", true)); code != http.StatusOK {
			t.Fatalf("turn of %s: %d", id, code)
		}
	}
	if got := view("s3"); !slices.Contains(got, "POST /run_sse") {
		t.Errorf("newest session's trace view %v lacks its turn", got)
	}
	if got := view("s1"); len(got) != 0 {
		t.Errorf("oldest session's trace view %v: want it gone with 2 traces kept", got)
	}
}

// The web UI's trace view of a session carries what hack/streampaths splits
// a turn's time to first event by (ttfestages.FromDebugSpans): the server,
// agent and prompt spans' starts in order, and the prompt's time to first
// event.
func TestTraceViewMarksATurnsStages(t *testing.T) {
	tp, _ := tracing()
	i := slices.IndexFunc(flavours, func(f flavour) bool { return f.name == "serve" })
	sc := startSidecar(t, flavours[i].start(t, goosetest.Echo), t.TempDir(), func(c *server.Config) { c.TracerProvider = tp })
	sc.createSession("u", "marked")
	if code, _ := sc.runSSE(runBody("u", "marked", "hi", true)); code != http.StatusOK {
		t.Fatalf("turn: %d", code)
	}
	code, body := sc.do(http.MethodGet, "/debug/trace/session/marked", nil)
	if code != http.StatusOK {
		t.Fatalf("trace view: %d %s", code, body)
	}
	var spans []ttfestages.DebugSpan
	if err := json.Unmarshal(body, &spans); err != nil {
		t.Fatalf("trace view: %v: %s", err, body)
	}
	turn, err := ttfestages.FromDebugSpans(spans)
	if err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	// The first event is placed from the turn's start, a few calls after
	// invoke_agent's: only its order against the agent span is certain.
	if !turn.Server.Before(turn.Invoke) || turn.Prompt.Before(turn.Invoke) || !turn.First.After(turn.Invoke) {
		t.Errorf("marks out of order: server %s, invoke %s, prompt %s, first event %s",
			turn.Server.Format(time.StampMicro), turn.Invoke.Format(time.StampMicro), turn.Prompt.Format(time.StampMicro), turn.First.Format(time.StampMicro))
	}
}
