package goose

import (
	"errors"
	"testing"
)

// countingStream hands out n text deltas, then ends; it counts Close calls.
type countingStream struct {
	n, next, closes int
}

func (s *countingStream) Next() (Event, error, bool) {
	if s.closes > 0 || s.next > s.n {
		return nil, nil, false
	}
	s.next++
	if s.next > s.n {
		return nil, errors.New("the end"), true
	}
	return &TextDelta{Text: "x"}, nil, true
}

func (s *countingStream) Close() { s.closes++ }

func TestReplySeqClosesTheStreamOnce(t *testing.T) {
	for _, stopAfter := range []int{1, 2, -1} {
		s := &countingStream{n: 3}
		var got, errs int
		for _, err := range ReplySeq(func() ReplyStream { return s }) {
			if err != nil {
				errs++
				continue
			}
			got++
			if got == stopAfter {
				break
			}
		}
		wantEvents, wantErrs := stopAfter, 0
		if stopAfter < 0 {
			wantEvents, wantErrs = 3, 1
		}
		if got != wantEvents || errs != wantErrs || s.closes != 1 {
			t.Errorf("stop after %d: %d events, %d errors, %d closes; want %d, %d, 1", stopAfter, got, errs, s.closes, wantEvents, wantErrs)
		}
	}
}
