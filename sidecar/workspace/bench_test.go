package workspace_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/workspace"
)

// BenchmarkOpen measures what a turn pays for its directory: an existing
// one (every turn after the first; "idle": each turn more than a minute
// after the last, so it is marked used at its start and end) and a new one
// (a session's first turn).
// Run: go test -run '^$' -bench Open ./sidecar/workspace/
func BenchmarkOpen(b *testing.B) {
	for _, scope := range []workspace.Scope{workspace.ScopeAgent, workspace.ScopeSession} {
		// Each reading of the clock is two minutes after the last.
		now := time.Now()
		idle := false
		clock := func() time.Time {
			if idle {
				now = now.Add(2 * time.Minute)
			}
			return now
		}
		m, err := workspace.New(workspace.Config{Root: filepath.Join(b.TempDir(), "ws"), Scope: scope, Now: clock, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range []string{"existing", "existing-idle"} {
			b.Run(string(scope)+"/"+name, func(b *testing.B) {
				idle = name == "existing-idle"
				defer func() { idle = false }()
				for b.Loop() {
					_, release, err := m.Open(context.Background(), "alice", "s1")
					if err != nil {
						b.Fatal(err)
					}
					release()
				}
			})
		}
		b.Run(string(scope)+"/new", func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				_, release, err := m.Open(context.Background(), "alice", "s"+strconv.Itoa(i))
				if err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
		_ = m.Close()
	}
}
