package server

import (
	"net/http"
	"runtime"
	"sync"
)

// batchedFlushes is the ResponseWriter of a run served here. adkrest
// flushes after every event; here a flush with event bytes written since
// the last one waits until the turn is about to wait for goose or do other
// slow work (goose.BeforeWait calls send), so events that reach the sidecar
// together leave in one write, as a plain proxy sends what one read gave
// it. Each event still goes out before anything waits, so none is held
// back. Writes are not delayed: they go to net/http's buffer at once, which
// writes to the connection by itself when full and at the handler's end.
type batchedFlushes struct {
	w  http.ResponseWriter
	mu sync.Mutex // send may come from the goroutine of a backend's reply
	// written: body bytes since the last flush.
	written bool
	// sent: body bytes were flushed before.
	sent  bool
	ended bool
}

func (b *batchedFlushes) Header() http.Header { return b.w.Header() }

func (b *batchedFlushes) WriteHeader(code int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.w.WriteHeader(code)
}

func (b *batchedFlushes) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.written = b.written || len(p) > 0
	return b.w.Write(p)
}

// Flush flushes at once the response headers (adkrest sends them before
// the run starts) and the first event, whose time to arrive is what a user
// waits for. After a later event the stream yields, flushed or not: a
// goroutine with events queued would otherwise handle them all before the
// next one runs, and with 50 streams on 2 cores a new stream's first event
// waited behind whole bursts (BenchmarkStreamPaths at concurrency 50: first
// event p50 77-110 ms without yielding, 42-51 ms yielding after each event,
// 67-78 ms yielding only after each batch).
func (b *batchedFlushes) Flush() {
	b.mu.Lock()
	start := !b.written || !b.sent
	if start {
		b.flushLocked()
	}
	b.mu.Unlock()
	if !start {
		runtime.Gosched()
	}
}

// send flushes what was written since the last flush.
func (b *batchedFlushes) send() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written && !b.ended {
		b.flushLocked()
	}
}

func (b *batchedFlushes) flushLocked() {
	_ = http.NewResponseController(b.w).Flush()
	b.sent = b.sent || b.written
	b.written = false
}

// end marks the handler done: the writer is not touched after it
// (net/http flushes what is left).
func (b *batchedFlushes) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
}

func (b *batchedFlushes) Unwrap() http.ResponseWriter { return b.w }
