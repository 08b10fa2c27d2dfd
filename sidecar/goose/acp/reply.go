package acp

import (
	"sync"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// item is one entry of a reply's queue: an event, or the final error.
type item struct {
	ev  goose.Event
	err error
}

// reply is the client-side state of one in-flight session/prompt. The
// session connection's reader delivers into it, waiting while the queue is
// full: a slow consumer slows its own session's connection, which nobody
// else shares. The Reply iterator drains it.
type reply struct {
	sessionID string
	cn        *conn

	signal  chan struct{} // cap 1: "items were pushed"
	drained chan struct{} // cap 1: "the iterator took the queue"
	ended   chan struct{} // closed once the iterator stops reading
	endOnce sync.Once

	mu              sync.Mutex
	items           []item
	tools           map[string]string // tool call id -> goose tool name
	approvals       map[string]chan goose.Decision
	sawMessageUsage bool
}

func newReply(sessionID string, cn *conn) *reply {
	return &reply{
		sessionID: sessionID,
		cn:        cn,
		signal:    make(chan struct{}, 1),
		drained:   make(chan struct{}, 1),
		ended:     make(chan struct{}),
	}
}

func (r *reply) push(it item) {
	r.mu.Lock()
	r.items = append(r.items, it)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// end marks that nobody reads the reply any more.
func (r *reply) end() { r.endOnce.Do(func() { close(r.ended) }) }

// deliver pushes a decoded notification, keeping the per-reply bookkeeping
// that a single notification cannot carry (tool names, whether per-message
// usage was seen). While limit items wait it blocks until the iterator takes
// them, the reply ends or the connection closes: goose is slowed, nothing is
// dropped for a reader that is still there.
func (r *reply) deliver(d decoded, limit int, closed <-chan struct{}) {
	r.mu.Lock()
	for len(r.items) >= limit {
		r.mu.Unlock()
		select {
		case <-r.drained:
		case <-r.ended:
			return
		case <-closed:
			return
		}
		r.mu.Lock()
	}
	switch ev := d.Event.(type) {
	case *goose.ToolRequest:
		if r.tools == nil {
			r.tools = make(map[string]string)
		}
		r.tools[ev.ID] = ev.Name
	case *goose.ToolResponse:
		if ev.Name == "" {
			ev.Name = r.tools[ev.ID]
		}
	case *goose.UsageUpdate:
		if !d.StableUsage && !ev.HasAccumulated {
			r.sawMessageUsage = true
		}
	}
	r.items = append(r.items, item{ev: d.Event})
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// take hands the queued items to the iterator.
func (r *reply) take() []item {
	r.mu.Lock()
	out := r.items
	r.items = nil
	r.mu.Unlock()
	select {
	case r.drained <- struct{}{}:
	default:
	}
	return out
}

func (r *reply) toolName(id, fallback string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.tools[id]; n != "" {
		return n
	}
	return fallback
}

func (r *reply) messageUsageSeen() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sawMessageUsage
}

// addApproval registers a pending permission request; false once the reply
// has ended (nobody is left to answer it).
func (r *reply) addApproval(id string, ch chan goose.Decision) bool {
	select {
	case <-r.ended:
		return false
	default:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.approvals == nil {
		r.approvals = make(map[string]chan goose.Decision)
	}
	r.approvals[id] = ch
	return true
}

func (r *reply) removeApproval(id string, ch chan goose.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.approvals[id] == ch {
		delete(r.approvals, id)
	}
}

func (r *reply) approval(id string) chan goose.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.approvals[id]
}

// cancelApprovals answers every outstanding permission request "cancelled":
// goose waits forever on an unanswered one (goose-acp.md §2.7).
func (r *reply) cancelApprovals() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.approvals {
		select {
		case ch <- goose.CancelDecision:
		default:
		}
	}
}
