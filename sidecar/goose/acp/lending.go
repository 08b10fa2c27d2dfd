package acp

import (
	"net"
	"sync"
	"syscall"

	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sockread"
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
	// borrow and giveBack as funcs, made once rather than on every read.
	borrowFn   func() []byte
	giveBackFn func()
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

// lendReads wraps c in a lendingConn when its socket can be read directly
// (sockread.Raw), and returns it unchanged otherwise.
func lendReads(c net.Conn) net.Conn {
	raw := sockread.Raw(c)
	if raw == nil {
		return c
	}
	lc := &lendingConn{Conn: c, raw: raw}
	lc.borrowFn, lc.giveBackFn = lc.borrow, lc.giveBack
	return lc
}

func (c *lendingConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.buf == nil {
		n, err := sockread.Read(c.Conn, c.raw, c.borrowFn, c.giveBackFn)
		if err != nil {
			c.giveBack()
			return 0, err
		}
		c.r, c.w = 0, n
	}
	n := copy(p, (*c.buf)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		c.giveBack()
	}
	return n, nil
}

// borrow takes a buffer to read into, once the socket may have bytes.
func (c *lendingConn) borrow() []byte {
	if c.buf == nil {
		c.buf = lentBuffers.Get().(*[]byte)
	}
	return *c.buf
}

// giveBack returns the buffer, before a wait or once it is read out.
func (c *lendingConn) giveBack() {
	if c.buf != nil {
		lentBuffers.Put(c.buf)
		c.buf = nil
	}
}
