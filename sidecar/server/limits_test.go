package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/server/defaults"
)

// connCounts counts what a server did on its connections.
type connCounts struct {
	read   atomic.Int64 // bytes read
	writes atomic.Int64 // Write calls
}

// countingListener counts in counts what the server does on its connections.
type countingListener struct {
	net.Listener
	counts *connCounts
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, counts: l.counts}, nil
}

type countingConn struct {
	net.Conn
	counts *connCounts
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.counts.read.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	c.counts.writes.Add(1)
	return c.Conn.Write(p)
}

// serveCounted serves srv's handler on a loopback listener that counts what
// the server reads and writes.
func serveCounted(t *testing.T, srv *server.Server) (addr string, counts *connCounts) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counts = new(connCounts)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(countingListener{Listener: ln, counts: counts}) }()
	t.Cleanup(func() { _ = hs.Close(); <-done })
	return ln.Addr().String(), counts
}

// rawRequest writes a request head by hand, then body() in the background
// while the answer is read, as a client that keeps sending after the server
// has answered does. The connection gives up after patience.
func rawRequest(t *testing.T, addr, method, path string, hdr map[string]string, body func(io.Writer), patience time.Duration) (*http.Response, map[string]string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(patience))
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n", method, path, addr)
	for k, v := range hdr {
		fmt.Fprintf(&head, "%s: %s\r\n", k, v)
	}
	head.WriteString("\r\n")
	if _, err := io.WriteString(c, head.String()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.Close() // ends body() once the answer is in
	wg.Go(func() { body(c) })
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: no answer within %s: %v", method, path, patience, err)
	}
	defer resp.Body.Close()
	var out map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp, out
}

// zeros writes n bytes (or until the connection fails), chunked when chunked.
func zeros(n int, chunked bool) func(io.Writer) {
	return func(w io.Writer) {
		buf := make([]byte, 64<<10)
		for i := range buf {
			buf[i] = ' '
		}
		for sent := 0; sent < n; sent += len(buf) {
			var err error
			if chunked {
				_, err = fmt.Fprintf(w, "%x\r\n%s\r\n", len(buf), buf)
			} else {
				_, err = w.Write(buf)
			}
			if err != nil {
				return
			}
		}
	}
}

// TestEveryRouteCapsItsBody: a 100 MB body, declared or chunked, to any
// route gets 413 with a JSON reason, and the server stops reading near the
// route's cap: it never holds the body.
func TestEveryRouteCapsItsBody(t *testing.T) {
	b := flavours[0].start(t, goosetest.Echo)
	sc := startSidecar(t, b, t.TempDir())
	sc.createSession("u", "s1")
	addr, counts := serveCounted(t, sc.srv)
	const hundredMB = 100 << 20
	routes := []struct {
		method, path string
		limit        int64
	}{
		{"POST", "/run", defaults.MaxMessageBytes},
		{"POST", "/run_sse", defaults.MaxMessageBytes},
		{"POST", server.A2APathV1, defaults.MaxMessageBytes},
		{"POST", server.A2APathV03, defaults.MaxMessageBytes},
		{"POST", "/apps/goose/users/u/sessions", defaults.MaxOtherBytes},
		{"POST", "/apps/goose/users/u/sessions/new-one", defaults.MaxOtherBytes},
		{"PATCH", "/apps/goose/users/u/sessions/s1", defaults.MaxOtherBytes},
		{"DELETE", "/apps/goose/users/u/sessions/s1", defaults.MaxOtherBytes},
		{"POST", "/no/such/route", defaults.MaxOtherBytes},
	}
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	for _, rt := range routes {
		for _, chunked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s %s chunked=%v", rt.method, rt.path, chunked), func(t *testing.T) {
				hdr := map[string]string{"Transfer-Encoding": "chunked"}
				if !chunked {
					hdr = map[string]string{"Content-Length": fmt.Sprint(hundredMB)}
				}
				maps.Copy(hdr, auth)
				before := counts.read.Load()
				resp, body := rawRequest(t, addr, rt.method, rt.path, hdr, zeros(hundredMB, chunked), 30*time.Second)
				if resp.StatusCode != http.StatusRequestEntityTooLarge || body["code"] != "REQUEST_TOO_LARGE" ||
					!strings.Contains(body["error"], fmt.Sprint(rt.limit)) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("status %d, body %v; want 413 naming the %d-byte cap", resp.StatusCode, body, rt.limit)
				}
				// What the server read: the head and, of a chunked body, the cap
				// plus what net/http drains after a handler (256 KiB), chunk
				// framing and read buffers; of a declared one, nothing.
				if got := counts.read.Load() - before; got > rt.limit+1<<20 {
					t.Fatalf("the server read %d bytes of a %d-byte body with a %d-byte cap", got, hundredMB, rt.limit)
				}
			})
		}
	}
	// Nothing was stored: the session is unchanged and no other was made.
	code, list := sc.do(http.MethodGet, "/apps/goose/users/u/sessions", nil)
	var sessions []map[string]any
	if code != http.StatusOK || json.Unmarshal(list, &sessions) != nil || len(sessions) != 1 {
		t.Fatalf("sessions after the oversized requests: %d %s", code, list)
	}
}

// TestBodyReadDeadline: a body that trickles in gets 408 with a JSON reason
// once the read timeout passes; an unauthenticated request gets its 401
// without the server waiting for its body at all; and a stream that
// outlasts the read timeout after its body arrived is not cut by it.
func TestBodyReadDeadline(t *testing.T) {
	slowly := func(w io.Writer) {
		// A byte now and then, never the whole declared body.
		for range 200 {
			if _, err := w.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	script := func(_ string, text string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "slow "}, {Delay: 600 * time.Millisecond, Text: "reply to " + text}}}
	}

	t.Run("trickle gets 408", func(t *testing.T) {
		sc := startSidecar(t, flavours[0].start(t, script), t.TempDir(), func(c *server.Config) { c.BodyReadTimeout = 300 * time.Millisecond })
		addr := strings.TrimPrefix(sc.URL, "http://")
		for _, path := range []string{"/run_sse", "/apps/goose/users/u/sessions", server.A2APathV1} {
			resp, body := rawRequest(t, addr, "POST", path,
				map[string]string{"Content-Length": "1000", "X-API-Key": testToken}, slowly, 20*time.Second)
			if resp.StatusCode != http.StatusRequestTimeout || body["code"] != "REQUEST_TIMEOUT" || body["error"] == "" {
				t.Fatalf("%s: status %d, body %v; want 408 with a reason", path, resp.StatusCode, body)
			}
		}
	})

	t.Run("unauthenticated slow body gets 401 at once", func(t *testing.T) {
		// A read timeout far beyond the client's patience: the 401 must not
		// wait for the body, nor for the timeout.
		sc := startSidecar(t, flavours[0].start(t, script), t.TempDir(), func(c *server.Config) { c.BodyReadTimeout = time.Hour })
		addr := strings.TrimPrefix(sc.URL, "http://")
		for _, chunked := range []bool{false, true} {
			hdr := map[string]string{"Content-Length": "100000"}
			if chunked {
				hdr = map[string]string{"Transfer-Encoding": "chunked"}
			}
			resp, body := rawRequest(t, addr, "POST", "/run_sse", hdr, slowly, 5*time.Second)
			if resp.StatusCode != http.StatusUnauthorized || body["error"] != "unauthorized" {
				t.Fatalf("chunked=%v: status %d, body %v; want 401", chunked, resp.StatusCode, body)
			}
		}
	})

	t.Run("a stream outlives the body deadline", func(t *testing.T) {
		sc := startSidecar(t, flavours[0].start(t, script), t.TempDir(), func(c *server.Config) { c.BodyReadTimeout = 200 * time.Millisecond })
		sc.createSession("u", "s")
		code, frames := sc.runSSE(runBody("u", "s", "hi", true))
		last := frames[len(frames)-1]
		if code != http.StatusOK || last.Event != "" || jpath(last.Data, "content", "parts", 0, "text") != "slow reply to hi" {
			t.Fatalf("stream: %d, last frame %+v", code, last)
		}
	})
}
