package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/gorilla/websocket"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

const (
	// writeTimeout bounds one frame write so a wedged peer cannot block its
	// connection's callers forever.
	writeTimeout = 10 * time.Second

	// DefaultMaxFrameBytes bounds one frame read from goose, as goose bounds
	// the frames it reads (tungstenite's 16 MiB). A larger frame is not
	// buffered and ends the connection it came on.
	DefaultMaxFrameBytes = 16 << 20

	// gooseMaxInboundFrame is the largest frame goose serve reads: a larger
	// one drops the WebSocket with no error (goose#10751).
	gooseMaxInboundFrame = 16 << 20

	methodCancelRequest = "$/cancel_request"
)

// errConnClosed is what calls on a connection that ended get; mapErr turns it
// into goose.ErrUnavailable with the reason.
var errConnClosed = errors.New("ACP connection closed")

// wsConn is JSON-RPC 2.0 over one goose WebSocket, one message per text
// frame (goose-acp.md §2.5). acp-go-sdk provides the message types; its
// Connection is not used because its transport cannot keep a fault to one
// session: it reads with a 10 MiB line limit whose overflow, like a full
// 1024-notification queue, closes the connection, and it allocates a 1 MiB
// buffer and runs four goroutines per connection, too much for a connection
// per session.
//
// One goroutine reads. Notifications go to notify in wire order on that
// goroutine, which waits for it: while notify waits (its reply's queue is
// full) nothing more is read from this socket and goose is slowed through
// TCP. It also orders events: a response or request is handled only after
// every notification before it was routed. Requests from goose run each on
// their own goroutine.
type wsConn struct {
	ws       *websocket.Conn
	maxFrame int
	log      *slog.Logger
	notify   func(f *frame)
	handle   requestHandler
	// ended, when set, runs on the reader once the connection has ended.
	ended func()

	wmu sync.Mutex

	nextID   atomic.Uint64
	mu       sync.Mutex
	pending  map[uint64]responder          // our requests not yet answered
	inflight map[string]context.CancelFunc // goose's requests being handled, by raw id

	// fault is why the connection was ended by this side's reader, if it was.
	fault     atomic.Pointer[error]
	done      chan struct{} // closed when the reader has stopped
	closing   chan struct{} // closed when Close starts
	closeOnce sync.Once
	ctx       context.Context // handlers' context; cancelled when the reader stops
	cancel    context.CancelFunc
	handlers  sync.WaitGroup
}

// responder takes the response to one of our requests, on the reader: the
// response, or (err set) the end of the connection before it came. It
// must not block the reader.
type responder func(f *frame, err error)

// requestHandler accepts one request from goose on the reader goroutine, so
// it sees the connection as of that frame (a session/load not yet answered,
// every notification before it routed), and returns the work that answers
// it, which runs on its own goroutine.
type requestHandler func(f *frame) func(ctx context.Context) (any, *acpsdk.RequestError)

// outMessage is a JSON-RPC message to send.
type outMessage struct {
	JSONRPC string               `json:"jsonrpc"`
	ID      json.RawMessage      `json:"id,omitempty"`
	Method  string               `json:"method,omitempty"`
	Params  any                  `json:"params,omitempty"`
	Result  any                  `json:"result,omitempty"`
	Error   *acpsdk.RequestError `json:"error,omitempty"`
}

func newWSConn(ws *websocket.Conn, maxFrame int, log *slog.Logger,
	notify func(*frame),
	handle requestHandler,
) *wsConn {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameBytes
	}
	// gorilla refuses a larger frame before reading it (ErrReadLimit).
	ws.SetReadLimit(int64(maxFrame))
	ctx, cancel := context.WithCancel(context.Background())
	w := &wsConn{
		ws: ws, maxFrame: maxFrame, log: log, notify: notify, handle: handle,
		pending: make(map[uint64]responder), inflight: make(map[string]context.CancelFunc),
		done: make(chan struct{}), closing: make(chan struct{}), ctx: ctx, cancel: cancel,
	}
	return w
}

// start runs the reader; ended, if not nil, runs once the connection ended.
func (w *wsConn) start(ended func()) {
	w.ended = ended
	go w.read()
}

// Done is closed once the connection has ended.
func (w *wsConn) Done() <-chan struct{} { return w.done }

// Closing is closed once Close was called: a notify waiting for room gives
// up, so the reader can stop.
func (w *wsConn) Closing() <-chan struct{} { return w.closing }

// faultErr is this side's own reason for ending the connection, or nil.
func (w *wsConn) faultErr() error {
	if p := w.fault.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *wsConn) fail(err error) {
	w.fault.CompareAndSwap(nil, &err)
}

// read is the connection's only reader.
func (w *wsConn) read() {
	defer func() {
		_ = w.ws.Close()
		w.cancel() // handlers of goose's requests stop
		w.mu.Lock()
		unanswered := w.pending
		w.pending = nil
		w.mu.Unlock()
		close(w.done)
		for _, respond := range unanswered {
			respond(nil, errConnClosed)
		}
		if w.ended != nil {
			w.ended()
		}
	}()
	for {
		typ, data, err := w.ws.ReadMessage()
		if errors.Is(err, websocket.ErrReadLimit) {
			w.fail(fmt.Errorf("%w: goose sent a frame over %d bytes", goose.ErrMessageTooLarge, w.maxFrame))
		}
		if err != nil {
			return
		}
		// goose ignores binary frames; so do we (§2.5).
		if typ != websocket.TextMessage {
			continue
		}
		if err := w.dispatch(data); err != nil {
			w.fail(err)
			return
		}
	}
}

// dispatch routes one frame; an error means the connection must end.
func (w *wsConn) dispatch(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	f, err := decodeFrame(data)
	if err != nil {
		// Nothing in it can be answered or routed, and a peer that sends it
		// may have lost a frame we wait for: end the connection (the
		// session's own, or the control one) with the reason.
		return fmt.Errorf("failed to decode a frame from goose: %w", err)
	}
	switch {
	case f.Method != "" && f.ID == nil:
		if f.Method == methodCancelRequest {
			w.cancelInbound(f)
			return nil
		}
		w.notify(f)
	case f.Method != "":
		w.serve(f)
	case f.ID != nil:
		w.deliver(f)
	default:
		w.log.Warn("skipped a goose frame with neither method nor id", "bytes", len(data))
	}
	return nil
}

// deliver hands a response to the request it answers.
func (w *wsConn) deliver(f *frame) {
	id, err := strconv.ParseUint(string(bytes.TrimSpace(f.ID)), 10, 64)
	if err != nil {
		w.log.Warn("skipped a goose response to no request of ours", "id", string(f.ID))
		return
	}
	w.mu.Lock()
	respond := w.pending[id]
	delete(w.pending, id)
	w.mu.Unlock()
	if respond != nil {
		respond(f, nil)
	}
}

// serve accepts one request from goose here, on the reader, then answers it
// on its own goroutine. One whose params cannot be read is refused.
func (w *wsConn) serve(f *frame) {
	var answer func(context.Context) (any, *acpsdk.RequestError)
	if f.Invalid != nil {
		rerr := acpsdk.NewInvalidParams(map[string]any{"error": f.Invalid.Error()})
		answer = func(context.Context) (any, *acpsdk.RequestError) { return nil, rerr }
	} else {
		answer = w.handle(f)
	}
	id, method := f.ID, f.Method
	ctx, cancel := context.WithCancel(w.ctx)
	key := string(id)
	w.mu.Lock()
	w.inflight[key] = cancel
	w.mu.Unlock()
	w.handlers.Go(func() {
		defer func() {
			w.mu.Lock()
			delete(w.inflight, key)
			w.mu.Unlock()
			cancel()
		}()
		res, rerr := answer(ctx)
		out := outMessage{JSONRPC: "2.0", ID: id, Error: rerr}
		if rerr == nil {
			if res == nil {
				res = struct{}{}
			}
			out.Result = res
		}
		if err := w.write(out); err != nil {
			w.log.Debug("failed to answer a goose request", "method", method, "err", err)
		}
	})
}

// cancelInbound stops the handler of a request goose cancelled.
func (w *wsConn) cancelInbound(f *frame) {
	if f.Invalid != nil {
		return
	}
	w.mu.Lock()
	cancel := w.inflight[string(bytes.TrimSpace(f.Params.RequestID))]
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// request sends one request and waits for its response. A done ctx sends
// goose $/cancel_request for it (goose supports it, §3).
func request[T any](ctx context.Context, w *wsConn, method string, params any) (T, error) {
	var zero T
	answers := make(chan *frame, 1) // the reader never waits on us
	sent, err := w.send(method, params, func(f *frame, err error) {
		if err == nil {
			answers <- f
		}
	})
	if err != nil {
		return zero, err
	}
	select {
	case f := <-answers:
		return decodeResult[T](method, f)
	case <-ctx.Done():
		sent.cancel()
		return zero, ctx.Err()
	case <-w.done:
		return zero, errConnClosed
	}
}

// decodeResult is a response's result, or its error.
func decodeResult[T any](method string, f *frame) (T, error) {
	var res T
	if f.Invalid != nil {
		return res, fmt.Errorf("failed to decode the %s response: %w", method, f.Invalid)
	}
	if f.Error != nil {
		return res, f.Error
	}
	if len(f.Result) > 0 {
		if err := json.Unmarshal(f.Result, &res); err != nil {
			return res, fmt.Errorf("failed to decode the %s result: %w", method, err)
		}
	}
	return res, nil
}

// sentRequest is one of our requests, sent.
type sentRequest struct {
	w  *wsConn
	id uint64
}

// send sends one request, whose response (or the connection's end before
// it) goes to respond on the reader: nothing has to wait for it.
func (w *wsConn) send(method string, params any, respond responder) (*sentRequest, error) {
	r := &sentRequest{w: w, id: w.nextID.Add(1)}
	w.mu.Lock()
	if w.pending == nil {
		w.mu.Unlock()
		return nil, errConnClosed
	}
	w.pending[r.id] = respond
	w.mu.Unlock()
	if err := w.write(outMessage{JSONRPC: "2.0", ID: r.rawID(), Method: method, Params: params}); err != nil {
		if !r.forget() {
			// The failed write closed the socket, and the reader has told
			// respond already: once is enough.
			return r, nil
		}
		return nil, err
	}
	return r, nil
}

// awaiting reports whether a request sent here still waits for its answer.
func (w *wsConn) awaiting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) > 0
}

func (r *sentRequest) rawID() json.RawMessage { return json.RawMessage(strconv.FormatUint(r.id, 10)) }

// forget drops the request's responder, unless its response came (or the
// connection ended) first; it reports whether it was still waiting.
func (r *sentRequest) forget() bool {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if _, waiting := r.w.pending[r.id]; !waiting {
		return false
	}
	delete(r.w.pending, r.id)
	return true
}

// cancel stops waiting for the response: if it had not come, goose is
// sent $/cancel_request for it (best effort: goose also ends it with the
// connection) and a late one is dropped.
func (r *sentRequest) cancel() {
	if r.forget() {
		// write bounds itself (writeTimeout) and sends nothing on a
		// connection that has ended.
		_ = r.w.sendNotification(context.Background(), methodCancelRequest, map[string]any{"requestId": r.rawID()})
	}
}

// sendNotification sends one notification.
func (w *wsConn) sendNotification(_ context.Context, method string, params any) error {
	return w.write(outMessage{JSONRPC: "2.0", Method: method, Params: params})
}

// write sends one message as one text frame. A message goose could not read
// is refused here and the connection kept.
func (w *wsConn) write(m outMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("failed to encode %s: %w", m.Method, err)
	}
	if len(b) > gooseMaxInboundFrame {
		// goose would drop the socket without a word (goose#10751).
		return fmt.Errorf("%w: a %d-byte frame, over goose's %d", goose.ErrMessageTooLarge, len(b), gooseMaxInboundFrame)
	}
	select {
	case <-w.done:
		return errConnClosed
	default:
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_ = w.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := w.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		// A failed write leaves the socket unusable; closing it ends the
		// reader too, so every waiter learns the connection is gone.
		_ = w.ws.Close()
		return fmt.Errorf("%w: %w", errConnClosed, err)
	}
	return nil
}

// Close sends a close frame (best effort), closes the socket and waits for
// the reader and the handlers of goose's requests to stop. goose aborts the
// connection's agent when the socket closes (§2.5); sessions stay in its
// store.
func (w *wsConn) Close() error {
	var err error
	w.closeOnce.Do(func() {
		close(w.closing)
		// WriteControl may run concurrently with WriteMessage (gorilla docs).
		_ = w.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
			time.Now().Add(time.Second))
		err = w.ws.Close()
	})
	<-w.done
	w.handlers.Wait()
	return err
}
