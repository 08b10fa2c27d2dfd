package wsframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// clientFrame is a masked frame as a client sends it.
func clientFrame(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	f := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n < 1<<16:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	f = append(f, 1, 2, 3, 4) // masking key; the scanner does not unmask
	return append(f, payload...)
}

func TestFrameScanner(t *testing.T) {
	small, big := bytes.Repeat([]byte("a"), 60), bytes.Repeat([]byte("b"), 300)
	for name, tc := range map[string]struct {
		stream  []byte
		wantOff int // where the refused frame starts; -1: none refused
	}{
		"small messages": {append(clientFrame(true, opText, small), clientFrame(true, opText, small)...), -1},
		"one too big":    {append(clientFrame(true, opText, small), clientFrame(true, opBinary, big)...), len(clientFrame(true, opText, small))},
		"fragments add up": {append(append(clientFrame(false, opText, small), clientFrame(true, opContinuation, small)...),
			clientFrame(true, opText, small)...), len(clientFrame(false, opText, small))},
		"control frames between fragments": {append(append(clientFrame(false, opText, small[:50]), clientFrame(true, 0x9, small[:10])...),
			clientFrame(true, opContinuation, small[:40])...), -1},
		"64-bit length": {clientFrame(true, opText, bytes.Repeat([]byte("c"), 70000)), 0},
		"long control":  {clientFrame(true, 0x9, big[:126]), 0},
	} {
		t.Run(name, func(t *testing.T) {
			// Whole, and one byte at a time: the same answer.
			s := Scanner{Max: 100}
			off, err := s.Feed(tc.stream)
			if tc.wantOff < 0 {
				if err != nil || off != len(tc.stream) || !s.BetweenFrames() {
					t.Fatalf("whole: %d %v", off, err)
				}
			} else if err == nil || off != tc.wantOff {
				t.Fatalf("whole: refused at %d (%v), want %d", off, err, tc.wantOff)
			}
			s = Scanner{Max: 100}
			for i := range tc.stream {
				n, err := s.Feed(tc.stream[i : i+1])
				if err != nil {
					if tc.wantOff < 0 {
						t.Fatalf("byte by byte: refused at %d: %v", i, err)
					}
					if n != 0 {
						t.Fatalf("byte by byte: %d bytes before the refused header", n)
					}
					return
				}
			}
			if tc.wantOff >= 0 {
				t.Fatal("byte by byte: nothing refused")
			}
		})
	}
	s := Scanner{Max: 100}
	if _, err := s.Feed(clientFrame(true, opText, big)); !errors.Is(err, ErrMessageTooBig) {
		t.Errorf("a message over the cap: %v", err)
	}
}

// FuzzFrameScanner: any bytes, cut anywhere, are scanned alike, within
// bounds and without a panic.
func FuzzFrameScanner(f *testing.F) {
	f.Add(append(clientFrame(false, opText, []byte("hello")), clientFrame(true, opContinuation, []byte("world"))...), 3)
	f.Add(clientFrame(true, opBinary, bytes.Repeat([]byte("x"), 200)), 1)
	f.Add([]byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1}, 5)
	f.Add(CloseFrame(1001, "bye"), 2)
	f.Fuzz(func(t *testing.T, stream []byte, cut int) {
		if cut < 0 || cut > len(stream) {
			cut = len(stream) / 2
		}
		whole := Scanner{Max: 64}
		wn, werr := whole.Feed(stream)
		if wn < 0 || wn > len(stream) {
			t.Fatalf("offset %d outside 0..%d", wn, len(stream))
		}
		parts := Scanner{Max: 64}
		n1, err := parts.Feed(stream[:cut])
		if err == nil {
			var n2 int
			n2, err = parts.Feed(stream[cut:])
			n1 = cut + n2
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("whole: %v, cut at %d: %v", werr, cut, err)
		}
		if err == nil && whole.BetweenFrames() != parts.BetweenFrames() {
			t.Fatal("the two scans disagree on where a frame ends")
		}
		// The refused frame starts where the whole scan says, unless its
		// header spans the cut (its first bytes were passed already).
		if err != nil && n1 != wn && (n1 != cut || wn >= cut) {
			t.Fatalf("cut at %d: refused at %d, whole scan at %d", cut, n1, wn)
		}
	})
}
