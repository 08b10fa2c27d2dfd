//go:build unix

package sockread

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// Raw is c's socket when it can be read directly (TCP, Unix sockets), else
// nil: then c is to be read as it is.
func Raw(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// Read reads once from raw, the socket of c, into the buffer buf returns.
// While the socket has no bytes, waiting runs (when set) and the read waits
// until it has; buf is asked again for each try, so a caller may hold no
// buffer while it waits. It returns io.EOF once the peer closed.
func Read(c net.Conn, raw syscall.RawConn, buf func() []byte, waiting func()) (int, error) {
	var n int
	var readErr error
	err := raw.Read(func(fd uintptr) bool {
		p := buf()
		for {
			n, readErr = syscall.Read(int(fd), p)
			if !errors.Is(readErr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(readErr, syscall.EAGAIN) {
			if waiting != nil {
				waiting()
			}
			return false // wait until the socket is readable
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
