package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Protocol is how a session's client speaks to the sidecar.
type Protocol string

const (
	REST Protocol = "rest" // ADK REST /run_sse
	A2A  Protocol = "a2a"  // A2A message/stream
)

// Kind is what a turn's client does.
type Kind string

const (
	Plain    Kind = "plain"
	Approval Kind = "approval" // goose asks before a tool; the client answers (REST only)
	Cancel   Kind = "cancel"   // REST: the client disconnects after the first delta; A2A: tasks/cancel
)

// ClientFault is how a turn's client misbehaves while reading.
type ClientFault string

const (
	ReadsWell  ClientFault = ""
	Disconnect ClientFault = "disconnect" // goes away after the first delta
	SlowRead   ClientFault = "slow-read"  // pauses between reads
)

// AnswerFault is how an approval is answered.
type AnswerFault string

const (
	AnswerOnce         AnswerFault = "once"
	AnswerTwice        AnswerFault = "twice"         // two answers at once
	AnswerLate         AnswerFault = "late"          // after -confirmation-timeout denied it
	AnswerAfterRestart AnswerFault = "after-restart" // after the owning sidecar drained and restarted
)

// ReplyFault is what goose does wrong within one reply (the fake's script).
type ReplyFault string

const (
	ReplyWell    ReplyFault = ""
	Stall        ReplyFault = "stall"          // pauses mid-reply
	DropMidFrame ReplyFault = "drop-mid-frame" // cuts its connection inside a frame
)

// FaultKind is a fault in the processes, injected between turns.
type FaultKind string

const (
	GooseKill       FaultKind = "goose-kill"       // goose dies abruptly and is started again
	GooseStall      FaultKind = "goose-stall"      // goose's process stops (SIGSTOP) for a while
	SidecarTerm     FaultKind = "sidecar-term"     // SIGTERM: the sidecar drains, then is started again
	SidecarKill     FaultKind = "sidecar-kill"     // kill -9, then started again
	PeerUnreachable FaultKind = "peer-unreachable" // the sidecar's process stops (SIGSTOP) for a while
)

// Usage is one reply's tokens.
type Usage struct{ In, Out int64 }

// Turn is one scripted turn.
type Turn struct {
	ID       int
	Session  int
	Protocol Protocol // the session's
	Replica  int      // the replica the client sends it to (peering forwards it to the owner)
	Kind     Kind
	Client   ClientFault
	Answer   AnswerFault // Approval turns
	Reply    ReplyFault
	Usage    Usage
}

// Session is one scripted conversation.
type Session struct {
	Name     string
	Protocol Protocol
}

// Fault is a process fault, injected once After turns have ended.
type Fault struct {
	After   int
	Kind    FaultKind
	Replica int
	For     time.Duration // GooseStall, PeerUnreachable
}

// Schedule is everything a soak run does, in order.
type Schedule struct {
	Seed     uint64
	Sessions []Session
	Turns    []Turn
	Faults   []Fault
}

// ScheduleConfig sizes a schedule.
type ScheduleConfig struct {
	Turns, Sessions, Replicas int
	// FaultEvery is the mean number of turns between process faults.
	FaultEvery int
}

// NewSchedule is the schedule of seed: a pure function of its arguments.
func NewSchedule(seed uint64, c ScheduleConfig) Schedule {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := Schedule{Seed: seed}
	for i := range c.Sessions {
		p := REST
		if r.IntN(4) == 0 {
			p = A2A
		}
		s.Sessions = append(s.Sessions, Session{Name: fmt.Sprintf("s%d-%d", seed%100000, i), Protocol: p})
	}
	faultKinds := []FaultKind{GooseKill, GooseStall, SidecarTerm, SidecarKill, PeerUnreachable}
	for id := range c.Turns {
		t := Turn{ID: id, Session: r.IntN(c.Sessions), Replica: r.IntN(c.Replicas), Kind: Plain,
			Usage: Usage{In: 10 + r.Int64N(90), Out: 1 + r.Int64N(40)}}
		t.Protocol = s.Sessions[t.Session].Protocol
		rest := t.Protocol == REST
		switch n := r.IntN(100); {
		case n < 12 && rest:
			t.Kind = Approval
			t.Answer = []AnswerFault{AnswerOnce, AnswerOnce, AnswerTwice, AnswerLate, AnswerAfterRestart}[r.IntN(5)]
		case n < 20:
			t.Kind = Cancel
		}
		switch n := r.IntN(100); {
		case n < 4:
			t.Client = Disconnect
		case n < 8:
			t.Client = SlowRead
		}
		switch n := r.IntN(100); {
		case n < 2:
			t.Reply = Stall
		case n < 4:
			t.Reply = DropMidFrame
		}
		s.Turns = append(s.Turns, t)
		if c.FaultEvery > 0 && r.IntN(c.FaultEvery) == 0 {
			f := Fault{After: id + 1, Kind: faultKinds[r.IntN(len(faultKinds))], Replica: r.IntN(c.Replicas)}
			if f.Kind == GooseStall || f.Kind == PeerUnreachable {
				f.For = time.Duration(1000+r.IntN(3000)) * time.Millisecond
			}
			s.Faults = append(s.Faults, f)
		}
	}
	return s
}

// Counts is how many turns and faults of each kind a schedule has.
func (s Schedule) Counts() map[string]int {
	n := map[string]int{}
	for _, t := range s.Turns {
		n["turn "+string(t.Kind)]++
		if t.Kind == Approval {
			n["answer "+string(t.Answer)]++
		}
		if t.Client != ReadsWell {
			n["client "+string(t.Client)]++
		}
		if t.Reply != ReplyWell {
			n["goose "+string(t.Reply)]++
		}
	}
	for _, f := range s.Faults {
		n["fault "+string(f.Kind)]++
	}
	return n
}
