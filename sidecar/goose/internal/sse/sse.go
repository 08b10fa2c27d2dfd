// Package sse reads a text/event-stream (the WHATWG "server-sent events"
// format) incrementally from an io.Reader.
//
// goosed's /reply stream uses only `data:` lines (one-line JSON per frame) and
// its /sessions/{id}/events stream adds `id:` lines and `: ping` comments, but
// the reader implements the whole line grammar so that a proxy re-framing the
// stream (CRLF, CR, split data lines) cannot confuse the client.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
)

// DefaultMaxLine bounds one line and one event's data.
//
// goosed accepts 50 MiB request bodies, but what it streams back is one
// message delta, one tool result or (rarely) a whole conversation after a
// compaction (`UpdateConversation`). 16 MiB covers a base64 image or a large
// tool output with room to spare, while keeping a misbehaving or hostile
// server from making the sidecar buffer without bound: the limit is reached
// only when such a line actually arrives, memory is not reserved up front.
const DefaultMaxLine = 16 << 20

// ErrTooLong reports a line or an event larger than the reader's limit. The
// reader cannot resynchronise after it and returns it from every later call.
var ErrTooLong = errors.New("sse: line or event exceeds the size limit")

// Event is one dispatched server-sent event.
type Event struct {
	// Type is the `event:` field; empty means the default "message".
	Type string
	// ID is the last event id seen so far on the stream (sticky, as the
	// spec's "last event ID buffer").
	ID string
	// Data is the `data:` lines joined with "\n". It aliases the reader's
	// buffer and is valid only until the next call to Next.
	Data []byte
	// Retry is the last `retry:` value in milliseconds, 0 if none.
	Retry int
}

// Reader parses events from a stream. It is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	max int

	line    []byte // spill buffer for lines longer than what bufio holds
	data    []byte
	evType  string
	lastID  string
	retry   int
	skipLF  bool // the previous line ended in CR; a following LF belongs to it
	started bool // BOM check done
	pending bool // fields were read since the last dispatch
	err     error
}

// NewReader returns a Reader over r. maxLine <= 0 selects DefaultMaxLine.
func NewReader(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	return &Reader{br: bufio.NewReader(r), max: maxLine}
}

// Next returns the next event. At a clean end of stream it returns io.EOF. If
// the stream ends inside an event (a line without its terminator, or fields
// not yet followed by the blank line that dispatches them) the partial event
// is discarded, as the spec demands, and io.ErrUnexpectedEOF is returned so the
// caller can tell a truncated stream from a finished one. Other read errors
// are returned as they are.
func (r *Reader) Next() (Event, error) {
	if r.err != nil {
		return Event{}, r.err
	}
	for {
		if ev, ok, err := r.step(); ok || err != nil {
			return ev, err
		}
	}
}

// step reads one line and applies it: ok when the line dispatched an event.
func (r *Reader) step() (_ Event, ok bool, _ error) {
	line, err := r.readLine()
	if err != nil {
		if errors.Is(err, io.EOF) && (r.pending || len(line) > 0) {
			err = io.ErrUnexpectedEOF
		}
		r.err = err
		return Event{}, false, err
	}
	if len(line) == 0 {
		ev, ok := r.dispatch()
		return ev, ok, nil
	}
	if err := r.field(line); err != nil {
		r.err = err
		return Event{}, false, err
	}
	return Event{}, false, nil
}

// dispatch ends the current event. Per spec an event with an empty data
// buffer is not dispatched, but its type is reset.
func (r *Reader) dispatch() (Event, bool) {
	r.pending = false
	typ := r.evType
	r.evType = ""
	if len(r.data) == 0 {
		return Event{}, false
	}
	data := r.data[:len(r.data)-1] // drop the trailing "\n" added per line
	r.data = r.data[:0]
	return Event{Type: typ, ID: r.lastID, Data: data, Retry: r.retry}, true
}

func (r *Reader) field(line []byte) error {
	if line[0] == ':' {
		return nil // comment, e.g. goosed's ": ping N" heartbeat
	}
	name, value := line, []byte(nil)
	if before, after, ok := bytes.Cut(line, []byte{':'}); ok {
		name, value = before, after
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) { // no allocation: the compiler special-cases this
	case "data":
		if len(r.data)+len(value)+1 > r.max+1 {
			return ErrTooLong
		}
		r.data = append(r.data, value...)
		r.data = append(r.data, '\n')
		r.pending = true
	case "event":
		r.evType = string(value)
		r.pending = true
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.lastID = string(value)
		}
	case "retry":
		if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 && isDigits(value) {
			r.retry = n
		}
	}
	// Unknown field names are ignored, as the spec says.
	return nil
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// readLine returns the next line without its terminator (CRLF, LF or CR).
// The slice is valid until the next call. On EOF it returns the unterminated
// remainder together with io.EOF.
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		buf, err := r.br.Peek(1)
		if err != nil {
			return r.line, err
		}
		if r.skipLF {
			r.skipLF = false
			if buf[0] == '\n' {
				_, _ = r.br.Discard(1)
				continue
			}
		}
		if !r.started {
			r.started = true
			// Peek(3) only after a first 0xEF, so a short first line never blocks.
			if buf[0] == 0xEF {
				if b, _ := r.br.Peek(3); bytes.Equal(b, []byte("\xEF\xBB\xBF")) {
					_, _ = r.br.Discard(3)
					continue
				}
			}
		}
		buf, _ = r.br.Peek(r.br.Buffered())
		i := bytes.IndexAny(buf, "\r\n")
		if i < 0 {
			if len(r.line)+len(buf) > r.max {
				return nil, ErrTooLong
			}
			r.line = append(r.line, buf...)
			_, _ = r.br.Discard(len(buf))
			continue
		}
		if len(r.line)+i > r.max {
			return nil, ErrTooLong
		}
		// Checked lazily on the next call: peeking past a CR here would block
		// on a stream that pauses right after it.
		r.skipLF = buf[i] == '\r'
		var line []byte
		if len(r.line) == 0 {
			line = buf[:i] // fast path: the whole line sits in the buffer
		} else {
			r.line = append(r.line, buf[:i]...)
			line = r.line
		}
		_, _ = r.br.Discard(i + 1)
		return line, nil
	}
}
