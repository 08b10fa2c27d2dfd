package main

import (
	"reflect"
	"testing"
)

func TestScheduleIsAFunctionOfTheSeed(t *testing.T) {
	c := ScheduleConfig{Turns: 2000, Sessions: 32, Replicas: 2, FaultEvery: 50}
	a, b := NewSchedule(42, c), NewSchedule(42, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if reflect.DeepEqual(a.Turns, NewSchedule(43, c).Turns) {
		t.Fatal("seeds 42 and 43 gave the same turns")
	}
}

// A long schedule has every kind of turn, answer, client and goose
// misbehaviour and process fault, on both replicas.
func TestScheduleCoversEveryFault(t *testing.T) {
	s := NewSchedule(7, ScheduleConfig{Turns: 10000, Sessions: 64, Replicas: 2, FaultEvery: 100})
	n := s.Counts()
	for _, k := range []string{
		"turn plain", "turn approval", "turn cancel",
		"answer once", "answer twice", "answer late", "answer after-restart",
		"client disconnect", "client slow-read", "goose stall", "goose drop-mid-frame",
		"fault goose-kill", "fault goose-stall", "fault sidecar-term", "fault sidecar-kill", "fault peer-unreachable",
	} {
		if n[k] == 0 {
			t.Errorf("no %s in %v", k, n)
		}
	}
	replicas := map[int]bool{}
	protocols := map[Protocol]bool{}
	for _, tr := range s.Turns {
		replicas[tr.Replica] = true
		protocols[tr.Protocol] = true
		if tr.Kind == Approval && tr.Protocol != REST {
			t.Errorf("turn %d: an approval over %s", tr.ID, tr.Protocol)
		}
	}
	if len(replicas) != 2 || len(protocols) != 2 {
		t.Errorf("replicas %v, protocols %v", replicas, protocols)
	}
}

// The fake goose's script plays what the prompt of a turn asks for.
func TestScriptFollowsThePrompt(t *testing.T) {
	tr := Turn{ID: 9, Kind: Approval, Reply: Stall, Usage: Usage{In: 12, Out: 3}}
	steps := script("", prompt(tr)).Steps
	var tool, stall, answer, usage bool
	for _, st := range steps {
		tool = tool || st.Tool != nil && st.Tool.ID == toolCallID(9) && st.Tool.NeedsApproval
		stall = stall || st.Delay == stallFor
		answer = answer || st.Text == answerText(9)
		usage = usage || st.Usage != nil && st.Usage.Input == 12 && st.Usage.Output == 3
	}
	if !tool || !stall || !answer || !usage {
		t.Fatalf("tool %v stall %v answer %v usage %v in %+v", tool, stall, answer, usage, steps)
	}
	last := script("", prompt(Turn{ID: 1, Reply: DropMidFrame})).Steps
	if !last[len(last)-1].DropMidFrame {
		t.Fatalf("a drop-mid-frame reply ends %+v", last[len(last)-1])
	}
}
