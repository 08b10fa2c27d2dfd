package gooseagent_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// scriptBackend is an in-process goose.Backend that plays goosetest Scripts
// without a network, so the translation can be tested in isolation. The
// end-to-end tests in sidecar/server use the real clients and fake servers.
type scriptBackend struct {
	script goosetest.Script

	mu       sync.Mutex
	next     int
	sessions map[string]*goose.Usage
	resumed  []string
	down     bool
	// waiting are approvals blocked in Reply, by session+tool call id.
	waiting       map[string]chan goose.Decision
	decisions     []string // "session/call=decision", in order
	closedReplies int      // replies whose consumer stopped before Finish
}

func newScriptBackend(s goosetest.Script) *scriptBackend {
	return &scriptBackend{script: s, sessions: map[string]*goose.Usage{}, waiting: map[string]chan goose.Decision{}}
}

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

func (b *scriptBackend) StartSession(ctx context.Context, _ goose.StartOptions) (goose.Session, error) {
	if b.isDown() {
		return goose.Session{}, fmt.Errorf("failed to start session: %w", goose.ErrUnavailable)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := fmt.Sprintf("g%d", b.next)
	b.sessions[id] = &goose.Usage{}
	return goose.Session{ID: id}, nil
}

func (b *scriptBackend) ResumeSession(ctx context.Context, id string) (goose.Session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sessions[id]; !ok {
		return goose.Session{}, goose.ErrSessionNotFound
	}
	b.resumed = append(b.resumed, id)
	return goose.Session{ID: id}, nil
}

func (b *scriptBackend) GetSession(ctx context.Context, id string) (goose.Session, error) {
	return b.ResumeSession(ctx, id)
}

func (b *scriptBackend) ListSessions(context.Context) ([]goose.Session, error) {
	return nil, goose.ErrUnsupported
}

func (b *scriptBackend) DeleteSession(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.sessions, id)
	return nil
}

func (b *scriptBackend) Reply(ctx context.Context, sid string, msg goose.UserMessage) iter.Seq2[goose.Event, error] {
	return func(yield0 func(goose.Event, error) bool) {
		finished := false
		yield := func(ev goose.Event, err error) bool {
			if _, ok := ev.(*goose.Finish); ok || err != nil {
				finished = true
			}
			return yield0(ev, err)
		}
		defer func() {
			if !finished {
				b.mu.Lock()
				b.closedReplies++
				b.mu.Unlock()
			}
		}()
		b.mu.Lock()
		acc, ok := b.sessions[sid]
		b.mu.Unlock()
		if !ok {
			yield(nil, goose.ErrSessionNotFound)
			return
		}
		for _, st := range b.script(sid, msg.Text).Steps {
			if st.Delay > 0 {
				select {
				case <-time.After(st.Delay):
				case <-ctx.Done():
					yield(nil, ctx.Err())
					return
				}
			}
			var evs []goose.Event
			switch {
			case st.Text != "":
				evs = []goose.Event{&goose.TextDelta{MessageID: "m", Text: st.Text}}
			case st.Thinking != "":
				evs = []goose.Event{&goose.ThinkingDelta{MessageID: "m", Text: st.Thinking}}
			case st.Tool != nil:
				if !yield(&goose.ToolRequest{ID: st.Tool.ID, Name: st.Tool.Name, Arguments: st.Tool.Arguments}, nil) {
					return
				}
				result := st.Tool.Result
				if st.Tool.NeedsApproval {
					ch := make(chan goose.Decision, 1)
					b.mu.Lock()
					b.waiting[sid+"/"+st.Tool.ID] = ch
					b.mu.Unlock()
					if !yield(&goose.ApprovalRequest{ID: st.Tool.ID, ToolName: st.Tool.Name, Arguments: st.Tool.Arguments}, nil) {
						return
					}
					select {
					case d := <-ch:
						if d != goose.AllowOnce && d != goose.AlwaysAllow {
							result = "declined"
						}
					case <-ctx.Done():
						yield(nil, ctx.Err())
						return
					}
				}
				evs = []goose.Event{&goose.ToolResponse{ID: st.Tool.ID, Name: st.Tool.Name, Text: result, IsError: st.Tool.IsError}}
			case st.Notify != nil:
				p, tot := st.Notify.Progress, st.Notify.Total
				evs = []goose.Event{&goose.Notification{ToolCallID: st.Notify.ToolCallID, Kind: "progress", Message: st.Notify.Message, Progress: &p, Total: &tot}}
			case st.Usage != nil:
				last := goose.Usage{InputTokens: st.Usage.Input, OutputTokens: st.Usage.Output, TotalTokens: st.Usage.Input + st.Usage.Output}
				b.mu.Lock()
				acc.InputTokens += last.InputTokens
				acc.OutputTokens += last.OutputTokens
				acc.TotalTokens += last.TotalTokens
				snapshot := *acc
				b.mu.Unlock()
				evs = []goose.Event{&goose.UsageUpdate{Last: last, Accumulated: snapshot, HasAccumulated: true}}
			case st.Error != "":
				yield(nil, &goose.AgentError{Code: -32603, Message: st.Error})
				return
			case st.Drop:
				yield(nil, goose.ErrStreamBroken)
				return
			}
			for _, ev := range evs {
				if !yield(ev, nil) {
					return
				}
			}
		}
		yield(&goose.Finish{Reason: "end_turn"}, nil)
	}
}

func (b *scriptBackend) Approve(_ context.Context, sid, id string, d goose.Decision) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.waiting[sid+"/"+id]
	if !ok {
		return fmt.Errorf("failed to approve: no approval %s pending in %s", id, sid)
	}
	delete(b.waiting, sid+"/"+id)
	b.decisions = append(b.decisions, sid+"/"+id+"="+string(d))
	ch <- d
	return nil
}

func (b *scriptBackend) snapshot() (decisions []string, closed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.decisions...), b.closedReplies
}

func (b *scriptBackend) Cancel(context.Context, string) error { return nil }

func (b *scriptBackend) Usage(_ context.Context, sid string) (goose.Usage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, ok := b.sessions[sid]
	if !ok {
		return goose.Usage{}, goose.ErrSessionNotFound
	}
	return *u, nil
}

func (b *scriptBackend) Close() error { return nil }

var _ goose.Backend = (*scriptBackend)(nil)
