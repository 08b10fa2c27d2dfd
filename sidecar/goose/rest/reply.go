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
// (frames already read are dropped).
func (c *Client) Reply(ctx context.Context, sessionID string, msg goose.UserMessage) iter.Seq2[goose.Event, error] {
	return func(yield func(goose.Event, error) bool) {
		x := &exchange{c: c, parent: ctx}
		defer x.release()
		// last yields the reply's last value, an error, after releasing the
		// exchange.
		last := func(err error) {
			x.release()
			yield(nil, err)
		}
		if err := x.send(sessionID, msg); err != nil {
			last(err)
			return
		}
		r := sse.NewReader(x.resp.Body, c.maxEvent)
		var (
			d   decoder
			buf []goose.Event
		)
		for {
			ev, err := r.Next()
			if err != nil {
				if d.agentErr != nil && c.closedBy(x.st) == nil && ctx.Err() == nil {
					// Early setup failures send Error and close (reference §3).
					last(earlyError(d.agentErr))
					return
				}
				if errors.Is(err, sse.ErrTooLong) {
					// Only this reply's stream is given up: each reply has its
					// own HTTP exchange, and closing it stops goosed's.
					err = fmt.Errorf("%w: %w", goose.ErrMessageTooLarge, err)
				}
				last(x.brokenBy(fmt.Errorf("failed to read reply: %w: %w", goose.ErrStreamBroken, err)))
				return
			}
			var done bool
			var doneErr error
			buf, done, doneErr = d.feed(ev.Data, buf[:0])
			x.finished = done && doneErr == nil
			for _, e := range buf {
				if ctx.Err() != nil {
					// Events already read are not handed out once ctx is
					// done: the reply ends with ctx's error.
					last(x.brokenBy(nil))
					return
				}
				if !yield(e, nil) {
					return
				}
			}
			if done {
				switch {
				case ctx.Err() != nil:
					last(x.brokenBy(nil))
				case doneErr != nil:
					last(doneErr)
				}
				return
			}
		}
	}
}

// exchange is one /reply request and its answer.
type exchange struct {
	c      *Client
	parent context.Context

	cancel context.CancelFunc // parent's child, cancelled when the reply ends unfinished
	st     *stream            // tracked by the client from send to release
	resp   *http.Response
	// finished: goose sent Finish; only the stream's end is left, whether
	// or not the consumer takes every event. The body is then read to its
	// end in the background, which releases the request and the stream
	// (finishBody).
	finished bool
}

// send checks the message, posts it and checks the answer's head.
func (x *exchange) send(sessionID string, msg goose.UserMessage) error {
	c := x.c
	if err := goose.CheckMessageSize(msg.Text, c.maxMsg); err != nil {
		return err
	}
	var ctx context.Context
	ctx, x.cancel = context.WithCancel(x.parent)
	st := &stream{cancel: x.cancel}
	if !c.track(st) {
		return fmt.Errorf("failed to send reply: %w", errClientClosed)
	}
	x.st = st
	um, err := userMessage(msg.Text, time.Now())
	if err != nil {
		return err
	}
	payload, err := json.Marshal(chatRequest{UserMessage: um, SessionID: sessionID})
	if err != nil {
		return fmt.Errorf("failed to encode reply request: %w", err)
	}
	resp, err := c.send(ctx, http.MethodPost, "/reply", payload) //nolint:bodyclose // closed by release, or read to its end by finishBody
	if err != nil {
		return x.brokenBy(fmt.Errorf("failed to send reply: %w", err))
	}
	x.resp = resp
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("failed to send reply: %w", statusError(resp, goose.ErrSessionNotFound))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return fmt.Errorf("failed to send reply: %w", &goose.HTTPError{StatusCode: resp.StatusCode, Body: "unexpected content type " + resp.Header.Get("Content-Type")})
	}
	return nil
}

// brokenBy picks the error that ends a reply whose HTTP exchange failed
// (err) or whose ctx is done (err nil).
func (x *exchange) brokenBy(err error) error {
	switch why := x.c.closedBy(x.st); {
	case why != nil:
		// Close: the stream ends before goose finished it, as the ACP
		// backend's does.
		return fmt.Errorf("failed to read reply: %w: %w", goose.ErrStreamBroken, why)
	case x.parent.Err() != nil:
		return fmt.Errorf("failed to read reply: %w", x.parent.Err())
	default:
		return err
	}
}

// release ends the exchange; it may be called more than once.
func (x *exchange) release() {
	if x.cancel == nil {
		return // nothing was sent, or already released
	}
	if x.resp != nil {
		if x.finished {
			// Still tracked: Close cuts it.
			body, cancel, st := x.resp.Body, x.cancel, x.st
			go func() {
				finishBody(body, cancel)
				x.c.untrack(st)
			}()
		} else {
			_ = x.resp.Body.Close() // not drained: that would wait for the agent
		}
	}
	if !x.finished {
		if x.st != nil {
			x.c.untrack(x.st)
		}
		x.cancel()
	}
	x.cancel, x.resp = nil, nil
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
