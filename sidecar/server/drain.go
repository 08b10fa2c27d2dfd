package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// serveDrainable serves r. A stream the drain cuts while relaying it to
// the pod that serves its session makes httputil.ReverseProxy panic with
// http.ErrAbortHandler, which would drop the connection with no last
// frame: in that case only, the panic is recovered so that the drain's
// error frame follows.
func serveDrainable(next http.Handler, rec *recorder, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) && rec.streaming && !rec.hijacked &&
				errors.Is(context.Cause(r.Context()), ErrDraining) {
				return
			}
			panic(v)
		}
	}()
	next.ServeHTTP(rec, r)
}

// writeDrainFrame ends a stream the drain cut with an event naming the
// shutdown, in the stream's own wire: a JSON-RPC error answering the
// request on A2A (a2a clients decode every data line as a JSON-RPC
// response), adkrest's {"error"} object elsewhere (the web UI and other
// readers look only at data: lines).
func writeDrainFrame(w http.ResponseWriter, route string, id json.RawMessage) {
	if route == "a2a_v1" || route == "a2a_v0_3" {
		if len(id) == 0 {
			id = json.RawMessage("null")
		}
		b, _ := json.Marshal(map[string]any{
			"jsonrpc": "2.0", "id": id,
			"error": map[string]any{"code": -32603, "message": ErrDraining.Error()},
		})
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
	} else {
		_, _ = fmt.Fprintf(w, "event: error\ndata: {\"error\":%q}\n\n", ErrDraining.Error())
	}
	_ = http.NewResponseController(w).Flush()
}

// rpcID holds an A2A request's JSON-RPC id for the drain's last frame,
// which must answer that request (noteRPCID sets it).
type rpcID struct{ id json.RawMessage }

type rpcIDKey struct{}

// noteRPCID notes an A2A request's JSON-RPC id, from its buffered body
// (inside bodyLimits.buffer), for meterAndDrain.
func noteRPCID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := r.Context().Value(rpcIDKey{}).(*rpcID); ok && (r.URL.Path == A2APathV1 || r.URL.Path == A2APathV03) {
			if b, ok := bodyBytes(r); ok {
				h.id = jsonRPCID(b)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// jsonRPCID is the "id" member of a JSON-RPC request object, read without
// decoding the rest (its params may be large); nil when there is none.
func jsonRPCID(b []byte) json.RawMessage {
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil
		}
		if k == "id" {
			return v
		}
	}
	return nil
}
