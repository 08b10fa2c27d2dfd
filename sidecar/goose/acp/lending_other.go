//go:build !unix

package acp

import "net"

// lentReadBufferSize leaves gorilla its default read buffer.
const lentReadBufferSize = 0

// lendReads returns c unchanged: lendingConn waits on a socket the unix way.
func lendReads(c net.Conn) net.Conn { return c }
