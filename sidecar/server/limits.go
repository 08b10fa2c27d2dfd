package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// bodyLimits bounds how large a request body may be and how long it may
// take to arrive. It works in two places: readDeadline, outside auth, gives
// every body a read deadline so that nothing (not even the 401 of an
// unauthenticated request, which net/http would otherwise delay by draining
// the body) waits on a client that trickles; buffer, after auth, reads the
// body up to its route's cap under that deadline and answers 413 or 408
// itself, so every route fails the same way and no handler reads a body of
// unbounded size or time.
type bodyLimits struct {
	message, other int64
	timeout        time.Duration
}

// capFor is the largest body the route takes: a user message on the run and
// A2A routes, little elsewhere (session create and PATCH carry state).
func (l bodyLimits) capFor(r *http.Request) int64 {
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/run", "/run_sse", A2APathV1, A2APathV03:
		return l.message
	}
	return l.other
}

func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// readDeadline sets the connection's read deadline for the body.
func (l bodyLimits) readDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hasBody(r) {
			// An error means the writer cannot set deadlines (HTTP/2 over a
			// test recorder, say); buffer's read is then bounded by size only.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(l.timeout))
		}
		next.ServeHTTP(w, r)
	})
}

// bufferedBody is a request body read whole by bodyLimits.buffer. Once
// read out it lets its bytes go: a handler decodes a body when it starts,
// and a stream then lasts minutes with the request still reachable.
type bufferedBody struct {
	b   []byte // nil once read out
	off int
}

func (b *bufferedBody) Read(p []byte) (int, error) {
	if b.off == len(b.b) {
		b.b, b.off = nil, 0
		return 0, io.EOF
	}
	n := copy(p, b.b[b.off:])
	if b.off += n; b.off == len(b.b) {
		b.b, b.off = nil, 0
	}
	return n, nil
}

func (*bufferedBody) Close() error { return nil }

// bodyBytes returns the request's body when buffer read it, without
// copying: what is left of it, none once a handler has read it out.
func bodyBytes(r *http.Request) ([]byte, bool) {
	b, ok := r.Body.(*bufferedBody)
	if !ok {
		return nil, false
	}
	return b.b[b.off:], true
}

// readBody reads body whole, given its declared length n (-1: unknown):
// into a slice of exactly n bytes when n is known, as it nearly always is
// (a buffer grown as it reads holds at least 512 bytes more).
func readBody(body io.Reader, n int64) ([]byte, error) {
	if n < 0 {
		var buf bytes.Buffer
		_, err := buf.ReadFrom(body)
		return buf.Bytes(), err
	}
	b := make([]byte, n)
	// net/http's body of a declared length ends there, and reports a
	// connection that ends before it as io.ErrUnexpectedEOF.
	_, err := io.ReadFull(body, b)
	return b, err
}

// buffer reads the body within its cap and deadline, or answers 413/408.
func (l bodyLimits) buffer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBody(r) {
			next.ServeHTTP(w, r)
			return
		}
		limit := l.capFor(r)
		if r.ContentLength > limit {
			writeJSONError(w, r, http.StatusRequestEntityTooLarge, "REQUEST_TOO_LARGE", tooLarge(limit))
			return
		}
		b, err := readBody(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			writeJSONError(w, r, http.StatusRequestEntityTooLarge, "REQUEST_TOO_LARGE", tooLarge(limit))
			return
		case errors.As(err, &ne) && ne.Timeout():
			writeJSONError(w, r, http.StatusRequestTimeout, "REQUEST_TIMEOUT",
				fmt.Sprintf("request body not received within %s", l.timeout))
			return
		case err != nil:
			writeJSONError(w, r, http.StatusBadRequest, "BAD_REQUEST", "failed to read request body: "+err.Error())
			return
		}
		// The body is in; net/http clears the read deadline itself when it
		// starts watching the connection for the client going away.
		r.Body = &bufferedBody{b: b}
		r.ContentLength = int64(len(b))
		r.Header.Set("Content-Length", strconv.Itoa(len(b)))
		next.ServeHTTP(w, r)
	})
}

func tooLarge(limit int64) string {
	return fmt.Sprintf("request body larger than %d bytes", limit)
}
