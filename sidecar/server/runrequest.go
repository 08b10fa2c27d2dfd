package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/adk2goose/goose-operator/sidecar/peering"
	"github.com/adk2goose/goose-operator/sidecar/server/internal/runrequest"
)

// isRun reports a request whose body is a run request.
func isRun(r *http.Request) bool {
	p := strings.TrimSuffix(r.URL.Path, "/")
	return r.Method == http.MethodPost && (p == "/run" || p == "/run_sse")
}

type runRequestKey struct{}

// runRequestOf is the run request decodeRuns decoded from r's body; nil
// when r is no run. Each run body is decoded once: the peer router, the run
// guards and the budget read the decoded value, and adkrest is handed its
// canonical encoding.
func runRequestOf(r *http.Request) *runrequest.Request {
	req, _ := r.Context().Value(runRequestKey{}).(*runrequest.Request)
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
		req, err := runrequest.Decode(body)
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
func withCanonicalBody(ctx context.Context, r *http.Request, req *runrequest.Request) (*http.Request, error) {
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
		return livePeerKey(r)
	}
	return peering.Key{User: req.UserID, Session: req.SessionID}, true
}
