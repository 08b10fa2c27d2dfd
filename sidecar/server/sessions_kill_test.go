//go:build unix

package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// synchronous=NORMAL with WAL: a commit is in the WAL file when it returns,
// so what was written survives the sidecar process being killed (only an
// OS crash or power loss can lose the last commits). A child process writes
// a session and usage, then SIGKILLs itself without closing anything.
func TestSessionsSurviveProcessKill(t *testing.T) {
	if dir := os.Getenv("ADK2GOOSE_KILL_HELPER_DIR"); dir != "" {
		killHelper(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSessionsSurviveProcessKill$")
	cmd.Env = append(os.Environ(), "ADK2GOOSE_KILL_HELPER_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper did not die by SIGKILL: %v\n%s", err, out)
	}

	svc := openTestSessions(t, dir)
	got, err := svc.Get(t.Context(), &session.GetRequest{AppName: "a", UserID: "u", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Session.Events().Len(); n != 50 {
		t.Fatalf("events after kill: %d, want 50", n)
	}
	if v, _ := got.Session.State().Get("n"); v != 49.0 {
		t.Fatalf("state after kill: %v", v)
	}
	us, err := OpenUsageStore(t.Context(), filepath.Join(dir, UsageDBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer us.Close()
	if u, err := us.Totals(t.Context(), "a"); err != nil || u.TotalTokens != 42 {
		t.Fatalf("usage after kill: %+v %v", u, err)
	}
}

func killHelper(dir string) {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println(err)
		os.Exit(3)
	}
	_, svc, err := openSessionService(ctx, filepath.Join(dir, SessionsDBFile))
	if err != nil {
		fail(err)
	}
	cr, err := svc.Create(ctx, &session.CreateRequest{AppName: "a", UserID: "u", SessionID: "s"})
	if err != nil {
		fail(err)
	}
	for i := range 50 {
		ev := textEvent(fmt.Sprint(i), false)
		ev.Actions.StateDelta = map[string]any{"n": i}
		if err := svc.AppendEvent(ctx, cr.Session, ev); err != nil {
			fail(err)
		}
	}
	us, err := OpenUsageStore(ctx, filepath.Join(dir, UsageDBFile))
	if err != nil {
		fail(err)
	}
	rec := gooseagent.UsageRecord{Key: gooseagent.SessionKey{AppName: "a", UserID: "u", SessionID: "s"}, GooseSessionID: "g", At: time.Now()}
	rec.Totals.TotalTokens = 42
	if err := us.RecordUsage(ctx, rec); err != nil {
		fail(err)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
