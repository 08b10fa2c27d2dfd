//go:build unix

package rest

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// newWaitConn wraps c when its descriptor can be read directly (TCP and
// Unix sockets); other connections are returned as they are.
func newWaitConn(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &waitConn{Conn: c, raw: raw}
}

func (c *waitConn) Read(p []byte) (int, error) {
	hook := c.hook.Load()
	if hook == nil || len(p) == 0 {
		return c.Conn.Read(p)
	}
	var (
		n       int
		readErr error
		waited  bool
	)
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, readErr = syscall.Read(int(fd), p)
			if !errors.Is(readErr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(readErr, syscall.EAGAIN) {
			if !waited {
				waited = true
				(*hook)()
			}
			return false // wait until the descriptor is readable
		}
		return true
	})
	switch {
	case err != nil:
		return 0, err // closed, or a deadline passed
	case readErr != nil:
		return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", readErr)}
	case n <= 0:
		return 0, io.EOF
	}
	return n, nil
}
