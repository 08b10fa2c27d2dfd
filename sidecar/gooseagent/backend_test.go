package gooseagent_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/backendtest"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// scriptBackend is an in-process goose.Backend that plays goosetest Scripts
// without a network, so the translation can be tested in isolation. It keeps
// the goose.Backend contract (TestScriptBackendContract) so that what the
// agent is tested against is what the real clients do. The end-to-end tests
// in sidecar/server use the real clients and fake servers.
type scriptBackend struct {
	script goosetest.Script
	closed chan struct{} // closed by Close

	mu       sync.Mutex
	next     int
	sessions map[string]*scriptSession
	resumed  []string
	down     bool
	isClosed bool
	// waiting are approvals blocked in Reply, by session+tool call id.
	waiting map[string]chan goose.Decision
	// approving, if set before the first turn, runs as Approve is called,
	// before goose takes the answer.
	approving func()

	// What goose received, by session, kept after a session is deleted.
	prompts   map[string][]string
	approvals []scriptApproval
	// cancels counts replies that ended before goose finished them because
	// their ctx was done or their consumer stopped reading.
	cancels map[string]int
}

// scriptSession is what the backend's goose keeps of a session.
type scriptSession struct {
	workingDir string
	messages   int
	usage      goose.Usage
}

type scriptApproval struct {
	session, call string
	decision      goose.Decision
}

func newScriptBackend(s goosetest.Script) *scriptBackend {
	return &scriptBackend{
		script:   s,
		closed:   make(chan struct{}),
		sessions: map[string]*scriptSession{},
		waiting:  map[string]chan goose.Decision{},
		prompts:  map[string][]string{},
		cancels:  map[string]int{},
	}
}

var errScriptBackendClosed = errors.New("script backend closed")

func (b *scriptBackend) Flavor() goose.Flavor { return goose.FlavorServe }

func (b *scriptBackend) Health(context.Context) error {
	if b.isDown() {
		return goose.ErrUnavailable
	}
	return nil
}

func (b *scriptBackend) isDown() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.down
}

func (b *scriptBackend) StartSession(_ context.Context, opts goose.StartOptions) (goose.Session, error) {
	if b.isDown() {
		return goose.Session{}, fmt.Errorf("failed to start session: %w", goose.ErrUnavailable)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := fmt.Sprintf("g%d", b.next)
	b.sessions[id] = &scriptSession{workingDir: opts.WorkingDir}
	return goose.Session{ID: id, WorkingDir: opts.WorkingDir}, nil
}

func (b *scriptBackend) ResumeSession(_ context.Context, id string) (goose.Session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[id]
	if !ok {
		return goose.Session{}, fmt.Errorf("failed to resume session %s: %w", id, goose.ErrSessionNotFound)
	}
	b.resumed = append(b.resumed, id)
	return goose.Session{ID: id, WorkingDir: s.workingDir, MessageCount: s.messages}, nil
}

// exists reports whether goose still has the session.
func (b *scriptBackend) exists(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.sessions[id]
	return ok
}

func (b *scriptBackend) DeleteSession(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sessions[id]; !ok {
		return fmt.Errorf("failed to delete session %s: %w", id, goose.ErrSessionNotFound)
	}
	delete(b.sessions, id)
	return nil
}

// sendPrompt records a prompt goose received, as the start of a reply.
func (b *scriptBackend) sendPrompt(sid, text string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed {
		return fmt.Errorf("failed to send prompt: %w", errScriptBackendClosed)
	}
	s, ok := b.sessions[sid]
	if !ok {
		return fmt.Errorf("failed to send prompt: %w", goose.ErrSessionNotFound)
	}
	b.prompts[sid] = append(b.prompts[sid], text)
	s.messages++
	return nil
}

func (b *scriptBackend) Reply(ctx context.Context, sid string, msg goose.UserMessage) iter.Seq2[goose.Event, error] {
	return func(yield func(goose.Event, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(nil, fmt.Errorf("failed to send prompt: %w", err))
			return
		}
		if err := goose.CheckMessageSize(msg.Text, goose.DefaultMaxMessageBytes); err != nil {
			yield(nil, err)
			return
		}
		if err := b.sendPrompt(sid, msg.Text); err != nil {
			yield(nil, err)
			return
		}
		// ended is set once goose finished the reply or reported its error;
		// a reply left before that is cancelled in goose.
		ended := false
		defer func() {
			if !ended {
				b.mu.Lock()
				b.cancels[sid]++
				b.mu.Unlock()
			}
		}()
		// stopped ends the sequence with the reason the reply can no longer
		// go on: ctx done, or Close.
		stopped := func() bool {
			select {
			case <-ctx.Done():
				yield(nil, fmt.Errorf("failed to stream reply: %w", ctx.Err()))
			case <-b.closed:
				ended = true
				yield(nil, fmt.Errorf("failed to stream reply: %w: %w", goose.ErrStreamBroken, errScriptBackendClosed))
			default:
				return false
			}
			return true
		}
		emit := func(ev goose.Event) bool { return !stopped() && yield(ev, nil) }

		const msgID = "m"
		for _, st := range b.script(sid, msg.Text).Steps {
			if st.Delay > 0 {
				select {
				case <-time.After(st.Delay):
				case <-ctx.Done():
				case <-b.closed:
				}
			}
			if stopped() {
				return
			}
			switch {
			case st.Text != "":
				if !emit(&goose.TextDelta{MessageID: msgID, Text: st.Text}) {
					return
				}
			case st.Thinking != "":
				if !emit(&goose.ThinkingDelta{MessageID: msgID, Text: st.Thinking}) {
					return
				}
			case st.Tool != nil:
				result, isError, ok := b.playTool(ctx, sid, st.Tool, emit, stopped)
				if !ok || !emit(&goose.ToolResponse{ID: st.Tool.ID, Name: st.Tool.Name, Text: result, IsError: isError}) {
					return
				}
			case st.Notify != nil:
				p, tot := st.Notify.Progress, st.Notify.Total
				if !emit(&goose.Notification{ToolCallID: st.Notify.ToolCallID, Kind: "progress", Message: st.Notify.Message, Progress: &p, Total: &tot}) {
					return
				}
			case st.Usage != nil:
				if !emit(b.countUsage(sid, st.Usage)) {
					return
				}
			case st.Error != "":
				ended = true
				yield(nil, &goose.AgentError{Code: -32603, Message: st.Error})
				return
			case st.Drop:
				ended = true
				yield(nil, fmt.Errorf("failed to stream reply: %w", goose.ErrStreamBroken))
				return
			}
		}
		if stopped() {
			return
		}
		ended = true
		b.mu.Lock()
		if s := b.sessions[sid]; s != nil {
			s.messages++ // goose's answer
		}
		b.mu.Unlock()
		yield(&goose.Finish{Reason: "end_turn"}, nil)
	}
}

// playTool yields the tool call and, when it needs approval, the request,
// then waits for the answer. It returns the tool's result, run as goose
// would (ToolStep.Run, never when denied); ok is false when the reply ended
// meanwhile.
func (b *scriptBackend) playTool(ctx context.Context, sid string, tool *goosetest.ToolStep, emit func(goose.Event) bool, stopped func() bool) (result string, isError, ok bool) {
	if !emit(&goose.ToolRequest{ID: tool.ID, Name: tool.Name, Arguments: tool.Arguments}) {
		return "", false, false
	}
	run := func() (string, bool, bool) {
		if tool.Run != nil {
			r, e := tool.Run()
			return r, e, true
		}
		return tool.Result, tool.IsError, true
	}
	if !tool.NeedsApproval {
		return run()
	}
	key := sid + "/" + tool.ID
	ch := make(chan goose.Decision, 1)
	b.mu.Lock()
	b.waiting[key] = ch
	b.mu.Unlock()
	if emit(&goose.ApprovalRequest{ID: tool.ID, ToolName: tool.Name, Arguments: tool.Arguments}) {
		select {
		case d := <-ch: // Approve removed the request
			if d != goose.AllowOnce && d != goose.AlwaysAllow {
				return goosetest.DeclinedToolResult, false, true
			}
			return run()
		case <-ctx.Done():
		case <-b.closed:
		}
		stopped()
	}
	// The reply ended unanswered: a late Approve finds nothing pending.
	b.mu.Lock()
	delete(b.waiting, key)
	b.mu.Unlock()
	return "", false, false
}

// countUsage adds one provider call's tokens to the session's totals.
func (b *scriptBackend) countUsage(sid string, u *goosetest.UsageStep) *goose.UsageUpdate {
	last := goose.Usage{InputTokens: u.Input, OutputTokens: u.Output}.Normalized()
	if u.Cost != 0 {
		c := u.Cost
		last.Cost = &c
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[sid]
	if s == nil {
		return &goose.UsageUpdate{Last: last}
	}
	// Add returns a new Cost: what is handed out never changes afterwards.
	s.usage = s.usage.Add(last)
	return &goose.UsageUpdate{Last: last, Accumulated: s.usage, HasAccumulated: true}
}

func (b *scriptBackend) Approve(_ context.Context, sid, id string, d goose.Decision) error {
	if b.approving != nil {
		b.approving()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.waiting[sid+"/"+id]
	if !ok {
		return fmt.Errorf("failed to approve: no approval %s pending in %s", id, sid)
	}
	delete(b.waiting, sid+"/"+id)
	b.approvals = append(b.approvals, scriptApproval{session: sid, call: id, decision: d})
	ch <- d
	return nil
}

// snapshot returns the approval answers goose received, as
// "session/call=decision" in order, and how many replies it saw cancelled.
func (b *scriptBackend) snapshot() (decisions []string, cancelled int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.approvals {
		decisions = append(decisions, a.session+"/"+a.call+"="+string(a.decision))
	}
	for _, n := range b.cancels {
		cancelled += n
	}
	return decisions, cancelled
}

func (b *scriptBackend) Usage(_ context.Context, sid string) (goose.Usage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[sid]
	if !ok {
		return goose.Usage{}, fmt.Errorf("failed to get usage of session %s: %w", sid, goose.ErrSessionNotFound)
	}
	return s.usage, nil
}

func (b *scriptBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.isClosed {
		b.isClosed = true
		close(b.closed)
	}
	return nil
}

var _ goose.Backend = (*scriptBackend)(nil)

// scriptObserver is the goose of a scriptBackend, as the contract asks it.
type scriptObserver struct{ b *scriptBackend }

func (o scriptObserver) Prompts(id string) []string {
	o.b.mu.Lock()
	defer o.b.mu.Unlock()
	return append([]string(nil), o.b.prompts[id]...)
}

func (o scriptObserver) Cancels(id string) int {
	o.b.mu.Lock()
	defer o.b.mu.Unlock()
	return o.b.cancels[id]
}

func (o scriptObserver) Approvals(id string) []goose.Decision {
	o.b.mu.Lock()
	defer o.b.mu.Unlock()
	var out []goose.Decision
	for _, a := range o.b.approvals {
		if a.session == id {
			out = append(out, a.decision)
		}
	}
	return out
}

func (o scriptObserver) Accumulated(id string) goose.Usage {
	o.b.mu.Lock()
	defer o.b.mu.Unlock()
	if s := o.b.sessions[id]; s != nil {
		return s.usage
	}
	return goose.Usage{}
}

// TestScriptBackendContract holds the in-process backend to the contract
// the real clients keep.
func TestScriptBackendContract(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		Start: func(t testing.TB, script goosetest.Script) (goose.Backend, backendtest.Observer) {
			t.Helper()
			b := newScriptBackend(script)
			t.Cleanup(func() { _ = b.Close() })
			return b, scriptObserver{b}
		},
		FinishReason:       "end_turn",
		AgentErrorCode:     -32603,
		CanDelete:          true,
		NotificationDetail: true,
	})
}
