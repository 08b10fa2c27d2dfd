//go:build unix

package server_test

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// Environment of the child sidecar that TestRestartDeletesEarlySessionsOfADeadSidecar kills.
const (
	earlyKillDirEnv    = "ADK2GOOSE_EARLY_KILL_DIR"
	earlyKillURLEnv    = "ADK2GOOSE_EARLY_KILL_GOOSE_URL"
	earlyKillSecretEnv = "ADK2GOOSE_EARLY_KILL_GOOSE_SECRET"
)

// TestRestartDeletesEarlySessionsOfADeadSidecar: a sidecar killed with
// SIGKILL cannot delete the goose sessions it started early for ADK
// sessions that ran no turn (its drain does that), and no ADK state names
// them. They are listed in usage.db until a turn takes one, so the next
// sidecar on the same volume deletes them from goose; the one a turn took
// stays, and both sessions go on working.
func TestRestartDeletesEarlySessionsOfADeadSidecar(t *testing.T) {
	if dir := os.Getenv(earlyKillDirEnv); dir != "" {
		earlyKillChild(t, dir)
		return
	}
	f := goosetest.NewServe(t)
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRestartDeletesEarlySessionsOfADeadSidecar$")
	cmd.Env = append(os.Environ(), earlyKillDirEnv+"="+dir, earlyKillURLEnv+"="+f.URL, earlyKillSecretEnv+"="+f.Secret)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child sidecar said %q, %v", line, err)
	}
	poll.Until(t, "both early goose sessions started", func() bool { return len(f.SessionIDs()) == 2 })
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	after := startSidecar(t, serveClient(t, f), dir)
	state, _ := after.history("u", "used")
	usedID, _ := jpath(state, "state", gooseagent.SessionIDStateKey(appName)).(string)
	if usedID == "" {
		t.Fatalf("the used session's state names no goose session: %v", state)
	}
	poll.Until(t, "the early session the killed sidecar left to be deleted", func() bool {
		return slices.Equal(f.SessionIDs(), []string{usedID})
	})
	if got := after.say("u", "used", "again"); got != "echo: again" {
		t.Errorf("the used session's next turn answered %q", got)
	}
	if got := after.say("u", "unused", "first"); got != "echo: first" {
		t.Errorf("the unused session's first turn answered %q", got)
	}
}

// earlyKillChild is the sidecar that gets killed: it creates two sessions
// (each starting its goose session early), runs a turn in one, says ready
// and waits to be killed.
func earlyKillChild(t *testing.T, dir string) {
	c, err := acp.New(acp.Config{URL: os.Getenv(earlyKillURLEnv), SecretKey: os.Getenv(earlyKillSecretEnv), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, c, dir)
	sc.createSession("u", "used")
	sc.createSession("u", "unused")
	if got := sc.say("u", "used", "hello"); got != "echo: hello" {
		t.Fatalf("turn: %q", got)
	}
	// Killed once the unused one is listed: a sidecar killed between
	// goose's answer and the listing leaves that session in goose (goose
	// has no hook for it).
	poll.Until(t, "the unused session's early start listed", func() bool {
		ids, err := server.EarlyListed(t.Context(), sc.srv)
		return err == nil && len(ids) == 1
	})
	os.Stdout.WriteString("ready\n")
	select {} // until killed
}
