package goose

import (
	"context"
	"iter"
)

// ReplyStream is one reply read event by event, by the caller's own
// goroutine: the shape of iter.Pull2 over Backend.Reply's sequence, with the
// same values in the same order, but without the goroutine iter.Pull2 runs
// the sequence on. A consumer that must stop reading a reply and pick it up
// again later (a reply paused at a tool approval across two ADK requests)
// reads it this way; each open reply then costs one goroutine stack less.
//
// Next and Close must not be called concurrently.
type ReplyStream interface {
	// Next returns the reply's next value; ok is false once the reply has
	// ended (after a *Finish or an error was returned) or was closed. The
	// first call sends the message.
	Next() (ev Event, err error, ok bool)
	// Close ends the reply as stopping a range over Reply does (a reply
	// goose has not finished is cancelled in goose) and releases it. It may
	// be called more than once, and without any Next.
	Close()
}

// ReadyStream is a ReplyStream that can tell whether it already holds its
// next value: a consumer that is behind goose can then take what has
// arrived and handle it at once (join text deltas, say) without ever
// holding a value back to wait for goose. Both of our backends' streams
// implement it.
type ReadyStream interface {
	ReplyStream
	// Ready reports whether Next would return a value the stream already
	// holds (read from goose, not yet handed out), without reading or
	// waiting. It never waits, and never returns true when Next would
	// wait. What arrives while a consumer takes the held values is not
	// Ready until a Next reads it, so taking values while Ready takes a
	// bounded batch, however fast goose sends.
	Ready() bool
}

// Ready reports whether s's next value has arrived; false when s cannot
// tell (it is not a ReadyStream).
func Ready(s ReplyStream) bool {
	r, ok := s.(ReadyStream)
	return ok && r.Ready()
}

// ReplyOpener is implemented by backends that read a reply without a
// goroutine of their own (both of ours). Reply and OpenReply are the same
// reply: Reply is ReplySeq over OpenReply.
type ReplyOpener interface {
	OpenReply(ctx context.Context, sessionID string, msg UserMessage) ReplyStream
}

// ReplySeq is the sequence of the replies open makes: each range opens one,
// reads it to its end or until the loop stops, and closes it.
func ReplySeq(open func() ReplyStream) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		s := open()
		defer s.Close()
		for {
			ev, err, ok := s.Next()
			if !ok || !yield(ev, err) {
				return
			}
		}
	}
}

// OpenReply reads b's reply to msg event by event: natively when b is a
// ReplyOpener, otherwise through iter.Pull2 (a goroutine per open reply).
func OpenReply(ctx context.Context, b Backend, sessionID string, msg UserMessage) ReplyStream {
	if o, ok := b.(ReplyOpener); ok {
		return o.OpenReply(ctx, sessionID, msg)
	}
	next, stop := iter.Pull2(b.Reply(ctx, sessionID, msg))
	return pulled{next: next, stop: stop}
}

// pulled is a ReplyStream over iter.Pull2.
type pulled struct {
	next func() (Event, error, bool)
	stop func()
}

func (p pulled) Next() (Event, error, bool) { return p.next() }
func (p pulled) Close()                     { p.stop() }
