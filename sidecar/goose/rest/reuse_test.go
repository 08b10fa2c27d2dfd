package rest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// A reply that goose finished leaves its connection to goosed for the next
// one, although the consumer stops at Finish before the stream's end has
// arrived: the rest (goosed closes the stream after Finish) is read in the
// background and the connection goes back to the pool.
func TestFinishedReplyKeepsItsConnection(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/reply" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"type":"Finish","reason":"stop","token_state":{"inputTokens":1,"outputTokens":1,"totalTokens":2,"accumulatedInputTokens":1,"accumulatedOutputTokens":1,"accumulatedTotalTokens":2}}`+"\n\n")
		w.(http.Flusher).Flush()
		<-release // the stream ends only once the consumer has left the reply
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL, SecretKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 2 {
		idle := make(chan struct{}, 1)
		reused := false
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
			PutIdleConn: func(err error) {
				if err == nil {
					idle <- struct{}{}
				}
			},
		})
		for ev, err := range c.Reply(ctx, "s1", goose.UserMessage{Text: "hi"}) {
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := ev.(*goose.Finish); ok {
				break // as gooseagent's turn does
			}
		}
		release <- struct{}{}
		if i > 0 && !reused {
			t.Errorf("reply %d went out on a new connection", i)
		}
		select {
		case <-idle:
		case <-time.After(30 * time.Second):
			t.Fatalf("reply %d: its connection never went back to the pool", i)
		}
	}
}

// finishBody gives up on a stream that does not end, and releases the
// request: the connection is closed, not kept.
func TestFinishBodyCutsAStreamThatDoesNotEnd(t *testing.T) {
	body := &endlessBody{closed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-ctx.Done(); body.Close() }() // as net/http ends a cancelled request's body
	done := make(chan struct{})
	go func() { finishBody(body, cancel); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("finishBody did not give up")
	}
	if ctx.Err() == nil {
		t.Error("the request was not released")
	}
}

// endlessBody blocks each read until closed; closing ends it.
type endlessBody struct {
	closed chan struct{}
	once   sync.Once
}

func (b *endlessBody) Read([]byte) (int, error) {
	<-b.closed
	return 0, context.Canceled
}

func (b *endlessBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}
