package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/internal/sse"
)

// Reply implements goose.Backend over the legacy POST /reply SSE stream
// (reference §2.2, §3): one `data:` JSON MessageEvent per frame, a Ping
// every 500 ms, closed after Finish.
//
// The sequence ends with *goose.Finish; with *goose.AgentError when goose
// reported an Error (after the Finish that follows it, so the final usage is
// delivered first); with an error wrapping goose.ErrSessionNotFound (and the
// *goose.AgentError) when goosed's early Error says the session is unknown;
// with an error wrapping goose.ErrStreamBroken when the stream ends before
// Finish or Close ends it; and with ctx's error as soon as ctx is done
// (frames already buffered are dropped).
func (c *Client) Reply(ctx context.Context, sessionID string, msg goose.UserMessage) iter.Seq2[goose.Event, error] {
	return goose.ReplySeq(func() goose.ReplyStream { return c.OpenReply(ctx, sessionID, msg) })
}

// OpenReply implements goose.ReplyOpener: Reply's values, read by the
// caller's goroutine.
func (c *Client) OpenReply(ctx context.Context, sessionID string, msg goose.UserMessage) goose.ReplyStream {
	return &replyStream{c: c, parent: ctx, sessionID: sessionID, msg: msg}
}

// replyStream is one /reply exchange. The first Next sends the request;
// then each Next hands out the next event of the frame decoded last, and
// reads a frame when none is left.
type replyStream struct {
	c         *Client
	parent    context.Context
	sessionID string
	msg       goose.UserMessage

	ctx    context.Context // parent's child, cancelled when the reply ends unfinished
	cancel context.CancelFunc
	st     *stream // tracked by the client from send to release
	resp   *http.Response
	r      *sse.Reader
	d      decoder
	buf    []goose.Event // the last frame's events
	next   int           // buf[next] is the next to hand out
	done   bool          // the last frame ended the reply: after buf, only doneErr
	// doneErr is the error of the frame that ended the reply, if any.
	doneErr error
	ended   bool // Next returns ok=false from now on
}

// finished: goose sent Finish; only the stream's end is left, whether or
// not the consumer takes every event. The body is then read to its end in
// the background, which releases the request and the stream (finishBody).
func (s *replyStream) finished() bool { return s.done && s.doneErr == nil }

func (s *replyStream) Next() (goose.Event, error, bool) {
	if s.ended {
		return nil, nil, false
	}
	if s.r == nil { // the first call
		if err := s.send(); err != nil {
			return s.end(err)
		}
	}
	for {
		if s.next < len(s.buf) {
			if s.parent.Err() != nil {
				// Frames already buffered are not handed out once ctx is
				// done: the reply ends with ctx's error.
				return s.end(s.brokenBy(nil))
			}
			ev := s.buf[s.next]
			s.buf[s.next] = nil
			s.next++
			return ev, nil, true
		}
		if s.done {
			switch {
			case s.parent.Err() != nil:
				return s.end(s.brokenBy(nil))
			case s.doneErr != nil:
				return s.end(s.doneErr)
			}
			s.Close()
			return nil, nil, false
		}
		ev, err := s.r.Next()
		if err != nil {
			if s.d.agentErr != nil && s.c.closedBy(s.st) == nil && s.parent.Err() == nil {
				// Early setup failures send Error and close (reference §3).
				return s.end(earlyError(s.d.agentErr))
			}
			if errors.Is(err, sse.ErrTooLong) {
				// Only this reply's stream is given up: each reply has its
				// own HTTP exchange, and closing it stops goosed's.
				err = fmt.Errorf("%w: %w", goose.ErrMessageTooLarge, err)
			}
			return s.end(s.brokenBy(fmt.Errorf("failed to read reply: %w: %w", goose.ErrStreamBroken, err)))
		}
		s.buf, s.done, s.doneErr = s.d.feed(ev.Data, s.buf[:0])
		s.next = 0
	}
}

// Ready implements goose.ReadyStream: it decodes the frames already read
// into the stream's buffer, without reading more, until one yields an event.
func (s *replyStream) Ready() bool {
	if s.ended {
		return true
	}
	if s.r == nil {
		return false // the first Next sends the message and waits for goose
	}
	for s.next >= len(s.buf) && !s.done {
		ev, ok, err := s.r.NextBuffered()
		if err != nil {
			return true // Next returns it at once
		}
		if !ok {
			return false
		}
		s.buf, s.done, s.doneErr = s.d.feed(ev.Data, s.buf[:0])
		s.next = 0
	}
	return true
}

// send checks the message, posts it and checks the answer's head.
func (s *replyStream) send() error {
	c := s.c
	if err := goose.CheckMessageSize(s.msg.Text, c.maxMsg); err != nil {
		return err
	}
	s.ctx, s.cancel = context.WithCancel(s.parent)
	st := &stream{cancel: s.cancel}
	if !c.track(st) {
		return fmt.Errorf("failed to send reply: %w", errClientClosed)
	}
	s.st = st
	um, err := userMessage(s.msg.Text, time.Now())
	if err != nil {
		return err
	}
	payload, err := json.Marshal(chatRequest{UserMessage: um, SessionID: s.sessionID})
	if err != nil {
		return fmt.Errorf("failed to encode reply request: %w", err)
	}
	resp, err := c.send(s.ctx, http.MethodPost, "/reply", payload) //nolint:bodyclose // closed by Close, or read to its end by finishBody
	if err != nil {
		return s.brokenBy(fmt.Errorf("failed to send reply: %w", err))
	}
	s.resp = resp
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("failed to send reply: %w", statusError(resp, goose.ErrSessionNotFound))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return fmt.Errorf("failed to send reply: %w", &goose.HTTPError{StatusCode: resp.StatusCode, Body: "unexpected content type " + resp.Header.Get("Content-Type")})
	}
	s.r = sse.NewReader(resp.Body, c.maxEvent)
	return nil
}

// brokenBy picks the error that ends a reply whose HTTP exchange failed
// (err) or whose ctx is done (err nil).
func (s *replyStream) brokenBy(err error) error {
	switch why := s.c.closedBy(s.st); {
	case why != nil:
		// Close: the stream ends before goose finished it, as the ACP
		// backend's does.
		return fmt.Errorf("failed to read reply: %w: %w", goose.ErrStreamBroken, why)
	case s.parent.Err() != nil:
		return fmt.Errorf("failed to read reply: %w", s.parent.Err())
	default:
		return err
	}
}

// end returns err as the reply's last value and releases the exchange.
func (s *replyStream) end(err error) (goose.Event, error, bool) {
	s.ended = true
	s.Close()
	return nil, err, true
}

func (s *replyStream) Close() {
	s.ended = true
	if s.cancel == nil {
		return // nothing was sent, or already released
	}
	if s.resp != nil {
		if s.finished() {
			// Still tracked: Close cuts it.
			body, cancel, st := s.resp.Body, s.cancel, s.st
			go func() {
				finishBody(body, cancel)
				s.c.untrack(st)
			}()
		} else {
			_ = s.resp.Body.Close() // not drained: that would wait for the agent
		}
	}
	if !s.finished() {
		if s.st != nil {
			s.c.untrack(s.st)
		}
		s.cancel()
	}
	s.cancel, s.resp, s.r, s.buf = nil, nil, nil, nil
}

// earlyError is the error of an Error event that was not followed by Finish:
// goosed failed to set the reply up (reference §3). For a session goose does
// not have, /reply still answers 200 and sends only
// `Error "Failed to get session: Session not found: <id>"`; that is reported
// as goose.ErrSessionNotFound (keeping the *goose.AgentError in the chain),
// as every other call on an unknown session is.
func earlyError(ae *goose.AgentError) error {
	if strings.Contains(strings.ToLower(ae.Message), "session not found") {
		return fmt.Errorf("failed to send reply: %w: %w", goose.ErrSessionNotFound, ae)
	}
	return ae
}

// userMessage builds the user Message goosed requires: role, created (unix
// seconds), content and both metadata flags (reference §3 "Message").
func userMessage(text string, now time.Time) (wireMessage, error) {
	content, err := json.Marshal(wireTextContent{Type: "text", Text: text})
	if err != nil {
		return wireMessage{}, fmt.Errorf("failed to encode user message: %w", err)
	}
	return wireMessage{
		Role:     "user",
		Created:  now.Unix(),
		Content:  []json.RawMessage{content},
		Metadata: wireMetadata{UserVisible: true, AgentVisible: true},
	}, nil
}

// finishTimeout bounds finishBody: goosed ends a reply's stream right after
// its Finish (reference §3), so the rest is at most the chunked encoding's
// end.
const finishTimeout = time.Second

// finishBody reads the rest of a finished reply, so that net/http keeps its
// connection for the next reply instead of goose taking a new one (a dial
// and an accept before each first event), then releases the request. A
// stream that does not end within finishTimeout is cut, and its connection
// with it.
func finishBody(body io.ReadCloser, cancel context.CancelFunc) {
	defer cancel()
	t := time.AfterFunc(finishTimeout, cancel)
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}
