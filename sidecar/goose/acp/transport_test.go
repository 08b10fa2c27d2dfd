package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/gorilla/websocket"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// rawPeer is a WebSocket server whose side of the conversation the test
// plays frame by frame.
func rawPeer(t testing.TB) (*websocket.Conn, <-chan *websocket.Conn) {
	t.Helper()
	peers := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		peers <- ws
	}))
	t.Cleanup(srv.Close)
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return ws, peers
}

// playPeer returns how the test plays goose's side of peer: send writes a
// text frame, read reads the next frame as a JSON object.
func playPeer(t *testing.T, peer *websocket.Conn) (send func(frame string), read func() map[string]any) {
	t.Helper()
	send = func(frame string) {
		t.Helper()
		if err := peer.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	read = func() map[string]any {
		t.Helper()
		_, b, err := peer.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return m
	}
	return send, read
}

func TestWSConnFrames(t *testing.T) {
	ws, peers := rawPeer(t)
	notes := make(chan string, 10)
	handled := make(chan context.Context, 1)
	w := newWSConn(ws, 1<<10, slog.New(slog.DiscardHandler),
		func(f *frame) { notes <- f.Method + " " + f.Params.SessionID },
		func(f *frame) func(context.Context) (any, *acpsdk.RequestError) {
			method := f.Method
			return func(ctx context.Context) (any, *acpsdk.RequestError) {
				if method == "slow" {
					handled <- ctx
					<-ctx.Done()
					return nil, acpsdk.NewRequestCancelled(nil)
				}
				return map[string]string{"echo": method}, nil
			}
		})
	w.start(nil)
	t.Cleanup(func() { _ = w.Close() })
	peer := <-peers
	t.Cleanup(func() { _ = peer.Close() })
	send, readPeer := playPeer(t, peer)

	// Binary, blank, id-less and unknown-id frames are skipped; a
	// pretty-printed notification is one message.
	_ = peer.WriteMessage(websocket.BinaryMessage, []byte("{}"))
	send("  \n")
	send(`{"jsonrpc":"2.0"}`)
	send(`{"jsonrpc":"2.0","id":999,"result":{}}`)
	send("{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"session/update\",\n  \"params\": {\"sessionId\": \"s1\"}\n}")
	if got := <-notes; got != `session/update s1` {
		t.Errorf("notification = %q", got)
	}

	// A request of ours gets its response; a goose request gets an answer.
	res := make(chan error, 1)
	go func() {
		v, err := request[map[string]int](context.Background(), w, "ping", nil)
		if err == nil && v["n"] != 7 {
			err = errors.New("wrong result")
		}
		res <- err
	}()
	m := readPeer()
	if m["method"] != "ping" {
		t.Fatalf("request = %v", m)
	}
	id, _ := json.Marshal(m["id"])
	send(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"n":7}}`)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	send(`{"jsonrpc":"2.0","id":"g1","method":"hello","params":{}}`)
	if m := readPeer(); m["id"] != "g1" || m["result"].(map[string]any)["echo"] != "hello" {
		t.Errorf("answer = %v", m)
	}

	// $/cancel_request from goose cancels its request's handler.
	send(`{"jsonrpc":"2.0","id":"g2","method":"slow","params":{}}`)
	ctx := <-handled
	send(`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"g2"}}`)
	<-ctx.Done()
	if m := readPeer(); m["id"] != "g2" || m["error"] == nil {
		t.Errorf("answer to the cancelled request = %v", m)
	}

	// A cancelled call of ours sends $/cancel_request.
	cctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := request[json.RawMessage](cctx, w, "long", nil)
		res <- err
	}()
	m = readPeer()
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	if c := readPeer(); c["method"] != methodCancelRequest || c["params"].(map[string]any)["requestId"] != m["id"] {
		t.Errorf("after cancel: %v, want $/cancel_request for %v", c, m["id"])
	}

	// A frame over the limit ends the connection with the reason; a call
	// waiting on it fails.
	go func() {
		_, err := request[json.RawMessage](context.Background(), w, "waits", nil)
		res <- err
	}()
	readPeer()
	send(`{"jsonrpc":"2.0","method":"x","params":"` + strings.Repeat("a", 2<<10) + `"}`)
	if err := <-res; !errors.Is(err, errConnClosed) {
		t.Errorf("waiting call: %v", err)
	}
	if err := w.faultErr(); !errors.Is(err, goose.ErrMessageTooLarge) {
		t.Errorf("fault = %v", err)
	}
	select {
	case <-w.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection still open")
	}
	if _, err := request[json.RawMessage](context.Background(), w, "after", nil); !errors.Is(err, errConnClosed) {
		t.Errorf("call after the end: %v", err)
	}
}

func TestWSConnRefusesAFrameGooseCannotRead(t *testing.T) {
	ws, peers := rawPeer(t)
	w := newWSConn(ws, 0, slog.New(slog.DiscardHandler), func(*frame) {}, nil)
	w.start(nil)
	t.Cleanup(func() { _ = w.Close() })
	peer := <-peers
	t.Cleanup(func() { _ = peer.Close() })
	_, err := request[json.RawMessage](context.Background(), w, "big", map[string]string{"t": strings.Repeat("x", 16<<20)})
	if !errors.Is(err, goose.ErrMessageTooLarge) {
		t.Fatalf("err = %v", err)
	}
	// The connection is kept: the next call goes out.
	go func() { _, _ = request[json.RawMessage](context.Background(), w, "small", nil) }()
	_, b, err := peer.ReadMessage()
	if err != nil || !strings.Contains(string(b), `"small"`) {
		t.Fatalf("next frame %s, %v", b, err)
	}
}

// TestWSConnFramesReachTheirHandlersIntact: what notify, goose's requests
// and our own call's response were given stays as goose sent it, in wire
// order, however many frames follow.
func TestWSConnFramesReachTheirHandlersIntact(t *testing.T) {
	ws, peers := rawPeer(t)
	var (
		mu   sync.Mutex
		kept []string
	)
	keep := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		kept = append(kept, s)
	}
	w := newWSConn(ws, 0, slog.New(slog.DiscardHandler),
		func(f *frame) {
			d, err := f.notification()
			if err != nil {
				t.Errorf("notification: %v", err)
				return
			}
			keep(d.SessionID + " " + d.Event.(*goose.TextDelta).Text)
		},
		func(f *frame) func(context.Context) (any, *acpsdk.RequestError) {
			keep(f.Params.SessionID + " " + f.Params.ToolCall.Title)
			return func(context.Context) (any, *acpsdk.RequestError) { return nil, nil }
		})
	w.start(nil)
	peer := <-peers
	t.Cleanup(func() { _ = peer.Close(); _ = w.Close() })

	text := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 1+i*37%900) }
	type answer struct {
		result json.RawMessage
		err    error
	}
	called := make(chan answer, 1)
	go func() {
		r, err := request[json.RawMessage](context.Background(), w, "call", nil)
		called <- answer{r, err}
	}()
	if _, b, err := peer.ReadMessage(); err != nil || !strings.Contains(string(b), `"id":1`) {
		t.Fatalf("our call: %s, %v", b, err)
	}
	var want []string
	send, _ := playPeer(t, peer)
	result := fmt.Sprintf(`{"text":%q}`, text(0))
	send(`{"jsonrpc":"2.0","id":1,"result":` + result + `}`)
	got := <-called
	for i := 1; i <= 200; i++ {
		session := fmt.Sprintf("s%d", i)
		want = append(want, session+" "+text(i))
		if i%3 == 0 {
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"r%d","method":"session/request_permission","params":{"sessionId":%q,"toolCall":{"toolCallId":"t","title":%q},"options":[]}}`, i, session, text(i)))
		} else {
			send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%q,"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q}}}}`, session, text(i)))
		}
	}
	// goose's side reads our answers; the answer to a last request says
	// every frame before it was read.
	send(`{"jsonrpc":"2.0","id":"end","method":"end","params":{"sessionId":"end"}}`)
	for {
		_, b, err := peer.ReadMessage()
		if err != nil {
			t.Fatalf("reading our answers: %v", err)
		}
		if strings.Contains(string(b), `"id":"end"`) {
			break
		}
	}
	want = append(want, "end ")
	if got.err != nil || string(got.result) != result {
		t.Errorf("our call's result %s, %v; want %s", got.result, got.err, result)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kept) != len(want) {
		t.Fatalf("%d frames reached notify and the request handler, want %d", len(kept), len(want))
	}
	for i, p := range kept {
		if p != want[i] {
			t.Fatalf("frame %d now reads %.60s..., was sent as %.60s...", i+1, p, want[i])
		}
	}
}

// TestWSConnWrongTypeFailsOnlyItsCall: a frame with a field of the wrong
// type fails its own message (a notification is skipped, goose's request is
// refused, our call gets the error) and the connection goes on.
func TestWSConnWrongTypeFailsOnlyItsCall(t *testing.T) {
	ws, peers := rawPeer(t)
	notes := make(chan *frame, 10)
	handled := make(chan string, 10)
	w := newWSConn(ws, 0, slog.New(slog.DiscardHandler),
		func(f *frame) { notes <- f },
		func(f *frame) func(context.Context) (any, *acpsdk.RequestError) {
			handled <- f.Method
			return func(context.Context) (any, *acpsdk.RequestError) { return map[string]string{"ok": f.Method}, nil }
		})
	w.start(nil)
	t.Cleanup(func() { _ = w.Close() })
	peer := <-peers
	t.Cleanup(func() { _ = peer.Close() })
	send, readPeer := playPeer(t, peer)

	// A notification: routed with the reason, and the next one is read.
	send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"},"used":"many"}}}`)
	send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"b"}}}}`)
	if f := <-notes; f.Invalid == nil {
		t.Errorf("a notification with a number that is a string: no error")
	} else if _, err := f.notification(); err == nil || !strings.Contains(err.Error(), "params.update.used") {
		t.Errorf("its notification: %v, want the field named", err)
	}
	if f := <-notes; f.Invalid != nil {
		t.Errorf("the next notification: %v", f.Invalid)
	} else if d, err := f.notification(); err != nil || d.Event.(*goose.TextDelta).Text != "b" {
		t.Errorf("the next notification decoded to %+v, %v", d, err)
	}

	// goose's request: refused with invalid params, without reaching its handler.
	send(`{"jsonrpc":"2.0","id":"g1","method":"session/request_permission","params":{"sessionId":"s","options":{"kind":1}}}`)
	if m := readPeer(); m["id"] != "g1" || m["error"] == nil || m["error"].(map[string]any)["code"] != float64(-32602) {
		t.Errorf("answer to an invalid request = %v, want -32602", m)
	}
	send(`{"jsonrpc":"2.0","id":"g2","method":"next","params":{}}`)
	if m := readPeer(); m["id"] != "g2" || m["result"] == nil {
		t.Errorf("answer to the next request = %v", m)
	}
	if got := <-handled; got != "next" {
		t.Errorf("handled %q, want only the valid request", got)
	}

	// Our call: an error object of the wrong shape fails it; the next call works.
	res := make(chan error, 1)
	call := func(name string) map[string]any {
		go func() {
			_, err := request[json.RawMessage](context.Background(), w, name, nil)
			res <- err
		}()
		return readPeer()
	}
	m := call("first")
	id, _ := json.Marshal(m["id"])
	send(`{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":"bad","message":"m"}}`)
	if err := <-res; err == nil || !strings.Contains(err.Error(), "failed to decode the first response") {
		t.Errorf("call answered with a bad error object: %v", err)
	}
	m = call("second")
	id, _ = json.Marshal(m["id"])
	send(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{}}`)
	if err := <-res; err != nil {
		t.Errorf("the next call: %v", err)
	}
	select {
	case <-w.Done():
		t.Fatalf("the connection ended: %v", w.faultErr())
	default:
	}
}

// FuzzWSConnDispatch feeds arbitrary frames to the frame router: it never
// panics, and it refuses (ending the connection) exactly the frames that are
// not a JSON-RPC object with a readable method.
func FuzzWSConnDispatch(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`, `{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"m"}}`,
		`{"jsonrpc":"2.0","id":"r1","method":"session/request_permission","params":{}}`,
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"r1"}}`,
		`{"jsonrpc":"2.0","id":"r2","method":"session/request_permission","params":{"sessionId":7}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":"x"},"method":5}`,
		`{}`, ``, `  `, `[1,2]`, `{"id":null}`, `{"method":5}`, `not json`,
	} {
		f.Add([]byte(s))
	}
	ws, peers := rawPeer(f)
	peer := <-peers
	go func() { // goose's side reads the answers to its requests
		for {
			if _, _, err := peer.ReadMessage(); err != nil {
				return
			}
		}
	}()
	w := newWSConn(ws, 0, slog.New(slog.DiscardHandler), func(*frame) {},
		func(*frame) func(context.Context) (any, *acpsdk.RequestError) {
			return func(context.Context) (any, *acpsdk.RequestError) { return nil, nil }
		})
	f.Cleanup(func() { _ = peer.Close(); _ = w.Close() })
	w.start(nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		var envelope struct {
			Method string `json:"method"`
		}
		refuse := len(strings.TrimSpace(string(data))) > 0 && json.Unmarshal(data, &envelope) != nil
		if err := w.dispatch(data); (err != nil) != refuse {
			t.Fatalf("dispatch(%q) = %v; refuse = %v", data, err, refuse)
		}
	})
}

// A request sent with a responder is answered on the reader, in wire order
// after the notifications before its response, exactly once: by its
// response, by nothing once cancelled (goose gets $/cancel_request and the
// late response is dropped), or by the connection's end.
func TestSentRequestsAreAnsweredOnTheReader(t *testing.T) {
	ws, peers := rawPeer(t)
	var (
		mu  sync.Mutex
		log []string
	)
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		log = append(log, s)
	}
	w := newWSConn(ws, 0, slog.New(slog.DiscardHandler),
		func(f *frame) { record("notify " + f.Method) }, nil)
	w.start(nil)
	t.Cleanup(func() { _ = w.Close() })
	peer := <-peers
	t.Cleanup(func() { _ = peer.Close() })
	send, readPeer := playPeer(t, peer)
	respond := func(name string) responder {
		return func(f *frame, err error) {
			switch {
			case err != nil:
				record(name + " error " + err.Error())
			case f.Error != nil:
				record(name + " rpc error " + f.Error.Message)
			default:
				record(name + " result " + string(f.Result))
			}
		}
	}
	id := func(m map[string]any) string { b, _ := json.Marshal(m["id"]); return string(b) }

	if _, err := w.send("answered", nil, respond("answered")); err != nil {
		t.Fatal(err)
	}
	answered := readPeer()
	cancelled, err := w.send("cancelled", nil, respond("cancelled"))
	if err != nil {
		t.Fatal(err)
	}
	cm := readPeer()
	cancelled.cancel()
	if c := readPeer(); c["method"] != methodCancelRequest || c["params"].(map[string]any)["requestId"] != cm["id"] {
		t.Errorf("after cancel: %v, want $/cancel_request for %v", c, cm["id"])
	}
	cancelled.cancel() // twice: nothing more is sent (the next frame read is the next request)
	if _, err := w.send("orphaned", nil, respond("orphaned")); err != nil {
		t.Fatal(err)
	}
	if m := readPeer(); m["method"] != "orphaned" {
		t.Fatalf("after a second cancel: %v, want the next request", m)
	}

	send(`{"jsonrpc":"2.0","method":"session/update","params":{}}`)
	send(`{"jsonrpc":"2.0","id":` + id(cm) + `,"result":{"late":true}}`)
	send(`{"jsonrpc":"2.0","id":` + id(answered) + `,"result":{"n":1}}`)
	send(`{"jsonrpc":"2.0","id":` + id(answered) + `,"result":{"again":true}}`) // a second response: no request waits
	_ = peer.Close()
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("connection still open after goose's side closed")
	}
	want := []string{
		"notify session/update",
		`answered result {"n":1}`,
		"orphaned error " + errConnClosed.Error(),
	}
	// The reader tells the unanswered requests of the end as it stops.
	poll.Until(t, "every request answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(log) >= len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(log, want) {
		t.Errorf("answers\n got %q\nwant %q", log, want)
	}
	if _, err := w.send("after", nil, respond("after")); !errors.Is(err, errConnClosed) {
		t.Errorf("send on a closed connection: %v", err)
	}
}
