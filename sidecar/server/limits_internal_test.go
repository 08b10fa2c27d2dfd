package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// TestBufferedBodyLetsGoOnceReadOut: a handler reads the buffered body as
// any body, and once it has read it out the body holds no bytes, while a
// stream goes on with the request reachable.
func TestBufferedBodyLetsGoOnceReadOut(t *testing.T) {
	const body = `{"appName":"a","userId":"u","sessionId":"s"}`
	r := httptest.NewRequest(http.MethodPost, "/run_sse", nil)
	r.Body = &bufferedBody{b: []byte(body)}
	if b, ok := bodyBytes(r); !ok || string(b) != body {
		t.Fatalf("bodyBytes before the read = %q, %v; want the body", b, ok)
	}
	var v map[string]string
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil || v["sessionId"] != "s" {
		t.Fatalf("decoding the body: %v, %v", v, err)
	}
	if bb := r.Body.(*bufferedBody); bb.b != nil {
		t.Errorf("the body still holds %d bytes after a decoder read it out", len(bb.b))
	}
	if b, ok := bodyBytes(r); !ok || len(b) != 0 {
		t.Errorf("bodyBytes after the read = %q, %v; want nothing left, and the body still the buffered one", b, ok)
	}
	if n, err := r.Body.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Errorf("a read after the end = %d, %v; want 0, io.EOF", n, err)
	}

	// Read a byte at a time, it reads back whole and lets go only at its end.
	bb := &bufferedBody{b: []byte(body)}
	var got []byte
	p := make([]byte, 1)
	for {
		n, err := iotest.OneByteReader(bb).Read(p)
		got = append(got, p[:n]...)
		if len(got) < len(body) && bb.b == nil {
			t.Fatalf("the body let go after %d of %d bytes", len(got), len(body))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != body || bb.b != nil {
		t.Errorf("read %q (held %d bytes after), want %q and none held", got, len(bb.b), body)
	}
}

// TestReadBodyTakesExactlyItsLength: a body of declared length is read into
// a slice of that length (no room to spare, which a stream would hold for
// its whole life); one of unknown length reads whole; one shorter than
// declared is an error.
func TestReadBodyTakesExactlyItsLength(t *testing.T) {
	body := strings.Repeat("x", 300)
	b, err := readBody(strings.NewReader(body), int64(len(body)))
	if err != nil || string(b) != body || cap(b) != len(body) {
		t.Errorf("declared length: %d bytes (capacity %d), %v; want the %d bytes and no more room", len(b), cap(b), err, len(body))
	}
	if b, err := readBody(iotest.HalfReader(strings.NewReader(body)), -1); err != nil || string(b) != body {
		t.Errorf("unknown length: %d bytes, %v; want the body", len(b), err)
	}
	if _, err := readBody(strings.NewReader(body[:100]), int64(len(body))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a body shorter than declared: %v, want io.ErrUnexpectedEOF", err)
	}
}
