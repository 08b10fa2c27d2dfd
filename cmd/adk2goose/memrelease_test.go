package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/syncbuf"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// TestReleasesMemoryAfterTurns: the sidecar looks at its server's turns,
// and gives the heap back once a turn has run and a whole period passed
// without one (periods shortened here; internal/memrelease tests when).
func TestReleasesMemoryAfterTurns(t *testing.T) {
	every, minGrowth := releaseEvery, releaseMinGrowth
	releaseEvery, releaseMinGrowth = 5*time.Millisecond, 1
	t.Cleanup(func() { releaseEvery, releaseMinGrowth = every, minGrowth })

	dir := t.TempDir()
	f := goosetest.NewGoosed(goosetest.GoosedOptions{})
	t.Cleanup(f.Close)
	env := envMap(map[string]string{
		"GOOSE_URL": f.URL, "GOOSE_FLAVOR": "goosed", "GOOSE_SERVER__SECRET_KEY": f.SecretKey,
		"ADK2GOOSE_DATA_DIR": filepath.Join(dir, "data"), "GOOSE_WORKING_DIR": filepath.Join(dir, "workspace"),
	})
	logs := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	base, done := startRun(ctx, t, []string{"-listen", "127.0.0.1:0", "-insecure-no-auth"}, env, logs)
	const released = "returned the heap's free memory"
	// Creating a session with an id takes the session's turn.
	resp, err := http.Post(base+"/apps/goose/users/u/sessions/s1", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create session: %d %s", resp.StatusCode, body)
	}
	waitUntil(t, "the memory to be released after the turn", func() bool { return strings.Contains(logs.String(), released) })
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
