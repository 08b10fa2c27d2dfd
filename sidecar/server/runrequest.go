package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/peering"
)

// RunRequest is a /run or /run_sse body. Each is decoded once
// (decodeRuns); the peer router, the run guards and the budget read the
// decoded value, and adkrest is handed its canonical encoding.
type RunRequest struct {
	AppName    string          `json:"appName"`
	UserID     string          `json:"userId"`
	SessionID  string          `json:"sessionId"`
	NewMessage *genai.Content  `json:"newMessage"`
	Streaming  bool            `json:"streaming,omitempty"`
	StateDelta *map[string]any `json:"stateDelta,omitempty"`
}

// isRun reports a request whose body is a run request.
func isRun(r *http.Request) bool {
	p := strings.TrimSuffix(r.URL.Path, "/")
	return r.Method == http.MethodPost && (p == "/run" || p == "/run_sse")
}

type runRequestKey struct{}

// runRequestOf is the run request decodeRuns decoded from r's body; nil
// when r is no run.
func runRequestOf(r *http.Request) *RunRequest {
	req, _ := r.Context().Value(runRequestKey{}).(*RunRequest)
	return req
}

// decodeRuns decodes the body of every run before anything else reads it
// and puts the result in the request context (runRequestOf). A body that is
// no run request gets 400. Bodies come read and bounded (bodyLimits.buffer).
func decodeRuns(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isRun(r) {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := bodyBytes(r) // none when the request has no body
		req, err := decodeRunRequest(body)
		if err != nil {
			writeJSONError(w, r, http.StatusBadRequest, codeBadRequest, "invalid run request: "+err.Error())
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), runRequestKey{}, req)))
	})
}

// withCanonicalBody returns a copy of r with ctx and req's canonical
// encoding as its body: what adkrest accepts, which rejects unknown and
// snake_case fields.
func withCanonicalBody(ctx context.Context, r *http.Request, req *RunRequest) (*http.Request, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("failed to encode run request: %w", err)
	}
	r = r.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return r, nil
}

// runPeerKey names the session of a run for the peer router.
func runPeerKey(r *http.Request) (peering.Key, bool) {
	req := runRequestOf(r)
	if req == nil {
		return peering.Key{}, false
	}
	return peering.Key{User: req.UserID, Session: req.SessionID}, true
}

// runDecodes counts decodeRunRequest calls, for the test that every run is
// decoded once.
var runDecodes atomic.Int64

// runField is one field of a run request.
type runField int

const (
	fieldAppName runField = iota
	fieldUserID
	fieldSessionID
	fieldNewMessage
	fieldStreaming
	fieldStateDelta
	runFieldCount
)

// runFieldNames are the names adkrest decodes, in the order problems are
// reported.
var runFieldNames = [runFieldCount]string{"appName", "userId", "sessionId", "newMessage", "streaming", "stateDelta"}

// runFieldSpellings maps every accepted spelling of a field: adkrest's
// camelCase and the snake_case of Python clients. Other fields (the web
// UI's functionCallEventId, Python's invocationId, …) are dropped.
var runFieldSpellings = map[string]runField{
	"appName": fieldAppName, "app_name": fieldAppName,
	"userId": fieldUserID, "user_id": fieldUserID,
	"sessionId": fieldSessionID, "session_id": fieldSessionID,
	"newMessage": fieldNewMessage, "new_message": fieldNewMessage,
	"streaming":  fieldStreaming,
	"stateDelta": fieldStateDelta, "state_delta": fieldStateDelta,
}

var errNotObject = errors.New("body must be a JSON object")

// decodeRunRequest decodes what real ADK clients send to /run and /run_sse
// in one pass over the body: field names in camelCase or snake_case (the
// camelCase one wins when a client sends both), unknown fields dropped, a
// bare string message taken as a user text message, a missing role taken
// as "user", and streaming as a boolean or its string. Its error names the
// problem when the body cannot be a run request.
func decodeRunRequest(body []byte) (*RunRequest, error) {
	runDecodes.Add(1)
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errNotObject
	}
	var (
		req       RunRequest
		ids       [3]*string // appName, userId, sessionId; nil when absent or null
		problems  [runFieldCount]error
		fromCamel [runFieldCount]bool
	)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, errNotObject
		}
		name, _ := t.(string)
		f, known := runFieldSpellings[name]
		if !known || (name != runFieldNames[f] && fromCamel[f]) {
			var skipped json.RawMessage
			if err := dec.Decode(&skipped); err != nil {
				return nil, errNotObject
			}
			continue
		}
		fromCamel[f] = name == runFieldNames[f]
		first := nextByte(dec, body)
		switch f {
		case fieldAppName, fieldUserID, fieldSessionID:
			ids[f] = nil
			err = dec.Decode(&ids[f])
		case fieldNewMessage:
			req.NewMessage, err = decodeMessage(dec, first)
		case fieldStreaming:
			req.Streaming, err = decodeBool(dec, first)
		case fieldStateDelta:
			req.StateDelta = nil
			if first == '{' {
				err = dec.Decode(&req.StateDelta)
			} else {
				err = skipValue(dec, first, "an object")
			}
		}
		if isSyntaxError(err) {
			return nil, errNotObject
		}
		problems[f] = err
	}
	if _, err := dec.Token(); err != nil || len(bytes.TrimSpace(body[dec.InputOffset():])) > 0 {
		return nil, errNotObject
	}

	for f, dst := range []*string{&req.AppName, &req.UserID, &req.SessionID} {
		switch {
		case problems[f] != nil || (ids[f] != nil && *ids[f] == ""):
			return nil, fmt.Errorf("%s must be a non-empty string", runFieldNames[f])
		case ids[f] == nil:
			return nil, fmt.Errorf("%s is required", runFieldNames[f])
		}
		*dst = *ids[f]
	}
	if err := problems[fieldNewMessage]; err != nil {
		return nil, fmt.Errorf("newMessage: %w", err)
	}
	if req.NewMessage == nil {
		return nil, errors.New("newMessage is required")
	}
	if err := problems[fieldStreaming]; err != nil {
		return nil, fmt.Errorf("streaming: %w", err)
	}
	if problems[fieldStateDelta] != nil {
		return nil, errors.New("stateDelta must be an object")
	}
	return &req, nil
}

// nextByte is the first byte of the value dec reads next: it has read the
// value's key, and the colon after it is still to come.
func nextByte(dec *json.Decoder, body []byte) byte {
	for i := dec.InputOffset(); i < int64(len(body)); i++ {
		switch c := body[i]; c {
		case ' ', '\t', '\r', '\n', ':':
		default:
			return c
		}
	}
	return 0
}

// skipValue reads past the next value, which is well-formed JSON of the
// wrong kind (want names the kinds allowed) unless it is null.
func skipValue(dec *json.Decoder, first byte, want string) error {
	var skipped json.RawMessage
	if err := dec.Decode(&skipped); err != nil {
		return err
	}
	if first == 'n' {
		return nil
	}
	return errors.New("must be " + want)
}

func isSyntaxError(err error) bool {
	if err == nil {
		return false
	}
	var se *json.SyntaxError
	return errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func decodeBool(dec *json.Decoder, first byte) (bool, error) {
	switch first {
	case 't', 'f':
		var b bool
		err := dec.Decode(&b)
		return b, err
	case '"':
		var s string
		if err := dec.Decode(&s); err != nil {
			return false, err
		}
		if b, err := strconv.ParseBool(s); err == nil {
			return b, nil
		}
	default:
		if err := skipValue(dec, first, "a boolean"); err != nil || first == 'n' {
			return false, err
		}
	}
	return false, errors.New("must be a boolean")
}

// decodeMessage decodes a message: a Content object, or a string taken as
// a user text message. A null one is nil.
func decodeMessage(dec *json.Decoder, first byte) (*genai.Content, error) {
	switch first {
	case '"':
		var text string
		if err := dec.Decode(&text); err != nil {
			return nil, err
		}
		return genai.NewContentFromText(text, genai.RoleUser), nil
	case '{':
		var c wireContent
		if err := dec.Decode(&c); err != nil {
			var te *json.UnmarshalTypeError
			switch {
			case isSyntaxError(err):
				return nil, err
			case errors.As(err, &te) && te.Field == "parts":
				return nil, errors.New("parts must be an array")
			case errors.As(err, &te):
				return nil, fmt.Errorf("invalid content: %s cannot be a %s", te.Field, te.Value)
			}
			return nil, fmt.Errorf("invalid content: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return c.content()
	}
	return nil, skipValue(dec, first, "a Content object")
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
			p.InlineData = &genai.Blob{Data: b.Data, MIMEType: or(b.MIMEType, b.MIMETypeSnake), DisplayName: or(b.DisplayName, b.DisplayNameSnake)}
		}
		if f := either(wp.FileData, wp.FileDataSnake); f != nil {
			p.FileData = &genai.FileData{FileURI: or(f.FileURI, f.FileURISnake), MIMEType: or(f.MIMEType, f.MIMETypeSnake), DisplayName: or(f.DisplayName, f.DisplayNameSnake)}
		}
		if v := either(wp.VideoMetadata, wp.VideoMetadataSnake); v != nil {
			var err error
			p.VideoMetadata = &genai.VideoMetadata{FPS: v.FPS}
			if p.VideoMetadata.StartOffset, err = offset(or(v.StartOffset, v.StartOffsetSnake)); err != nil {
				return nil, err
			}
			if p.VideoMetadata.EndOffset, err = offset(or(v.EndOffset, v.EndOffsetSnake)); err != nil {
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

func or(camel, snake string) string {
	if camel != "" {
		return camel
	}
	return snake
}
