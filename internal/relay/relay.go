// Package relay holds what every reverse proxy of this repository needs
// beyond net/http/httputil.
package relay

import (
	"io"
	"net/http"
)

// LimitBody makes an outbound request (a ReverseProxy's Rewrite gets it as
// pr.Out) read its body no further than its Content-Length.
//
// A Go server drains and closes the inbound body once the handler starts
// writing its response. The transport, after copying Content-Length bytes
// upstream, reads once more to check the body has no more; when the
// upstream answers first (an SSE stream starts as soon as the request is
// read), that read hits the closed body, and the transport tears down the
// upstream connection mid-stream: "ReverseProxy read error during body
// copy: use of closed network connection" (golang/go#40747). Stopping at
// Content-Length ends the check at EOF without touching the closed body.
func LimitBody(out *http.Request) {
	if out.Body == nil || out.Body == http.NoBody || out.ContentLength <= 0 {
		return
	}
	out.Body = struct {
		io.Reader
		io.Closer
	}{io.LimitReader(out.Body, out.ContentLength), out.Body}
}
