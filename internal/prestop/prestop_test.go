package prestop

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hook runs Script as the kubelet runs goose's preStop hook, and returns
// a channel that gets its error when it exits.
func hook(t *testing.T, dir string, wait time.Duration) <-chan error {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", Script(dir, wait))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done
}

// A path with a space and a quote: the script quotes it.
func awkwardDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "drain dir's")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestHookWaitsForTheDrain(t *testing.T) {
	dir := awkwardDir(t)
	if err := Watch(dir); err != nil {
		t.Fatal(err)
	}
	if exists(dir, requestFile) {
		t.Fatal("a drain was requested before the hook ran")
	}

	exited := hook(t, dir, time.Hour)
	if err := AwaitRequest(t.Context(), dir, 10*time.Millisecond); err != nil {
		t.Fatal(err) // the hook asked
	}
	select {
	case err := <-exited:
		t.Fatalf("the hook returned before the drain was done: %v", err)
	default:
	}
	if Drained(dir) {
		t.Fatal("Drained before Done")
	}
	if err := Done(dir); err != nil {
		t.Fatal(err)
	}
	if !Drained(dir) {
		t.Fatal("not Drained after Done")
	}
	if err := <-exited; err != nil {
		t.Fatalf("the hook failed: %v", err)
	}
}

func TestHookSkipsWithoutAWatchingSidecar(t *testing.T) {
	dir := awkwardDir(t)
	if err := <-hook(t, dir, time.Hour); err != nil {
		t.Fatalf("the hook failed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, requestFile)); err == nil {
		t.Error("the hook asked for a drain nobody watches")
	}
}

func TestHookGivesUpAfterItsWait(t *testing.T) {
	dir := awkwardDir(t)
	if err := Watch(dir); err != nil {
		t.Fatal(err)
	}
	// Watched, never done (a sidecar that died): the hook ends by itself.
	if err := <-hook(t, dir, time.Millisecond); err != nil {
		t.Fatalf("the hook failed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, requestFile)); err != nil {
		t.Errorf("the hook did not ask for a drain: %v", err)
	}
}

func TestAwaitRequestSeesAnEarlierRequest(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, requestFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := AwaitRequest(t.Context(), dir, time.Hour); err != nil { // at once, not after an hour
		t.Fatal(err)
	}
}

func TestAwaitRequestEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := AwaitRequest(ctx, t.TempDir(), time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitRequest with no request and an ended context: %v, want context.Canceled", err)
	}
}

func TestWatchFailsOnAMissingDirectory(t *testing.T) {
	if err := Watch(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("Watch of a missing directory succeeded")
	}
}

func TestScriptWaitRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want string
	}{{time.Millisecond, `-lt 1 ]`}, {25 * time.Second, `-lt 25 ]`}, {1500 * time.Millisecond, `-lt 2 ]`}} {
		if s := Script("/d", tc.wait); !strings.Contains(s, tc.want) {
			t.Errorf("Script(%s) = %q, want it to contain %q", tc.wait, s, tc.want)
		}
	}
}

func TestWithdraw(t *testing.T) {
	dir := t.TempDir()
	if err := Watch(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{requestFile, doneFile} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Withdraw(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{requestFile: false, doneFile: false, watchingFile: true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", name, err == nil, want)
		}
	}
	if err := Withdraw(dir); err != nil {
		t.Errorf("a second Withdraw: %v", err)
	}
}
