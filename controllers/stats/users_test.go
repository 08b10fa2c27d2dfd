package stats

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/adk2goose/goose-operator/controllers/stats/sample"
)

// withUsers makes the fake report users, of which it names those in hashes.
func (f *fakeSidecar) withUsers(users int64, hashes ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.body["users"] = users
	f.body["userHashes"] = hashes
}

// hashOf is a stand-in user hash: 8 bytes in hex, like the sidecar's.
func hashOf(i int) string { return fmt.Sprintf("%016x", 0xa11ce000+i) }

// TestCollectCountsUsersOnce: a user with sessions on two replicas counts
// once; a pod that counted more users than it named adds the rest.
func TestCollectCountsUsersOnce(t *testing.T) {
	noLeaks(t)
	p0 := newFakeSidecar(t, 3, 1, 100, 20)
	p1 := newFakeSidecar(t, 4, 2, 1000, 200)
	p0.withUsers(2, hashOf(1), hashOf(2))
	p1.withUsers(2, hashOf(2), hashOf(3))
	c := New(Options{})
	pods := []Pod{p0.pod("a-0"), p1.pod("a-1")}
	if res := c.Collect(context.Background(), agent, "tok", pods); res.Totals.Users != 3 || len(res.Stale) != 0 {
		t.Fatalf("users %d (stale %v), want 3: one user on both pods counts once", res.Totals.Users, res.Stale)
	}
	// a-1 has more users than it names (past sample.MaxUserHashes, or a sidecar
	// that sends no hashes): the unnamed ones are added.
	p1.withUsers(5, hashOf(2), hashOf(3))
	if res := c.Collect(context.Background(), agent, "tok", pods); res.Totals.Users != 6 {
		t.Fatalf("users %d, want 3 named + 3 unnamed", res.Totals.Users)
	}
	p1.withUsers(4)
	if res := c.Collect(context.Background(), agent, "tok", pods); res.Totals.Users != 6 {
		t.Fatalf("users %d, want a-0's 2 named + a-1's 4 unnamed", res.Totals.Users)
	}
}

// TestCollectRefusesBadUserHashes: a hash that is not 8 bytes in hex, or
// more hashes than a sidecar sends, make the pod's answer invalid.
func TestCollectRefusesBadUserHashes(t *testing.T) {
	noLeaks(t)
	many := make([]string, sample.MaxUserHashes+1)
	for i := range many {
		many[i] = hashOf(i)
	}
	for name, hashes := range map[string][]string{
		"not hex":   {"alice-in-clear!!"},
		"too short": {"a11ce0"},
		"too many":  many,
	} {
		t.Run(name, func(t *testing.T) {
			p := newFakeSidecar(t, 1, 1, 1, 1)
			p.withUsers(int64(len(hashes)), hashes...)
			res := New(Options{}).Collect(context.Background(), agent, "tok", []Pod{p.pod("a-0")})
			if res.Known || len(res.Stale) != 1 || !strings.Contains(res.Stale[0], "user hash") {
				t.Fatalf("known %v, stale %v: want the answer refused naming the user hashes", res.Known, res.Stale)
			}
		})
	}
}
