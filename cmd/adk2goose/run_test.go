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

	"github.com/dustin/go-humanize"
	"go.uber.org/goleak"

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

func TestParse(t *testing.T) {
	env := envMap(map[string]string{"ADK2GOOSE_ACTIVE_WINDOW": "1m", "ADK2GOOSE_APP_NAME": "from_env", "ADK2GOOSE_INSECURE_NO_AUTH": "true"})
	o, err := parse([]string{"-app-name", "from_flag"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.appName != "from_flag" || o.activeWindow != time.Minute || !o.insecureNoAuth || o.gooseFlavor != "serve" ||
		o.confirmationTimeout != 10*time.Minute || o.gooseUnusedIdleTimeout != 2*time.Minute || o.debugTraces != 10000 || o.peersHost != "" || o.podIP != "" {
		t.Fatalf("%+v", o)
	}
	o, err = parse(nil, envMap(map[string]string{
		"ADK2GOOSE_INSECURE_NO_AUTH": "1", "ADK2GOOSE_CONFIRMATION_TIMEOUT": "90s", "ADK2GOOSE_DEBUG_TRACES": "500",
	}), io.Discard)
	if err != nil || o.confirmationTimeout != 90*time.Second || o.debugTraces != 500 ||
		o.workspaceScope != "session" || o.workspaceRetention != 0 || o.workspaceSeedDir != "" {
		t.Fatalf("%v %+v", err, o)
	}
	o, err = parse([]string{"-insecure-no-auth"}, envMap(map[string]string{
		"ADK2GOOSE_PEERS_HOST": "a-headless.ns.svc", "POD_IP": "10.0.0.7",
	}), io.Discard)
	if err != nil || o.peersHost != "a-headless.ns.svc" || o.podIP != "10.0.0.7" {
		t.Fatalf("%v %+v", err, o)
	}
	o, err = parse([]string{"-insecure-no-auth", "-peers-host", "b-headless.ns.svc", "-pod-ip", "10.0.0.8"}, envMap(map[string]string{
		"ADK2GOOSE_PEERS_HOST": "a-headless.ns.svc", "POD_IP": "10.0.0.7",
	}), io.Discard)
	if err != nil || o.peersHost != "b-headless.ns.svc" || o.podIP != "10.0.0.8" {
		t.Fatalf("%v %+v", err, o)
	}
	// This sidecar's URL is what its peers list it by, and it does not list
	// itself (localhost resolves through the hosts file only).
	o.peersHost, o.podIP = "localhost", "127.0.0.1"
	peers, self := o.peers(8080)
	mine, err := peers(t.Context())
	if err != nil || self != "http://127.0.0.1:8080" || slices.Contains(mine, self) {
		t.Fatalf("peers %v (%v), self %q: want self 127.0.0.1:8080, not among its peers", mine, err, self)
	}
	othersView, err := peering.DNSPeers("localhost", 8080, "")(t.Context())
	if err != nil || !slices.Contains(othersView, self) {
		t.Fatalf("another pod lists %v (%v), not this one's %q", othersView, err, self)
	}
	o.podIP = ""
	if _, self := o.peers(8080); self != "" {
		t.Fatalf("URL %q without a pod IP", self)
	}
	o.peersHost = ""
	if peers, _ := o.peers(8080); peers != nil {
		t.Fatal("peers without a peers host")
	}
	// Body limits: defaults, env, then flags over env; sizes in any unit.
	o, err = parse([]string{"-insecure-no-auth"}, envMap(nil), io.Discard)
	if err != nil || o.maxMessageBody != 5<<20 || o.maxOtherBody != 1<<20 || o.bodyReadTimeout != 30*time.Second || o.turnWait != time.Minute {
		t.Fatalf("default limits: %v %+v", err, o)
	}
	o, err = parse([]string{"-insecure-no-auth", "-max-message-body", "2MiB"}, envMap(map[string]string{
		"ADK2GOOSE_MAX_MESSAGE_BODY": "9MiB", "ADK2GOOSE_MAX_OTHER_BODY": "64KiB", "ADK2GOOSE_BODY_READ_TIMEOUT": "5s",
	}), io.Discard)
	if err != nil || o.maxMessageBody != 2<<20 || o.maxOtherBody != 64<<10 || o.bodyReadTimeout != 5*time.Second {
		t.Fatalf("limits from env and flags: %v %+v", err, o)
	}
	o, err = parse([]string{"-insecure-no-auth", "-budget-file", "/etc/adk2goose/budget/budget.json"}, envMap(map[string]string{
		"POD_NAME": "agent-1", "ADK2GOOSE_BUDGET_SYNC_INTERVAL": "2s",
	}), io.Discard)
	if err != nil || o.budgetFile != "/etc/adk2goose/budget/budget.json" || o.podName != "agent-1" || o.budgetSyncInterval != 2*time.Second {
		t.Fatalf("%v %+v", err, o)
	}
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"bad size flag":      {[]string{"-insecure-no-auth", "-max-message-body", "lots"}, nil},
		"zero size":          {[]string{"-insecure-no-auth", "-max-other-body", "0"}, nil},
		"bad size env":       {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_MAX_OTHER_BODY": "-1"}},
		"no read timeout":    {[]string{"-insecure-no-auth", "-body-read-timeout", "0s"}, nil},
		"no turn wait":       {[]string{"-insecure-no-auth", "-turn-wait", "0s"}, nil},
		"no auth":            {nil, nil},
		"bad flavor":         {[]string{"-insecure-no-auth", "-goose-flavor", "x"}, nil},
		"bad env dur":        {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_DRAIN_TIMEOUT": "soon"}},
		"bad flag":           {[]string{"-nope"}, nil},
		"extra arg":          {[]string{"-insecure-no-auth", "x"}, nil},
		"no timeout":         {[]string{"-insecure-no-auth", "-confirmation-timeout", "0s"}, nil},
		"bad scope":          {[]string{"-insecure-no-auth", "-workspace-scope", "tenant"}, nil},
		"negative retention": {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_WORKSPACE_RETENTION": "-1h"}},
		"no budget sync":     {[]string{"-insecure-no-auth", "-budget-sync-interval", "0s"}, nil},
		"no unused idle":     {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_GOOSE_UNUSED_IDLE_TIMEOUT": "0s"}},
		"no debug traces":    {[]string{"-insecure-no-auth", "-debug-traces", "0"}, nil},
		"bad debug traces":   {[]string{"-insecure-no-auth"}, map[string]string{"ADK2GOOSE_DEBUG_TRACES": "many"}},
	} {
		if _, err := parse(c.args, envMap(c.env), io.Discard); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := run(context.Background(), []string{"-insecure-no-auth", "-auth-token-file", "/nonexistent"}, envMap(nil)); err == nil {
		t.Error("missing token file accepted")
	}
}

// A size flag's default is written in the largest unit that divides it,
// and reads back as the same size.
func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{5 << 20: "5MiB", 1 << 30: "1GiB", 1536 << 10: "1536KiB", 1536: "1536B", 3 << 30 / 2: "1536MiB"} {
		got := sizeText(n)
		back, err := humanize.ParseBytes(got)
		if got != want || err != nil || int64(back) != n {
			t.Errorf("sizeText(%d) = %q (reads back as %d, %v), want %q", n, got, back, err, want)
		}
	}
}
