package server_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/server"
)

// strictRun mirrors adkrest's RunAgentRequest, decoded as strictly as adkrest does.
type strictRun struct {
	AppName    string          `json:"appName"`
	UserID     string          `json:"userId"`
	SessionID  string          `json:"sessionId"`
	NewMessage genai.Content   `json:"newMessage"`
	Streaming  bool            `json:"streaming,omitempty"`
	StateDelta *map[string]any `json:"stateDelta,omitempty"`
}

func decodeStrict(b []byte) (strictRun, error) {
	var r strictRun
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return r, d.Decode(&r)
}

func TestNormalizeRunRequest(t *testing.T) {
	in := `{"app_name":"a","userId":"u","user_id":"ignored","session_id":"s","functionCallEventId":"x",
		"new_message":{"parts":[{"function_response":{"id":"1","name":"f","response":{"snake_key":1}}},{"text":"t","unknownPartField":1}]}}`
	out, dropped, err := server.NormalizeRunRequest([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeStrict(out)
	if err != nil {
		t.Fatalf("adkrest would reject %s: %v", out, err)
	}
	if r.AppName != "a" || r.UserID != "u" || r.SessionID != "s" || r.NewMessage.Role != "user" {
		t.Fatalf("%+v", r)
	}
	fr := r.NewMessage.Parts[0].FunctionResponse
	if fr == nil || fr.Response["snake_key"] == nil {
		t.Fatalf("function response altered: %s", out)
	}
	if len(dropped) != 1 || dropped[0] != "functionCallEventId" {
		t.Fatalf("dropped %v", dropped)
	}
}

func FuzzNormalizeRunRequest(f *testing.F) {
	for _, s := range []string{
		`{"appName":"a","userId":"u","sessionId":"s","newMessage":{"role":"user","parts":[{"text":"hi"}]},"streaming":true}`,
		`{"app_name":"a","user_id":"u","session_id":"s","new_message":"hi","state_delta":{"k":1},"functionCallEventId":"e"}`,
		`{"appName":"a","userId":"u","sessionId":"s","newMessage":{"parts":[{"inline_data":{"mime_type":"text/plain","data":"aGk="}}]}}`,
		`{"appName":"a","userId":"u","sessionId":"s","newMessage":{"parts":"x"}}`,
		`null`, `[]`, `{}`, `"x"`, `{"streaming":"maybe"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, _, err := server.NormalizeRunRequest(b)
		if err != nil {
			if out != nil {
				t.Fatalf("output with error")
			}
			return
		}
		r, err := decodeStrict(out)
		if err != nil {
			t.Fatalf("normalised body %s rejected by a strict decoder: %v", out, err)
		}
		if r.AppName == "" || r.UserID == "" || r.SessionID == "" || r.NewMessage.Role == "" {
			t.Fatalf("required field empty after normalisation: %s", out)
		}
		// Normalising is idempotent.
		again, _, err := server.NormalizeRunRequest(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %s -> %s (%v)", out, again, err)
		}
	})
}
