//go:build unix

package rest

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sockread/sockreadtest"
)

// loopbackPair is a connected TCP pair on loopback: the client side
// wrapped as the client's transport wraps what it dials.
func loopbackPair(t *testing.T) (client *waitConn, server net.Conn) {
	t.Helper()
	raw, server := sockreadtest.Pair(t)
	client = waitConnOf(newWaitConn(raw))
	if client == nil {
		t.Fatal("a TCP connection was not wrapped")
	}
	return client, server
}

// The hook runs once before a read that has to wait, and not for bytes
// that are already there.
func TestWaitConnHookOnlyBeforeAWait(t *testing.T) {
	c, server := loopbackPair(t)
	var calls atomic.Int32
	release := c.carry(func() {
		if calls.Add(1) == 1 {
			_, _ = server.Write([]byte("xyz")) // what the read waits for
		}
	})
	buf := make([]byte, 1)
	for i, want := range "xyz" {
		if n, err := c.Read(buf); n != 1 || err != nil || rune(buf[0]) != want {
			t.Fatalf("read %d = %q, %v; want %q", i, buf[:n], err, want)
		}
		if got := calls.Load(); got != 1 {
			t.Fatalf("after read %d: hook called %d times, want once (before the first read only)", i, got)
		}
	}
	release()
	_, _ = server.Write([]byte("w"))
	if n, err := c.Read(buf); n != 1 || err != nil || calls.Load() != 1 {
		t.Fatalf("after release: read %q, %v, hook calls %d; want w, nil, 1", buf[:n], err, calls.Load())
	}
}

func TestWaitConnEndsLikeAConn(t *testing.T) {
	c, server := loopbackPair(t)
	defer c.carry(func() {})()
	_ = server.Close()
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
	_ = c.Close()
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
}
