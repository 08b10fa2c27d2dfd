package rest

import (
	"net"
	"sync/atomic"
	"syscall"

	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sockread"
)

// waitConn is a connection to goosed that knows when a read is about to
// wait: it reads without blocking first, and only when the kernel has
// nothing for it calls the hook of the reply it carries (goose.WaitHook),
// then lets the runtime park the read.
//
// Calling the hook before every read of the reply body instead (as
// waitingBody does) calls it also when goose's next frames are already
// here, and the sidecar then flushes its client's stream every few events
// of a fast reply: with 1 KiB buffers, seven times as often as with 8 KiB
// ones (BenchmarkStreamPaths' CPU profile).
//
// Where the socket cannot be read directly (sockread.Raw), no connection is
// wrapped and replies fall back to waitingBody.
type waitConn struct {
	net.Conn
	raw  syscall.RawConn
	hook atomic.Pointer[func()]
}

// waitConnOf finds the waitConn under c (a TLS connection wraps it).
func waitConnOf(c net.Conn) *waitConn {
	for c != nil {
		if wc, ok := c.(*waitConn); ok {
			return wc
		}
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = nc.NetConn()
	}
	return nil
}

// carry makes f the hook of this connection's reads until release.
func (c *waitConn) carry(f func()) (release func()) {
	p := &f
	c.hook.Store(p)
	return func() { c.hook.CompareAndSwap(p, nil) }
}

// newWaitConn wraps c when its socket can be read directly; other
// connections are returned as they are.
func newWaitConn(c net.Conn) net.Conn {
	raw := sockread.Raw(c)
	if raw == nil {
		return c
	}
	return &waitConn{Conn: c, raw: raw}
}

func (c *waitConn) Read(p []byte) (int, error) {
	hook := c.hook.Load()
	if hook == nil || len(p) == 0 {
		return c.Conn.Read(p)
	}
	waited := false
	return sockread.Read(c.Conn, c.raw, func() []byte { return p }, func() {
		if !waited {
			waited = true
			(*hook)()
		}
	})
}
