package server

import (
	"errors"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// TestTurnGateDrain: once draining, no turn is handed out, a request
// waiting for one is refused, and idle closes when the turns taken before
// are released.
func TestTurnGateDrain(t *testing.T) {
	g := newTurnGate()
	a := gooseagent.SessionKey{AppName: "app", UserID: "u", SessionID: "a"}
	b := gooseagent.SessionKey{AppName: "app", UserID: "u", SessionID: "b"}
	relA, relB := mustAcquire(t, g, a), mustAcquire(t, g, b)
	waited := make(chan error, 1)
	go func() {
		_, err := g.acquire(t.Context(), a, time.Hour)
		waited <- err
	}()
	waitQueued(t, g, a)

	idle := g.drain()
	if err := <-waited; !errors.Is(err, errDraining) {
		t.Errorf("a request waiting for the turn got %v once draining, want errDraining", err)
	}
	if _, err := g.acquire(t.Context(), gooseagent.SessionKey{SessionID: "c"}, time.Hour); !errors.Is(err, errDraining) {
		t.Errorf("a new session's turn while draining: %v, want errDraining", err)
	}
	relA()
	select {
	case <-idle:
		t.Fatal("idle while b's turn is still taken")
	default:
	}
	relB()
	<-idle
	if again := g.drain(); again != idle {
		t.Error("a second drain has another idle channel")
	}
}

// TestTurnGateDrainWhenIdle: a gate with no turn taken is idle at once.
func TestTurnGateDrainWhenIdle(t *testing.T) {
	select {
	case <-newTurnGate().drain():
	case <-time.After(time.Minute):
		t.Fatal("an unused gate is not idle after drain")
	}
}

// mustAcquire takes k's turn, which must be free.
func mustAcquire(t *testing.T, g *turnGate, k gooseagent.SessionKey) (release func()) {
	t.Helper()
	release, err := g.acquire(t.Context(), k, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return release
}

// waitQueued waits until a request waits for k's turn.
func waitQueued(t *testing.T, g *turnGate, k gooseagent.SessionKey) {
	t.Helper()
	poll.Until(t, "the request to queue", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(*g.queues[k]) > 0
	})
}
