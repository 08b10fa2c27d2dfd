package acp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// An adk2goose that restarts while goose waits for a tool approval: goose's
// session/load (ResumeSession, which gooseagent calls for a session it has
// not used since it started) resumes that turn and asks for the approval again
// (load_session.rs start_resumed_state_machine_turn), with a resumed run that
// refuses prompts until it ends. The next turn on the new client starts with
// a function response ending the lost tool call, goose's resumed run is
// stopped, and the turn itself then runs normally.
func TestResumedApprovalAfterRestartEndsAndTheNextTurnWorks(t *testing.T) {
	srv := goosetest.NewServe(t, goosetest.WithServeScript(func(_, text string) goosetest.Reply {
		if text == "go" {
			return goosetest.Reply{Steps: []goosetest.Step{
				{Tool: &goosetest.ToolStep{ID: "toolu_7", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "removed", NeedsApproval: true}},
				// A resumed run that is not stopped holds the session this long.
				{Delay: time.Minute, Text: "after the tool"},
			}}
		}
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "fine"}}}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	before, err := New(Config{URL: srv.URL, SecretKey: srv.Secret})
	if err != nil {
		t.Fatal(err)
	}
	s, err := before.StartSession(ctx, goose.StartOptions{WorkingDir: "/tmp", Mode: "approve"})
	if err != nil {
		t.Fatal(err)
	}
	dropped := false
	for ev, err := range before.Reply(ctx, s.ID, goose.UserMessage{Text: "go"}) {
		if err != nil {
			if !dropped || !errors.Is(err, goose.ErrStreamBroken) {
				t.Fatal(err)
			}
			break
		}
		if _, ok := ev.(*goose.ApprovalRequest); ok {
			// The process dies here: its socket goes, nothing is answered.
			dropped = true
			srv.DropConnections()
		}
	}
	if !dropped {
		t.Fatal("goose asked for no approval")
	}
	before.Close()
	poll.Until(t, "goose keeping the pending approval", func() bool {
		ss, _ := srv.Session(s.ID)
		return ss.AwaitingApproval
	})

	after, err := New(Config{URL: srv.URL, SecretKey: srv.Secret})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	// As gooseagent does with a session it has not used since it started.
	if _, err := after.ResumeSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	var got []string
	for ev, err := range after.Reply(ctx, s.ID, goose.UserMessage{Text: "next"}) {
		if err != nil {
			t.Fatalf("the turn after the restart failed: %v (events so far %v)", err, got)
		}
		switch e := ev.(type) {
		case *goose.ToolResponse:
			got = append(got, "lost:"+e.ID+":"+e.Name)
			if !e.IsError || !strings.Contains(e.Text, "restarted") {
				t.Errorf("lost tool call response %+v", e)
			}
		case *goose.TextDelta:
			got = append(got, "text:"+e.Text)
		case *goose.Finish:
			got = append(got, "finish:"+e.Reason)
		}
	}
	if strings.Join(got, " ") != "lost:toolu_7:shell text:fine finish:end_turn" {
		t.Errorf("events %v", got)
	}
	// The refusal is answered on a goroutine of its own, so it may reach
	// goose after the reply ended.
	var perms []goosetest.ServePermission
	poll.Until(t, "goose hearing the refusal", func() bool {
		perms = srv.Permissions()
		return len(perms) > 0
	})
	if len(perms) != 1 || perms[0].ToolCallID != "toolu_7" || perms[0].Outcome != "cancelled" {
		t.Errorf("goose heard %+v, want the resent approval refused", perms)
	}
	if c := srv.Cancels(); len(c) != 1 || c[0].SessionID != s.ID {
		t.Errorf("session/cancel %+v, want one stopping the resumed run", c)
	}
}
