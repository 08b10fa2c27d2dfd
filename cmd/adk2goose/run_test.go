package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adk2goose/goose-operator/cmd/adk2goose/internal/options"
	"github.com/adk2goose/goose-operator/internal/prestop"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/syncbuf"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/peering"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func envMap(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// startRun runs the sidecar with args and env until ctx ends. It returns
// the sidecar's base URL once it listens, and where run's result arrives.
func startRun(ctx context.Context, t *testing.T, args []string, env func(string) string, logw io.Writer) (base string, done <-chan error) {
	t.Helper()
	errc := make(chan error, 1)
	addrc := make(chan net.Addr, 1)
	go func() { errc <- runWith(ctx, args, env, logw, func(a net.Addr) { addrc <- a }) }()
	select {
	case a := <-addrc:
		return "http://" + a.String(), errc
	case err := <-errc:
		t.Fatalf("run: %v", err)
		return "", nil
	}
}

func TestRunServesAndDrains(t *testing.T) {
	for _, flavor := range []string{"serve", "goosed"} {
		t.Run(flavor, func(t *testing.T) {
			dir := t.TempDir()
			tokenFile := filepath.Join(dir, "token")
			if err := os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			secretFile := filepath.Join(dir, "goose-secret")
			drainDir := filepath.Join(dir, "drain")
			if err := os.Mkdir(drainDir, 0o755); err != nil {
				t.Fatal(err)
			}
			var url, secret string
			var serve *goosetest.Serve
			if flavor == "serve" {
				serve = goosetest.NewServe(t)
				url, secret = serve.URL, serve.Secret
			} else {
				f := goosetest.NewGoosed(goosetest.GoosedOptions{})
				t.Cleanup(f.Close)
				url, secret = f.URL, f.SecretKey
			}
			if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
				t.Fatal(err)
			}
			env := envMap(map[string]string{
				"GOOSE_URL": url, "GOOSE_FLAVOR": flavor, "GOOSE_SECRET_FILE": secretFile,
				"ADK2GOOSE_DATA_DIR": filepath.Join(dir, "data"), "ADK2GOOSE_DRAIN_TIMEOUT": "2s",
				"GOOSE_WORKING_DIR": filepath.Join(dir, "workspace"), "ADK2GOOSE_WORKSPACE_RETENTION": "24h",
				"ADK2GOOSE_GOOSE_UNUSED_IDLE_TIMEOUT": "50ms", "ADK2GOOSE_DRAIN_DIR": drainDir,
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			logs := &syncbuf.Buffer{}
			base, done := startRun(ctx, t, []string{"-listen", "127.0.0.1:0", "-auth-token-file", tokenFile, "-app-name", "my_goose"}, env, logs)
			do := func(method, path string, auth bool) (int, string) {
				req, _ := http.NewRequest(method, base+path, nil)
				if auth {
					req.Header.Set("Authorization", "Bearer tok-123")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			get := func(path string, auth bool) (int, string) { return do(http.MethodGet, path, auth) }
			if code, _ := get("/readyz", false); code != 200 {
				t.Fatalf("readyz %d", code)
			}
			if fi, err := os.Stat(filepath.Join(dir, "workspace")); err != nil || !fi.IsDir() {
				t.Fatalf("workspace root not created: %v", err)
			}
			if code, body := get("/list-apps", true); code != 200 || !strings.Contains(body, "my_goose") {
				t.Fatalf("list-apps %d %s", code, body)
			}
			if code, _ := get("/list-apps", false); code != 401 {
				t.Fatalf("unauthenticated list-apps %d", code)
			}
			if _, body := get("/.well-known/agent-card.json", false); !strings.Contains(body, base+"/a2a/v1/invoke") {
				t.Fatalf("card %s", body)
			}
			if serve != nil {
				// A new ADK session starts its goose session on a connection
				// of its own, which -goose-unused-idle-timeout closes unused.
				if code, body := do(http.MethodPost, "/apps/my_goose/users/u/sessions", true); code != 200 {
					t.Fatalf("create session %d %s", code, body)
				}
				poll.Until(t, "goose to start the session", func() bool { return serve.Calls("session/new") == 1 })
				poll.Until(t, "its unused connection to close", func() bool { return serve.OpenConnections() == 0 })
			}
			// goose's preStop hook, as the kubelet runs it, returns once the
			// sidecar has drained (nothing runs here), which then serves as
			// out of service until its own SIGTERM.
			if out, err := exec.CommandContext(t.Context(), "/bin/sh", "-c", prestop.Script(drainDir, time.Minute)).CombinedOutput(); err != nil {
				t.Fatalf("preStop hook: %v %s", err, out)
			}
			if !prestop.Drained(drainDir) {
				t.Fatal("the preStop hook returned before the sidecar drained")
			}
			if code, body := get("/readyz", false); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
				t.Fatalf("readyz after the drain: %d %s", code, body)
			}
			http.DefaultClient.CloseIdleConnections()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("run did not return after cancel")
			}
			if l := logs.String(); strings.Contains(l, "tok-123") || strings.Contains(l, secret) || !strings.Contains(l, `"msg":"stopped"`) {
				t.Fatalf("logs leak a secret or lack the stop line:\n%s", l)
			}
		})
	}
}

// TestDrainNotFollowedByAStop: a drain request the pod's stop does not
// follow (goose's shell tools can write the directory too) is withdrawn
// after -drain-stop-wait, and the sidecar exits with an error, for the
// kubelet to restart it in service.
func TestDrainNotFollowedByAStop(t *testing.T) {
	dir := t.TempDir()
	drainDir := filepath.Join(dir, "drain")
	if err := os.Mkdir(drainDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := goosetest.NewGoosed(goosetest.GoosedOptions{})
	t.Cleanup(f.Close)
	env := envMap(map[string]string{
		"GOOSE_URL": f.URL, "GOOSE_FLAVOR": "goosed", "GOOSE_SERVER__SECRET_KEY": f.SecretKey,
		"ADK2GOOSE_DATA_DIR": filepath.Join(dir, "data"), "GOOSE_WORKING_DIR": filepath.Join(dir, "workspace"),
		"ADK2GOOSE_DRAIN_DIR": drainDir, "ADK2GOOSE_DRAIN_STOP_WAIT": "5s",
	})
	_, done := startRun(t.Context(), t, []string{"-listen", "127.0.0.1:0", "-insecure-no-auth"}, env, io.Discard)
	if out, err := exec.CommandContext(t.Context(), "/bin/sh", "-c", prestop.Script(drainDir, time.Minute)).CombinedOutput(); err != nil {
		t.Fatalf("preStop hook: %v %s", err, out)
	}
	// The hook looks once a second, well within the stop wait.
	if !prestop.Drained(drainDir) {
		t.Fatal("the preStop hook returned before the sidecar drained")
	}
	if err := <-done; !errors.Is(err, errDrainNotFollowed) {
		t.Fatalf("run returned %v, want errDrainNotFollowed", err)
	}
	if prestop.Drained(drainDir) {
		t.Error("the drain was not withdrawn: the restarted sidecar would drain again")
	}
}

// This sidecar's URL is what its peers list it by, and it does not list
// itself (localhost resolves through the hosts file only).
func TestAgentPeers(t *testing.T) {
	o := &options.Options{PeersHost: "localhost", PodIP: "127.0.0.1"}
	peers, self := agentPeers(o, 8080)
	mine, err := peers(t.Context())
	if err != nil || self != "http://127.0.0.1:8080" || slices.Contains(mine, self) {
		t.Fatalf("peers %v (%v), self %q: want self 127.0.0.1:8080, not among its peers", mine, err, self)
	}
	othersView, err := peering.DNSPeers("localhost", 8080, "")(t.Context())
	if err != nil || !slices.Contains(othersView, self) {
		t.Fatalf("another pod lists %v (%v), not this one's %q", othersView, err, self)
	}
	o.PodIP = ""
	if _, self := agentPeers(o, 8080); self != "" {
		t.Fatalf("URL %q without a pod IP", self)
	}
	o.PeersHost = ""
	if peers, _ := agentPeers(o, 8080); peers != nil {
		t.Fatal("peers without a peers host")
	}
}

func TestRunRefusesAMissingTokenFile(t *testing.T) {
	if err := run(context.Background(), []string{"-insecure-no-auth", "-auth-token-file", "/nonexistent"}, envMap(nil)); err == nil {
		t.Error("missing token file accepted")
	}
}
