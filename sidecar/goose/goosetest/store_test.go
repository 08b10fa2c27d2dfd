package goosetest

import "testing"

// A fake started from another's snapshot knows its sessions and never reuses
// their ids, as goose restarted on the same sessions.db.
func TestServeSnapshotRestore(t *testing.T) {
	a := NewServe(t)
	id := a.SeedSession("/workspace", 4)
	st := a.Snapshot()
	a.Close()

	b := NewServe(t, WithServeRestore(st))
	got, ok := b.Session(id)
	if !ok || got.MessageCount != 4 || got.WorkingDir != "/workspace" || got.Title != "seeded "+id {
		t.Fatalf("restored session %q: %+v, %v", id, got, ok)
	}
	if fresh := b.SeedSession("/workspace", 0); fresh == id {
		t.Fatalf("a new session reused the restored id %s", id)
	}
	if n := len(b.Snapshot().Sessions); n != 2 {
		t.Fatalf("snapshot after restore holds %d sessions, want 2", n)
	}
}
