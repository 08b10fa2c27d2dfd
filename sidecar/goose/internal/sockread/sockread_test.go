//go:build unix

package sockread_test

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sockread"
	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sockread/sockreadtest"
)

// A read of a socket with nothing in it asks for a buffer, finds nothing,
// says so (waiting) and waits; once bytes come it asks for a buffer again
// and reads them.
func TestReadWaitsOnlyWhenThereIsNothing(t *testing.T) {
	c, peer := sockreadtest.Pair(t)
	raw := sockread.Raw(c)
	if raw == nil {
		t.Fatal("no raw socket for TCP")
	}
	p := make([]byte, 8)
	var asked, waited int
	buf := func() []byte { asked++; return p }
	waiting := func() {
		waited++
		if waited == 1 {
			_, _ = peer.Write([]byte("hello")) // what the read waits for
		}
	}
	n, err := sockread.Read(c, raw, buf, waiting)
	if err != nil || string(p[:n]) != "hello" || asked != 2 || waited != 1 {
		t.Fatalf("read %q, %v; buffer asked %d times, waited %d; want hello, 2, 1", p[:n], err, asked, waited)
	}
	_, _ = peer.Write([]byte("again"))
	// The bytes may still be on their way: the read then waits for them.
	if n, err = sockread.Read(c, raw, buf, nil); err != nil || string(p[:n]) != "again" {
		t.Fatalf("read %q, %v; want again", p[:n], err)
	}
	_ = peer.Close()
	if _, err := sockread.Read(c, raw, buf, nil); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
}

func TestReadEndsAtTheDeadline(t *testing.T) {
	c, _ := sockreadtest.Pair(t)
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8)
	if _, err := sockread.Read(c, sockread.Raw(c), func() []byte { return p }, nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
}
