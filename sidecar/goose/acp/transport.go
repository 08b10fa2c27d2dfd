package acp

import (
	"bytes"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/gorilla/websocket"
)

// writeTimeout bounds one frame write so a wedged peer cannot block every
// session sharing the connection.
const writeTimeout = 10 * time.Second

// wsStream adapts one WebSocket to the newline-delimited byte stream that
// acp-go-sdk's Connection reads and writes (goose-acp.md §2.5: one JSON-RPC
// message per text frame; §5: the SDK speaks NDJSON only).
//
// It also counts inbound notifications, because the SDK runs inbound requests
// (session/request_permission) on their own goroutines while notifications go
// through an ordered queue: the count lets a request handler wait until every
// notification read before it has been handled, so events keep wire order.
type wsStream struct {
	ws *websocket.Conn

	// rest is the unread part of the current frame (plus its '\n'); only the
	// SDK's single receive goroutine touches it.
	rest []byte

	wmu  sync.Mutex
	wbuf []byte

	// notifRead counts notifications handed to the SDK; the Client counts the
	// ones it handled.
	notifRead atomic.Uint64

	ready     chan struct{}
	closeOnce sync.Once
}

func newWSStream(ws *websocket.Conn) *wsStream {
	return &wsStream{ws: ws, ready: make(chan struct{})}
}

// start lets Read proceed.
func (s *wsStream) start() { close(s.ready) }

// envelope mirrors the fields, and their types, that the SDK's own message
// struct decodes, so a frame this decoder rejects is exactly one the SDK
// drops too and the notification counts agree.
type envelope struct {
	JSONRPC string               `json:"jsonrpc"`
	ID      *json.RawMessage     `json:"id,omitempty"`
	Method  string               `json:"method,omitempty"`
	Error   *acpsdk.RequestError `json:"error,omitempty"`
}

// Read returns the next frame as one line.
func (s *wsStream) Read(p []byte) (int, error) {
	<-s.ready
	for len(s.rest) == 0 {
		typ, data, err := s.ws.ReadMessage()
		if err != nil {
			return 0, err
		}
		// goose ignores binary frames; so do we (§2.5).
		if typ != websocket.TextMessage {
			continue
		}
		// A pretty-printed frame would be split into several lines by the
		// SDK's scanner. Raw newlines are only legal as whitespace in JSON,
		// so turning them into spaces keeps the message intact.
		if bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0 {
			data = bytes.Map(func(r rune) rune {
				if r == '\n' || r == '\r' {
					return ' '
				}
				return r
			}, data)
		}
		if len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		var env envelope
		if json.Unmarshal(data, &env) == nil && env.Method != "" && env.ID == nil && env.Method != "$/cancel_request" {
			s.notifRead.Add(1)
		}
		s.rest = append(data, '\n')
	}
	n := copy(p, s.rest)
	s.rest = s.rest[n:]
	return n, nil
}

// Write sends each complete line as one text frame.
func (s *wsStream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	buf := append(s.wbuf, p...)
	start := 0
	for {
		i := bytes.IndexByte(buf[start:], '\n')
		if i < 0 {
			break
		}
		line := buf[start : start+i]
		start += i + 1
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		_ = s.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
		if err := s.ws.WriteMessage(websocket.TextMessage, line); err != nil {
			// A failed write leaves the socket unusable; closing it ends
			// the reader too, so every waiter learns the connection is gone.
			_ = s.ws.Close()
			s.wbuf = buf[:0]
			return 0, err
		}
	}
	// Keep a partial line (the SDK never writes one, but io.Writer allows it)
	// at the front so the buffer's storage is reused.
	n := copy(buf, buf[start:])
	s.wbuf = buf[:n]
	return len(p), nil
}

// Close sends a close frame (best effort) and closes the socket, which ends
// the SDK's reader and so the whole Connection. goose aborts the connection's
// agent when the socket closes (§2.5), sessions stay in its store.
func (s *wsStream) Close() error {
	var err error
	s.closeOnce.Do(func() {
		// WriteControl may run concurrently with WriteMessage (gorilla docs).
		_ = s.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
			time.Now().Add(time.Second))
		err = s.ws.Close()
	})
	return err
}
