//go:build unix

package acp

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sockread/sockreadtest"
)

// tcpPair is a lendingConn and the loopback TCP connection at its other end.
func tcpPair(t *testing.T) (*lendingConn, net.Conn) {
	t.Helper()
	c, peer := sockreadtest.Pair(t)
	lc, ok := lendReads(c).(*lendingConn)
	if !ok {
		t.Fatalf("lendReads(%T) did not lend", c)
	}
	return lc, peer
}

// Whatever arrives, in whatever pieces, reads back in order with reads of
// any size; a buffer is held only while it has bytes unread, and the peer's
// close reads as io.EOF.
func TestLendingConnReadsWhatArrives(t *testing.T) {
	c, peer := tcpPair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 256<<10)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	go func() {
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(9000))
			if _, err := peer.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		_ = peer.Close()
	}()
	var got []byte
	sizes := rand.New(rand.NewPCG(3, 4))
	for {
		p := make([]byte, 1+sizes.IntN(6000))
		n, err := c.Read(p)
		got = append(got, p[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		if c.buf != nil && c.r == c.w {
			t.Fatal("a drained buffer is still held")
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
	if c.buf != nil {
		t.Error("a buffer is held after the connection ended")
	}
}

// A read waiting for bytes ends with the connection's Close or its
// deadline, as any net.Conn read does.
func TestLendingConnWaitEnds(t *testing.T) {
	c, _ := tcpPair(t)
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := c.Read(make([]byte, 10)); !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		done <- err
	}()
	_ = c.Close() // before or during the read: either way it ends
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
	}
}

// The client's connections to goose read through a lendingConn, behind a
// gorilla buffer of lentReadBufferSize.
func TestClientConnectionsLendTheirReads(t *testing.T) {
	_, c := newIsolationPair(t, Config{})
	id := startSession(t, c)
	c.mu.Lock()
	cn := c.sessions[id]
	c.mu.Unlock()
	if _, ok := cn.rpc.ws.NetConn().(*lendingConn); !ok {
		t.Fatalf("session connection reads through %T", cn.rpc.ws.NetConn())
	}
}
