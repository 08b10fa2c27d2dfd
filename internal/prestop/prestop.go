// Package prestop is how a pod's goose waits for its adk2goose sidecar to
// drain before it stops.
//
// When a pod is deleted, the kubelet stops the main container (goose) first
// and the native sidecar (adk2goose) after it. Stopped first, goose would
// end every turn still streaming. So goose's preStop hook (Script) asks the
// sidecar to drain, by creating a file on a volume both containers mount,
// and waits until the sidecar has: stopped taking turns and let the running
// ones end. Only then does the kubelet send goose its SIGTERM.
//
// A file handshake needs nothing in the goose image but a POSIX shell and
// sleep, and no endpoint anyone else could call to take the pod out of
// service. The sidecar marks the directory when it starts watching it, so
// a sidecar that does not (an older image) costs goose's stop no wait.
package prestop

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The handshake's files, in the directory both containers mount.
const (
	// watchingFile: the sidecar watches for requests (written when it starts).
	watchingFile = "watching"
	// requestFile: the hook asks for a drain.
	requestFile = "drain"
	// doneFile: the sidecar has drained.
	doneFile = "drained"
)

// Script is goose's preStop command for /bin/sh -c: it asks for a drain in
// dir and returns when the sidecar says it is done, after at most wait
// (rounded up to whole seconds: sleep takes fractions only as an
// extension), or at once when no sidecar watches dir. It always exits 0: a
// failed hook only delays the stop.
func Script(dir string, wait time.Duration) string {
	secs := int((wait + time.Second - 1) / time.Second)
	return fmt.Sprintf(`d=%s
[ -e "$d/%s" ] || exit 0
: > "$d/%s" || exit 0
n=0
while [ ! -e "$d/%s" ] && [ "$n" -lt %d ]; do sleep 1; n=$((n+1)); done
exit 0`, shellQuote(dir), watchingFile, requestFile, doneFile, secs)
}

// shellQuote quotes s as one word for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Watch marks dir as watched, so the hook asks and waits from now on.
func Watch(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, watchingFile), nil, 0o644); err != nil {
		return fmt.Errorf("failed to mark the drain directory watched: %w", err)
	}
	return nil
}

// AwaitRequest returns once the hook has asked for a drain in dir, looking
// every interval, or ctx's error when ctx ends first. A request made
// before the sidecar (re)started counts: the pod is stopping.
func AwaitRequest(ctx context.Context, dir string, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for !exists(dir, requestFile) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Done tells the hook the drain is over.
func Done(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, doneFile), nil, 0o644); err != nil {
		return fmt.Errorf("failed to tell goose's preStop hook the drain is done: %w", err)
	}
	return nil
}

// Withdraw removes a request and its answer from dir, so that a sidecar
// starting next serves rather than drains.
func Withdraw(dir string) error {
	for _, name := range []string{requestFile, doneFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("failed to withdraw the drain request: %w", err)
		}
	}
	return nil
}

// Drained reports whether the sidecar has told the hook it is done.
func Drained(dir string) bool { return exists(dir, doneFile) }

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}
