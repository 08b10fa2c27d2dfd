package workspace

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestBeneathFindsOnlyRealDirectories: beneath answers for a directory
// reached through real directories only, with its modification time, and
// leaves everything else to the walk through os.Root.
func TestBeneathFindsOnlyRealDirectories(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"sessions/u/s", "real"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "sessions/u/file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{
		"sessions/v":        "u", // inside the root
		"sessions/w":        filepath.Join(root, "sessions/u"),
		"sessions/u/last":   "s",
		"sessions/out":      outside,
		"sessions/u/relout": "../../..",
	} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	b := openBeneath(root)
	defer b.close()
	mod, ok := b.modTime("sessions/u/s")
	fi, err := os.Lstat(filepath.Join(root, "sessions/u/s"))
	if err != nil {
		t.Fatal(err)
	}
	if !ok || !mod.Equal(fi.ModTime()) {
		t.Errorf("sessions/u/s: %v, %v; want its modification time %v", mod, ok, fi.ModTime())
	}
	for _, rel := range []string{
		"sessions/u/missing", "sessions/u/file", "sessions/v/s", "sessions/w/s", "sessions/u/last",
		"sessions/out", "sessions/u/relout", "../" + filepath.Base(outside), "/" + root,
	} {
		if mod, ok := b.modTime(rel); ok {
			t.Errorf("%s: answered %v, want it left to the walk", rel, mod)
		}
	}
}

// TestOpenLooksBeneathFirst: a turn finds its existing directory through
// beneath; its first turn, which creates the directory, cannot.
func TestOpenLooksBeneathFirst(t *testing.T) {
	m, err := New(Config{Root: filepath.Join(t.TempDir(), "ws"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for turn := range 3 {
		_, release, err := m.Open(context.Background(), "alice", "s1")
		if err != nil {
			t.Fatal(err)
		}
		release()
		if m.beneath.hits != turn {
			t.Errorf("after turn %d beneath answered %d times, want %d", turn+1, m.beneath.hits, turn)
		}
	}
}
