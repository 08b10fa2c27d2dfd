package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/server"
)

// TestStatsUserHashes: /stats names each distinct user by a keyed hash, the
// same on every pod with the agent's token and different under another
// key, never by name, and at most server.MaxUserHashes of them while
// users still counts all.
func TestStatsUserHashes(t *testing.T) {
	sc := startSidecar(t, flavours[0].start(t, nil), t.TempDir())
	create := func(user, id string) {
		t.Helper()
		if _, err := sc.srv.SessionService().Create(t.Context(), &session.CreateRequest{AppName: appName, UserID: user, SessionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	create("alice", "a1")
	create("alice", "a2")
	create("bob", "b1")
	st := sc.stats()
	want := []string{server.UserHash(testToken, "alice"), server.UserHash(testToken, "bob")}
	if st.Users != 2 || strings.Join(st.UserHashes, ",") != strings.Join(want, ",") {
		t.Fatalf("users %d hashes %v, want 2 and %v", st.Users, st.UserHashes, want)
	}
	if len(want[0]) != 16 || want[0] == server.UserHash("another agent's token", "alice") || want[0] == want[1] {
		t.Fatalf("hashes %v: want 8 bytes in hex, distinct per user and per key", want)
	}
	code, body := sc.do(http.MethodGet, "/stats", nil)
	if code != http.StatusOK || strings.Contains(string(body), "alice") {
		t.Fatalf("/stats %d names a user: %s", code, body)
	}

	for i := range server.MaxUserHashes {
		create(fmt.Sprintf("user-%04d", i), "s")
	}
	st = sc.stats()
	if st.Users != server.MaxUserHashes+2 || len(st.UserHashes) != server.MaxUserHashes {
		t.Fatalf("users %d with %d hashes, want %d with %d", st.Users, len(st.UserHashes), server.MaxUserHashes+2, server.MaxUserHashes)
	}
	code, body = sc.do(http.MethodGet, "/stats", nil)
	if code != http.StatusOK || len(body) > 20<<10 {
		t.Fatalf("/stats with %d users: %d, %d bytes", st.Users, code, len(body))
	}
}
