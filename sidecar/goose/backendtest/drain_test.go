package backendtest

import (
	"errors"
	"fmt"
	"iter"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// recorder is a testing.TB that records failures instead of reporting them.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func TestDrainCatchesBrokenSequences(t *testing.T) {
	// drain is the contract's checker; make sure it flags what it must.
	boom := errors.New("boom")
	for name, seq := range map[string]iter.Seq2[goose.Event, error]{
		"nothing yielded": func(func(goose.Event, error) bool) {},
		"value after the error": func(yield func(goose.Event, error) bool) {
			if yield(nil, boom) {
				yield(&goose.TextDelta{Text: "late"}, nil)
			}
		},
		"value after Finish": func(yield func(goose.Event, error) bool) {
			if yield(&goose.Finish{Reason: "stop"}, nil) {
				yield(nil, boom)
			}
		},
		"neither event nor error": func(yield func(goose.Event, error) bool) { yield(nil, nil) },
		"event with an error":     func(yield func(goose.Event, error) bool) { yield(&goose.Finish{}, boom) },
	} {
		rec := &recorder{TB: t}
		drain(rec, seq)
		if len(rec.failures) == 0 {
			t.Errorf("%s: drain found nothing wrong", name)
		}
	}
	rec := &recorder{TB: t}
	drain(rec, func(yield func(goose.Event, error) bool) {
		if yield(&goose.TextDelta{Text: "a"}, nil) {
			yield(&goose.Finish{Reason: "stop"}, nil)
		}
	})
	if len(rec.failures) != 0 {
		t.Errorf("a well-formed sequence was flagged: %v", rec.failures)
	}
}
