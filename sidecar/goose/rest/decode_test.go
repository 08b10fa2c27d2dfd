package rest

import (
	"errors"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

const ts0 = `{"inputTokens":0,"outputTokens":0,"totalTokens":0,"accumulatedInputTokens":0,"accumulatedOutputTokens":0,"accumulatedTotalTokens":0,"accumulatedCost":null}`

func TestDecoderFrames(t *testing.T) {
	tests := []struct {
		name   string
		frames []string
		want   string // event kinds
		check  func(t *testing.T, evs []goose.Event)
		err    error
		done   bool
	}{
		{
			name:   "ping ignored",
			frames: []string{`{"type":"Ping"}`},
			want:   "",
		},
		{
			name:   "system notification progress and notice",
			frames: []string{`{"type":"Message","message":{"id":"m","role":"assistant","created":1,"content":[{"type":"systemNotification","notificationType":"progressMessage","msg":"compacting"},{"type":"systemNotification","notificationType":"inlineMessage","msg":"fyi"}],"metadata":{"userVisible":true,"agentVisible":false}},"token_state":` + ts0 + `}`},
			want:   "Notification,Notification",
			check: func(t *testing.T, evs []goose.Event) {
				t.Helper()
				a, b := evs[0].(*goose.Notification), evs[1].(*goose.Notification)
				if a.Kind != "progress" || a.Message != "compacting" || b.Kind != "notice" || b.Message != "fyi" {
					t.Errorf("%+v %+v", a, b)
				}
			},
		},
		{
			name: "tool error status and bare content array",
			frames: []string{
				`{"type":"Message","message":{"id":"m","role":"assistant","created":1,"content":[{"type":"toolRequest","id":"c1","toolCall":{"status":"error","error":"bad json"}}],"metadata":{"userVisible":true,"agentVisible":true}},"token_state":` + ts0 + `}`,
				`{"type":"Message","message":{"id":"u","role":"user","created":1,"content":[{"type":"toolResponse","id":"c1","toolResult":{"status":"error","error":"no such tool"}},{"type":"toolResponse","id":"c2","toolResult":{"status":"success","value":[{"type":"text","text":"a"},{"type":"image","data":"x","mimeType":"image/png"},{"type":"text","text":"b"}]}}],"metadata":{"userVisible":true,"agentVisible":true}},"token_state":` + ts0 + `}`,
			},
			want: "ToolRequest,ToolResponse,ToolResponse",
			check: func(t *testing.T, evs []goose.Event) {
				t.Helper()
				if r := evs[1].(*goose.ToolResponse); !r.IsError || r.Text != "no such tool" {
					t.Errorf("%+v", r)
				}
				if r := evs[2].(*goose.ToolResponse); r.IsError || r.Text != "a\nb" {
					t.Errorf("%+v", r)
				}
			},
		},
		{
			name:   "user text echo is not a delta; elicitation ignored",
			frames: []string{`{"type":"Message","message":{"role":"user","created":1,"content":[{"type":"text","text":"/clear"},{"type":"actionRequired","data":{"actionType":"elicitation","id":"e","message":"?","requested_schema":{}}}],"metadata":{"userVisible":true,"agentVisible":true}},"token_state":` + ts0 + `}`},
			want:   "",
		},
		{
			name:   "early Error alone is held until the stream ends",
			frames: []string{`{"type":"Error","error":"Provider not set"}`},
			want:   "",
		},
		{
			name:   "Error then Finish yields usage then AgentError",
			frames: []string{`{"type":"Error","error":"x"}`, `{"type":"Finish","reason":"stop","token_state":{"inputTokens":1,"outputTokens":1,"totalTokens":2,"accumulatedInputTokens":1,"accumulatedOutputTokens":1,"accumulatedTotalTokens":2,"accumulatedCost":0.1}}`},
			want:   "UsageUpdate",
			err:    &goose.AgentError{Message: "x"},
			done:   true,
		},
		{
			name:   "unchanged token state emits nothing",
			frames: []string{`{"type":"Finish","reason":"stop","token_state":` + ts0 + `}`},
			want:   "Finish",
			done:   true,
		},
		{
			name:   "1.41 cache fields count as a change",
			frames: []string{`{"type":"Finish","reason":"stop","token_state":{"inputTokens":0,"outputTokens":0,"totalTokens":0,"accumulatedInputTokens":0,"accumulatedOutputTokens":0,"accumulatedTotalTokens":0,"accumulatedCost":null,"cacheReadTokens":5,"cacheWriteTokens":0,"accumulatedCacheReadTokens":5,"accumulatedCacheWriteTokens":0}}`},
			want:   "UsageUpdate,Finish",
			done:   true,
		},
		{
			name:   "unknown and later variants are skipped",
			frames: []string{`{"type":"UpdateConversation","conversation":[]}`, `{"type":"ActiveRequests","request_ids":[]}`, `{"type":"SomethingNew"}`},
			want:   "",
		},
		{
			// Decoded in one pass with the variants read: a skipped variant
			// whose "message" or other fields have other shapes is still
			// skipped, not an error.
			name:   "skipped variants may reuse field names with other types",
			frames: []string{`{"type":"SomethingNew","message":"a string","token_state":[1],"usage":7}`, `{"type":"Message","message":{"id":"m","role":"assistant","created":1,"content":[{"type":"text","text":"still here"}],"metadata":{"userVisible":true,"agentVisible":true}}}`},
			want:   "TextDelta",
		},
		{
			name:   "malformed JSON is an error",
			frames: []string{`{"type":`},
			done:   true,
		},
		{
			name:   "malformed content of a Message is an error",
			frames: []string{`{"type":"Message","message":{"id":"m","role":"assistant","created":1,"content":[{"type":"text","text":5}],"metadata":{"userVisible":true,"agentVisible":true}}}`},
			done:   true,
		},
		{
			name:   "malformed params of a Notification is an error",
			frames: []string{`{"type":"Notification","request_id":"c","message":{"method":"notifications/progress","params":{"progress":"half"}}}`},
			done:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d decoder
			var evs []goose.Event
			var done bool
			var err error
			for _, f := range tt.frames {
				evs, done, err = d.feed([]byte(f), evs)
				if done {
					break
				}
			}
			if got := kinds(evs); got != tt.want {
				t.Fatalf("events %q, want %q", got, tt.want)
			}
			if done != tt.done {
				t.Errorf("done %v, want %v", done, tt.done)
			}
			var ae *goose.AgentError
			switch {
			case tt.err != nil:
				if want, ok := errors.AsType[*goose.AgentError](tt.err); !ok || !errors.As(err, &ae) || ae.Message != want.Message {
					t.Errorf("error %v, want %v", err, tt.err)
				}
			case strings.HasPrefix(tt.name, "malformed"):
				if err == nil {
					t.Error("no error for malformed JSON")
				}
			case err != nil:
				t.Errorf("error %v", err)
			}
			if tt.check != nil {
				tt.check(t, evs)
			}
		})
	}
}

// FuzzDecodeEvent feeds arbitrary frames to the MessageEvent decoder: it
// must never panic, must end (done) on every error, and never emit nil.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"type":"Message","message":{"id":"a","role":"assistant","created":1,"content":[{"type":"text","text":"hi"}],"metadata":{"userVisible":true,"agentVisible":true}},"token_state":` + ts0 + `}`))
	f.Add([]byte(`{"type":"Notification","request_id":"c","message":{"method":"notifications/progress","params":{"progress":1,"total":2}}}`))
	f.Add([]byte(`{"type":"Message","message":{"id":null,"role":"assistant","created":1,"content":[{"type":"actionRequired","data":{"actionType":"toolConfirmation","id":"c","toolName":"t","arguments":{},"prompt":null}}],"metadata":{"userVisible":true,"agentVisible":false}},"token_state":` + ts0 + `}`))
	f.Add([]byte(`{"type":"MessageUsage","message_id":null,"usage":{"inputTokens":1,"cost":0.1}}`))
	f.Add([]byte(`{"type":"MessageUsage","message_id":null,"usage":{"inputTokens":3,"outputTokens":2,"totalTokens":0}}`))
	f.Add([]byte(`{"type":"Finish","reason":"stop","token_state":{"inputTokens":3,"outputTokens":2,"totalTokens":0,"accumulatedInputTokens":3,"accumulatedOutputTokens":2,"accumulatedTotalTokens":0,"accumulatedCost":null}}`))
	f.Add([]byte(`{"type":"Error","error":"x"}`))
	f.Add([]byte(`{"type":"Finish","reason":"stop","token_state":` + ts0 + `}`))
	f.Add([]byte(`{"type":"Message","message":{"role":"user","created":1,"content":[{"type":"toolResponse","id":"c","toolResult":{"status":"success","value":{"content":[{"type":"text","text":"r"}],"structuredContent":{"a":1},"isError":true}}}],"metadata":{"userVisible":true,"agentVisible":true}}}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		var d decoder
		for range 2 { // twice: state carried between frames must stay sound
			evs, done, err := d.feed(frame, nil)
			for _, e := range evs {
				if e == nil {
					t.Fatal("nil event")
				}
				if u, ok := e.(*goose.UsageUpdate); ok && (u.Last.TotalTokens != u.Last.Total() || u.Accumulated.TotalTokens != u.Accumulated.Total()) {
					t.Fatalf("usage without its total: %+v", u)
				}
			}
			if err != nil && !done {
				t.Fatalf("error %v without done", err)
			}
			if done {
				return
			}
		}
	})
}
