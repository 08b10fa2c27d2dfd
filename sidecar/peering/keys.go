package peering

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"

	"github.com/adk2goose/goose-operator/sidecar/internal/adkcompat"
	"github.com/adk2goose/goose-operator/sidecar/peering/internal/requestkey"
)

// listPath reports a GET of a user's session list.
func (r *Router) listPath(req *http.Request) (user string, ok bool) {
	if req.Method != http.MethodGet {
		return "", false
	}
	user, _, isList, ok := requestkey.SessionPath(req.URL.EscapedPath(), r.cfg.AppName)
	return user, ok && isList
}

// keyOf finds the session or task a request works on. An A2A body it reads
// is put back in the request it returns, a shallow copy (handlers must not
// modify the request they are given).
func (r *Router) keyOf(req *http.Request) (Key, *http.Request, bool) {
	if user, session, isList, ok := requestkey.SessionPath(req.URL.EscapedPath(), r.cfg.AppName); ok && !isList {
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

// a2aKey is the key of an A2A JSON-RPC request (requestkey.A2A): a
// context is a session of the caller's A2A user.
func a2aKey(ctx context.Context, body []byte) (Key, bool) {
	contextID, taskID, ok := requestkey.A2A(body)
	switch {
	case !ok:
		return Key{}, false
	case contextID != "":
		return Key{User: adkcompat.A2AUserID(ctx, contextID), Session: contextID}, true
	}
	return Key{Task: taskID}, true
}
