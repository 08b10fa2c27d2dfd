package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

const (
	// writeTimeout bounds one frame write so a wedged peer cannot block its
	// connection's callers forever.
	writeTimeout = 10 * time.Second

	// sdkMaxLine is the longest line acp-go-sdk's reader takes (its
	// bufio.Scanner max, connection.go receive), newline included. A longer
	// one ends the SDK's Connection, so such frames never reach it.
	sdkMaxLine = 10 << 20

	// DefaultMaxFrameBytes bounds one frame read from goose, as goose bounds
	// the frames it reads (tungstenite's 16 MiB). A larger frame is skipped
	// without being buffered and ends the connection it came on.
	DefaultMaxFrameBytes = 16 << 20

	// gooseMaxInboundFrame is the largest frame goose serve reads: a larger
	// one drops the WebSocket with no error (goose#10751).
	gooseMaxInboundFrame = 16 << 20
)

// Methods of the frames the transport makes up in place of ones acp-go-sdk
// must not see. goose never sends names starting "_adk2goose/".
const methodOversizedRequest = "_adk2goose/oversized_request"

// oversizedMarker is the key, in the data of the error the transport puts in
// place of an oversized response, that mapErr recognises.
const oversizedMarker = "adk2goose_oversized"

// wsStream adapts one WebSocket to the newline-delimited byte stream that
// acp-go-sdk's Connection reads and writes (goose-acp.md §2.5: one JSON-RPC
// message per text frame; §5: the SDK speaks NDJSON only).
//
// Notifications never reach the SDK: Read hands each to notify in wire order
// on the SDK's reader goroutine and waits for it. That is the connection's
// flow control: while notify waits (its reply's queue is full) nothing more
// is read from this socket, so goose is slowed through TCP instead of the
// SDK's bounded notification queue overflowing and closing the connection
// (connection.go receive, capacity 1024). It also orders events: everything
// before a response or a request has been routed when the SDK sees it.
type wsStream struct {
	ws       *websocket.Conn
	maxFrame int
	notify   func(method string, params json.RawMessage)

	// rest is the unread part of the current frame (plus its '\n'); only the
	// SDK's single receive goroutine touches it.
	rest []byte

	wmu  sync.Mutex
	wbuf []byte

	// fault is why the transport ended the connection itself, if it did.
	fault atomic.Pointer[error]

	ready     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func newWSStream(ws *websocket.Conn, maxFrame int, notify func(string, json.RawMessage)) *wsStream {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameBytes
	}
	return &wsStream{ws: ws, maxFrame: maxFrame, notify: notify, ready: make(chan struct{}), closed: make(chan struct{})}
}

// start lets Read proceed.
func (s *wsStream) start() { close(s.ready) }

// frame is what Read needs of a message to route it.
type frame struct {
	ID     *json.RawMessage `json:"id,omitempty"`
	Method string           `json:"method,omitempty"`
	Params json.RawMessage  `json:"params,omitempty"`
}

// faultErr is the transport's own reason for ending the connection, or nil.
func (s *wsStream) faultErr() error {
	if p := s.fault.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records why the connection ends and returns it for Read to report.
func (s *wsStream) fail(err error) error {
	s.fault.CompareAndSwap(nil, &err)
	return err
}

// Read returns the next response or request frame as one line, routing the
// notifications before it.
func (s *wsStream) Read(p []byte) (int, error) {
	<-s.ready
	for len(s.rest) == 0 {
		typ, r, err := s.ws.NextReader()
		if err != nil {
			return 0, err
		}
		// goose ignores binary frames; so do we (§2.5). NextReader skips
		// what is left of a frame we do not read.
		if typ != websocket.TextMessage {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(r, int64(s.maxFrame)+1))
		if err != nil {
			return 0, err
		}
		if len(data) > s.maxFrame {
			return 0, s.fail(fmt.Errorf("%w: goose sent a frame over %d bytes", goose.ErrMessageTooLarge, s.maxFrame))
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
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			// Nothing in it can be answered or routed, and a peer that sends
			// it may have lost a frame we are waiting for: end the connection
			// (the session's own, or the control one) with the reason.
			return 0, s.fail(fmt.Errorf("failed to decode a frame from goose: %w", err))
		}
		if f.ID == nil && f.Method != "" && f.Method != "$/cancel_request" {
			s.notify(f.Method, f.Params)
			continue
		}
		if len(data)+1 > sdkMaxLine {
			data = s.replaceOversized(f, len(data))
		}
		s.rest = append(data, '\n')
	}
	n := copy(p, s.rest)
	s.rest = s.rest[n:]
	return n, nil
}

// replaceOversized returns a frame the SDK can read in place of a response
// or request too long for it: an error answer to our request, or a request
// our handler refuses, so goose gets an error answer to it.
func (s *wsStream) replaceOversized(f frame, size int) []byte {
	var v any
	if f.Method == "" {
		v = map[string]any{"jsonrpc": "2.0", "id": f.ID, "error": map[string]any{
			"code":    -32603,
			"message": fmt.Sprintf("goose's answer is %d bytes, over the %d the ACP client reads", size, sdkMaxLine-1),
			"data":    map[string]any{oversizedMarker: size},
		}}
	} else {
		v = map[string]any{"jsonrpc": "2.0", "id": f.ID, "method": methodOversizedRequest,
			"params": map[string]any{"method": f.Method, "bytes": size}}
	}
	b, _ := json.Marshal(v) // maps of strings and numbers always marshal
	return b
}

// errFrameTooLarge is returned by Write for a frame goose would not read.
var errFrameTooLarge = errors.New("frame over goose's 16 MiB read limit")

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
		if len(line) > gooseMaxInboundFrame {
			// goose would drop the socket without a word (goose#10751):
			// refuse this one message and keep the connection.
			s.wbuf = buf[:0]
			return 0, fmt.Errorf("%w: %w", goose.ErrMessageTooLarge, errFrameTooLarge)
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
		close(s.closed)
		// WriteControl may run concurrently with WriteMessage (gorilla docs).
		_ = s.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
			time.Now().Add(time.Second))
		err = s.ws.Close()
	})
	return err
}
