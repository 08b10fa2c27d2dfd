package server_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/server"
)

// TestRunBodyDecodedOnce: every /run and /run_sse body is decoded once, by
// the sidecar, whatever reads it on the way (the peer router, the run
// guards, the budget); adkrest then decodes the canonical encoding it is
// handed, once. Not parallel: server.RunDecodes counts for the package.
func TestRunBodyDecodedOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "budget.json")
	writeBudget(t, file, "Day", 100)
	sc := startSidecar(t, flavours[0].start(t, spendScript(nil, nil)), t.TempDir(), budgeted(file, &fakeClock{t: monday10}, "goose-0"), func(c *server.Config) {
		// Replicas: the peer router looks up every run's session.
		c.Peers = func(context.Context) ([]string, error) { return nil, nil }
	})
	sc.createSession("u", "s")

	before := server.RunDecodes()
	sc.spend("s", 60) // /run_sse
	snake := fmt.Sprintf(`{"app_name":%q,"user_id":"u","session_id":"s","new_message":{"parts":[{"text":"spend 60"}]},"invocationId":"i"}`, appName)
	if code, body := sc.do(http.MethodPost, "/run", snake); code != http.StatusOK {
		t.Fatalf("/run: %d %s", code, body)
	}
	// 120 of 100 tokens: the budget refuses the next ones.
	sc.refused("/run", "s", "50400")
	sc.refused("/run_sse", "s", "50400")
	if code, _ := sc.do(http.MethodPost, "/run", `{"appName":`); code != http.StatusBadRequest {
		t.Fatalf("bad body: %d", code)
	}
	if got := server.RunDecodes() - before; got != 5 {
		t.Fatalf("5 runs decoded %d times, want 5", got)
	}
}
