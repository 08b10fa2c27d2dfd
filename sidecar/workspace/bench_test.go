package workspace_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/workspace"
)

// BenchmarkOpen measures what a turn pays for its directory: an existing
// one (every turn after the first) and a new one (a session's first turn).
// Run: go test -run '^$' -bench Open ./sidecar/workspace/
func BenchmarkOpen(b *testing.B) {
	for _, scope := range []workspace.Scope{workspace.ScopeAgent, workspace.ScopeSession} {
		m, err := workspace.New(workspace.Config{Root: filepath.Join(b.TempDir(), "ws"), Scope: scope, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(scope)+"/existing", func(b *testing.B) {
			for b.Loop() {
				_, release, err := m.Open(context.Background(), "alice", "s1")
				if err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
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
