// Package jsonhttp writes JSON answers the way every handler of the sidecar
// does: encoded before the header goes out, never cached.
package jsonhttp

import (
	"encoding/json"
	"net/http"
)

// Write answers v as JSON with status. It encodes v before writing the
// header, so that a value that cannot be encoded is answered 500, not cut
// off.
func Write(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n')) // a client that went away: nothing to do
}
