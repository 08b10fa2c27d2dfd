//go:build !unix

package rest

import "net"

// newWaitConn returns c: reading a descriptor directly is Unix-only here.
func newWaitConn(c net.Conn) net.Conn { return c }
