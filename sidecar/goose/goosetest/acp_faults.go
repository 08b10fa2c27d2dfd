package goosetest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
)

// ServeMaxFrameBytes is the largest frame goose serve reads: axum/tungstenite's
// default 16 MiB. A larger frame drops the socket with no JSON-RPC error
// (goose#10751); the fake does the same.
const ServeMaxFrameBytes = 16 << 20

// ServeOutboundCapacity is goose serve's outbound queue per connection:
// agent-client-protocol-http 1.0.1 and 2.0.0 OUTBOUND_STREAM_CAPACITY.
const ServeOutboundCapacity = 1024

// WithServeOutboundQueue gives every connection goose serve's bounded
// outbound queue: frames wait in a queue of n that one writer drains, and when
// a frame finds it full the connection is dropped with no close frame (1006),
// as agent-client-protocol-http 1.0.1/2.0.0 does on try_send Full (rust-sdk
// #288, #337, goose#11559). A client that stops reading then loses its
// connection instead of blocking the fake. Use ServeOutboundCapacity for
// goose's figure. Without it each frame is written at once, blocking while
// the client does not read.
func WithServeOutboundQueue(n int) ServeOption { return func(f *Serve) { f.outQueue = n } }

// OutboundDrops returns how many connections were dropped because their
// outbound queue was full.
func (s *Serve) OutboundDrops() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outDrops
}

// startWriter sets the connection up as goose's transport does: the inbound
// frame limit, and the bounded outbound queue when one is configured.
func (c *serveConn) startWriter() {
	c.ws.SetReadLimit(ServeMaxFrameBytes)
	if c.s.outQueue <= 0 {
		return
	}
	c.out = make(chan []byte, c.s.outQueue)
	c.s.wg.Go(func() {
		for {
			select {
			case b := <-c.out:
				_ = c.ws.SetWriteDeadline(time.Now().Add(time.Minute))
				if c.ws.WriteMessage(websocket.TextMessage, b) != nil {
					_ = c.ws.NetConn().Close()
					return
				}
			case <-c.done:
				return
			}
		}
	})
}

// enqueue hands b to the writer; false when there is no queue. A full queue
// drops the connection and the frame.
func (c *serveConn) enqueue(b []byte) bool {
	if c.out == nil {
		return false
	}
	select {
	case c.out <- b:
	default:
		c.dropOnce.Do(func() {
			c.s.mu.Lock()
			c.s.outDrops++
			c.s.mu.Unlock()
			_ = c.ws.NetConn().Close()
		})
	}
	return true
}

// SendRaw writes frame, as it is, on the connection running a reply in the
// session: a broken or hostile goose's frame (not JSON, not JSON-RPC) lands
// in the middle of that session's traffic. false when no reply runs there.
func (s *Serve) SendRaw(sessionID string, frame []byte) bool {
	for _, c := range s.openConns() {
		c.mu.Lock()
		_, running := c.runs[sessionID]
		c.mu.Unlock()
		if !running {
			continue
		}
		if !c.enqueue(frame) {
			c.wmu.Lock()
			_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_ = c.ws.WriteMessage(websocket.TextMessage, frame)
			c.wmu.Unlock()
		}
		return true
	}
	return false
}

// openConns lists the open connections.
func (s *Serve) openConns() []*serveConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	conns := make([]*serveConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// cutMidFrame writes the header of a text frame carrying a message chunk and
// half of its payload, then closes the socket (no close frame): goose killed
// while its writer is inside a frame. The client reads a truncated frame,
// then EOF. It bypasses the outbound queue, as the process dies under it.
func (c *serveConn) cutMidFrame(sid string) {
	payload, err := json.Marshal(acpRpcNotification{JSONRPC: "2.0", Method: "session/update", Params: acpUpdateParams{
		SessionID: sid, Update: acpMessageChunk{SessionUpdate: "agent_message_chunk", Content: acpTextContent{Type: "text", Text: "cut"}},
	}})
	if err != nil {
		panic(fmt.Sprintf("goosetest: marshal: %v", err))
	}
	// FIN and opcode 1 (text); a server's frames are unmasked (RFC 6455 §5.2).
	frame := []byte{0x81}
	if n := len(payload); n < 126 {
		frame = append(frame, byte(n))
	} else {
		frame = binary.BigEndian.AppendUint16(append(frame, 126), uint16(n))
	}
	frame = append(frame, payload[:len(payload)/2]...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	conn := c.ws.NetConn()
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _ = conn.Write(frame)
	_ = conn.Close()
}
