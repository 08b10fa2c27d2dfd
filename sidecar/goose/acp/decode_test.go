package acp

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// Seeds are goose's own frames (goose-acp.md §2.6, §3.1).
var decodeSeeds = []struct{ method, params string }{
	{methodSessionUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Let me look."},"_meta":{"goose":{"created":1784563200,"messageId":"msg_a1"}}}}`},
	{methodSessionUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"I should list"},"_meta":{"goose":{"created":1784563200,"messageId":"msg_a1"}}}}`},
	{methodSessionUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"tool_call","toolCallId":"toolu_01X","title":"developer: shell","rawInput":{"command":"ls -la"},"_meta":{"goose":{"toolCall":{"toolName":"shell","extensionName":"developer"}}}}}`},
	{methodSessionUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"tool_call_update","toolCallId":"toolu_01X","title":"listing files in directory"}}`},
	{methodSessionUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"tool_call_update","toolCallId":"toolu_01X","status":"completed","content":[{"type":"content","content":{"type":"text","text":"total 8"}}],"rawOutput":{"files":3}}}`},
	{methodSessionUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"usage_update","used":2398,"size":128000,"cost":{"amount":0.0118,"currency":"USD"}}}`},
	{methodSessionUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"session_info_update","_meta":{"goose":{"activeRunId":null}}}}`},
	{methodSessionUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"available_commands_update","availableCommands":[]}}`},
	{methodGooseUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"usage_update","used":2398,"contextLimit":128000,"accumulatedInputTokens":4420,"accumulatedOutputTokens":171,"accumulatedCost":0.0118}}`},
	{methodGooseUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"message_usage","messageId":"msg_a2","usage":{"inputTokens":2310,"outputTokens":88,"totalTokens":2398,"cacheReadTokens":0,"cacheWriteTokens":0,"cost":0.0061,"costSource":"estimated","elapsedMs":2140,"timeToFirstTokenMs":610,"isCompaction":false}}}`},
	{methodGooseUpdate, `{"sessionId":"20260720_1","update":{"sessionUpdate":"status_message","status":{"type":"notice","message":"compacting"}}}`},
}

// frameOf is a notification frame as goose sends it.
func frameOf(method string, params []byte) []byte {
	return []byte(`{"jsonrpc":"2.0","method":"` + method + `","params":` + string(params) + `}`)
}

// notificationOf decodes a notification frame with these params.
func notificationOf(method string, params []byte) (decoded, error) {
	f, err := decodeFrame(frameOf(method, params))
	if err != nil {
		return decoded{}, err
	}
	return f.notification()
}

func TestDecodeNotificationGooseFrames(t *testing.T) {
	want := []func(d decoded) bool{
		func(d decoded) bool {
			e, ok := d.Event.(*goose.TextDelta)
			return ok && e.MessageID == "msg_a1" && e.Text == "Let me look."
		},
		func(d decoded) bool { e, ok := d.Event.(*goose.ThinkingDelta); return ok && e.MessageID == "msg_a1" },
		func(d decoded) bool {
			e, ok := d.Event.(*goose.ToolRequest)
			return ok && e.Name == "shell" && string(e.Arguments) == `{"command":"ls -la"}`
		},
		func(d decoded) bool { return d.Event == nil },
		func(d decoded) bool {
			e, ok := d.Event.(*goose.ToolResponse)
			return ok && e.Text == "total 8" && !e.IsError && string(e.Structured) == `{"files":3}`
		},
		func(d decoded) bool {
			e, ok := d.Event.(*goose.UsageUpdate)
			return ok && d.StableUsage && e.Last.TotalTokens == 2398 && e.ContextLimit == 128000 && *e.Accumulated.Cost == 0.0118
		},
		// session_info_update: activeRunId null is a run's end.
		func(d decoded) bool { return d.Event == nil && d.ActiveRun != nil && *d.ActiveRun == "" },
		func(d decoded) bool { return d.Event == nil && d.ActiveRun == nil },
		func(d decoded) bool {
			e, ok := d.Event.(*goose.UsageUpdate)
			return ok && e.HasAccumulated && d.Accumulated.TotalTokens == 4591 && *d.Accumulated.Cost == 0.0118
		},
		func(d decoded) bool {
			e, ok := d.Event.(*goose.UsageUpdate)
			return ok && !e.HasAccumulated && e.Last.InputTokens == 2310 && e.Last.TotalTokens == 2398 && *e.Last.Cost == 0.0061
		},
		func(d decoded) bool {
			e, ok := d.Event.(*goose.Notification)
			return ok && e.Kind == "notice" && e.Message == "compacting"
		},
	}
	for i, s := range decodeSeeds {
		d, err := notificationOf(s.method, []byte(s.params))
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		if d.SessionID != "20260720_1" || !want[i](d) {
			t.Errorf("seed %d decoded to %+v (event %#v)", i, d, d.Event)
		}
	}
	if _, err := notificationOf(methodSessionUpdate, []byte(`{"update":{"sessionUpdate":"plan","entries":[]}}`)); !errors.Is(err, errNoSession) {
		t.Errorf("a notification without sessionId: %v", err)
	}
}

// TestDecodeNotificationTextChunks: what a text chunk says, in the forms
// goose and JSON give it, and the chunks that say nothing or are refused.
func TestDecodeNotificationTextChunks(t *testing.T) {
	chunk := func(update string) []byte {
		return []byte(`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk",` + update + `}}`)
	}
	for _, c := range []struct {
		name   string
		params []byte
		want   goose.Event
	}{
		{"the ACP messageId wins over goose's", chunk(`"messageId":"m1","content":{"type":"text","text":"x"},"_meta":{"goose":{"messageId":"m2"}}`),
			&goose.TextDelta{MessageID: "m1", Text: "x"}},
		{"a null messageId falls back to goose's", chunk(`"messageId":null,"content":{"type":"text","text":"x"},"_meta":{"goose":{"messageId":"m2"}}`),
			&goose.TextDelta{MessageID: "m2", Text: "x"}},
		{"an empty messageId falls back to goose's", chunk(`"messageId":"","content":{"type":"text","text":"x"},"_meta":{"goose":{"messageId":"m2"}}`),
			&goose.TextDelta{MessageID: "m2", Text: "x"}},
		{"a goose messageId that is no string is none", chunk(`"content":{"type":"text","text":"x"},"_meta":{"goose":{"messageId":7}}`),
			&goose.TextDelta{Text: "x"}},
		{"escapes and raw UTF-8", chunk(`"content":{"type":"text","text":"a \"b\"\\\n\tc\u0001\/\u00e9 日本 😀"}`),
			&goose.TextDelta{Text: "a \"b\"\\\n\tc\x01/é 日本 😀"}},
		{"an image says nothing", chunk(`"content":{"type":"image","data":"AA==","mimeType":"image/png"}`), nil},
		{"ACP's _meta of another type is ignored", []byte(`{"_meta":5,"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"},"_meta":{"goose":{"messageId":["m"]}}}}`),
			&goose.TextDelta{Text: "hi"}},
		{"the user's own chunk says nothing", []byte(`{"sessionId":"s","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}}`), nil},
	} {
		d, err := notificationOf(methodSessionUpdate, c.params)
		if err != nil || d.SessionID != "s" || !reflect.DeepEqual(d.Event, c.want) {
			t.Errorf("%s: decoded %+v (%#v), %v; want %#v", c.name, d, d.Event, err, c.want)
		}
	}
	for _, params := range []string{
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":7}}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text"}}}`,
		`{"sessionId":5,"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`,
		`"params"`,
		`not json`,
	} {
		if d, err := notificationOf(methodSessionUpdate, []byte(params)); err == nil {
			t.Errorf("%s: decoded %+v, want an error", params, d)
		}
	}
}

// TestDecodeNotificationActiveRun: session_info_update's activeRunId is a
// run's start (its id) or end (null); without it the update says neither.
func TestDecodeNotificationActiveRun(t *testing.T) {
	info := func(meta string) []byte {
		return []byte(`{"sessionId":"s","update":{"sessionUpdate":"session_info_update","_meta":` + meta + `}}`)
	}
	run := func(id string) *string { return &id }
	for _, c := range []struct {
		meta string
		want *string
	}{
		{`{"goose":{"activeRunId":"run_1"}}`, run("run_1")},
		{`{"goose":{"activeRunId":null}}`, run("")},
		{`{"goose":{}}`, nil},
		{`{"goose":"r"}`, nil},
		{`null`, nil},
	} {
		d, err := notificationOf(methodSessionUpdate, info(c.meta))
		if err != nil || d.Event != nil || !reflect.DeepEqual(d.ActiveRun, c.want) {
			t.Errorf("_meta %s: decoded %+v, %v; want active run %v", c.meta, d, err, c.want)
		}
	}
}

// TestDecodeNotificationToolCalls: a tool call's arguments and result as
// goose sent them, and a result that cannot be read.
func TestDecodeNotificationToolCalls(t *testing.T) {
	update := func(u string) []byte { return []byte(`{"sessionId":"s","update":` + u + `}`) }
	for _, c := range []struct {
		name   string
		params []byte
		want   goose.Event
	}{
		{"arguments keep their JSON", update(`{"sessionUpdate":"tool_call","toolCallId":"t","title":"developer: shell","rawInput":{"n":12345678901234567890,"z":1,"a":"<&>"}}`),
			&goose.ToolRequest{ID: "t", Name: "developer: shell", Arguments: json.RawMessage(`{"n":12345678901234567890,"z":1,"a":"<&>"}`)}},
		{"null arguments are none", update(`{"sessionUpdate":"tool_call","toolCallId":"t","title":"x","rawInput":null,"_meta":{"goose":{"toolCall":{"toolName":"shell"}}}}`),
			&goose.ToolRequest{ID: "t", Name: "shell"}},
		{"a tool name that is no string is none", update(`{"sessionUpdate":"tool_call","toolCallId":"t","title":"x","_meta":{"goose":{"toolCall":{"toolName":5},"messageId":"m"}}}`),
			&goose.ToolRequest{ID: "t", Name: "x"}},
		{"a failure joins its text and skips the rest", update(`{"sessionUpdate":"tool_call_update","toolCallId":"t","status":"failed","content":[{"type":"content","content":{"type":"text","text":"a"}},{"type":"diff","path":"/p","newText":"b"},{"type":"content","content":{"type":"text","text":"c"}}],"rawOutput":null,"_meta":{"goose":{"toolCall":{"toolName":"shell"}}}}`),
			&goose.ToolResponse{ID: "t", Name: "shell", Text: "a\nc", IsError: true}},
		{"in_progress says nothing", update(`{"sessionUpdate":"tool_call_update","toolCallId":"t","status":"in_progress","content":[{"type":"content","content":{"type":"text","text":"a"}}]}`), nil},
	} {
		d, err := notificationOf(methodSessionUpdate, c.params)
		if err != nil || !reflect.DeepEqual(d.Event, c.want) {
			t.Errorf("%s: decoded %#v, %v; want %#v", c.name, d.Event, err, c.want)
		}
	}
	if d, err := notificationOf(methodSessionUpdate, update(`{"sessionUpdate":"tool_call_update","toolCallId":"t","status":"completed","content":[{"type":"content","content":{"type":"text","text":5}}]}`)); err == nil {
		t.Errorf("a result with unreadable content decoded to %#v", d.Event)
	}
}

// FuzzDecodeFrame: any frame from goose decodes without a panic; only a
// frame that is no JSON-RPC object is refused; what a notification means
// keeps its invariants, and an error says what failed.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add(frameOf(s.method, []byte(s.params)))
	}
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"x","update":{"sessionUpdate":"tool_call_update","toolCallId":"t","status":"failed","content":[{"type":"diff","path":"/a","newText":"b"}]}}}`,
		`{"jsonrpc":"2.0","method":"_goose/unstable/session/update","params":{"sessionId":"x","update":{"sessionUpdate":"message_usage"}}}`,
		`{"jsonrpc":"2.0","method":"_goose/unstable/session/update","params":{"sessionId":"x","update":{"sessionUpdate":"message_usage","usage":{"inputTokens":3,"outputTokens":2}}}}`,
		`{"jsonrpc":"2.0","method":"other","params":null}`,
		`{"jsonrpc":"2.0","id":"r1","method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"t","title":"shell","rawInput":{"command":"ls"}},"options":[{"optionId":"o","name":"Allow","kind":"allow_once"}]}}`,
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"r1"}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"m","data":{"x":1}}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":"x"}}`,
		`{"method":5}`, `[1]`, `not json`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := decodeFrame(data)
		if err != nil {
			var envelope struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(data, &envelope) == nil {
				t.Fatalf("refused a JSON-RPC object whose method reads: %v", err)
			}
			return
		}
		// A JSON object whatever its values hold (1e700 is valid JSON that no
		// float64 holds): RawMessage values are not parsed into numbers.
		if fr.Invalid != nil && json.Unmarshal(data, new(map[string]json.RawMessage)) != nil {
			t.Fatalf("frame that is not a JSON object decoded with only its params invalid: %v", fr.Invalid)
		}
		d, err := fr.notification()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "failed to decode "+fr.Method+": ") || errors.Unwrap(err) == nil {
				t.Fatalf("error not wrapped with its context: %v", err)
			}
			return
		}
		if fr.Invalid != nil {
			t.Fatalf("notification read from params that were invalid: %v", fr.Invalid)
		}
		if d.Accumulated != nil && !d.Custom {
			t.Fatalf("accumulated usage from a stable notification: %+v", d)
		}
		if d.Event != nil && d.SessionID == "" {
			t.Fatalf("event without session: %#v", d.Event)
		}
		if d.Accumulated != nil && d.Accumulated.TotalTokens != d.Accumulated.Total() {
			t.Fatalf("accumulated usage without its total: %+v", *d.Accumulated)
		}
		if u, ok := d.Event.(*goose.UsageUpdate); ok && (u.Last.TotalTokens != u.Last.Total() || u.Accumulated.TotalTokens != u.Accumulated.Total()) {
			t.Fatalf("usage without its total: %+v", u)
		}
	})
}

func TestParseExportUsage(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       goose.Usage
	}{
		{"accumulated_usage", `{"accumulated_usage":{"input_tokens":600,"output_tokens":60,"total_tokens":700},"accumulated_cost":1}`,
			goose.Usage{InputTokens: 600, OutputTokens: 60, TotalTokens: 700}},
		{"accumulated_usage without a total", `{"accumulated_usage":{"input_tokens":600,"output_tokens":60}}`,
			goose.Usage{InputTokens: 600, OutputTokens: 60, TotalTokens: 660}},
		{"flat fields with a zero total", `{"accumulated_input_tokens":5,"accumulated_output_tokens":1,"accumulated_total_tokens":0}`,
			goose.Usage{InputTokens: 5, OutputTokens: 1, TotalTokens: 6}},
		{"no usage yet", `{"accumulated_usage":null}`, goose.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseExportUsage([]byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			cost := got.Cost
			got.Cost = nil
			if got != tc.want {
				t.Errorf("parseExportUsage = %+v, want %+v", got, tc.want)
			}
			if tc.name == "accumulated_usage" && (cost == nil || *cost != 1) {
				t.Errorf("cost = %v, want 1", cost)
			}
		})
	}
}

// FuzzParseExportUsage: goose's exported session, any bytes of it, reads
// without a panic as usage with its total, or an error.
func FuzzParseExportUsage(f *testing.F) {
	for _, s := range []string{
		`{"accumulated_usage":{"input_tokens":600,"output_tokens":60,"total_tokens":700},"accumulated_cost":1}`,
		`{"accumulated_input_tokens":5,"accumulated_output_tokens":1,"accumulated_total_tokens":0}`,
		`{"accumulated_usage":null}`, `null`, `[]`, `{"accumulated_usage":{"input_tokens":"x"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := parseExportUsage(data)
		if err != nil {
			if u != (goose.Usage{}) {
				t.Fatalf("usage %+v beside the error %v", u, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("%q is no JSON, yet read as %+v", data, u)
		}
		if u.TotalTokens != u.Total() {
			t.Fatalf("usage without its total: %+v", u)
		}
	})
}

// BenchmarkDecodeFrameTextChunk: the frame a reply is mostly made of, from
// its bytes to its event.
func BenchmarkDecodeFrameTextChunk(b *testing.B) {
	data := frameOf(methodSessionUpdate, []byte(decodeSeeds[0].params))
	b.ReportAllocs()
	for b.Loop() {
		f, err := decodeFrame(data)
		if err != nil {
			b.Fatal(err)
		}
		d, err := f.notification()
		if err != nil || d.Event == nil {
			b.Fatalf("decoded %+v, %v", d, err)
		}
	}
}
