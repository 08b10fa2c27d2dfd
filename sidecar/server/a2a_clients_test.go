package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// This file reads the sidecar's A2A 0.3 stream (message/stream on
// /a2a/invoke) the way two clients nobody on the project wrote do:
//
//   - ADK for TypeScript (@google/adk 2.0.0) RemoteA2AAgent, ported from its
//     dist/esm/a2a: event_converter_utils.js (toAdkEvent),
//     a2a_remote_agent_run_processor.js (aggregatePartial,
//     updateCustomMetadata), a2a_remote_agent_utils.js
//     (toMissingRemoteSessionParts: the contextId of the next turn) and
//     sessions/base_session_service.js (partial events are not stored);
//   - an A2A JS SDK application folding artifact chunks into its task view
//     (append concatenates parts, otherwise the artifact is replaced), as
//     a2a-js's own task store does with artifact-update events.
//
// adk-go's remoteagent is exercised with the real client in a2a_test.go.

// a2a03Stream posts one 0.3 message/stream and returns every result.
func (s *sidecar) a2a03Stream(msg map[string]any) []map[string]any {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": map[string]any{"message": msg}})
	req, _ := http.NewRequestWithContext(s.t.Context(), http.MethodPost, s.URL+"/a2a/invoke", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := s.httpc().Do(req)
	if err != nil {
		s.t.Fatalf("message/stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("message/stream: %d", resp.StatusCode)
	}
	var out []map[string]any
	for _, f := range readSSE(s.t, resp.Body) {
		res, ok := f.Data["result"].(map[string]any)
		if !ok {
			s.t.Fatalf("message/stream frame without result: %v", f.Data)
		}
		out = append(out, res)
	}
	return out
}

// tsEvent is the part of an ADK TS Event these checks look at.
type tsEvent struct {
	Author       string
	Texts        []string // text parts, thoughts included (as the UI shows them)
	Calls        []string // function call names
	Responses    []string // function response names
	Partial      bool
	TurnComplete bool
	ErrorMessage string
	LongRunning  []string
	Custom       map[string]any
}

func (e tsEvent) text() string { return strings.Join(e.Texts, "") }

// tsRemoteAgent is ADK TS's RemoteA2AAgent with its runner's session: only
// non-partial events are stored, and the next turn's contextId is the
// stored custom metadata a2a:context_id of this agent's last event.
type tsRemoteAgent struct {
	sc      *sidecar
	name    string
	session []tsEvent
}

// turn sends text and returns the events the runner yields, in order.
func (a *tsRemoteAgent) turn(text string) []tsEvent {
	msg := map[string]any{"kind": "message", "messageId": fmt.Sprintf("m%d", len(a.session)), "role": "user",
		"parts": []any{map[string]any{"kind": "text", "text": text}}}
	for _, v := range slices.Backward(a.session) {
		if v.Author == a.name {
			if c, ok := v.Custom["a2a:context_id"].(string); ok && c != "" {
				msg["contextId"] = c
			}
			break
		}
	}
	a.session = append(a.session, tsEvent{Author: "user", Texts: []string{text}})
	return a.send(msg)
}

// answer sends a function response to a long-running call, with the task
// and context of the event that made the call (getUserFunctionCallAt).
func (a *tsRemoteAgent) answer(callID, name string, response map[string]any) []tsEvent {
	msg := map[string]any{"kind": "message", "messageId": fmt.Sprintf("m%d", len(a.session)), "role": "user",
		"parts": []any{map[string]any{"kind": "data", "data": map[string]any{"id": callID, "name": name, "response": response},
			"metadata": map[string]any{"adk_type": "function_response"}}}}
	for _, v := range slices.Backward(a.session) {
		if slices.Contains(v.LongRunning, callID) {
			msg["taskId"], msg["contextId"] = v.Custom["a2a:task_id"], v.Custom["a2a:context_id"]
			break
		}
	}
	a.session = append(a.session, tsEvent{Author: "user", Responses: []string{name}})
	return a.send(msg)
}

func (a *tsRemoteAgent) send(msg map[string]any) []tsEvent {
	var out []tsEvent
	agg := newTSAggregator()
	for _, chunk := range a.sc.a2a03Stream(msg) {
		ev, ok := tsToAdkEvent(chunk, a.name)
		if !ok {
			continue
		}
		tsUpdateCustomMetadata(&ev, chunk)
		for _, e := range agg.aggregatePartial(chunk, ev, a.name) {
			out = append(out, e)
			if !e.Partial {
				a.session = append(a.session, e)
			}
		}
	}
	return out
}

// tsToAdkEvent is toAdkEvent; false where it returns undefined.
func tsToAdkEvent(chunk map[string]any, agent string) (tsEvent, bool) {
	meta, _ := chunk["metadata"].(map[string]any)
	ev := tsEvent{Author: agent, Partial: truthy(meta["adk_partial"])}
	switch chunk["kind"] {
	case "message":
		ev.add(jpath(chunk, "parts"))
		ev.Partial, ev.TurnComplete = false, true
		return ev, true
	case "task":
		for _, art := range asSlice(chunk["artifacts"]) {
			ev.add(jpath(art, "parts"))
		}
		ev.add(jpath(chunk, "status", "message", "parts"))
		state := jpath(chunk, "status", "state")
		failed := state == "failed"
		if len(ev.Texts)+len(ev.Calls)+len(ev.Responses) == 0 && !failed {
			return ev, false
		}
		ev.TurnComplete = slices.Contains([]any{"completed", "failed", "canceled", "rejected", "input-required"}, state)
		if failed {
			ev.ErrorMessage = firstText(jpath(chunk, "status", "message", "parts"))
		}
		return ev, true
	case "artifact-update":
		parts := asSlice(jpath(chunk, "artifact", "parts"))
		if len(parts) == 0 {
			return ev, false
		}
		ev.add(parts)
		ev.Partial = truthy(jpath(chunk, "artifact", "metadata", "adk_partial")) || truthy(chunk["append"]) || !truthy(chunk["lastChunk"])
		return ev, true
	case "status-update":
		parts := asSlice(jpath(chunk, "status", "message", "parts"))
		if len(parts) == 0 {
			return ev, false
		}
		ev.add(parts)
		if truthy(chunk["final"]) {
			ev.TurnComplete = true
			if jpath(chunk, "status", "state") == "failed" {
				ev.ErrorMessage = firstText(parts)
				ev.Texts = nil
			}
			return ev, true
		}
		ev.Partial = true
		return ev, true
	}
	return ev, false
}

// add is toGenAIParts plus getLongRunningToolIDs.
func (e *tsEvent) add(parts any) {
	for _, p := range asSlice(parts) {
		switch jpath(p, "kind") {
		case "text":
			e.Texts = append(e.Texts, jpath(p, "text").(string))
		case "data":
			switch jpath(p, "metadata", "adk_type") {
			case "function_call":
				e.Calls = append(e.Calls, fmt.Sprint(jpath(p, "data", "name")))
				if truthy(jpath(p, "metadata", "adk_is_long_running")) {
					e.LongRunning = append(e.LongRunning, fmt.Sprint(jpath(p, "data", "id")))
				}
			case "function_response":
				e.Responses = append(e.Responses, fmt.Sprint(jpath(p, "data", "name")))
			default: // toGenAIPartData: any other data part becomes its JSON as text
				j, _ := json.Marshal(jpath(p, "data"))
				e.Texts = append(e.Texts, string(j))
			}
		}
	}
}

// tsUpdateCustomMetadata is A2ARemoteAgentRunProcessor.updateCustomMetadata.
func tsUpdateCustomMetadata(ev *tsEvent, chunk map[string]any) {
	if ev.Custom == nil {
		ev.Custom = map[string]any{}
	}
	if chunk["kind"] == "task" {
		ev.Custom["a2a:task_id"], ev.Custom["a2a:context_id"] = chunk["id"], chunk["contextId"]
		return
	}
	if chunk["taskId"] != nil {
		ev.Custom["a2a:task_id"], ev.Custom["a2a:context_id"] = chunk["taskId"], chunk["contextId"]
	}
}

// tsAggregator is A2ARemoteAgentRunProcessor.aggregatePartial.
type tsAggregator struct {
	aggs  map[string]*tsEvent
	order []string
}

func newTSAggregator() *tsAggregator { return &tsAggregator{aggs: map[string]*tsEvent{}} }

func (a *tsAggregator) remove(id string) {
	delete(a.aggs, id)
	a.order = slices.DeleteFunc(a.order, func(s string) bool { return s == id })
}

func (a *tsAggregator) build(agg *tsEvent, agent string) tsEvent {
	out := *agg
	out.Author, out.Partial, out.TurnComplete = agent, false, false
	if t := strings.Join(agg.Texts, ""); t != "" {
		out.Texts = []string{t}
	}
	return out
}

func (a *tsAggregator) aggregatePartial(chunk map[string]any, ev tsEvent, agent string) []tsEvent {
	meta, _ := chunk["metadata"].(map[string]any)
	if chunk["kind"] == "artifact-update" {
		meta, _ = jpath(chunk, "artifact", "metadata").(map[string]any)
	}
	if truthy(meta["adk_partial"]) {
		return []tsEvent{ev}
	}
	switch chunk["kind"] {
	case "status-update":
		if !truthy(chunk["final"]) {
			return []tsEvent{ev}
		}
		var out []tsEvent
		for _, id := range a.order {
			out = append(out, a.build(a.aggs[id], agent))
		}
		a.aggs, a.order = map[string]*tsEvent{}, nil
		return append(out, ev)
	case "task":
		a.aggs, a.order = map[string]*tsEvent{}, nil
		return []tsEvent{ev}
	case "artifact-update":
	default:
		return []tsEvent{ev}
	}
	id := fmt.Sprint(jpath(chunk, "artifact", "artifactId"))
	if !truthy(chunk["append"]) {
		a.remove(id)
		if truthy(chunk["lastChunk"]) {
			ev.Partial = false
			return []tsEvent{ev}
		}
	}
	agg, ok := a.aggs[id]
	if !ok {
		agg = &tsEvent{}
		a.aggs[id] = agg
	}
	a.order = append(slices.DeleteFunc(a.order, func(s string) bool { return s == id }), id)
	agg.Texts = append(agg.Texts, ev.Texts...)
	agg.Calls = append(agg.Calls, ev.Calls...)
	agg.Responses = append(agg.Responses, ev.Responses...)
	agg.Custom = ev.Custom
	if !truthy(chunk["lastChunk"]) {
		return []tsEvent{ev}
	}
	a.remove(id)
	return []tsEvent{ev, a.build(agg, agent)}
}

// jsTaskView folds a stream into the task an A2A JS SDK application shows:
// the task result starts it, artifact-updates append to or replace their
// artifact, status-updates set the state.
type jsTaskView struct {
	ID, ContextID, State string
	artifacts            map[string][]string // artifact id -> texts
	order                []string
}

func foldJS(t *testing.T, chunks []map[string]any) *jsTaskView {
	t.Helper()
	v := &jsTaskView{artifacts: map[string][]string{}}
	for _, c := range chunks {
		switch c["kind"] {
		case "task":
			v.ID, v.ContextID = fmt.Sprint(c["id"]), fmt.Sprint(c["contextId"])
			v.State = fmt.Sprint(jpath(c, "status", "state"))
		case "status-update":
			v.State = fmt.Sprint(jpath(c, "status", "state"))
		case "artifact-update":
			id := fmt.Sprint(jpath(c, "artifact", "artifactId"))
			old, known := v.artifacts[id]
			if truthy(c["append"]) && !known {
				t.Fatalf("append to artifact %s the client never saw: %v", id, c)
			}
			if !known {
				v.order = append(v.order, id)
			}
			var texts []string
			for _, p := range asSlice(jpath(c, "artifact", "parts")) {
				texts = append(texts, partText(p))
			}
			if truthy(c["append"]) {
				texts = append(old, texts...)
			}
			v.artifacts[id] = texts
		}
	}
	return v
}

// texts is every artifact's text, in order.
func (v *jsTaskView) texts() []string {
	var out []string
	for _, id := range v.order {
		out = append(out, strings.Join(v.artifacts[id], ""))
	}
	return out
}

// taskArtifactTexts reads tasks/get: every artifact's text, in order.
func (s *sidecar) taskArtifactTexts(taskID string) (string, []string) {
	s.t.Helper()
	code, body := s.do(http.MethodPost, "/a2a/invoke", map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": map[string]any{"id": taskID}})
	var resp map[string]any
	if code != http.StatusOK || json.Unmarshal(body, &resp) != nil || resp["result"] == nil {
		s.t.Fatalf("tasks/get: %d %s", code, body)
	}
	var out []string
	for _, art := range asSlice(jpath(resp, "result", "artifacts")) {
		var b strings.Builder
		for _, p := range asSlice(jpath(art, "parts")) {
			b.WriteString(partText(p))
		}
		out = append(out, b.String())
	}
	return fmt.Sprint(jpath(resp, "result", "status", "state")), out
}

// partText renders a part as a client shows it: text, a data part's JSON.
func partText(p any) string {
	if jpath(p, "kind") == "text" {
		return fmt.Sprint(jpath(p, "text"))
	}
	j, _ := json.Marshal(jpath(p, "data"))
	return string(j)
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case nil:
		return false
	case string:
		return b != ""
	}
	return true
}

func firstText(parts any) string {
	if p := asSlice(parts); len(p) > 0 && jpath(p[0], "kind") == "text" {
		return fmt.Sprint(jpath(p[0], "text"))
	}
	return ""
}

func dumpTS(evs []tsEvent) string {
	j, _ := json.MarshalIndent(evs, "", " ")
	return string(j)
}

// TestA2AStreamAsADKTypeScript: what ADK TS's RemoteA2AAgent yields and
// stores over two streamed turns, and what a JS SDK application and
// tasks/get show for the same tasks.
func TestA2AStreamAsADKTypeScript(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			sc := startSidecar(t, fl.start(t, goosetest.Echo), t.TempDir())
			ts := &tsRemoteAgent{sc: sc, name: "goose_ts"}
			var contexts []any
			for i, text := range []string{"hello ts", "and again"} {
				want := "echo: " + text
				evs := ts.turn(text)
				var partial strings.Builder
				var finals []tsEvent
				for _, ev := range evs {
					if ev.ErrorMessage != "" || strings.Contains(ev.text(), "{}") {
						t.Fatalf("turn %d: bad event %s", i, dumpTS(evs))
					}
					if ev.Partial {
						partial.WriteString(ev.text())
					} else {
						finals = append(finals, ev)
					}
				}
				// The deltas once as partials, the whole text once, stored.
				if partial.String() != want || len(finals) != 1 || finals[0].text() != want {
					t.Fatalf("turn %d: partials %q, finals %s", i, partial.String(), dumpTS(finals))
				}
				stored := ts.session[len(ts.session)-1]
				if stored.text() != want || stored.Custom["a2a:context_id"] == nil {
					t.Fatalf("turn %d: stored %s", i, dumpTS(ts.session))
				}
				contexts = append(contexts, stored.Custom["a2a:context_id"])

				// tasks/get and a JS SDK client's folded view: one artifact, the text.
				chunks := sc.a2a03Stream(map[string]any{"kind": "message", "messageId": fmt.Sprintf("js%d", i), "role": "user",
					"parts": []any{map[string]any{"kind": "text", "text": text}}})
				view := foldJS(t, chunks)
				state, arts := sc.taskArtifactTexts(view.ID)
				if state != "completed" || !slices.Equal(arts, []string{want}) || view.State != "completed" || !slices.Equal(view.texts(), arts) {
					t.Fatalf("turn %d: tasks/get %s %q, JS view %s %q", i, state, arts, view.State, view.texts())
				}
			}
			// Turn 2 went to the same context, hence the same goose session.
			if contexts[0] != contexts[1] {
				t.Fatalf("second turn opened context %v, first was %v", contexts[1], contexts[0])
			}
			ctxID := fmt.Sprint(contexts[0])
			code, body := sc.do(http.MethodGet, "/apps/"+appName+"/users/A2A_USER_"+ctxID+"/sessions/"+ctxID, nil)
			var sess map[string]any
			if code != http.StatusOK || json.Unmarshal(body, &sess) != nil || len(asSlice(sess["events"])) != 4 {
				t.Fatalf("ADK session of the context: %d %s", code, body)
			}
		})
	}
}

// TestA2AStreamToolsAndProgressAsADKTypeScript: tool calls, their results
// and a progress notification (sent as a status message, whose chunk
// artifact the next delta then starts) reach ADK TS and JS SDK clients
// whole, and the task store takes every update.
func TestA2AStreamToolsAndProgressAsADKTypeScript(t *testing.T) {
	script := goosetest.Fixed(goosetest.Reply{Steps: []goosetest.Step{
		{Text: "Let me look."},
		{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"ls"}`), Result: "README.md"}},
		{Notify: &goosetest.NotifyStep{ToolCallID: "c1", Message: "compiling", Progress: 1, Total: 4}},
		{Text: "Built."},
	}})
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			sc := startSidecar(t, fl.start(t, script), t.TempDir())
			ts := &tsRemoteAgent{sc: sc, name: "goose_ts"}
			evs := ts.turn("build")
			var stored []string
			for _, ev := range ts.session[1:] {
				if ev.ErrorMessage != "" {
					t.Fatalf("error: %s", dumpTS(evs))
				}
				stored = append(stored, fmt.Sprintf("%s%v%v", ev.text(), ev.Calls, ev.Responses))
			}
			want := []string{"Let me look.[shell][]", "[][shell]", "Built.[][]"}
			if !slices.Equal(stored, want) {
				t.Fatalf("stored %q, want %q; yielded %s", stored, want, dumpTS(evs))
			}
			progress := false
			for _, ev := range evs {
				progress = progress || (ev.Partial && strings.Contains(ev.text(), "compiling"))
			}
			if !progress {
				t.Fatalf("progress not shown: %s", dumpTS(evs))
			}

			view := foldJS(t, sc.a2a03Stream(map[string]any{"kind": "message", "messageId": "js", "role": "user",
				"parts": []any{map[string]any{"kind": "text", "text": "build"}}}))
			state, arts := sc.taskArtifactTexts(view.ID)
			if state != "completed" || view.State != "completed" || !slices.Equal(view.texts(), arts) || len(arts) != 3 || arts[2] != "Built." {
				t.Fatalf("tasks/get %s %q, JS view %s %q", state, arts, view.State, view.texts())
			}
		})
	}
}

// TestA2AApprovalAsADKTypeScript: a goose tool approval reaches ADK TS as a
// stored long-running adk_request_confirmation call; its answer, sent the
// way ADK TS resumes a task, runs the tool and the reply goes on.
func TestA2AApprovalAsADKTypeScript(t *testing.T) {
	for _, fl := range flavours {
		t.Run(fl.name, func(t *testing.T) {
			sc := startSidecar(t, fl.start(t, approvalScript), t.TempDir(), approveMode)
			ts := &tsRemoteAgent{sc: sc, name: "goose_ts"}
			evs := ts.turn("delete x")
			last := ts.session[len(ts.session)-1]
			if len(last.LongRunning) != 1 || !slices.Equal(last.Calls, []string{"adk_request_confirmation"}) || !last.TurnComplete ||
				last.Custom["a2a:task_id"] == nil {
				t.Fatalf("no stored confirmation call: %s", dumpTS(evs))
			}
			evs = ts.answer(last.LongRunning[0], "adk_request_confirmation", map[string]any{"confirmed": true})
			var stored []string
			for _, ev := range evs {
				if ev.ErrorMessage != "" {
					t.Fatalf("error: %s", dumpTS(evs))
				}
				if !ev.Partial {
					stored = append(stored, fmt.Sprintf("%s%v", ev.text(), ev.Responses))
				}
			}
			if !slices.Equal(stored, []string{"[shell]", "Done.[]"}) {
				t.Fatalf("after the answer: %q in %s", stored, dumpTS(evs))
			}
		})
	}
}
