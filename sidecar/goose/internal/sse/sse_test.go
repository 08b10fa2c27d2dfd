package sse

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

type got struct {
	Type, ID, Data string
	Retry          int
}

// readAll drains r and returns the events and the terminating error.
func readAll(r *Reader) ([]got, error) {
	var out []got
	for {
		ev, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, got{ev.Type, ev.ID, string(ev.Data), ev.Retry})
	}
}

// chunkReader returns the input in reads of the given sizes (cycled), to
// exercise frames and line terminators split across reads.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = c.sizes[c.i%len(c.sizes)]
		c.i++
	}
	n = max(1, min(n, len(p), len(c.data)))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestReader(t *testing.T) {
	long := strings.Repeat("x", 200_000) // far longer than the read buffer
	tests := []struct {
		name    string
		in      string
		max     int
		want    []got
		wantErr error
	}{
		{
			name:    "goosed legacy reply frames",
			in:      "data: {\"type\":\"Ping\"}\n\ndata: {\"type\":\"Finish\",\"reason\":\"stop\"}\n\n",
			want:    []got{{Data: `{"type":"Ping"}`}, {Data: `{"type":"Finish","reason":"stop"}`}},
			wantErr: io.EOF,
		},
		{
			name:    "CRLF line endings",
			in:      "data: a\r\n\r\ndata: b\r\n\r\n",
			want:    []got{{Data: "a"}, {Data: "b"}},
			wantErr: io.EOF,
		},
		{
			name:    "bare CR line endings",
			in:      "data: a\r\rdata: b\r\r",
			want:    []got{{Data: "a"}, {Data: "b"}},
			wantErr: io.EOF,
		},
		{
			name:    "comment lines are ignored (events-stream heartbeat)",
			in:      ": ping 0\n\n: ping 1\ndata: x\n: inside\n\n",
			want:    []got{{Data: "x"}},
			wantErr: io.EOF,
		},
		{
			name:    "multi-line data joined with newline",
			in:      "data: one\ndata:two\ndata\ndata:  four\n\n",
			want:    []got{{Data: "one\ntwo\n\n four"}},
			wantErr: io.EOF,
		},
		{
			name:    "id is sticky, event type is per event",
			in:      "id: 1\nevent: custom\ndata: a\n\ndata: b\n\nid: 7\ndata: c\n\n",
			want:    []got{{Type: "custom", ID: "1", Data: "a"}, {ID: "1", Data: "b"}, {ID: "7", Data: "c"}},
			wantErr: io.EOF,
		},
		{
			name:    "id containing NUL is ignored",
			in:      "id: 1\n\nid: a\x00b\ndata: x\n\n",
			want:    []got{{ID: "1", Data: "x"}},
			wantErr: io.EOF,
		},
		{
			name:    "retry digits only",
			in:      "retry: 1500\nretry: 12a\ndata: x\n\n",
			want:    []got{{Data: "x", Retry: 1500}},
			wantErr: io.EOF,
		},
		{
			name:    "event without data is not dispatched",
			in:      "event: nothing\n\ndata: x\n\n",
			want:    []got{{Data: "x"}},
			wantErr: io.EOF,
		},
		{
			name:    "leading BOM is stripped",
			in:      "\xEF\xBB\xBFdata: x\n\n",
			want:    []got{{Data: "x"}},
			wantErr: io.EOF,
		},
		{
			name:    "unknown fields ignored",
			in:      "foo: bar\ndata: x\n\n",
			want:    []got{{Data: "x"}},
			wantErr: io.EOF,
		},
		{
			name:    "truncated mid line",
			in:      "data: a\n\ndata: {\"type\":\"Mess",
			want:    []got{{Data: "a"}},
			wantErr: io.ErrUnexpectedEOF,
		},
		{
			name:    "truncated before the dispatching blank line",
			in:      "data: a\n\ndata: b\n",
			want:    []got{{Data: "a"}},
			wantErr: io.ErrUnexpectedEOF,
		},
		{
			name:    "very long line within the limit",
			in:      "data: " + long + "\n\n",
			want:    []got{{Data: long}},
			wantErr: io.EOF,
		},
		{
			name:    "over-long line is an error, not a panic",
			in:      "data: a\n\ndata: " + long + "\n\n",
			max:     100_000,
			want:    []got{{Data: "a"}},
			wantErr: ErrTooLong,
		},
		{
			name:    "over-long event from many short lines",
			in:      strings.Repeat("data: 0123456789\n", 20) + "\n",
			max:     64,
			wantErr: ErrTooLong,
		},
		{
			name:    "empty stream",
			in:      "",
			wantErr: io.EOF,
		},
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one-byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"chunks":   func(s string) io.Reader { return &chunkReader{data: []byte(s), sizes: []int{3, 7, 1, 64, 2}} },
	}
	for _, tt := range tests {
		for rname, mk := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				evs, err := readAll(NewReader(mk(tt.in), tt.max))
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
				if len(evs) != len(tt.want) {
					t.Fatalf("got %d events %+v, want %d", len(evs), evs, len(tt.want))
				}
				for i := range evs {
					if evs[i] != tt.want[i] {
						t.Errorf("event %d = %+v, want %+v", i, evs[i], tt.want[i])
					}
				}
			})
		}
	}
}

// A CR at the end of one read and the LF at the start of the next are one
// line terminator, not an empty line that would dispatch early.
func TestReaderCRLFSplitAcrossReads(t *testing.T) {
	in := "data: a\r\ndata: b\r\n\r\n"
	for split := 1; split < len(in); split++ {
		r := NewReader(io.MultiReader(strings.NewReader(in[:split]), strings.NewReader(in[split:])), 0)
		evs, err := readAll(r)
		if !errors.Is(err, io.EOF) || len(evs) != 1 || evs[0].Data != "a\nb" {
			t.Fatalf("split at %d: events %+v, err %v", split, evs, err)
		}
	}
}

// Frames around the read buffer's size (bufio's default, 4 KiB), read in
// whatever pieces the body gives: a line that straddles the end of the
// buffer is joined whole.
func TestReaderLinesAcrossTheBuffer(t *testing.T) {
	var in strings.Builder
	var want []got
	for n := 1; n <= 3*4096; n += 97 {
		d := strings.Repeat(strconv.Itoa(n%10), n)
		in.WriteString("data: " + d + "\n\n")
		want = append(want, got{Data: d})
	}
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"halves":   iotest.HalfReader,
		"one byte": iotest.OneByteReader,
	} {
		evs, err := readAll(NewReader(wrap(strings.NewReader(in.String())), 0))
		if !errors.Is(err, io.EOF) || len(evs) != len(want) {
			t.Fatalf("%s: %d events, err %v; want %d", name, len(evs), err, len(want))
		}
		for i := range want {
			if evs[i] != want[i] {
				t.Fatalf("%s: event %d is %d bytes, want %d", name, i, len(evs[i].Data), len(want[i].Data))
			}
		}
	}
}

// A frame must be delivered as soon as its blank line arrives, without
// waiting for more bytes: goosed streams are long-lived.
func TestReaderDoesNotBlockAfterFrame(t *testing.T) {
	for _, frame := range []string{"data: x\n\n", "data: x\r\r", "data: x\r\n\r\n"} {
		pr, pw := io.Pipe()
		go func() { _, _ = pw.Write([]byte(frame)) }() // then the writer stalls
		r := NewReader(pr, 0)
		ev, err := r.Next()
		if err != nil || string(ev.Data) != "x" {
			t.Fatalf("%q: got %q, %v", frame, ev.Data, err)
		}
		_ = pw.Close()
	}
}

func TestReaderStickyError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(strings.NewReader("data: a\n\n"), iotest.ErrReader(boom)), 0)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.Next(); !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
	}
}

// reference is a deliberately naive parser over the whole input, written
// straight from the spec's prose, used as the oracle for FuzzSSE.
func reference(in []byte, maxLen int) ([]got, error) {
	in = bytes.TrimPrefix(in, []byte("\xEF\xBB\xBF"))
	var (
		out            []got
		data           []byte
		typ, id        string
		retry          int
		pending        bool
		haveData       bool
		lineStart, pos = 0, 0
	)
	for pos <= len(in) {
		if pos == len(in) {
			if pos > lineStart || pending {
				if pos-lineStart > maxLen {
					return out, ErrTooLong
				}
				return out, io.ErrUnexpectedEOF
			}
			return out, io.EOF
		}
		c := in[pos]
		if c != '\r' && c != '\n' {
			pos++
			if pos-lineStart > maxLen {
				return out, ErrTooLong
			}
			continue
		}
		line := in[lineStart:pos]
		pos++
		if c == '\r' && pos < len(in) && in[pos] == '\n' {
			pos++
		}
		lineStart = pos
		switch {
		case len(line) == 0:
			pending = false
			if haveData {
				out = append(out, got{typ, id, string(data), retry})
			}
			data, typ, haveData = nil, "", false
		case line[0] == ':':
		default:
			name, value := string(line), ""
			if before, after, ok := bytes.Cut(line, []byte{':'}); ok {
				name, value = string(before), strings.TrimPrefix(string(after), " ")
			}
			switch name {
			case "data":
				if haveData {
					data = append(data, '\n')
				}
				data = append(data, value...)
				if len(data) > maxLen {
					return out, ErrTooLong
				}
				haveData, pending = true, true
			case "event":
				typ, pending = value, true
			case "id":
				if !strings.ContainsRune(value, 0) {
					id = value
				}
			case "retry":
				n, err := strconv.Atoi(value)
				ok := err == nil && value != "" && strings.Trim(value, "0123456789") == ""
				if ok {
					retry = n
				}
			}
		}
	}
	panic("unreachable")
}

func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"type\":\"Ping\"}\n\n"), []byte{3, 1, 7})
	f.Add([]byte("id: 1\ndata: a\r\ndata: b\r\n\r\n: ping 0\r\r"), []byte{1})
	f.Add([]byte("\xEF\xBB\xBFevent: e\rdata\r\rretry: 10\n"), []byte{2, 5})
	f.Add([]byte("data: 0123456789012345678901234567890123456789\n\n"), []byte{9})
	f.Fuzz(func(t *testing.T, in []byte, sizes []byte) {
		const maxLen = 32 // small, so the limit path is exercised too
		want, wantErr := reference(in, maxLen)
		sz := make([]int, len(sizes))
		for i, s := range sizes {
			sz[i] = int(s)
		}
		gotEvs, err := readAll(NewReader(&chunkReader{data: in, sizes: sz}, maxLen))
		if !errors.Is(err, wantErr) {
			t.Fatalf("error = %v, reference %v", err, wantErr)
		}
		if len(gotEvs) != len(want) {
			t.Fatalf("events %+v, reference %+v", gotEvs, want)
		}
		for i := range want {
			if gotEvs[i] != want[i] {
				t.Fatalf("event %d = %+v, reference %+v", i, gotEvs[i], want[i])
			}
			if len(gotEvs[i].Data) > maxLen || strings.ContainsRune(gotEvs[i].Data, '\r') {
				t.Fatalf("event %d data violates invariants: %q", i, gotEvs[i].Data)
			}
		}
	})
}

func BenchmarkReader(b *testing.B) {
	frame := []byte(`data: {"type":"Message","message":{"id":"chatcmpl-1","role":"assistant","created":1780411215,"content":[{"type":"text","text":"Hello"}],"metadata":{"userVisible":true,"agentVisible":true}},"token_state":{"inputTokens":0,"outputTokens":0,"totalTokens":0,"accumulatedInputTokens":0,"accumulatedOutputTokens":0,"accumulatedTotalTokens":0,"accumulatedCost":null}}` + "\n\n")
	in := bytes.Repeat(frame, 1000)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(bytes.NewReader(in), 0)
		n := 0
		for {
			if _, err := r.Next(); err != nil {
				break
			}
			n++
		}
		if n != 1000 {
			b.Fatalf("read %d events", n)
		}
	}
}
