//go:build unix

package acp

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// lendingConn is a net.Conn whose reads hold no buffer while they wait: a
// Read with nothing left waits until the socket is readable, then borrows
// a buffer from lentBuffers for what arrived and gives it back once that is
// read out. gorilla's own buffer in front of it can then be small
// (lentReadBufferSize). A session's connection spends most of its life
// waiting for goose, and its 4 KiB read buffer was the largest thing an
// open stream held that was the sidecar's to choose.
//
// It has one reader at a time, as a net.Conn read by gorilla does.
type lendingConn struct {
	net.Conn
	raw  syscall.RawConn
	buf  *[]byte // borrowed while it holds (*buf)[r:w] unread; else nil
	r, w int
}

// lentReadBufferSize is gorilla's read buffer in front of a lendingConn:
// room for a frame header and a control frame (125 bytes), refilled from
// the lent buffer without a system call.
const lentReadBufferSize = 512

// lentBuffers are the buffers lendingConns read into; as large as
// gorilla's default, so a burst of goose's frames still costs one read.
var lentBuffers = sync.Pool{New: func() any {
	b := make([]byte, 4096)
	return &b
}}

// lendReads wraps c in a lendingConn when its socket can be waited on
// (TCP, Unix), and returns it unchanged otherwise.
func lendReads(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &lendingConn{Conn: c, raw: raw}
}

func (c *lendingConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.buf == nil {
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*c.buf)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		lentBuffers.Put(c.buf)
		c.buf = nil
	}
	return n, nil
}

// fill waits for the socket to be readable (holding no buffer), then reads
// what arrived into a borrowed one. The runtime's poller does the waiting,
// as for any net.Conn read, deadlines and Close included.
func (c *lendingConn) fill() error {
	var n int
	var rerr error
	werr := c.raw.Read(func(fd uintptr) bool {
		b := lentBuffers.Get().(*[]byte)
		for {
			n, rerr = syscall.Read(int(fd), *b)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			lentBuffers.Put(b)
			return false // nothing yet: wait until the socket is readable
		}
		c.buf = b
		return true
	})
	switch {
	case werr != nil:
	case rerr != nil:
		werr = os.NewSyscallError("read", rerr)
	case n <= 0:
		werr = io.EOF
	default:
		c.r, c.w = 0, n
		return nil
	}
	if c.buf != nil {
		lentBuffers.Put(c.buf)
		c.buf = nil
	}
	return werr
}
