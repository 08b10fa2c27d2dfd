package workspace_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/sidecar/workspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake Config.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newManager(t *testing.T, cfg workspace.Config) *workspace.Manager {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = filepath.Join(t.TempDir(), "workspace")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := workspace.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func open(t *testing.T, m *workspace.Manager, user, session string) string {
	t.Helper()
	dir, release, err := m.Open(context.Background(), user, session)
	if err != nil {
		t.Fatalf("Open(%q, %q): %v", user, session, err)
	}
	release()
	return dir
}

func isDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}

// attackIDs are client-chosen ids aimed at the path: traversal, separators,
// hidden names, case variants, Unicode look-alikes and normalisation
// variants, NUL, and ids that differ only past the readable prefix.
var attackIDs = []string{
	"", ".", "..", "...", "/", "//", "../..", "../../etc/passwd", "a/../../b", "/etc", "a/b", `a\b`, `..\..`,
	".hidden", "-rf", "--", "alice", "Alice", "ALICE", "alicE",
	"аlice",        // Cyrillic а
	"ａｌｉｃｅ",        // fullwidth
	"alice\u200b",  // zero-width space
	"é", "e\u0301", // NFC vs NFD
	"a\x00b", "a b", "a_b", "a-b", "a.b", "a?b", "a*b", "a:b", "\xff\xfe",
	strings.Repeat("x", 40) + "1", strings.Repeat("x", 40) + "2", strings.Repeat("X", 41),
	strings.Repeat("../", 2000), strings.Repeat("é", 5000), strings.Repeat("a", 100000),
}

func checkName(t *testing.T, id, name string) {
	t.Helper()
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`+"\x00") {
		t.Fatalf("Name(%q) = %q: not one safe path element", id, name)
	}
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "-") {
		t.Fatalf("Name(%q) = %q: hidden or looks like an option", id, name)
	}
	if len(name) > 67 {
		t.Fatalf("Name(%q) has %d bytes", id, len(name))
	}
	for _, r := range name {
		if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789.-_", r) {
			t.Fatalf("Name(%q) = %q has %q", id, name, r)
		}
	}
}

func TestNameAttackIDsStayDistinctAndSafe(t *testing.T) {
	seen := map[string]string{}
	for _, id := range attackIDs {
		name := workspace.Name(id)
		checkName(t, id, name)
		// The whole name is lower-case, so a case-folding file system
		// compares names exactly as they are.
		if prev, ok := seen[name]; ok {
			t.Fatalf("ids %q and %q collide as %q", prev, id, name)
		}
		seen[name] = id
		if workspace.Name(id) != name {
			t.Fatalf("Name(%q) is not stable", id)
		}
	}
	if got := workspace.Name("Alice@example.com"); !strings.HasPrefix(got, "alice_example.com-") {
		t.Errorf("readable prefix lost: %q", got)
	}
}

// TestAttackIDsOnDisk creates a directory for every pair of attack ids in
// session scope: all land below the root, one per pair.
func TestAttackIDsOnDisk(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "ws")
	m := newManager(t, workspace.Config{Root: root, Scope: workspace.ScopeSession})
	ids := attackIDs[:30]
	dirs := map[string]bool{}
	for _, u := range ids {
		for _, s := range ids {
			dir := open(t, m, u, s)
			rel, err := filepath.Rel(root, dir)
			if err != nil || rel == "." || strings.HasPrefix(rel, "..") || filepath.IsAbs(rel) {
				t.Fatalf("(%q, %q) -> %s: outside %s", u, s, dir, root)
			}
			if dirs[dir] {
				t.Fatalf("(%q, %q) -> %s: shared with another pair", u, s, dir)
			}
			dirs[dir] = true
			if !isDir(dir) {
				t.Fatalf("%s not created", dir)
			}
		}
	}
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.Count(strings.TrimPrefix(p, root), string(filepath.Separator)) == 3 {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ids)*len(ids) {
		t.Fatalf("%d session directories on disk, want %d", n, len(ids)*len(ids))
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Fatalf("something was created beside the root: %v", entries)
	}
}

func FuzzName(f *testing.F) {
	for _, id := range attackIDs[:36] {
		f.Add(id, strings.ToUpper(id))
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na, nb := workspace.Name(a), workspace.Name(b)
		checkName(t, a, na)
		if (a == b) != (na == nb) {
			t.Fatalf("Name(%q) = %q, Name(%q) = %q", a, na, b, nb)
		}
	})
}

func TestScopes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	for _, tc := range []struct {
		scope      workspace.Scope
		want       string
		sameForBob bool // bob's and alice's first session share a directory
		sameForS2  bool // alice's two sessions share a directory
	}{
		{workspace.ScopeAgent, root, true, true},
		{workspace.ScopeUser, filepath.Join(root, "users", workspace.Name("alice")), false, true},
		{workspace.ScopeSession, filepath.Join(root, "sessions", workspace.Name("alice"), workspace.Name("s1")), false, false},
	} {
		t.Run(string(tc.scope), func(t *testing.T) {
			m := newManager(t, workspace.Config{Root: root, Scope: tc.scope})
			dir := open(t, m, "alice", "s1")
			if dir != tc.want || m.Path("alice", "s1") != dir {
				t.Fatalf("dir = %s, want %s", dir, tc.want)
			}
			if got := open(t, m, "bob", "s1") == dir; got != tc.sameForBob {
				t.Errorf("bob shares alice's directory: %v", got)
			}
			if got := open(t, m, "alice", "s2") == dir; got != tc.sameForS2 {
				t.Errorf("alice's second session shares the first's directory: %v", got)
			}
			if err := os.WriteFile(filepath.Join(dir, "work.txt"), []byte("kept"), 0o600); err != nil {
				t.Fatal(err)
			}
			// A restarted sidecar (a new manager on the same volume) finds
			// the same directory with its files.
			m2 := newManager(t, workspace.Config{Root: root, Scope: tc.scope})
			if again := open(t, m2, "alice", "s1"); again != dir {
				t.Fatalf("after restart dir = %s, want %s", again, dir)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "work.txt")); err != nil || string(b) != "kept" {
				t.Fatalf("file lost on reopen: %q %v", b, err)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]workspace.Config{
		"relative root": {Root: "ws"},
		"empty root":    {},
		"bad scope":     {Root: t.TempDir(), Scope: "tenant"},
		"negative":      {Root: t.TempDir(), Retention: -time.Hour},
	} {
		if _, err := workspace.New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A link planted where a workspace directory belongs (goose's shell can do
// that) is refused: nothing is created or removed through it.
func TestLinksAreNotFollowed(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	outside := t.TempDir()
	m := newManager(t, workspace.Config{Root: root, Scope: workspace.ScopeSession})
	if err := os.MkdirAll(filepath.Join(root, "sessions"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "sessions", workspace.Name("mallory"))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Open(context.Background(), "mallory", "s"); err == nil {
		t.Fatal("Open followed a link")
	}
	if err := os.WriteFile(filepath.Join(outside, workspace.Name("s")), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(context.Background(), "mallory", "s"); err == nil {
		t.Fatal("Remove went through a link")
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Fatalf("outside directory changed: %v", entries)
	}
	// A link to a directory inside the root (another user's) is refused too.
	if err := os.MkdirAll(filepath.Join(root, "sessions", workspace.Name("victim")), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "sessions", workspace.Name("victim")),
		filepath.Join(root, "sessions", workspace.Name("eve"))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Open(context.Background(), "eve", "s"); err == nil {
		t.Fatal("Open followed a link inside the root")
	}
	// So is a session directory that is a link to its sibling, whose
	// turn has found it before.
	_, release, err := m.Open(context.Background(), "victim", "s")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := os.Symlink(workspace.Name("s"), filepath.Join(root, "sessions", workspace.Name("victim"), workspace.Name("last"))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Open(context.Background(), "victim", "last"); err == nil {
		t.Fatal("Open followed a link as the session's directory")
	}
}

func TestRemove(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	m := newManager(t, workspace.Config{Root: root, Scope: workspace.ScopeSession})
	ctx := context.Background()
	a1, a2, b1 := open(t, m, "alice", "s1"), open(t, m, "alice", "s2"), open(t, m, "bob", "s1")
	if err := os.WriteFile(filepath.Join(a1, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "alice", "s1"); err != nil {
		t.Fatal(err)
	}
	if isDir(a1) || !isDir(a2) || !isDir(b1) {
		t.Fatalf("after removing alice/s1: a1 %v a2 %v b1 %v", isDir(a1), isDir(a2), isDir(b1))
	}
	if err := m.Remove(ctx, "alice", "s1"); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	if err := m.Remove(ctx, "alice", "s2"); err != nil {
		t.Fatal(err)
	}
	if isDir(filepath.Dir(a1)) {
		t.Error("alice's empty parent directory stayed")
	}

	// In user and agent scope a session's deletion leaves the shared directory.
	for _, scope := range []workspace.Scope{workspace.ScopeUser, workspace.ScopeAgent} {
		m := newManager(t, workspace.Config{Root: root, Scope: scope})
		dir := open(t, m, "carol", "s1")
		if err := m.Remove(ctx, "carol", "s1"); err != nil {
			t.Fatal(err)
		}
		if !isDir(dir) {
			t.Errorf("%s scope: shared directory removed", scope)
		}
	}
}

func TestSweepRemovesOnlyUnusedDirectories(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	clk := newClock()
	ctx := context.Background()
	m := newManager(t, workspace.Config{Root: root, Scope: workspace.ScopeSession, Retention: 24 * time.Hour, Now: clk.Now})
	old := open(t, m, "alice", "old")
	busy, release, err := m.Open(ctx, "alice", "busy")
	if err != nil {
		t.Fatal(err)
	}
	// A directory left by an earlier user scope ages out too.
	mu := newManager(t, workspace.Config{Root: root, Scope: workspace.ScopeUser, Now: clk.Now})
	userDir := open(t, mu, "dave", "x")

	// Someone's own files that happen to sit in the trees are not ours.
	foreign := []string{filepath.Join(root, "users", "README"), filepath.Join(root, "sessions", "notes"),
		filepath.Join(filepath.Dir(old), "scratch")}
	for _, f := range foreign {
		if err := os.MkdirAll(f, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, clk.Now(), clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(23 * time.Hour)
	fresh := open(t, m, "bob", "fresh")
	if n, err := m.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before retention: %d, %v", n, err)
	}

	clk.advance(2 * time.Hour) // old, busy and userDir are 25h old; fresh 2h
	n, err := m.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || isDir(old) || isDir(userDir) || !isDir(busy) || !isDir(fresh) {
		t.Fatalf("removed %d: old %v userDir %v busy %v fresh %v", n, isDir(old), isDir(userDir), isDir(busy), isDir(fresh))
	}

	// Releasing marks the directory used now: it lives another retention.
	release()
	clk.advance(23 * time.Hour)
	if _, err := m.Sweep(ctx); err != nil || !isDir(busy) {
		t.Fatalf("busy swept right after release: %v", err)
	}
	clk.advance(2 * time.Hour)
	if _, err := m.Sweep(ctx); err != nil || isDir(busy) || isDir(fresh) {
		t.Fatalf("busy %v fresh %v after their retention: %v", isDir(busy), isDir(fresh), err)
	}
	for _, f := range foreign {
		if !isDir(f) {
			t.Errorf("swept %s, which the sidecar did not create", f)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(root, "sessions")); len(left) != 2 { // notes, alice's (holding scratch)
		t.Fatalf("sessions tree after sweeps: %v", left)
	}
	if isDir(filepath.Join(root, "sessions", workspace.Name("bob"))) {
		t.Fatal("bob's emptied directory stayed")
	}

	// A swept session that comes back gets its directory again.
	if dir := open(t, m, "alice", "old"); dir != old || !isDir(old) {
		t.Fatalf("reopened %s", dir)
	}
}

// TestUseIsMarkedAtMostAMinuteLate: a turn marks its directory used when
// it starts and when it ends, except within a minute of the last mark, so
// back-to-back turns do not touch it and a mark is never more than a minute
// older than the directory's last use.
func TestUseIsMarkedAtMostAMinuteLate(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	m := newManager(t, workspace.Config{Scope: workspace.ScopeSession, Retention: time.Hour, Now: clk.Now})
	dir := m.Path("alice", "s")
	turn := func(long time.Duration, want time.Duration) {
		t.Helper()
		_, release, err := m.Open(context.Background(), "alice", "s")
		if err != nil {
			t.Fatal(err)
		}
		clk.advance(long)
		release()
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.ModTime().Sub(t0); got != want {
			t.Fatalf("at %s the mark is %s, want %s", clk.Now().Sub(t0), got, want)
		}
	}
	turn(0, 0) // new: marked
	clk.advance(30 * time.Second)
	turn(20*time.Second, 0) // starts 30 s and ends 50 s after the mark
	clk.advance(15 * time.Second)
	turn(0, 65*time.Second) // starts 65 s after it: marked
	turn(3*time.Minute, 245*time.Second)
	// Gone meanwhile (another replica's sweep): made again, and marked.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	clk.advance(10 * time.Second)
	turn(0, 255*time.Second)
}

func TestSweepWithoutRetentionKeepsEverything(t *testing.T) {
	clk := newClock()
	m := newManager(t, workspace.Config{Scope: workspace.ScopeSession, Now: clk.Now})
	dir := open(t, m, "alice", "s")
	clk.advance(10 * 365 * 24 * time.Hour)
	if n, err := m.Sweep(context.Background()); n != 0 || err != nil || !isDir(dir) {
		t.Fatalf("swept %d, %v", n, err)
	}
}

// TestRunSweepsPeriodically runs the loop in a synctest bubble: its ticker
// and the manager's clock are the bubble's fake time.
func TestRunSweepsPeriodically(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	synctest.Test(t, func(t *testing.T) {
		m, err := workspace.New(workspace.Config{Root: root, Scope: workspace.ScopeUser, Retention: 2 * time.Hour, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = m.Close() }()
		dir := open(t, m, "alice", "s")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		interval := workspace.SweepInterval(2 * time.Hour)
		go func() { defer close(done); m.Run(ctx, interval) }()

		time.Sleep(2*time.Hour - interval/2)
		synctest.Wait()
		if !isDir(dir) {
			t.Fatal("swept before its retention")
		}
		time.Sleep(interval/2 + interval) // retention + one interval
		synctest.Wait()
		if isDir(dir) {
			t.Fatal("not swept within one interval after its retention")
		}
		cancel()
		<-done
	})
	if got := workspace.SweepInterval(2 * time.Hour); got != 12*time.Minute {
		t.Errorf("SweepInterval(2h) = %s", got)
	}
	if got := workspace.SweepInterval(30 * 24 * time.Hour); got != time.Hour {
		t.Errorf("SweepInterval(30d) = %s", got)
	}
}

// TestSeedFromConfigMapVolume copies a mounted ConfigMap's files (kubelet
// layout: keys are links into a timestamped directory via ..data) into each
// new directory, once.
func TestSeedFromConfigMapVolume(t *testing.T) {
	seed := t.TempDir()
	ts := filepath.Join(seed, "..2026_01_01_00_00_00.000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"README.md": "# start here\n", ".goosehints": "be brief\n"} {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(seed, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(seed, "..data")); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, workspace.Config{Scope: workspace.ScopeSession, SeedDir: seed})
	dir := open(t, m, "alice", "s")
	var names []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		names = append(names, e.Name())
		if !e.Type().IsRegular() {
			t.Errorf("%s is not a regular file", e.Name())
		}
	}
	sort.Strings(names)
	if strings.Join(names, ",") != ".goosehints,README.md" {
		t.Fatalf("seeded %v", names)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(b) != "# start here\n" {
		t.Fatalf("README.md = %q", b)
	}
	// An existing directory is not seeded again: what the session deleted stays deleted.
	if err := os.Remove(filepath.Join(dir, "README.md")); err != nil {
		t.Fatal(err)
	}
	open(t, m, "alice", "s")
	if _, err := os.Stat(filepath.Join(dir, "README.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reseeded an existing directory: %v", err)
	}
}

// Removed directories pass through TrashDir, which is emptied after the
// lock is released; what a process left there goes with the next removal,
// and a link in its place is refused.
func TestTrash(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ws")
	m := newManager(t, workspace.Config{Root: root, Scope: workspace.ScopeSession})
	ctx := context.Background()
	leftover := filepath.Join(root, workspace.TrashDir, "leftover", "deep")
	if err := os.MkdirAll(leftover, 0o750); err != nil {
		t.Fatal(err)
	}
	dir := open(t, m, "alice", "s")
	if err := m.Remove(ctx, "alice", "s"); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(filepath.Join(root, workspace.TrashDir)); err != nil || len(entries) != 0 || isDir(dir) {
		t.Fatalf("trash %v (%v), dir kept %v", entries, err, isDir(dir))
	}

	victim := open(t, m, "victim", "s")
	if err := os.Remove(filepath.Join(root, workspace.TrashDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(victim), filepath.Join(root, workspace.TrashDir)); err != nil {
		t.Fatal(err)
	}
	open(t, m, "bob", "s")
	if err := m.Remove(ctx, "bob", "s"); err == nil {
		t.Fatal("removed through a linked trash")
	}
	if !isDir(victim) {
		t.Fatal("the victim's directory was emptied through the link")
	}
}
