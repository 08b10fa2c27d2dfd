// Package runrequest decodes the /run and /run_sse bodies real ADK clients
// send (either field spelling, a bare string message) into the one form
// adkrest accepts.
package runrequest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genai"
)

// Request is a /run or /run_sse body with adkrest's field names: its JSON
// encoding is the canonical one adkrest accepts.
type Request struct {
	AppName    string          `json:"appName"`
	UserID     string          `json:"userId"`
	SessionID  string          `json:"sessionId"`
	NewMessage *genai.Content  `json:"newMessage"`
	Streaming  bool            `json:"streaming,omitempty"`
	StateDelta *map[string]any `json:"stateDelta,omitempty"`
}

var errNotObject = errors.New("body must be a JSON object")

// wireRun is a run request as real ADK clients send it: adkrest's
// camelCase field names or the snake_case of Python clients. Each field is
// decoded once a spelling is chosen (the camelCase one when a client sends
// both), so a snake_case duplicate cannot fail a request. Other fields (the
// web UI's functionCallEventId, Python's invocationId, …) are dropped.
type wireRun struct {
	AppName         json.RawMessage `json:"appName"`
	AppNameSnake    json.RawMessage `json:"app_name"`
	UserID          json.RawMessage `json:"userId"`
	UserIDSnake     json.RawMessage `json:"user_id"`
	SessionID       json.RawMessage `json:"sessionId"`
	SessionIDSnake  json.RawMessage `json:"session_id"`
	NewMessage      json.RawMessage `json:"newMessage"`
	NewMessageSnake json.RawMessage `json:"new_message"`
	Streaming       json.RawMessage `json:"streaming"`
	StateDelta      json.RawMessage `json:"stateDelta"`
	StateDeltaSnake json.RawMessage `json:"state_delta"`
}

// Decode decodes what real ADK clients send to /run and /run_sse:
// field names in either spelling (wireRun), a bare string message taken as
// a user text message, a missing role taken as "user", and streaming as a
// boolean or its string. null means absent. Its error names the problem
// when the body cannot be a run request.
func Decode(body []byte) (*Request, error) {
	var w wireRun
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return nil, errNotObject
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, errNotObject
	}
	var req Request
	for _, id := range []struct {
		name string
		raw  json.RawMessage
		dst  *string
	}{
		{"appName", spelling(w.AppName, w.AppNameSnake), &req.AppName},
		{"userId", spelling(w.UserID, w.UserIDSnake), &req.UserID},
		{"sessionId", spelling(w.SessionID, w.SessionIDSnake), &req.SessionID},
	} {
		if isNull(id.raw) {
			return nil, fmt.Errorf("%s is required", id.name)
		}
		if err := json.Unmarshal(id.raw, id.dst); err != nil || *id.dst == "" {
			return nil, fmt.Errorf("%s must be a non-empty string", id.name)
		}
	}
	var err error
	if req.NewMessage, err = decodeMessage(spelling(w.NewMessage, w.NewMessageSnake)); err != nil {
		return nil, fmt.Errorf("newMessage: %w", err)
	}
	if req.NewMessage == nil {
		return nil, errors.New("newMessage is required")
	}
	if req.Streaming, err = decodeBool(w.Streaming); err != nil {
		return nil, fmt.Errorf("streaming: %w", err)
	}
	if delta := spelling(w.StateDelta, w.StateDeltaSnake); !isNull(delta) {
		if err := json.Unmarshal(delta, &req.StateDelta); err != nil {
			return nil, errors.New("stateDelta must be an object")
		}
	}
	return &req, nil
}

// spelling is the field's camelCase value when the client sent it, else
// its snake_case one.
func spelling(camel, snake json.RawMessage) json.RawMessage {
	if camel != nil {
		return camel
	}
	return snake
}

// isNull reports a value that is absent or null.
func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func decodeBool(raw json.RawMessage) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return b, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if b, err := strconv.ParseBool(s); err == nil {
			return b, nil
		}
	}
	return false, errors.New("must be a boolean")
}

// decodeMessage decodes a message: a Content object, or a string taken as
// a user text message. A null one is nil.
func decodeMessage(raw json.RawMessage) (*genai.Content, error) {
	switch {
	case isNull(raw):
		return nil, nil
	case raw[0] == '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, err
		}
		return genai.NewContentFromText(text, genai.RoleUser), nil
	case raw[0] == '{':
		var c wireContent
		if err := json.Unmarshal(raw, &c); err != nil {
			var te *json.UnmarshalTypeError
			switch {
			case errors.As(err, &te) && te.Field == "parts":
				return nil, errors.New("parts must be an array")
			case errors.As(err, &te):
				return nil, fmt.Errorf("invalid content: %s cannot be a %s", te.Field, te.Value)
			}
			return nil, fmt.Errorf("invalid content: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return c.content()
	}
	return nil, errors.New("must be a Content object")
}

// wireContent is a genai.Content as clients send it: Python clients and
// protobuf JSON spell part fields in snake_case. Only the fields of content
// and part objects have two spellings; user data such as functionCall.args
// is left alone. A field's camelCase spelling wins over its snake_case one.
type wireContent struct {
	Role  string      `json:"role"`
	Parts []*wirePart `json:"parts"`
}

// wirePart is a genai.Part (its fields decode as they would there), with
// the snake_case spellings besides, and the fields whose own fields have
// two spellings replaced by their wire forms.
type wirePart struct {
	genai.Part
	InlineData    *wireBlob          `json:"inlineData"`
	FileData      *wireFileData      `json:"fileData"`
	VideoMetadata *wireVideoMetadata `json:"videoMetadata"`

	FunctionCallSnake        *genai.FunctionCall        `json:"function_call"`
	FunctionResponseSnake    *genai.FunctionResponse    `json:"function_response"`
	InlineDataSnake          *wireBlob                  `json:"inline_data"`
	FileDataSnake            *wireFileData              `json:"file_data"`
	ExecutableCodeSnake      *genai.ExecutableCode      `json:"executable_code"`
	CodeExecutionResultSnake *genai.CodeExecutionResult `json:"code_execution_result"`
	ThoughtSignatureSnake    []byte                     `json:"thought_signature"`
	VideoMetadataSnake       *wireVideoMetadata         `json:"video_metadata"`
}

type wireBlob struct {
	genai.Blob
	MIMETypeSnake    string `json:"mime_type"`
	DisplayNameSnake string `json:"display_name"`
}

type wireFileData struct {
	genai.FileData
	FileURISnake     string `json:"file_uri"`
	MIMETypeSnake    string `json:"mime_type"`
	DisplayNameSnake string `json:"display_name"`
}

// wireVideoMetadata: genai.VideoMetadata decodes its offsets from duration
// strings ("1.5s") itself, which it cannot do for the snake_case ones.
type wireVideoMetadata struct {
	FPS              *float64 `json:"fps"`
	StartOffset      string   `json:"startOffset"`
	EndOffset        string   `json:"endOffset"`
	StartOffsetSnake string   `json:"start_offset"`
	EndOffsetSnake   string   `json:"end_offset"`
}

func (w *wireContent) content() (*genai.Content, error) {
	c := &genai.Content{Role: w.Role, Parts: make([]*genai.Part, len(w.Parts))}
	if c.Role == "" {
		c.Role = genai.RoleUser
	}
	for i, wp := range w.Parts {
		if wp == nil {
			continue
		}
		p := wp.Part
		p.FunctionCall = either(p.FunctionCall, wp.FunctionCallSnake)
		p.FunctionResponse = either(p.FunctionResponse, wp.FunctionResponseSnake)
		p.ExecutableCode = either(p.ExecutableCode, wp.ExecutableCodeSnake)
		p.CodeExecutionResult = either(p.CodeExecutionResult, wp.CodeExecutionResultSnake)
		if p.ThoughtSignature == nil {
			p.ThoughtSignature = wp.ThoughtSignatureSnake
		}
		if b := either(wp.InlineData, wp.InlineDataSnake); b != nil {
			p.InlineData = &genai.Blob{Data: b.Data, MIMEType: cmp.Or(b.MIMEType, b.MIMETypeSnake), DisplayName: cmp.Or(b.DisplayName, b.DisplayNameSnake)}
		}
		if f := either(wp.FileData, wp.FileDataSnake); f != nil {
			p.FileData = &genai.FileData{FileURI: cmp.Or(f.FileURI, f.FileURISnake), MIMEType: cmp.Or(f.MIMEType, f.MIMETypeSnake), DisplayName: cmp.Or(f.DisplayName, f.DisplayNameSnake)}
		}
		if v := either(wp.VideoMetadata, wp.VideoMetadataSnake); v != nil {
			var err error
			p.VideoMetadata = &genai.VideoMetadata{FPS: v.FPS}
			if p.VideoMetadata.StartOffset, err = offset(cmp.Or(v.StartOffset, v.StartOffsetSnake)); err != nil {
				return nil, err
			}
			if p.VideoMetadata.EndOffset, err = offset(cmp.Or(v.EndOffset, v.EndOffsetSnake)); err != nil {
				return nil, err
			}
		}
		c.Parts[i] = &p
	}
	return c, nil
}

func offset(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid content: video offset: %w", err)
	}
	return d, nil
}

// either is the camelCase field's value when the client sent it, else the
// snake_case one's.
func either[T any](camel, snake *T) *T {
	if camel != nil {
		return camel
	}
	return snake
}
