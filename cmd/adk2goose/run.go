package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/dustin/go-humanize"

	"github.com/adk2goose/goose-operator/internal/memorylimit"
	"github.com/adk2goose/goose-operator/internal/prestop"
	"github.com/adk2goose/goose-operator/internal/secretfile"
	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/rest"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/peering"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/workspace"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type options struct {
	listen, publicBaseURL, appName, description, dataDir string
	gooseURL, gooseFlavor, gooseSecretFile, gooseWorkDir string
	authTokenFile, authConfigFile, corsOrigins           string
	logLevel, logFormat                                  string
	peersHost, podIP                                     string
	budgetFile, podName, drainDir                        string
	budgetSyncInterval                                   time.Duration
	insecureNoAuth, startGooseOnCreate                   bool
	activeWindow, sseWriteTimeout, drainTimeout          time.Duration
	drainStopWait                                        time.Duration
	confirmationTimeout, gooseIdleTimeout                time.Duration
	gooseUnusedIdleTimeout                               time.Duration
	bodyReadTimeout, turnWait                            time.Duration
	maxMessageBody, maxOtherBody                         int64
	debugTraces                                          int
	workspaceScope, workspaceSeedDir                     string
	workspaceRetention                                   time.Duration
	liveConnsPerUser                                     int
	liveWriteTimeout, liveIdleTimeout                    time.Duration

	gooseSecretEnv string // GOOSE_SERVER__SECRET_KEY, env only: never a flag (it would show in ps)
}

// fromEnv is a flag's default: env's value read by parse when it is set
// (a value parse refuses is added to errs), else def.
func fromEnv[T any](getenv func(string) string, env string, def T, parse func(string) (T, error), errs *[]error) T {
	v := getenv(env)
	if v == "" {
		return def
	}
	parsed, err := parse(v)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("failed to parse %s: %w", env, err))
	}
	return parsed
}

// parse reads flags, falling back to the environment, then to defaults.
func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{gooseSecretEnv: getenv("GOOSE_SERVER__SECRET_KEY")}
	fs, check := newFlagSet(o, getenv)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := check(); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.authTokenFile == "" && !o.insecureNoAuth {
		return nil, errors.New("an auth token file is required (-auth-token-file), or -insecure-no-auth for development")
	}
	for _, c := range []struct {
		what  string
		value time.Duration
	}{
		{"turn wait", o.turnWait},
		{"body read timeout", o.bodyReadTimeout},
		{"budget sync interval", o.budgetSyncInterval},
		{"confirmation timeout", o.confirmationTimeout},
		{"goose unused idle timeout", o.gooseUnusedIdleTimeout},
		{"live write timeout", o.liveWriteTimeout},
		{"live idle timeout", o.liveIdleTimeout},
	} {
		if c.value <= 0 {
			return nil, fmt.Errorf("%s must be positive, got %s", c.what, c.value)
		}
	}
	if o.debugTraces <= 0 {
		return nil, fmt.Errorf("debug traces must be positive, got %d", o.debugTraces)
	}
	if _, err := workspace.ParseScope(o.workspaceScope); err != nil {
		return nil, err
	}
	if o.workspaceRetention < 0 {
		return nil, fmt.Errorf("workspace retention must not be negative, got %s", o.workspaceRetention)
	}
	if o.gooseFlavor != string(goose.FlavorServe) && o.gooseFlavor != string(goose.FlavorGoosed) {
		return nil, fmt.Errorf("unknown goose flavor %q: want serve or goosed", o.gooseFlavor)
	}
	return o, nil
}

// newFlagSet registers every flag of adk2goose on a new flag set, each
// defaulting to its environment variable, and returns it with check, which
// after Parse reports the values that did not parse (environment variables
// and sizes). The docs' tables of flags are kept to this set
// (TestDocsNameEveryFlag).
func newFlagSet(o *options, getenv func(string) string) (fs *flag.FlagSet, check func() error) {
	fs = flag.NewFlagSet("adk2goose", flag.ContinueOnError)
	var errs []error
	var sizes []func() error // flag or env, parsed after Parse
	str := func(p *string, name, env, def, usage string) {
		if v := getenv(env); v != "" {
			def = v
		}
		fs.StringVar(p, name, def, usage+" (env "+env+")")
	}
	dur := func(p *time.Duration, name, env string, def time.Duration, usage string) {
		fs.DurationVar(p, name, fromEnv(getenv, env, def, time.ParseDuration, &errs), usage+" (env "+env+")")
	}
	boolean := func(p *bool, name, env string, def bool, usage string) {
		fs.BoolVar(p, name, fromEnv(getenv, env, def, strconv.ParseBool, &errs), usage+" (env "+env+")")
	}
	count := func(p *int, name, env string, def int, usage string) {
		fs.IntVar(p, name, fromEnv(getenv, env, def, strconv.Atoi, &errs), usage+" (env "+env+")")
	}
	size := func(p *int64, name, env string, def int64, usage string) {
		v := &sizeValue{text: sizeText(def)}
		if e := getenv(env); e != "" {
			v.text = e
		}
		fs.Var(v, name, usage+" (a `size` such as 512KiB; env "+env+")")
		sizes = append(sizes, func() error {
			n, err := humanize.ParseBytes(v.text)
			if err != nil || n == 0 || n > 1<<40 {
				return fmt.Errorf("failed to parse %s %q: want a size such as 5MiB", name, v.text)
			}
			*p = int64(n)
			return nil
		})
	}
	str(&o.listen, "listen", "ADK2GOOSE_LISTEN", ":8080", "address to serve on")
	str(&o.publicBaseURL, "public-base-url", "ADK2GOOSE_PUBLIC_BASE_URL", "", "URL clients reach this server at, used in the A2A agent card (default http://<listen host, or localhost>:<listen port>)")
	str(&o.appName, "app-name", "ADK2GOOSE_APP_NAME", "goose", "ADK app and agent name")
	str(&o.description, "description", "ADK2GOOSE_DESCRIPTION", "", "agent description for the agent card")
	str(&o.dataDir, "data-dir", "ADK2GOOSE_DATA_DIR", "/data/adk2goose", "directory for the SQLite session and usage databases")
	str(&o.gooseURL, "goose-url", "GOOSE_URL", "http://127.0.0.1:3284", "goose server base URL (loopback)")
	str(&o.gooseFlavor, "goose-flavor", "GOOSE_FLAVOR", string(goose.FlavorServe), "goose protocol: serve (ACP) or goosed (REST)")
	str(&o.gooseSecretFile, "goose-secret-file", "GOOSE_SECRET_FILE", "", "file holding goose's X-Secret-Key (else env GOOSE_SERVER__SECRET_KEY)")
	str(&o.gooseWorkDir, "goose-working-dir", "GOOSE_WORKING_DIR", "/tmp", "the workspace: goose sessions work in it or in a directory below it (see -workspace-scope); the same path in the sidecar and goose")
	str(&o.workspaceScope, "workspace-scope", "ADK2GOOSE_WORKSPACE_SCOPE", string(workspace.ScopeSession), "which sessions share a working directory: session (each its own, under <workspace>/sessions), user (one per ADK user id, under <workspace>/users) or agent (all in the workspace itself)")
	dur(&o.workspaceRetention, "workspace-retention", "ADK2GOOSE_WORKSPACE_RETENTION", 0, "remove user and session directories unused for this long (0: keep until the session is deleted)")
	str(&o.workspaceSeedDir, "workspace-seed-dir", "ADK2GOOSE_WORKSPACE_SEED_DIR", "", "directory whose files are copied into every new user or session directory (a mounted ConfigMap)")
	str(&o.authTokenFile, "auth-token-file", "ADK2GOOSE_AUTH_TOKEN_FILE", "", "file holding the inbound token clients must present")
	str(&o.authConfigFile, "auth-config-file", "ADK2GOOSE_AUTH_CONFIG_FILE", "", "JSON file of how callers are verified (spec.sidecar.auth: mode token, kubernetes or oidc, and the admin groups); with a kubernetes or oidc mode the auth token authenticates only the agent's own pods to each other. Empty: token mode")
	boolean(&o.insecureNoAuth, "insecure-no-auth", "ADK2GOOSE_INSECURE_NO_AUTH", false, "serve without inbound auth (development only)")
	str(&o.corsOrigins, "cors-origins", "ADK2GOOSE_CORS_ORIGINS", "", "comma-separated browser origins allowed by CORS, or *")
	dur(&o.activeWindow, "active-window", "ADK2GOOSE_ACTIVE_WINDOW", 10*time.Minute, "a session used within this window counts as active in /stats")
	dur(&o.sseWriteTimeout, "sse-write-timeout", "ADK2GOOSE_SSE_WRITE_TIMEOUT", 10*time.Minute, "longest /run_sse response")
	count(&o.debugTraces, "debug-traces", "ADK2GOOSE_DEBUG_TRACES", server.DefaultDebugTraces, "how many of the newest turns' traces the ADK web UI's trace view keeps in memory (about 2 KiB each)")
	dur(&o.confirmationTimeout, "confirmation-timeout", "ADK2GOOSE_CONFIRMATION_TIMEOUT", 10*time.Minute, "how long a goose tool approval waits for the ADK client's answer before it is denied")
	dur(&o.gooseIdleTimeout, "goose-idle-timeout", "ADK2GOOSE_GOOSE_IDLE_TIMEOUT", 10*time.Minute, "goose serve: close a session's own goose connection after it ran no reply for this long (goose then stops the session's extensions; the next turn reconnects), and the connection for other calls after no call for this long")
	dur(&o.gooseUnusedIdleTimeout, "goose-unused-idle-timeout", "ADK2GOOSE_GOOSE_UNUSED_IDLE_TIMEOUT", 2*time.Minute, "goose serve: the same for a session that has run no turn yet (one started when its ADK session was created); never longer than -goose-idle-timeout")
	dur(&o.drainTimeout, "drain-timeout", "ADK2GOOSE_DRAIN_TIMEOUT", 25*time.Second, "on SIGTERM, or when goose's preStop hook asks (-drain-dir), how long running turns may finish before they are ended")
	str(&o.drainDir, "drain-dir", "ADK2GOOSE_DRAIN_DIR", "", "directory shared with the goose container, whose preStop hook asks here for a drain before goose stops (internal/prestop); empty: none")
	dur(&o.drainStopWait, "drain-stop-wait", "ADK2GOOSE_DRAIN_STOP_WAIT", 2*time.Minute, "after a drain goose's preStop hook asked for, how long the pod has to stop; if it has not (the request came from something else), the sidecar withdraws it and exits, to be restarted in service")
	size(&o.maxMessageBody, "max-message-body", "ADK2GOOSE_MAX_MESSAGE_BODY", server.DefaultMaxMessageBytes, "largest body of /run, /run_sse and A2A requests (a user message); larger ones get 413")
	size(&o.maxOtherBody, "max-other-body", "ADK2GOOSE_MAX_OTHER_BODY", server.DefaultMaxOtherBytes, "largest body of every other route (session create, PATCH); larger ones get 413")
	dur(&o.bodyReadTimeout, "body-read-timeout", "ADK2GOOSE_BODY_READ_TIMEOUT", server.DefaultBodyReadTimeout, "longest time a request body may take to arrive; slower ones get 408")
	boolean(&o.startGooseOnCreate, "start-goose-on-create", "ADK2GOOSE_START_GOOSE_ON_CREATE", true, "start a new ADK session's goose session in the background when the session is created, so its first turn does not wait for goose to start it (its agent and extensions)")
	dur(&o.turnWait, "turn-wait", "ADK2GOOSE_TURN_WAIT", server.DefaultTurnWait, "how long a request waits for a session busy with another turn before it gets 409")
	count(&o.liveConnsPerUser, "live-conns-per-user", "ADK2GOOSE_LIVE_CONNS_PER_USER", server.DefaultLiveConnsPerUser, "how many /run_live sockets one ADK user may have open on this pod; one more gets 429")
	dur(&o.liveWriteTimeout, "live-write-timeout", "ADK2GOOSE_LIVE_WRITE_TIMEOUT", server.DefaultLiveWriteTimeout, "longest time one write to a /run_live socket may take; a client that stops reading loses its socket")
	dur(&o.liveIdleTimeout, "live-idle-timeout", "ADK2GOOSE_LIVE_IDLE_TIMEOUT", server.DefaultLiveIdleTimeout, "close a /run_live socket on which nothing was sent either way for this long while no turn ran")
	str(&o.peersHost, "peers-host", "ADK2GOOSE_PEERS_HOST", "", "DNS name whose addresses are this agent's sidecars (its headless Service); requests for a session another pod owns are forwarded there. Empty: one replica, no forwarding")
	str(&o.podIP, "pod-ip", "POD_IP", "", "this pod's IP, so peer lookups skip it and a new session's id places it on one pod")
	str(&o.podName, "pod-name", "POD_NAME", "", "this replica's name in the token ledger (default the hostname, a StatefulSet pod's stable name)")
	str(&o.budgetFile, "budget-file", "ADK2GOOSE_BUDGET_FILE", "", "JSON file holding the agent's token budget (spec.budget), re-read while running; empty: no budget")
	dur(&o.budgetSyncInterval, "budget-sync-interval", "ADK2GOOSE_BUDGET_SYNC_INTERVAL", 5*time.Second, "how often the budget file is re-read and the peers' token usage fetched; bounds how stale one pod's view of the others is")
	str(&o.logLevel, "log-level", "ADK2GOOSE_LOG_LEVEL", "info", "debug, info, warn or error")
	str(&o.logFormat, "log-format", "ADK2GOOSE_LOG_FORMAT", "json", "json or text")
	return fs, func() error {
		for _, size := range sizes {
			if err := size(); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// sizeText writes n bytes as the largest binary unit that divides it
// (5MiB), as a size flag takes it.
func sizeText(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// sizeValue is a size flag's text, parsed after Parse (newFlagSet).
type sizeValue struct{ text string }

func (v *sizeValue) String() string { return v.text }

func (v *sizeValue) Set(s string) error {
	v.text = s
	return nil
}

func newLogger(o *options, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("failed to parse log level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	switch o.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("unknown log format %q", o.logFormat)
}

// run is the whole program; main only wires signals. It returns after a
// graceful drain once ctx is done.
func run(ctx context.Context, args []string, getenv func(string) string) error {
	return runWith(ctx, args, getenv, os.Stderr, nil)
}

func runWith(ctx context.Context, args []string, getenv func(string) string, logw io.Writer, onListen func(net.Addr)) error {
	o, err := parse(args, getenv, logw)
	if err != nil {
		return err
	}
	log, err := newLogger(o, logw)
	if err != nil {
		return err
	}
	ctx, stopRefresh := context.WithCancel(ctx) // ends the memory limit's refresh with the run
	defer stopRefresh()
	if _, err := memorylimit.Set(ctx, log, memlimit.FromCgroup); err != nil {
		log.Warn("failed to give the Go runtime the container's memory limit; its GC does not know it", "error", err)
	}
	secret := o.gooseSecretEnv
	if o.gooseSecretFile != "" {
		if secret, err = secretfile.Read(o.gooseSecretFile, "goose secret"); err != nil {
			return err
		}
	}
	var token string
	if o.authTokenFile != "" {
		if token, err = secretfile.Read(o.authTokenFile, "auth token"); err != nil {
			return err
		}
	} else {
		log.Warn("inbound auth is disabled")
	}
	var auth identity.Settings
	if o.authConfigFile != "" {
		if auth, err = identity.ReadSettings(o.authConfigFile); err != nil {
			return err
		}
	}
	verifier, err := auth.Verifier(ctx)
	if err != nil {
		return err
	}

	var backend goose.Backend
	switch goose.Flavor(o.gooseFlavor) {
	case goose.FlavorGoosed:
		backend, err = rest.New(rest.Config{URL: o.gooseURL, SecretKey: secret})
	default:
		backend, err = acp.New(acp.Config{URL: o.gooseURL, SecretKey: secret, ClientName: "adk2goose", ClientVersion: version, Logger: log,
			IdleTimeout: o.gooseIdleTimeout, UnusedIdleTimeout: o.gooseUnusedIdleTimeout})
	}
	if err != nil {
		return fmt.Errorf("failed to create goose client: %w", err)
	}
	defer func() { _ = backend.Close() }() // sessions persist in goose; a failed close loses nothing

	workspaces, err := workspace.New(workspace.Config{
		Root: o.gooseWorkDir, Scope: workspace.Scope(o.workspaceScope),
		Retention: o.workspaceRetention, SeedDir: o.workspaceSeedDir, Logger: log,
	})
	if err != nil {
		return err
	}
	defer func() { _ = workspaces.Close() }() // directories stay; closing only releases the handle

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.listen)
	if err != nil {
		return fmt.Errorf("failed to listen: %w", err)
	}
	if o.publicBaseURL == "" {
		// A2A clients require the card's URLs to have the origin they fetched
		// it from; the listen host is the best guess when none is configured.
		host := "localhost"
		if ta := ln.Addr().(*net.TCPAddr); !ta.IP.IsUnspecified() {
			host = ta.IP.String()
		}
		o.publicBaseURL = "http://" + net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	peers, peerURL := o.peers(ln.Addr().(*net.TCPAddr).Port)
	tp, stopTracing, err := setupTracing(ctx)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("failed to flush traces", "error", err)
		}
	}()
	var origins []string
	if o.corsOrigins != "" {
		origins = strings.Split(o.corsOrigins, ",")
	}
	srv, err := server.New(ctx, server.Config{
		Backend:             backend,
		AppName:             o.appName,
		Description:         o.description,
		Version:             version,
		DataDir:             o.dataDir,
		PublicBaseURL:       o.publicBaseURL,
		AuthToken:           token,
		Identity:            verifier,
		AdminGroups:         auth.AdminGroups,
		CORSOrigins:         origins,
		ActiveWindow:        o.activeWindow,
		SSEWriteTimeout:     o.sseWriteTimeout,
		DebugTraces:         o.debugTraces,
		ConfirmationTimeout: o.confirmationTimeout,
		MaxMessageBytes:     o.maxMessageBody,
		MaxOtherBodyBytes:   o.maxOtherBody,
		BodyReadTimeout:     o.bodyReadTimeout,
		TurnWait:            o.turnWait,
		LiveConnsPerUser:    o.liveConnsPerUser,
		LiveWriteTimeout:    o.liveWriteTimeout,
		LiveIdleTimeout:     o.liveIdleTimeout,
		StartGooseOnCreate:  o.startGooseOnCreate,
		StartOptions:        goose.StartOptions{WorkingDir: o.gooseWorkDir},
		Peers:               peers,
		PeerURL:             peerURL,
		Workspaces:          workspaces,
		PodName:             o.podName,
		Budget:              budget.Config{File: o.budgetFile, SyncInterval: o.budgetSyncInterval},
		TracerProvider:      tp,
		Logger:              log,
	})
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("failed to create server: %w", err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			log.Error("failed to close server", "error", err)
		}
	}()
	log.Info("starting adk2goose", "version", version, "goose_url", o.gooseURL, "goose_flavor", o.gooseFlavor,
		"data_dir", o.dataDir, "public_base_url", o.publicBaseURL, "app", o.appName,
		"goose_secret_set", secret != "", "cors_origins", origins, "peers_host", o.peersHost,
		"workspace", o.gooseWorkDir, "workspace_scope", o.workspaceScope, "workspace_retention", o.workspaceRetention.String(),
		"budget_file", o.budgetFile)
	serveCtx, stopServing := context.WithCancelCause(ctx)
	defer stopServing(nil)
	if o.drainDir != "" {
		stopWatch := drainOnRequest(ctx, log, srv, o, stopServing)
		defer stopWatch()
	}
	// Told once goose's preStop hook would find the drain directory watched.
	if onListen != nil {
		onListen(ln.Addr())
	}
	if err := srv.Serve(serveCtx, ln, o.drainTimeout); err != nil {
		return err
	}
	if cause := context.Cause(serveCtx); errors.Is(cause, errDrainNotFollowed) {
		return cause
	}
	return nil
}

// drainRequestInterval is how often the drain directory is looked at.
const drainRequestInterval = 200 * time.Millisecond

// errDrainNotFollowed ends a sidecar whose pod did not stop after a drain.
var errDrainNotFollowed = errors.New("the pod did not stop after goose's preStop hook asked for a drain; withdrew the request, exiting to be restarted in service")

// drainOnRequest drains srv when goose's preStop hook asks in the drain
// directory (goose serve ends every running turn at once when it gets its
// SIGTERM), then tells the hook. The pod should stop next. If it has not
// within -drain-stop-wait, something else asked (goose's shell tools can
// write there too): the request is withdrawn and stopServing ends the
// process, which the kubelet restarts in service, as a drained server does
// not take turns again. The returned func stops watching and waits for a
// drain under way, which ctx's end cuts short.
func drainOnRequest(ctx context.Context, log *slog.Logger, srv *server.Server, o *options, stopServing context.CancelCauseFunc) (stop func()) {
	if err := prestop.Watch(o.drainDir); err != nil {
		log.Warn("goose's preStop hook will not wait for running turns", "error", err)
		return func() {}
	}
	return inBackground(ctx, func(ctx context.Context) {
		if prestop.AwaitRequest(ctx, o.drainDir, drainRequestInterval) != nil {
			return // ctx ended: no drain asked for
		}
		log.Info("goose's preStop hook asks for a drain", "timeout", o.drainTimeout.String())
		dctx, cancelDrain := context.WithTimeout(ctx, o.drainTimeout)
		err := srv.Drain(dctx)
		cancelDrain()
		if err != nil {
			log.Warn("failed to drain before goose stops", "error", err)
		}
		if err := prestop.Done(o.drainDir); err != nil {
			log.Error("goose will stop only when its preStop hook gives up", "error", err)
		}
		t := time.NewTimer(o.drainStopWait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return // the pod's stop
		case <-t.C:
		}
		if err := prestop.Withdraw(o.drainDir); err != nil {
			log.Error("the restarted sidecar will drain again", "error", err)
		}
		log.Error("the pod did not stop after a drain", "waited", o.drainStopWait.String(), "error", errDrainNotFollowed)
		stopServing(errDrainNotFollowed)
	})
}

// inBackground runs fn on a goroutine with a context derived from ctx. The
// returned func cancels that context and waits for fn to return.
func inBackground(ctx context.Context, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	return func() { cancel(); <-done }
}

// peers lists the agent's other sidecars, which listen on port as this one
// does, and gives this one's URL as they list it (empty without a pod IP);
// nil with no peers host: one replica.
func (o *options) peers(port int) (peering.Peers, string) {
	if o.peersHost == "" {
		return nil, ""
	}
	self := ""
	if o.podIP != "" {
		self = peering.URL(o.podIP, port)
	}
	return peering.DNSPeers(o.peersHost, port, o.podIP), self
}
