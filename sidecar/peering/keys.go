package peering

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
)

// a2aTaskMethods name a task by params.id, in A2A 1.0 and 0.3.
var a2aTaskMethods = []string{"GetTask", "CancelTask", "SubscribeToTask", "tasks/get", "tasks/cancel", "tasks/resubscribe"}

// sessionPath splits /apps/{app}/users/{user}/sessions[/{session}[/...]]
// for this app.
func (r *Router) sessionPath(req *http.Request) (user, session string, isList, ok bool) {
	seg := strings.Split(strings.TrimSuffix(req.URL.EscapedPath(), "/"), "/")
	if len(seg) < 6 || seg[0] != "" || seg[1] != "apps" || seg[3] != "users" || seg[5] != "sessions" {
		return "", "", false, false
	}
	app, err1 := url.PathUnescape(seg[2])
	user, err2 := url.PathUnescape(seg[4])
	if err1 != nil || err2 != nil || app != r.cfg.AppName || user == "" {
		return "", "", false, false
	}
	if len(seg) == 6 {
		return user, "", true, true
	}
	session, err := url.PathUnescape(seg[6])
	if err != nil || session == "" {
		return "", "", false, false
	}
	return user, session, false, true
}

// listPath reports a GET of a user's session list.
func (r *Router) listPath(req *http.Request) (user string, ok bool) {
	if req.Method != http.MethodGet {
		return "", false
	}
	user, _, isList, ok := r.sessionPath(req)
	return user, ok && isList
}

// keyOf finds the session or task a request works on. An A2A body it reads
// is put back in the request it returns, a shallow copy (handlers must not
// modify the request they are given).
func (r *Router) keyOf(req *http.Request) (Key, *http.Request, bool) {
	if user, session, isList, ok := r.sessionPath(req); ok && !isList {
		return Key{User: user, Session: session}, req, true
	}
	if r.cfg.RunKey != nil {
		if k, ok := r.cfg.RunKey(req); ok {
			return k, req, true
		}
	}
	if req.Method != http.MethodPost || !slices.Contains(r.cfg.A2APaths, req.URL.Path) {
		return Key{}, req, false
	}
	req, body, ok := r.peekBody(req)
	if !ok {
		return Key{}, req, false
	}
	k, ok := a2aKey(req.Context(), body)
	return k, req, ok
}

// peekBody reads the body and returns a copy of req that reads it again. A
// body over MaxBodyBytes is not looked into; the copy reads it whole.
func (r *Router) peekBody(req *http.Request) (*http.Request, []byte, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil, false
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, r.cfg.MaxBodyBytes+1))
	whole := err == nil && int64(len(b)) <= r.cfg.MaxBodyBytes
	out := new(http.Request)
	*out = *req
	if whole {
		out.Body = io.NopCloser(bytes.NewReader(b))
	} else {
		out.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), req.Body), req.Body}
	}
	return out, b, whole
}

// a2aKey reads an A2A JSON-RPC request: a message names its context (an
// ADK session) or its task, a task method its task.
func a2aKey(ctx context.Context, body []byte) (Key, bool) {
	var rpc struct {
		Method string `json:"method"`
		Params struct {
			ID      json.RawMessage `json:"id"`
			Message *struct {
				ContextID string `json:"contextId"`
				TaskID    string `json:"taskId"`
			} `json:"message"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &rpc) != nil {
		return Key{}, false
	}
	if m := rpc.Params.Message; m != nil {
		switch {
		case m.ContextID != "":
			return Key{User: adkcompat.A2AUserID(ctx, m.ContextID), Session: m.ContextID}, true
		case m.TaskID != "":
			return Key{Task: m.TaskID}, true
		}
		return Key{}, false
	}
	var id string
	if slices.Contains(a2aTaskMethods, rpc.Method) && json.Unmarshal(rpc.Params.ID, &id) == nil && id != "" {
		return Key{Task: id}, true
	}
	return Key{}, false
}
