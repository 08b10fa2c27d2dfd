package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
		d, err := decodeNotification(s.method, []byte(s.params))
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		if d.SessionID != "20260720_1" || !want[i](d) {
			t.Errorf("seed %d decoded to %+v (event %#v)", i, d, d.Event)
		}
	}
	if _, err := decodeNotification(methodSessionUpdate, []byte(`{"update":{"sessionUpdate":"plan","entries":[]}}`)); err == nil {
		t.Error("want error for a notification without sessionId")
	}
}

func FuzzDecodeNotification(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add(s.method, []byte(s.params))
	}
	f.Add(methodSessionUpdate, []byte(`{"sessionId":"x","update":{"sessionUpdate":"tool_call_update","toolCallId":"t","status":"failed","content":[{"type":"diff","path":"/a","newText":"b"}]}}`))
	f.Add(methodGooseUpdate, []byte(`{"sessionId":"x","update":{"sessionUpdate":"message_usage"}}`))
	f.Add(methodGooseUpdate, []byte(`{"sessionId":"x","update":{"sessionUpdate":"message_usage","usage":{"inputTokens":3,"outputTokens":2}}}`))
	f.Add("other", []byte(`null`))
	f.Fuzz(func(t *testing.T, method string, params []byte) {
		d, err := decodeNotification(method, params)
		if err != nil {
			return
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

// plainNames reports whether params is JSON whose objects name each member
// once (case folded), with no case variant of a name the SDK's union types
// or messageID match exactly.
func plainNames(params []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(params))
	var objects []map[string]bool // the names of each open object so far
	var inObject []bool           // for each open container: an object (else an array)
	expectName := func() bool { return len(inObject) > 0 && inObject[len(inObject)-1] }
	afterName := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
		if s, isString := tok.(string); isString && expectName() && !afterName {
			folded := strings.ToLower(s)
			names := objects[len(objects)-1]
			if names[folded] {
				return false
			}
			names[folded] = true
			for _, exact := range []string{"sessionUpdate", "type", "goose", "messageId"} {
				if strings.EqualFold(s, exact) && s != exact {
					return false
				}
			}
			afterName = true
			continue
		}
		afterName = false
		switch tok {
		case json.Delim('{'):
			inObject = append(inObject, true)
			objects = append(objects, map[string]bool{})
		case json.Delim('['):
			inObject = append(inObject, false)
		case json.Delim('}'):
			inObject = inObject[:len(inObject)-1]
			objects = objects[:len(objects)-1]
		case json.Delim(']'):
			inObject = inObject[:len(inObject)-1]
		}
	}
}

// BenchmarkDecodeTextChunk: one of goose's text delta frames, scanned
// (scanTextChunkFrame, what the client does first), read whole through
// encoding/json (unmarshalTextChunkFrame, for frames the scan leaves) and
// through the transport's rpcMessage and the SDK's types; side by side.
func BenchmarkDecodeTextChunk(b *testing.B) {
	frame := []byte(frameOf(decodeSeeds[0].method, decodeSeeds[0].params))
	taken := func(read func([]byte) (decoded, bool)) func([]byte) (decoded, error) {
		return func(frame []byte) (decoded, error) {
			d, ok := read(frame)
			if !ok {
				return d, errors.New("not taken")
			}
			return d, nil
		}
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) (decoded, error)
	}{
		{"scan", taken(scanTextChunkFrame)},
		{"whole", taken(unmarshalTextChunkFrame)},
		{"rpc+sdk", readThroughDispatch},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, err := c.decode(frame); err != nil || d.Event == nil {
					b.Fatal(d, err)
				}
			}
		})
	}
}

// frameOf is a notification frame as goose sends it.
func frameOf(method, params string) string {
	return `{"jsonrpc":"2.0","method":"` + method + `","params":` + params + `}`
}

// readThroughDispatch reads a notification frame as the transport and
// decodeNotification do when readTextChunkFrame leaves it.
func readThroughDispatch(frame []byte) (decoded, error) {
	var m rpcMessage
	if err := json.Unmarshal(frame, &m); err != nil {
		return decoded{}, err
	}
	if m.ID != nil || m.Method == "" {
		return decoded{}, fmt.Errorf("not a notification: %+v", m)
	}
	return decodeNotification(m.Method, m.Params)
}

// FuzzTextChunkFrameReadsAsDispatch: a frame readTextChunkFrame takes is a
// session/update notification that the transport and the SDK's types read
// the same, unless a name is repeated or a case variant (see textChunk).
func FuzzTextChunkFrameReadsAsDispatch(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(frameOf(s.method, s.params)))
	}
	for _, params := range []string{
		`{"sessionId":"s","_meta":{},"update":{"sessionUpdate":"agent_thought_chunk","messageId":null,"content":{"type":"text","text":"x","annotations":{"priority":1}}}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text"}}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"_meta":{"goose":{"messageId":7}}}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"_meta":{"goose":[1]}}}`,
		"{\"sessionId\":\"s\",\"update\":{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"x\"},\"_meta\":{\"goose\":{\"messageId\":\"m\xff\\u00e9\"}}}}",
		"{\"sessionId\":\"s\",\"update\":{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"x\"},\"_meta\":{\"goose\":{\"messageId\":\"m\xff\"}}}}",
	} {
		f.Add([]byte(frameOf(methodSessionUpdate, params)))
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":3,"method":"session/update","params":` + decodeSeeds[0].params + `}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"session/update","params":` + decodeSeeds[0].params + `,"error":{"code":"x"}}`))
	f.Add([]byte(`{"jsonrpc":2,"method":"session/update","params":` + decodeSeeds[1].params + `}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		whole, ok := readTextChunkFrame(frame)
		if !ok || !plainNames(frame) {
			return
		}
		viaDispatch, err := readThroughDispatch(frame)
		if err != nil || !reflect.DeepEqual(whole, viaDispatch) {
			t.Fatalf("whole %+v (%#v); through dispatch %+v (%#v), %v", whole, whole.Event, viaDispatch, viaDispatch.Event, err)
		}
	})
}

// TestGooseTextChunkFramesAreTakenWhole: goose's text and thinking chunk
// frames are read in one pass, as the transport and the SDK read them; its
// other frames, requests, responses and anything the SDK would not read as
// a text chunk are left to the transport.
func TestGooseTextChunkFramesAreTakenWhole(t *testing.T) {
	for i, s := range decodeSeeds {
		frame := []byte(frameOf(s.method, s.params))
		whole, ok := readTextChunkFrame(frame)
		if want := s.method == methodSessionUpdate && strings.Contains(s.params, `_chunk"`); ok != want {
			t.Errorf("seed %d: taken %v, want %v", i, ok, want)
			continue
		}
		if !ok {
			continue
		}
		viaDispatch, err := readThroughDispatch(frame)
		if err != nil || !reflect.DeepEqual(whole, viaDispatch) {
			t.Errorf("seed %d: whole %+v (%#v), through dispatch %+v (%#v), %v", i, whole, whole.Event, viaDispatch, viaDispatch.Event, err)
		}
	}
	// messageId as the ACP field, which wins over goose's _meta.
	whole, ok := readTextChunkFrame([]byte(frameOf(methodSessionUpdate, `{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"hi"},"_meta":{"goose":{"messageId":"m2"}}}}`)))
	if e, isText := whole.Event.(*goose.TextDelta); !ok || !isText || e.MessageID != "m1" || e.Text != "hi" {
		t.Errorf("got %+v (%#v), %v", whole, whole.Event, ok)
	}
	for _, frame := range []string{
		frameOf(methodSessionUpdate, `{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA==","mimeType":"image/png"}}}`),
		frameOf(methodSessionUpdate, `{"sessionId":"s","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}}`),
		frameOf(methodSessionUpdate, `{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`),
		frameOf(methodSessionUpdate, `{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":7}}}`),
		frameOf(methodGooseUpdate, `{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`),
		`{"jsonrpc":"2.0","id":3,"method":"session/update","params":` + decodeSeeds[0].params + `}`,
		`{"jsonrpc":"2.0","method":"session/update","params":` + decodeSeeds[0].params + `,"error":{"code":"x"}}`,
		frameOf(methodSessionUpdate, `{"_meta":5,"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`),
		`{"jsonrpc":"2.0","id":4,"result":{"stopReason":"end_turn"}}`,
	} {
		if d, ok := readTextChunkFrame([]byte(frame)); ok {
			t.Errorf("%s: taken whole: %+v", frame, d)
		}
	}
}
