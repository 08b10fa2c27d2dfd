//go:build !unix

package sockread

import (
	"errors"
	"net"
	"syscall"
)

// Raw is nil: sockets are read directly on Unix systems only.
func Raw(net.Conn) syscall.RawConn { return nil }

// Read is never called where Raw is nil.
func Read(net.Conn, syscall.RawConn, func() []byte, func()) (int, error) {
	return 0, errors.ErrUnsupported
}
