// Package wsframe follows the frames of a WebSocket byte stream (RFC 6455)
// without copying payloads, and builds the close frame a server sends.
package wsframe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// WebSocket opcodes (RFC 6455 §5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
)

// Scanner follows the frames of one direction of a WebSocket byte
// stream without copying payloads: it reads each frame header and skips the
// payload. /run_live uses it on what the client sends, to refuse a message
// over the cap from its header before its payload is read, and on what the
// server sends, to know where a frame ends so that a close frame of its own
// never lands inside another frame.
type Scanner struct {
	// Max bounds a message (the sum of its frames' payloads); 0: no bound.
	Max int64

	hdr     [14]byte // a header being read
	hdrLen  int
	payload uint64 // payload bytes of the current frame still to come
	message int64  // payload bytes of the current data message so far
}

// ErrMessageTooBig is wrapped by Feed's error for a message over Max.
var ErrMessageTooBig = errors.New("message too big")

// Feed scans p. It returns how many bytes of p come before the header of a
// frame that breaks the cap or the protocol, and that error; len(p) and nil
// when p is fine. After an error the scanner must not be fed again.
func (s *Scanner) Feed(p []byte) (int, error) {
	off := 0
	for off < len(p) {
		if s.payload > 0 {
			n := uint64(len(p) - off)
			if n > s.payload {
				n = s.payload
			}
			s.payload -= n
			off += int(n)
			continue
		}
		start := off - s.hdrLen // where this header began, if in p
		for s.hdrLen < 2 && off < len(p) {
			s.hdr[s.hdrLen] = p[off]
			s.hdrLen++
			off++
		}
		if s.hdrLen < 2 {
			return len(p), nil
		}
		need := 2
		switch s.hdr[1] & 0x7f {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if s.hdr[1]&0x80 != 0 {
			need += 4 // masking key
		}
		for s.hdrLen < need && off < len(p) {
			s.hdr[s.hdrLen] = p[off]
			s.hdrLen++
			off++
		}
		if s.hdrLen < need {
			return len(p), nil
		}
		if err := s.header(); err != nil {
			return max(start, 0), err
		}
		s.hdrLen = 0
	}
	return len(p), nil
}

// header takes the complete header in s.hdr.
func (s *Scanner) header() error {
	var n uint64
	switch l := s.hdr[1] & 0x7f; l {
	case 126:
		n = uint64(binary.BigEndian.Uint16(s.hdr[2:4]))
	case 127:
		n = binary.BigEndian.Uint64(s.hdr[2:10])
		if n>>63 != 0 {
			return errors.New("invalid frame length")
		}
	default:
		n = uint64(l)
	}
	switch op := s.hdr[0] & 0x0f; {
	case op == opText || op == opBinary:
		s.message = 0
		fallthrough
	case op == opContinuation:
		if s.Max > 0 && (n > uint64(s.Max) || s.message+int64(n) > s.Max) {
			return fmt.Errorf("%w: over the %d-byte cap", ErrMessageTooBig, s.Max)
		}
		s.message += int64(n)
	case op >= opClose && n > 125:
		return errors.New("control frame longer than 125 bytes")
	}
	s.payload = n
	return nil
}

// BetweenFrames reports that the bytes fed so far end at a frame boundary.
func (s *Scanner) BetweenFrames() bool { return s.payload == 0 && s.hdrLen == 0 }

// CloseFrame is an unmasked close frame (what a server sends) with code and
// reason, the reason cut to fit a control frame.
func CloseFrame(code int, reason string) []byte {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	f := make([]byte, 0, 4+len(reason))
	f = append(f, 0x80|opClose, byte(2+len(reason)))
	f = binary.BigEndian.AppendUint16(f, uint16(code))
	return append(f, reason...)
}
