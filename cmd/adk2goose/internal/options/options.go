// Package options reads adk2goose's flags and environment variables into
// the options it runs with, and refuses values it cannot run with. It links
// neither the server nor the goose clients, so its fuzz target stays fast.
package options

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/server/defaults"
	"github.com/adk2goose/goose-operator/sidecar/workspace"
)

// Options are what adk2goose runs with; NewFlagSet says what each means.
type Options struct {
	Listen, PublicBaseURL, AppName, Description, DataDir string
	GooseURL, GooseFlavor, GooseSecretFile, GooseWorkDir string
	AuthTokenFile, AuthConfigFile, CORSOrigins           string
	LogLevel, LogFormat                                  string
	PeersHost, PodIP                                     string
	BudgetFile, PodName, DrainDir                        string
	BudgetSyncInterval                                   time.Duration
	InsecureNoAuth, StartGooseOnCreate                   bool
	ActiveWindow, SSEWriteTimeout, DrainTimeout          time.Duration
	DrainStopWait                                        time.Duration
	ConfirmationTimeout, GooseIdleTimeout                time.Duration
	GooseUnusedIdleTimeout                               time.Duration
	BodyReadTimeout, TurnWait                            time.Duration
	MaxMessageBody, MaxOtherBody                         int64
	DebugTraces                                          int
	WorkspaceScope, WorkspaceSeedDir                     string
	WorkspaceRetention                                   time.Duration
	LiveConnsPerUser                                     int
	LiveWriteTimeout, LiveIdleTimeout                    time.Duration

	GooseSecretEnv string // GOOSE_SERVER__SECRET_KEY, env only: never a flag (it would show in ps)
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

// Parse reads flags, falling back to the environment, then to defaults.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (*Options, error) {
	o := &Options{GooseSecretEnv: getenv("GOOSE_SERVER__SECRET_KEY")}
	fs, check := NewFlagSet(o, getenv)
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
	if o.AuthTokenFile == "" && !o.InsecureNoAuth {
		return nil, errors.New("an auth token file is required (-auth-token-file), or -insecure-no-auth for development")
	}
	for _, c := range []struct {
		what  string
		value time.Duration
	}{
		{"turn wait", o.TurnWait},
		{"body read timeout", o.BodyReadTimeout},
		{"budget sync interval", o.BudgetSyncInterval},
		{"confirmation timeout", o.ConfirmationTimeout},
		{"goose unused idle timeout", o.GooseUnusedIdleTimeout},
		{"live write timeout", o.LiveWriteTimeout},
		{"live idle timeout", o.LiveIdleTimeout},
	} {
		if c.value <= 0 {
			return nil, fmt.Errorf("%s must be positive, got %s", c.what, c.value)
		}
	}
	if o.DebugTraces <= 0 {
		return nil, fmt.Errorf("debug traces must be positive, got %d", o.DebugTraces)
	}
	if _, err := workspace.ParseScope(o.WorkspaceScope); err != nil {
		return nil, err
	}
	if o.WorkspaceRetention < 0 {
		return nil, fmt.Errorf("workspace retention must not be negative, got %s", o.WorkspaceRetention)
	}
	if o.GooseFlavor != string(goose.FlavorServe) && o.GooseFlavor != string(goose.FlavorGoosed) {
		return nil, fmt.Errorf("unknown goose flavor %q: want serve or goosed", o.GooseFlavor)
	}
	return o, nil
}

// NewFlagSet registers every flag of adk2goose on a new flag set, each
// defaulting to its environment variable, and returns it with check, which
// after Parse reports the values that did not parse (environment variables
// and sizes). The docs' tables of flags are kept to this set
// (TestDocsNameEveryFlag).
func NewFlagSet(o *Options, getenv func(string) string) (fs *flag.FlagSet, check func() error) {
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
	str(&o.Listen, "listen", "ADK2GOOSE_LISTEN", ":8080", "address to serve on")
	str(&o.PublicBaseURL, "public-base-url", "ADK2GOOSE_PUBLIC_BASE_URL", "", "URL clients reach this server at, used in the A2A agent card (default http://<listen host, or localhost>:<listen port>)")
	str(&o.AppName, "app-name", "ADK2GOOSE_APP_NAME", "goose", "ADK app and agent name")
	str(&o.Description, "description", "ADK2GOOSE_DESCRIPTION", "", "agent description for the agent card")
	str(&o.DataDir, "data-dir", "ADK2GOOSE_DATA_DIR", "/data/adk2goose", "directory for the SQLite session and usage databases")
	str(&o.GooseURL, "goose-url", "GOOSE_URL", "http://127.0.0.1:3284", "goose server base URL (loopback)")
	str(&o.GooseFlavor, "goose-flavor", "GOOSE_FLAVOR", string(goose.FlavorServe), "goose protocol: serve (ACP) or goosed (REST)")
	str(&o.GooseSecretFile, "goose-secret-file", "GOOSE_SECRET_FILE", "", "file holding goose's X-Secret-Key (else env GOOSE_SERVER__SECRET_KEY)")
	str(&o.GooseWorkDir, "goose-working-dir", "GOOSE_WORKING_DIR", "/tmp", "the workspace: goose sessions work in it or in a directory below it (see -workspace-scope); the same path in the sidecar and goose")
	str(&o.WorkspaceScope, "workspace-scope", "ADK2GOOSE_WORKSPACE_SCOPE", string(workspace.ScopeSession), "which sessions share a working directory: session (each its own, under <workspace>/sessions), user (one per ADK user id, under <workspace>/users) or agent (all in the workspace itself)")
	dur(&o.WorkspaceRetention, "workspace-retention", "ADK2GOOSE_WORKSPACE_RETENTION", 0, "remove user and session directories unused for this long (0: keep until the session is deleted)")
	str(&o.WorkspaceSeedDir, "workspace-seed-dir", "ADK2GOOSE_WORKSPACE_SEED_DIR", "", "directory whose files are copied into every new user or session directory (a mounted ConfigMap)")
	str(&o.AuthTokenFile, "auth-token-file", "ADK2GOOSE_AUTH_TOKEN_FILE", "", "file holding the inbound token clients must present")
	str(&o.AuthConfigFile, "auth-config-file", "ADK2GOOSE_AUTH_CONFIG_FILE", "", "JSON file of how callers are verified (spec.sidecar.auth: mode token, kubernetes or oidc, and the admin groups); with a kubernetes or oidc mode the auth token authenticates only the agent's own pods to each other. Empty: token mode")
	boolean(&o.InsecureNoAuth, "insecure-no-auth", "ADK2GOOSE_INSECURE_NO_AUTH", false, "serve without inbound auth (development only)")
	str(&o.CORSOrigins, "cors-origins", "ADK2GOOSE_CORS_ORIGINS", "", "comma-separated browser origins allowed by CORS, or *")
	dur(&o.ActiveWindow, "active-window", "ADK2GOOSE_ACTIVE_WINDOW", defaults.ActiveWindow, "a session used within this window counts as active in /stats")
	dur(&o.SSEWriteTimeout, "sse-write-timeout", "ADK2GOOSE_SSE_WRITE_TIMEOUT", defaults.SSEWriteTimeout, "longest /run_sse response")
	count(&o.DebugTraces, "debug-traces", "ADK2GOOSE_DEBUG_TRACES", defaults.DebugTraces, "how many of the newest turns' traces the ADK web UI's trace view keeps in memory (about 2 KiB each)")
	dur(&o.ConfirmationTimeout, "confirmation-timeout", "ADK2GOOSE_CONFIRMATION_TIMEOUT", defaults.ConfirmationTimeout, "how long a goose tool approval waits for the ADK client's answer before it is denied")
	dur(&o.GooseIdleTimeout, "goose-idle-timeout", "ADK2GOOSE_GOOSE_IDLE_TIMEOUT", goose.DefaultServeIdleTimeout, "goose serve: close a session's own goose connection after it ran no reply for this long (goose then stops the session's extensions; the next turn reconnects), and the connection for other calls after no call for this long")
	dur(&o.GooseUnusedIdleTimeout, "goose-unused-idle-timeout", "ADK2GOOSE_GOOSE_UNUSED_IDLE_TIMEOUT", goose.DefaultServeUnusedIdleTimeout, "goose serve: the same for a session that has run no turn yet (one started when its ADK session was created); never longer than -goose-idle-timeout")
	dur(&o.DrainTimeout, "drain-timeout", "ADK2GOOSE_DRAIN_TIMEOUT", 25*time.Second, "on SIGTERM, or when goose's preStop hook asks (-drain-dir), how long running turns may finish before they are ended")
	str(&o.DrainDir, "drain-dir", "ADK2GOOSE_DRAIN_DIR", "", "directory shared with the goose container, whose preStop hook asks here for a drain before goose stops (internal/prestop); empty: none")
	dur(&o.DrainStopWait, "drain-stop-wait", "ADK2GOOSE_DRAIN_STOP_WAIT", 2*time.Minute, "after a drain goose's preStop hook asked for, how long the pod has to stop; if it has not (the request came from something else), the sidecar withdraws it and exits, to be restarted in service")
	size(&o.MaxMessageBody, "max-message-body", "ADK2GOOSE_MAX_MESSAGE_BODY", defaults.MaxMessageBytes, "largest body of /run, /run_sse and A2A requests (a user message); larger ones get 413")
	size(&o.MaxOtherBody, "max-other-body", "ADK2GOOSE_MAX_OTHER_BODY", defaults.MaxOtherBytes, "largest body of every other route (session create, PATCH); larger ones get 413")
	dur(&o.BodyReadTimeout, "body-read-timeout", "ADK2GOOSE_BODY_READ_TIMEOUT", defaults.BodyReadTimeout, "longest time a request body may take to arrive; slower ones get 408")
	boolean(&o.StartGooseOnCreate, "start-goose-on-create", "ADK2GOOSE_START_GOOSE_ON_CREATE", true, "start a new ADK session's goose session in the background when the session is created, so its first turn does not wait for goose to start it (its agent and extensions)")
	dur(&o.TurnWait, "turn-wait", "ADK2GOOSE_TURN_WAIT", defaults.TurnWait, "how long a request waits for a session busy with another turn before it gets 409")
	count(&o.LiveConnsPerUser, "live-conns-per-user", "ADK2GOOSE_LIVE_CONNS_PER_USER", defaults.LiveConnsPerUser, "how many /run_live sockets one ADK user may have open on this pod; one more gets 429")
	dur(&o.LiveWriteTimeout, "live-write-timeout", "ADK2GOOSE_LIVE_WRITE_TIMEOUT", defaults.LiveWriteTimeout, "longest time one write to a /run_live socket may take; a client that stops reading loses its socket")
	dur(&o.LiveIdleTimeout, "live-idle-timeout", "ADK2GOOSE_LIVE_IDLE_TIMEOUT", defaults.LiveIdleTimeout, "close a /run_live socket on which nothing was sent either way for this long while no turn ran")
	str(&o.PeersHost, "peers-host", "ADK2GOOSE_PEERS_HOST", "", "DNS name whose addresses are this agent's sidecars (its headless Service); requests for a session another pod owns are forwarded there. Empty: one replica, no forwarding")
	str(&o.PodIP, "pod-ip", "POD_IP", "", "this pod's IP, so peer lookups skip it and a new session's id places it on one pod")
	str(&o.PodName, "pod-name", "POD_NAME", "", "this replica's name in the token ledger (default the hostname, a StatefulSet pod's stable name)")
	str(&o.BudgetFile, "budget-file", "ADK2GOOSE_BUDGET_FILE", "", "JSON file holding the agent's token budget (spec.budget), re-read while running; empty: no budget")
	dur(&o.BudgetSyncInterval, "budget-sync-interval", "ADK2GOOSE_BUDGET_SYNC_INTERVAL", 5*time.Second, "how often the budget file is re-read and the peers' token usage fetched; bounds how stale one pod's view of the others is")
	str(&o.LogLevel, "log-level", "ADK2GOOSE_LOG_LEVEL", "info", "debug, info, warn or error")
	str(&o.LogFormat, "log-format", "ADK2GOOSE_LOG_FORMAT", "json", "json or text")
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

// sizeValue is a size flag's text, parsed after Parse (NewFlagSet).
type sizeValue struct{ text string }

func (v *sizeValue) String() string { return v.text }

func (v *sizeValue) Set(s string) error {
	v.text = s
	return nil
}
