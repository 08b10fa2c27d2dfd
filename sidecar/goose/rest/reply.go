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
	return func(yield func(goose.Event, error) bool) {
		if err := goose.CheckMessageSize(msg.Text, c.maxMsg); err != nil {
			yield(nil, err)
			return
		}
		parent := ctx
		ctx, cancel := context.WithCancel(ctx)
		// finished: goose sent Finish; the body is then read to its end
		// in the background, which releases the request and the stream
		// (finishBody).
		finished := false
		defer func() {
			if !finished {
				cancel()
			}
		}()
		st := &stream{cancel: cancel}
		if !c.track(st) {
			yield(nil, fmt.Errorf("failed to send reply: %w", errClientClosed))
			return
		}
		defer func() {
			if !finished {
				c.untrack(st)
			}
		}()

		// ended picks the last value once the HTTP exchange failed.
		ended := func(err error) {
			switch why := c.closedBy(st); {
			case why != nil:
				// Close: the stream ends before goose finished it, as the
				// ACP backend's does.
				yield(nil, fmt.Errorf("failed to read reply: %w: %w", goose.ErrStreamBroken, why))
			case parent.Err() != nil:
				yield(nil, fmt.Errorf("failed to read reply: %w", parent.Err()))
			default:
				yield(nil, err)
			}
		}

		um, err := userMessage(msg.Text, time.Now())
		if err != nil {
			yield(nil, err)
			return
		}
		payload, err := json.Marshal(chatRequest{UserMessage: um, SessionID: sessionID})
		if err != nil {
			yield(nil, fmt.Errorf("failed to encode reply request: %w", err))
			return
		}
		goose.BeforeWait(ctx)
		resp, err := c.send(ctx, http.MethodPost, "/reply", payload)
		if err != nil {
			ended(fmt.Errorf("failed to send reply: %w", err))
			return
		}
		defer func() {
			if finished {
				// Still tracked: Close cuts it.
				go func() {
					finishBody(resp.Body, cancel)
					c.untrack(st)
				}()
				return
			}
			_ = resp.Body.Close() // not drained: that would wait for the agent
		}()
		if resp.StatusCode != http.StatusOK {
			yield(nil, fmt.Errorf("failed to send reply: %w", statusError(resp, goose.ErrSessionNotFound)))
			return
		}
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
			yield(nil, fmt.Errorf("failed to send reply: %w", &goose.HTTPError{StatusCode: resp.StatusCode, Body: "unexpected content type " + resp.Header.Get("Content-Type")}))
			return
		}

		r := sse.NewReader(waitingBody{wait: goose.WaitHook(ctx), body: resp.Body}, c.maxEvent)
		var (
			d   decoder
			buf []goose.Event
		)
		for {
			ev, err := r.Next()
			if err != nil {
				if d.agentErr != nil && c.closedBy(st) == nil && parent.Err() == nil {
					// Early setup failures send Error and close (reference §3).
					yield(nil, earlyError(d.agentErr))
					return
				}
				if errors.Is(err, sse.ErrTooLong) {
					// Only this reply's stream is given up: each reply has
					// its own HTTP exchange, and closing it stops goosed's.
					err = fmt.Errorf("%w: %w", goose.ErrMessageTooLarge, err)
				}
				ended(fmt.Errorf("failed to read reply: %w: %w", goose.ErrStreamBroken, err))
				return
			}
			var done bool
			buf, done, err = d.feed(ev.Data, buf[:0])
			// goose finished the reply: only the stream's end is left,
			// whether or not the consumer takes every event.
			finished = done && err == nil
			for _, e := range buf {
				if parent.Err() != nil {
					// Frames already buffered are not yielded once ctx is
					// done: the sequence ends with ctx's error.
					ended(nil)
					return
				}
				if !yield(e, nil) {
					return
				}
			}
			if done {
				if parent.Err() != nil {
					ended(nil)
					return
				}
				if err != nil {
					yield(nil, err)
				}
				return
			}
		}
	}
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

// waitingBody calls the reply's goose.WaitHook, if any, before each read of
// the reply body: the SSE reader reads when it has decoded every event it
// holds, and the read may wait for goose.
type waitingBody struct {
	wait func()
	body io.Reader
}

func (w waitingBody) Read(p []byte) (int, error) {
	if w.wait != nil {
		w.wait()
	}
	return w.body.Read(p)
}
