package runrequest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"
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

// canonical is what adkrest is handed for body.
func canonical(body []byte) ([]byte, error) {
	req, err := Decode(body)
	if err != nil {
		return nil, err
	}
	return json.Marshal(req)
}

func TestDecodeRunRequest(t *testing.T) {
	in := `{"app_name":"a","userId":"u","user_id":"ignored","session_id":"s","functionCallEventId":"x",
		"new_message":{"parts":[{"function_response":{"id":"1","name":"f","response":{"snake_key":1}}},{"text":"t","unknownPartField":1},
		{"inline_data":{"mime_type":"text/plain","data":"aGk=","display_name":"d"},"thought_signature":"c2ln"},
		{"file_data":{"file_uri":"gs://b/f","mimeType":"camel/wins","mime_type":"snake/loses"},"video_metadata":{"start_offset":"1s","endOffset":"3s","fps":2}},
		{"function_call":{"id":"2","name":"g","args":{"snake_arg":{"mime_type":"kept"}}},"functionCall":{"id":"3","name":"camel"}}]},
		"streaming":"true","state_delta":{"k":"v"}}`
	out, err := canonical([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeStrict(out)
	if err != nil {
		t.Fatalf("adkrest would reject %s: %v", out, err)
	}
	if r.AppName != "a" || r.UserID != "u" || r.SessionID != "s" || r.NewMessage.Role != "user" || !r.Streaming || (*r.StateDelta)["k"] != "v" {
		t.Fatalf("%s", out)
	}
	p := r.NewMessage.Parts
	if len(p) != 5 || p[0].FunctionResponse == nil || p[0].FunctionResponse.Response["snake_key"] == nil || p[1].Text != "t" {
		t.Fatalf("parts: %s", out)
	}
	if b := p[2].InlineData; b == nil || b.MIMEType != "text/plain" || string(b.Data) != "hi" || b.DisplayName != "d" || string(p[2].ThoughtSignature) != "sig" {
		t.Fatalf("inline data: %s", out)
	}
	if f, v := p[3].FileData, p[3].VideoMetadata; f == nil || f.FileURI != "gs://b/f" || f.MIMEType != "camel/wins" ||
		v == nil || v.StartOffset != time.Second || v.EndOffset != 3*time.Second || v.FPS == nil || *v.FPS != 2 {
		t.Fatalf("file data, video metadata: %s", out)
	}
	if fc := p[4].FunctionCall; fc == nil || fc.Name != "camel" {
		t.Fatalf("function call: %s (the camelCase spelling wins)", out)
	}
	// User data keeps its keys.
	if _, err := canonical([]byte(strings.Replace(in, `"functionCall":{"id":"3","name":"camel"}`, `"x":1`, 1))); err != nil {
		t.Fatal(err)
	}
	if fc := mustDecode(t, strings.Replace(in, `,"functionCall":{"id":"3","name":"camel"}`, ``, 1)).NewMessage.Parts[4].FunctionCall; fc.Args["snake_arg"].(map[string]any)["mime_type"] != "kept" {
		t.Fatalf("function call args renamed: %+v", fc.Args)
	}
}

func mustDecode(t *testing.T, body string) *Request {
	t.Helper()
	req, err := Decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestDecodeRunRequestRejects(t *testing.T) {
	const ids = `"appName":"a","userId":"u","sessionId":"s"`
	for body, want := range map[string]string{
		``:                      "body must be a JSON object",
		`[1,2]`:                 "body must be a JSON object",
		`null`:                  "body must be a JSON object",
		`{"appName":`:           "body must be a JSON object",
		`{` + ids + `} trailer`: "body must be a JSON object",
		`{` + ids + `,"newMessage":{"parts":[{"text":` + `}`:             "body must be a JSON object",
		`{"userId":"u","sessionId":"s","newMessage":"x"}`:                "appName is required",
		`{"appName":null,"userId":"u","sessionId":"s","newMessage":"x"}`: "appName is required",
		`{"appName":"a","userId":"","sessionId":"s","newMessage":"x"}`:   "userId must be a non-empty string",
		`{"appName":"a","userId":"u","sessionId":7,"newMessage":"x"}`:    "sessionId must be a non-empty string",
		`{` + ids + `}`:                                                                "newMessage is required",
		`{` + ids + `,"newMessage":null}`:                                              "newMessage is required",
		`{` + ids + `,"newMessage":[1]}`:                                               "newMessage: must be a Content object",
		`{` + ids + `,"newMessage":{"parts":"x"}}`:                                     "newMessage: parts must be an array",
		`{` + ids + `,"newMessage":{"role":5}}`:                                        "newMessage: invalid content: role cannot be a number",
		`{` + ids + `,"newMessage":{"parts":[{"inlineData":{"data":"%%"}}]}}`:          "newMessage: invalid content: illegal base64 data",
		`{` + ids + `,"newMessage":{"parts":[{"videoMetadata":{"startOffset":"x"}}]}}`: "newMessage: invalid content: video offset",
		`{` + ids + `,"newMessage":"x","streaming":"maybe"}`:                           "streaming: must be a boolean",
		`{` + ids + `,"newMessage":"x","streaming":1}`:                                 "streaming: must be a boolean",
		`{` + ids + `,"newMessage":"x","stateDelta":[]}`:                               "stateDelta must be an object",
	} {
		req, err := Decode([]byte(body))
		if err == nil || !strings.HasPrefix(err.Error(), want) || req != nil {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	// null means absent; a snake_case spelling after the camelCase one is ignored, even when bad.
	req := mustDecode(t, `{`+ids+`,"newMessage":"x","streaming":null,"stateDelta":null,"app_name":7}`)
	if req.AppName != "a" || req.Streaming || req.StateDelta != nil || req.NewMessage.Parts[0].Text != "x" {
		t.Fatalf("%+v", req)
	}
}

func FuzzDecodeRunRequest(f *testing.F) {
	for _, s := range []string{
		`{"appName":"a","userId":"u","sessionId":"s","newMessage":{"role":"user","parts":[{"text":"hi"}]},"streaming":true}`,
		`{"app_name":"a","user_id":"u","session_id":"s","new_message":"hi","state_delta":{"k":1},"functionCallEventId":"e"}`,
		`{"appName":"a","userId":"u","sessionId":"s","newMessage":{"parts":[{"inline_data":{"mime_type":"text/plain","data":"aGk="}}]}}`,
		`{"appName":"a","userId":"u","sessionId":"s","newMessage":{"parts":[{"video_metadata":{"start_offset":"1s"}},null]}}`,
		`{"appName":"a","userId":"u","sessionId":"s","newMessage":{"parts":"x"}}`,
		`null`, `[]`, `{}`, `"x"`, `{"streaming":"maybe"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := canonical(b)
		if err != nil {
			return
		}
		r, err := decodeStrict(out)
		if err != nil {
			t.Fatalf("canonical body %s rejected by a strict decoder: %v", out, err)
		}
		if r.AppName == "" || r.UserID == "" || r.SessionID == "" || r.NewMessage.Role == "" {
			t.Fatalf("required field empty after decoding: %s", out)
		}
		// Decoding the canonical form gives it back.
		again, err := canonical(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %s -> %s (%v)", out, again, err)
		}
	})
}

// BenchmarkRunRequest is the work a run body costs before the runner: the
// sidecar's one decode, the canonical encoding, and adkrest's decode of it
// (decodeStrict does what adkrest does).
func BenchmarkRunRequest(b *testing.B) {
	text := strings.Repeat("hello goose ", 100)
	for name, body := range map[string]string{
		"camel": `{"appName":"goose","userId":"u","sessionId":"s","newMessage":{"role":"user","parts":[{"text":"` + text + `"}]},"streaming":true}`,
		"snake": `{"app_name":"goose","user_id":"u","session_id":"s","new_message":{"parts":[{"text":"` + text + `"}]},"functionCallEventId":"e"}`,
	} {
		b.Run(name, func(b *testing.B) {
			in := []byte(body)
			b.ReportAllocs()
			for b.Loop() {
				out, err := canonical(in)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := decodeStrict(out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
