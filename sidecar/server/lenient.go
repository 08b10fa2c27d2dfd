package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/genai"
)

// runFields maps every accepted spelling of a /run body field to the name
// adkrest decodes (it rejects anything else with 400).
var runFields = map[string]string{
	"appName": "appName", "app_name": "appName",
	"userId": "userId", "user_id": "userId",
	"sessionId": "sessionId", "session_id": "sessionId",
	"newMessage": "newMessage", "new_message": "newMessage",
	"streaming":  "streaming",
	"stateDelta": "stateDelta", "state_delta": "stateDelta",
}

// partKeys are the snake_case spellings (Python clients, protobuf JSON) of
// genai Content/Part fields. Only keys of content and part objects are
// renamed; user data such as functionCall.args is left alone.
var partKeys = map[string]string{
	"function_call": "functionCall", "function_response": "functionResponse",
	"inline_data": "inlineData", "file_data": "fileData",
	"executable_code": "executableCode", "code_execution_result": "codeExecutionResult",
	"thought_signature": "thoughtSignature", "video_metadata": "videoMetadata",
	"mime_type": "mimeType", "file_uri": "fileUri", "display_name": "displayName",
	"will_continue": "willContinue", "start_offset": "startOffset", "end_offset": "endOffset",
}

// RunRequest is the canonical /run body after normalisation.
type RunRequest struct {
	AppName    string          `json:"appName"`
	UserID     string          `json:"userId"`
	SessionID  string          `json:"sessionId"`
	NewMessage *genai.Content  `json:"newMessage"`
	Streaming  bool            `json:"streaming,omitempty"`
	StateDelta *map[string]any `json:"stateDelta,omitempty"`
}

// NormalizeRunRequest turns what real ADK clients send to /run and /run_sse
// into the strict body adkrest accepts: snake_case names are mapped to
// camelCase, unknown fields (the web UI's functionCallEventId, Python's
// invocationId, …) are dropped, a bare string message becomes a user text
// message, and a missing role defaults to "user". It returns the fields it
// dropped, and an error naming the problem when the body cannot be a run
// request.
func NormalizeRunRequest(body []byte) (out []byte, dropped []string, err error) {
	_, out, dropped, err = normalizeRunRequest(body)
	return out, dropped, err
}

func normalizeRunRequest(body []byte) (req RunRequest, out []byte, dropped []string, err error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return req, nil, nil, errors.New("body must be a JSON object")
	}
	canon := map[string]json.RawMessage{}
	for k, v := range raw {
		c, ok := runFields[k]
		if !ok {
			dropped = append(dropped, k)
			continue
		}
		// The camelCase spelling wins when a client sends both.
		if _, seen := canon[c]; seen && k != c {
			continue
		}
		canon[c] = v
	}
	slices.Sort(dropped)

	for _, f := range []struct {
		name string
		dst  *string
	}{{"appName", &req.AppName}, {"userId", &req.UserID}, {"sessionId", &req.SessionID}} {
		v, ok := canon[f.name]
		if !ok || string(v) == "null" {
			return req, nil, dropped, fmt.Errorf("%s is required", f.name)
		}
		if err := json.Unmarshal(v, f.dst); err != nil || *f.dst == "" {
			return req, nil, dropped, fmt.Errorf("%s must be a non-empty string", f.name)
		}
	}
	msg, ok := canon["newMessage"]
	if !ok || string(msg) == "null" {
		return req, nil, dropped, errors.New("newMessage is required")
	}
	req.NewMessage, err = decodeContent(msg)
	if err != nil {
		return req, nil, dropped, fmt.Errorf("newMessage: %w", err)
	}
	if v, ok := canon["streaming"]; ok && string(v) != "null" {
		req.Streaming, err = decodeBool(v)
		if err != nil {
			return req, nil, dropped, fmt.Errorf("streaming: %w", err)
		}
	}
	if v, ok := canon["stateDelta"]; ok && string(v) != "null" {
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			return req, nil, dropped, errors.New("stateDelta must be an object")
		}
		req.StateDelta = &m
	}
	out, err = json.Marshal(req)
	if err != nil {
		return req, nil, dropped, fmt.Errorf("failed to encode run request: %w", err)
	}
	return req, out, dropped, nil
}

func decodeContent(v json.RawMessage) (*genai.Content, error) {
	var text string
	if json.Unmarshal(v, &text) == nil {
		return genai.NewContentFromText(text, genai.RoleUser), nil
	}
	var generic map[string]any
	if err := json.Unmarshal(v, &generic); err != nil || generic == nil {
		return nil, errors.New("must be a Content object")
	}
	renameKeys(generic)
	if parts, ok := generic["parts"].([]any); ok {
		for _, p := range parts {
			if pm, ok := p.(map[string]any); ok {
				renameKeys(pm)
				for _, k := range []string{"inlineData", "fileData", "videoMetadata"} {
					if sub, ok := pm[k].(map[string]any); ok {
						renameKeys(sub)
					}
				}
			}
		}
	} else if generic["parts"] != nil {
		return nil, errors.New("parts must be an array")
	}
	b, err := json.Marshal(generic)
	if err != nil {
		return nil, errors.New("must be a Content object")
	}
	// A plain decoder ignores unknown part fields, which adkrest's strict
	// decoder would reject; re-encoding then yields the canonical form.
	var c genai.Content
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("invalid content: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if c.Role == "" {
		c.Role = genai.RoleUser
	}
	return &c, nil
}

func renameKeys(m map[string]any) {
	for k, v := range m {
		if c, ok := partKeys[k]; ok {
			if _, exists := m[c]; !exists {
				m[c] = v
			}
			delete(m, k)
		}
	}
}

func decodeBool(v json.RawMessage) (bool, error) {
	var b bool
	if json.Unmarshal(v, &b) == nil {
		return b, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if b, err := strconv.ParseBool(s); err == nil {
			return b, nil
		}
	}
	return false, errors.New("must be a boolean")
}

// runGuard serves a normalised run request: it answers the request itself
// (a client mistake, a busy session) or passes it on to next.
type runGuard func(w http.ResponseWriter, r *http.Request, req *RunRequest, next http.Handler)

// lenient normalises /run and /run_sse bodies before adkrest sees them, then
// hands them to guard. Bodies come read and bounded (bodyLimits.buffer).
func lenient(next http.Handler, guard runGuard) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimSuffix(r.URL.Path, "/")
		if r.Method != http.MethodPost || (p != "/run" && p != "/run_sse") {
			next.ServeHTTP(w, r)
			return
		}
		body, ok := bodyBytes(r)
		if !ok {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				writeJSONError(w, r, http.StatusBadRequest, codeBadRequest, "failed to read request body: "+err.Error())
				return
			}
		}
		req, norm, _, err := normalizeRunRequest(body)
		if err != nil {
			writeJSONError(w, r, http.StatusBadRequest, codeBadRequest, "invalid run request: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(norm))
		r.ContentLength = int64(len(norm))
		r.Header.Set("Content-Length", strconv.Itoa(len(norm)))
		guard(w, r, &req, next)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
