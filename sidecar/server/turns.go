package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// errSessionBusy: the session's running turn did not end within the wait.
var errSessionBusy = errors.New("the session is busy with another turn")

// errDraining: the pod is stopping (Server.Drain) and takes no new turns.
var errDraining = errors.New("adk2goose is draining: its pod is stopping and takes no new turns")

// turnGate runs one request at a time per ADK session, in arrival order.
//
// adk-go's runner loads the session when a run starts and appends each of
// its events through that copy; the database session service rejects an
// append from a copy older than the stored session ("stale session
// error"). Two runs of one session at once therefore failed after goose
// had answered, and the answer was lost from the history (its tokens
// counted anyway). ADK Python serializes only the appends (a per-session
// lock in DatabaseSessionService.append_event) and interleaves the turns'
// events; here whole turns take turns, so each turn's events stay together
// and every one is stored: a second message waits for the first turn, as
// a user who sends twice expects, and gets 409 only when the wait is
// longer than the turn wait. Session writes outside runs (PATCH, DELETE,
// create with an id) take the same turn, so they cannot make a running
// turn's copy stale either. The gate is in-process: peering forwards every
// request for a session to the pod that has it, so this is where all its
// turns meet.
type turnGate struct {
	mu sync.Mutex
	// queues has an entry for every session whose turn is taken; its
	// waiters are handed the turn in order.
	queues map[gooseagent.SessionKey]*[]chan struct{}
	// draining is closed by drain: no turn is handed out from then on.
	draining chan struct{}
	// idle is closed once draining and no turn is taken.
	idle chan struct{}
}

func newTurnGate() *turnGate {
	return &turnGate{
		queues:   map[gooseagent.SessionKey]*[]chan struct{}{},
		draining: make(chan struct{}),
		idle:     make(chan struct{}),
	}
}

// drain stops handing out turns: new and waiting requests fail with
// errDraining. The returned channel is closed when the turns taken
// before have all been released.
func (g *turnGate) drain() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.draining:
	default:
		close(g.draining)
		g.closeIdleLocked()
	}
	return g.idle
}

func (g *turnGate) isDraining() bool {
	select {
	case <-g.draining:
		return true
	default:
		return false
	}
}

func (g *turnGate) closeIdleLocked() {
	if len(g.queues) == 0 {
		select {
		case <-g.idle:
		default:
			close(g.idle)
		}
	}
}

// acquire takes the session's turn, waiting at most wait. It fails with
// errSessionBusy when the wait ends first, errDraining once the gate
// drains, or with ctx's cause.
func (g *turnGate) acquire(ctx context.Context, k gooseagent.SessionKey, wait time.Duration) (release func(), err error) {
	release = func() { g.release(k) }
	g.mu.Lock()
	if g.isDraining() {
		g.mu.Unlock()
		return nil, errDraining
	}
	q, taken := g.queues[k]
	if !taken {
		g.queues[k] = new([]chan struct{})
		g.mu.Unlock()
		return release, nil
	}
	turn := make(chan struct{})
	*q = append(*q, turn)
	g.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-turn:
		return release, nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-timer.C:
		err = errSessionBusy
	case <-g.draining:
		err = errDraining
	}
	g.mu.Lock()
	select {
	case <-turn:
		// Handed over while giving up: pass it on.
		g.mu.Unlock()
		g.release(k)
		return nil, err
	default:
	}
	if q := g.queues[k]; q != nil {
		*q = slices.DeleteFunc(*q, func(c chan struct{}) bool { return c == turn })
	}
	g.mu.Unlock()
	return nil, err
}

func (g *turnGate) release(k gooseagent.SessionKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[k]
	if q == nil {
		return
	}
	if draining := g.isDraining(); draining || len(*q) == 0 {
		// Waiters left once draining give up by themselves (acquire).
		delete(g.queues, k)
		if draining {
			g.closeIdleLocked()
		}
		return
	}
	next := (*q)[0]
	*q = (*q)[1:]
	close(next)
}
