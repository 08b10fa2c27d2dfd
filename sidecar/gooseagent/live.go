package gooseagent

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/adk/agent"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/sidecar/gooseagent/internal/userinput"
)

// Live conversations: the agent implements adk-go's live interface (the
// RunLive method runner.RunLive looks for), so adkrest's /run_live and any
// ADK Go program's runner.RunLive drive goose over one bidirectional stream.
//
//   - A content message with text starts a goose turn; its events stream as
//     they do with StreamingModeSSE (partial deltas, then one final event).
//   - A message that arrives while a turn runs waits for it: one turn per
//     session, as for /run_sse. At most MaxLiveWaiting wait; one more ends
//     the live session with ErrLiveBacklog.
//   - A content message with a functionResponse to adk_request_confirmation
//     answers the pending tool approval and continues goose's reply.
//   - ActivityStart, ADK's own interrupt, stops the running turn: it ends
//     with ErrorCodeCancelled and the live session stays open. Between turns
//     it denies a pending tool approval.
//   - A blob (audio, video, any binary frame) ends the live session with
//     ErrLiveNotText; goose takes text.
//   - Close, or the end of the invocation's context, cancels the running
//     turn (goose is told: ACP session/cancel).

// MaxLiveWaiting is how many messages may wait for a live session's running
// turn.
const MaxLiveWaiting = 8

// SpanLiveTurn is the span of one turn of a live session, under the span
// of the live invocation.
const SpanLiveTurn = "goose.live_turn"

var (
	// ErrLiveNotText ends a live session that was sent audio, video or
	// binary data.
	ErrLiveNotText = errors.New("goose takes text: audio, video and binary frames are not accepted")
	// ErrLiveBacklog ends a live session sent more messages than may wait.
	ErrLiveBacklog = fmt.Errorf("more than %d messages wait for the running turn", MaxLiveWaiting)
	// errLiveStopped is the cause a stopped turn's context ends with.
	errLiveStopped = fmt.Errorf("turn stopped by the client (activityStart): %w", context.Canceled)
	// errLiveClosed is the cause when the live session is closed.
	errLiveClosed = fmt.Errorf("the live session was closed: %w", context.Canceled)
)

// liveGoose is the goose agent with adk-go's live interface. The embedded
// agent.Agent (agent.New's) is what every other part of ADK sees, as with
// adk-go's own llmagent.
type liveGoose struct {
	agent.Agent
	g *gooseAgent
}

// RunLive starts a live session of the invocation's ADK session. adk-go's
// runner stores each text message sent through it in the session history
// and every non-partial event the returned sequence yields. The sequence
// ends when the session is closed, its context ends, or it fails (its last
// item is then the error).
func (l *liveGoose) RunLive(ic agent.InvocationContext) (agent.LiveSession, iter.Seq2[*session.Event, error], error) {
	ctx, cancel := context.WithCancelCause(ic)
	s := &liveSession{
		g: l.g, ic: ic, ctx: ctx, cancel: cancel,
		key:   SessionKey{AppName: ic.Session().AppName(), UserID: ic.Session().UserID(), SessionID: ic.Session().ID()},
		inbox: make(chan *genai.Content, MaxLiveWaiting),
		wake:  make(chan struct{}, 1),
	}
	return s, s.events, nil
}

// liveSession is one live invocation: messages in through Send, events out
// through events, one turn at a time.
type liveSession struct {
	g      *gooseAgent
	ic     agent.InvocationContext
	key    SessionKey
	ctx    context.Context // ends with Close or a failure
	cancel context.CancelCauseFunc
	inbox  chan *genai.Content
	// wake tells events of an interrupt between turns (idleStop).
	wake chan struct{}

	mu sync.Mutex
	// fatal is the error the live session failed with, yielded last.
	fatal error
	// stopTurn cancels the running turn; nil between turns.
	stopTurn context.CancelCauseFunc
	// idleStop: an interrupt came while no turn ran.
	idleStop bool
}

// Send implements agent.LiveSession. It does not wait for a running turn.
func (s *liveSession) Send(req agent.LiveRequest) error {
	if err := context.Cause(s.ctx); err != nil {
		return fmt.Errorf("failed to send to goose: %w", err)
	}
	switch in := req.RealtimeInput.(type) {
	case nil, *genai.ActivityEnd:
	case *genai.ActivityStart:
		s.interrupt()
	case *genai.Blob:
		return s.fail(fmt.Errorf("%w (got %s)", ErrLiveNotText, in.MIMEType))
	default:
		return s.fail(fmt.Errorf("%w (got %T)", ErrLiveNotText, in))
	}
	if req.Content == nil {
		return nil
	}
	select {
	case s.inbox <- req.Content:
		return nil
	default:
		return s.fail(ErrLiveBacklog)
	}
}

// Close implements agent.LiveSession: the running turn is cancelled and
// the event sequence ends. It does not wait.
func (s *liveSession) Close() error {
	s.cancel(errLiveClosed)
	return nil
}

// fail ends the live session with err, which the event sequence yields.
func (s *liveSession) fail(err error) error {
	s.mu.Lock()
	if s.fatal == nil && s.ctx.Err() == nil {
		s.fatal = err
	}
	s.mu.Unlock()
	s.cancel(err)
	return err
}

// reports tells whether a turn ended by cause still has a consumer to
// tell: not when the live session was closed or failed.
func (s *liveSession) reports(cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal == nil && !errors.Is(cause, errLiveClosed)
}

// interrupt stops the running turn, or notes a stop between turns.
func (s *liveSession) interrupt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopTurn != nil {
		s.stopTurn(errLiveStopped)
		return
	}
	s.idleStop = true
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// events is the live session's event sequence.
func (s *liveSession) events(yield func(*session.Event, error) bool) {
	defer s.cancel(errLiveClosed)
	for {
		var msg *genai.Content
		select {
		case <-s.ctx.Done():
		case <-s.wake:
		case msg = <-s.inbox:
		}
		if s.ctx.Err() != nil {
			s.mu.Lock()
			fatal := s.fatal
			s.mu.Unlock()
			if fatal != nil {
				yield(nil, fatal)
			}
			return
		}
		tctx, stop := context.WithCancelCause(s.ctx)
		s.mu.Lock()
		idleStop := s.idleStop
		s.idleStop = false
		if msg != nil {
			s.stopTurn = stop
		}
		s.mu.Unlock()
		ok := true
		if idleStop {
			ok = s.denyPending(yield)
		}
		if ok && msg != nil {
			ok = s.turn(tctx, msg, yield)
		}
		s.mu.Lock()
		s.stopTurn = nil
		s.mu.Unlock()
		stop(nil)
		if !ok {
			return
		}
	}
}

// liveTurnContext is the live invocation with one turn's context and
// message.
type liveTurnContext struct {
	agent.InvocationContext
	content *genai.Content
}

func (c *liveTurnContext) UserContent() *genai.Content { return c.content }

// turn runs one message as a goose turn. It returns false when the consumer
// of the events is gone.
func (s *liveSession) turn(ctx context.Context, msg *genai.Content, yield func(*session.Event, error) bool) bool {
	ctx, span := s.g.tracer.Start(ctx, SpanLiveTurn, trace.WithAttributes(attrConversation.String(s.key.SessionID)))
	defer span.End()
	// From its final event on, the turn is over for the client: an
	// interrupt then is one between turns.
	ended := func(ev *session.Event, err error) bool {
		if ev != nil && ev.TurnComplete && !ev.Partial {
			s.mu.Lock()
			s.stopTurn = nil
			s.mu.Unlock()
		}
		return yield(ev, err)
	}
	t := newTurn(s.g, &liveTurnContext{InvocationContext: s.ic.WithContext(ctx), content: msg}, ended)
	t.streaming, t.live = true, s
	in := userinput.Parse(msg)
	span.SetAttributes(attribute.Bool("adk2goose.live.answer", len(in.Answers) > 0))
	if admit := s.g.cfg.AdmitLiveTurn; admit != nil && len(in.Answers) == 0 {
		if err := admit(ctx, s.key); err != nil {
			t.finish("", fmt.Errorf("failed to start a goose turn: %w", err))
			endSpan(span, err)
			return !t.stopped
		}
	}
	t.run()
	return !t.stopped
}

// denyPending denies the session's pending tool approval, if any, after an
// interrupt between turns, and yields the event that says so.
func (s *liveSession) denyPending(yield func(*session.Event, error) bool) bool {
	e := s.g.entry(s.key)
	defer s.g.unuse(e)
	if err := e.acquire(s.ctx); err != nil {
		return true
	}
	defer e.release()
	const reason = "stopped by the client (activityStart); goose was told the tool call is denied"
	p := s.g.pending(e)
	if p == nil || !s.g.claim(e, p, reason) {
		return true
	}
	ev := s.g.abandon(session.NewEventWithContext(s.ic, s.ic.InvocationID()), s.key, p, ErrorCodeCancelled, reason)
	ev.Branch = s.ic.Branch()
	return yield(ev, nil)
}
