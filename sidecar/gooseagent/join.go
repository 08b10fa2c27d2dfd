package gooseagent

import (
	"strings"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// maxJoinedDelta bounds the text of deltas joined into one partial event.
const maxJoinedDelta = 16 << 10

// lookahead reads a goose reply with room to put one value back.
type lookahead struct {
	stream  goose.ReplyStream
	held    value
	holding bool
}

// value is one return of goose.ReplyStream.Next.
type value struct {
	ev  goose.Event
	err error
	ok  bool
}

func (l *lookahead) next() (goose.Event, error, bool) {
	if l.holding {
		v := l.held
		l.held, l.holding = value{}, false
		return v.ev, v.err, v.ok
	}
	return l.stream.Next()
}

// nextArrived is next when its value has already arrived (arrived true);
// it never waits for goose.
func (l *lookahead) nextArrived() (v value, arrived bool) {
	if !l.holding && !goose.Ready(l.stream) {
		return value{}, false
	}
	v.ev, v.err, v.ok = l.next()
	return v, true
}

func (l *lookahead) putBack(v value) { l.held, l.holding = v, true }

// joinArrived appends to first the deltas of the same kind (text or
// thinking) that goose has already sent after it, up to maxJoinedDelta,
// and adds them to the turn's text. A client that keeps up with goose gets
// a partial event per delta; a sidecar that fell behind (more streams than
// cores) sends what has piled up as one event, which costs it one event's
// work instead of many and the client sees the text no later. It never
// waits for goose: the first value that is not such a delta is put back.
func (t *turn) joinArrived(events *lookahead, first string, thought bool) string {
	aggregate := &t.text
	if thought {
		aggregate = &t.thought
	}
	var joined strings.Builder
	for joined.Len() < maxJoinedDelta {
		v, arrived := events.nextArrived()
		if !arrived {
			break
		}
		text, isDelta := deltaText(v.ev, thought)
		if !isDelta || v.err != nil || !v.ok {
			events.putBack(v)
			break
		}
		if joined.Len() == 0 {
			joined.WriteString(first)
		}
		joined.WriteString(text)
		aggregate.WriteString(text)
	}
	if joined.Len() == 0 {
		return first
	}
	return joined.String()
}

// deltaText is ev's text when ev is a text delta (a thinking delta when
// thought).
func deltaText(ev goose.Event, thought bool) (string, bool) {
	switch e := ev.(type) {
	case *goose.TextDelta:
		return e.Text, !thought
	case *goose.ThinkingDelta:
		return e.Text, thought
	}
	return "", false
}
