// Package server wires the adk2goose sidecar's HTTP surface on one port:
//
//	/healthz, /readyz            open; process and goose health
//	/stats                       JSON session and token figures (see Stats)
//	/whoami                      the caller's ADK user, as authentication found it (see WhoAmI)
//	/metrics                     Prometheus
//	/.well-known/agent-card.json A2A card (open: it holds no secret and tells clients how to authenticate)
//	/a2a/v1/invoke               A2A 1.0 JSON-RPC (a2a-go v2 a2asrv + adk-go adka2a/v2)
//	/a2a/invoke                  A2A 0.3 JSON-RPC (a2a-go a2av0 compat)
//	/peer/v1/owner               whether this pod has a session or task (see package peering)
//	/peer/v1/usage               this pod's token ledger, for its peers (see package budget)
//	/run_live                    adkrest's live WebSocket, behind guardLive (live.go)
//	everything else              adk-go's adkrest server (ADK REST API and web UI wire)
//
// Every route except the open ones requires the inbound token. Every body
// is capped and must arrive within BodyReadTimeout (413/408 with a JSON
// reason; see bodyLimits). A /run or /run_sse body is decoded once, as
// leniently as real clients need (snake_case and unknown fields, which
// adkrest rejects), and everything after reads that (decodeRuns); adkrest
// gets its canonical encoding.
//
// Tool approvals (goose in approve / smart_approve mode): a goose permission
// request ends the ADK turn with an adk_request_confirmation function call
// listed in longRunningToolIds (A2A: the task ends input-required with that
// call as a data part). The goose reply is held by the agent until the
// client's next message answers it with a functionResponse for that id
// ({"confirmed": bool}, or the web UI's {"response": "{\"confirmed\":true}"}),
// then the same reply continues into the answering turn. Unanswered ones are
// denied after ConfirmationTimeout, on A2A CancelTask and on shutdown. A
// /run or /run_sse whose functionResponse names no pending confirmation is
// rejected before it reaches the session: 400 for an unknown id, 409 for one
// that already ended.
//
// Turns: a session runs one request at a time, in arrival order (runs,
// A2A messages and session writes; see turnGate); one still waiting after
// Config.TurnWait gets 409. Client mistakes get a 4xx with a JSON reason on
// every route (guard.go).
//
// Sessions: DELETE of an ADK session also deletes its goose session and
// what the agent holds for it (gooseagent.Controller.SessionService), so the
// same id created again starts a fresh goose conversation.
//
// Replicas: with Config.Peers set, a request naming a session, A2A context or
// task that another pod of the agent has is forwarded to that pod, one naming
// a session no pod has to the pod its id hashes to (with Config.PeerURL), and
// a user's session list merges every pod's (package peering).
//
// Token budget (package budget): while the agent's budget is spent, a
// /run or /run_sse that would start a turn is answered 429 with a JSON
// reason and Retry-After, and an A2A message ends in a FAILED task with the
// same reason; answers to pending tool confirmations still pass.
//
// Cancellation: a REST client that goes away cancels the goose reply (its
// request context); A2A CancelTask ends the task canceled and cancels goose
// (a running execution through its context, an input-required one through
// the held reply); shutdown denies and cancels held approvals at once.
// goose progress notifications reach REST clients as partial thought events
// and A2A clients as non-terminal WORKING status messages.
package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/adk2goose/goose-operator/internal/jsonhttp"
	"github.com/adk2goose/goose-operator/sidecar/internal/waitgroup"
	"github.com/adk2goose/goose-operator/sidecar/server/defaults"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/server/adkrest"
	"google.golang.org/adk/session"

	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/peering"
	"github.com/adk2goose/goose-operator/sidecar/workspace"
)

// ErrDraining is the cancellation cause of requests still running when the
// drain timeout ends. A live turn it ends says so with ErrorCode DRAINING.
var ErrDraining error = codedError{code: codeDraining, err: errors.New("adk2goose is shutting down")}

// Config configures New.
type Config struct {
	// Backend is the goose server. Required.
	Backend goose.Backend
	// AppName is the ADK app name and agent name. Required; it must be a
	// valid ADK agent name (letters, digits, underscores).
	AppName string
	// Description appears in the agent card.
	Description string
	// Version appears in the agent card. Default "0.0.0".
	Version string
	// DataDir holds the SQLite files. Required.
	DataDir string
	// PublicBaseURL is how A2A clients reach this server, e.g.
	// http://goose.default.svc:8080; the agent card's URLs are built from it.
	// Required. A2A clients insist that the card's URL origin equals the one
	// they fetched the card from.
	PublicBaseURL string
	// AuthToken is the inbound token. Empty disables auth (development only).
	// With Identity set it is the agent's pods' own token: a request bearing
	// it comes from a peer, and carries the caller that peer verified.
	AuthToken string
	// Identity, when set, verifies every caller (package identity) in place
	// of the shared token, and the verified user is the ADK user of every
	// request: a request naming another user is refused (403).
	Identity identity.Verifier
	// AdminGroups lets callers in any of these groups act for every user
	// and reach the routes that are not about one user (traces, evals).
	AdminGroups []string
	// CORSOrigins lists allowed browser origins; "*" allows any.
	CORSOrigins []string
	// ActiveWindow: a session counts as active in /stats when a reply is in
	// flight or its last turn ended within this window. Default defaults.ActiveWindow.
	ActiveWindow time.Duration
	// SSEWriteTimeout bounds one /run_sse response. Default defaults.SSEWriteTimeout; adkrest
	// kills the stream at once when it is zero, hence the default.
	SSEWriteTimeout time.Duration
	// DebugTraces is how many of the newest turns' traces adkrest keeps in
	// memory for the ADK web UI's trace view. Default defaults.DebugTraces.
	DebugTraces int
	// StartOptions are used for new goose sessions.
	StartOptions goose.StartOptions
	// MaxMessageBytes bounds the bodies that carry a user message: /run,
	// /run_sse and both A2A endpoints. Default defaults.MaxMessageBytes.
	MaxMessageBytes int64
	// MaxOtherBodyBytes bounds every other route's body (session create,
	// PATCH). Default defaults.MaxOtherBytes.
	MaxOtherBodyBytes int64
	// BodyReadTimeout bounds the time a request body takes to arrive.
	// Default defaults.BodyReadTimeout.
	BodyReadTimeout time.Duration
	// ConfirmationTimeout is how long a goose tool approval (approve and
	// smart_approve modes) waits for the client's answer before it is
	// denied. Default defaults.ConfirmationTimeout.
	ConfirmationTimeout time.Duration
	// TurnWait is how long a request waits for a session busy with another
	// turn before it gets 409. Default defaults.TurnWait.
	TurnWait time.Duration
	// StartGooseOnCreate starts a new ADK session's goose session in the
	// background at its creation (gooseagent.Config.StartGooseOnCreate).
	StartGooseOnCreate bool
	// IdleSessions bounds the ADK sessions the agent keeps in memory between
	// turns (gooseagent.Config.IdleSessions). Default 4096.
	IdleSessions int
	// Peers lists the other sidecars of the agent (replicas > 1); nil serves
	// every request here.
	Peers peering.Peers
	// PeerURL is this sidecar's base URL as Peers lists it on the other
	// pods (peering.URL): with it a session no pod has is created on the one
	// pod its id hashes to (peering.Config.Self).
	PeerURL string
	// Workspaces, when set, gives each ADK user or session its own goose
	// working directory (in place of StartOptions.WorkingDir), removes a
	// session's directory when the session is deleted, and sweeps unused
	// ones on its retention. The caller closes it after the server.
	Workspaces *workspace.Manager
	// PodName names this replica in the token ledger; default the hostname
	// (a StatefulSet pod's name, stable across restarts).
	PodName string
	// Budget configures the agent's token budget (File, SyncInterval, Now);
	// Peers, Token and Logger are filled in from this Config.
	Budget budget.Config
	// TracerProvider, when set, traces every turn: a server span continuing
	// the client's W3C traceparent, adk-go's spans and the goose spans (see
	// package gooseagent), and peer forwarding. Its spans also feed the ADK
	// web UI's trace view (adkrest /debug/trace). adk-go makes its spans with
	// the global provider, so this should be the global one too.
	TracerProvider *sdktrace.TracerProvider
	// LiveConnsPerUser bounds the /run_live sockets one user has open on
	// this pod. Default defaults.LiveConnsPerUser.
	LiveConnsPerUser int
	// LiveWriteTimeout bounds each write to a /run_live socket. Default
	// defaults.LiveWriteTimeout.
	LiveWriteTimeout time.Duration
	// LiveIdleTimeout closes a /run_live socket on which nothing was sent
	// either way for this long while no turn ran. Default
	// defaults.LiveIdleTimeout.
	LiveIdleTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// fillDefaults refuses a Config without its required fields and gives the
// others that are zero their defaults (package defaults, and a few that
// only the server uses).
func (c *Config) fillDefaults() error {
	switch {
	case c.Backend == nil:
		return errors.New("backend is required")
	case c.AppName == "":
		return errors.New("app name is required")
	case c.DataDir == "":
		return errors.New("data dir is required")
	case c.PublicBaseURL == "":
		return errors.New("public base URL is required")
	}
	if c.Version == "" {
		c.Version = "0.0.0"
	}
	if c.ActiveWindow <= 0 {
		c.ActiveWindow = defaults.ActiveWindow
	}
	if c.SSEWriteTimeout <= 0 {
		c.SSEWriteTimeout = defaults.SSEWriteTimeout
	}
	if c.DebugTraces <= 0 {
		c.DebugTraces = defaults.DebugTraces
	}
	if c.ConfirmationTimeout <= 0 {
		c.ConfirmationTimeout = defaults.ConfirmationTimeout
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = defaults.MaxMessageBytes
	}
	if c.MaxOtherBodyBytes <= 0 {
		c.MaxOtherBodyBytes = defaults.MaxOtherBytes
	}
	if c.BodyReadTimeout <= 0 {
		c.BodyReadTimeout = defaults.BodyReadTimeout
	}
	if c.TurnWait <= 0 {
		c.TurnWait = defaults.TurnWait
	}
	if c.LiveConnsPerUser <= 0 {
		c.LiveConnsPerUser = defaults.LiveConnsPerUser
	}
	if c.LiveWriteTimeout <= 0 {
		c.LiveWriteTimeout = defaults.LiveWriteTimeout
	}
	if c.LiveIdleTimeout <= 0 {
		c.LiveIdleTimeout = defaults.LiveIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Description == "" {
		c.Description = DefaultDescription
	}
	return nil
}

// Server is the sidecar's HTTP surface. Create it with New, serve it with
// Serve (or mount Handler), and Close it when done.
type Server struct {
	cfg      Config
	log      *slog.Logger
	handler  http.Handler
	agent    agent.Agent
	control  *gooseagent.Controller
	sessions *sessionService
	// adkSessions is sessions as ADK's servers see it: a delete also
	// reaches goose and releases what the agent holds for the session.
	adkSessions session.Service
	sessDBs     []*sql.DB
	usage       *UsageStore
	activity    *activity
	metrics     *metrics
	a2aExec     *drainingExecutor
	tasks       taskstore.Store
	turns       *turnGate
	live        *liveConns

	// stop is cancelled (cause ErrDraining) when the drain timeout ends:
	// request contexts and A2A executions are linked to it, so open streams
	// end with an error event or a FAILED task while their connections are
	// still up to carry it.
	stop       context.Context
	cancelStop context.CancelCauseFunc
	inflight   sync.WaitGroup
	closeOnce  sync.Once
	// sweeper is the workspace retention loop, ended by stop.
	sweeper sync.WaitGroup

	ledger *budget.Ledger
	budget *budget.Budget
	// budgetDone closes when the budget's sync loop has stopped.
	budgetDone chan struct{}
	// untrace unregisters the web UI's span store from the TracerProvider.
	untrace func()
}

// New builds the server: opens the SQLite stores in DataDir, builds the goose
// agent, adkrest, and the A2A handlers.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.fillDefaults(); err != nil {
		return nil, fmt.Errorf("failed to configure server: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("failed to create data dir: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, turns: newTurnGate(), live: newLiveConns(cfg.LiveConnsPerUser)}
	s.stop, s.cancelStop = context.WithCancelCause(context.WithoutCancel(ctx))

	ok := false
	defer func() {
		if !ok {
			_ = s.Close()
		}
	}()

	var err error
	var sessions *sessionService
	s.sessDBs, sessions, err = openSessionService(ctx, filepath.Join(cfg.DataDir, SessionsDBFile))
	if err != nil {
		return nil, err
	}
	s.sessions = sessions
	// gooseagent trusts a goose session id kept under the unscoped key of
	// versions before ids were scoped by agent only once it has found, in
	// the history, the event that set it: such a session's run loads it all.
	sessions.needsHistory = func(sess session.Session) bool {
		st := sess.State()
		if _, err := st.Get(gooseagent.SessionIDStateKey(cfg.AppName)); err == nil {
			return false
		}
		_, err := st.Get(gooseagent.StateKeySessionID)
		return err == nil
	}
	s.usage, err = OpenUsageStore(ctx, filepath.Join(cfg.DataDir, UsageDBFile))
	if err != nil {
		return nil, err
	}

	s.metrics = newMetrics()
	s.metrics.countUsers(func() (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return s.countUsers(ctx)
	})
	if err := s.openBudget(ctx); err != nil {
		return nil, err
	}
	s.activity = newActivity(s.metrics)
	var workspaces gooseagent.Workspaces
	if ws := cfg.Workspaces; ws != nil {
		workspaces = ws
		sessions.onDelete(func(ctx context.Context, req *session.DeleteRequest) {
			if err := ws.Remove(ctx, req.UserID, req.SessionID); err != nil {
				// The session is gone; its directory ages out with the retention.
				s.log.WarnContext(ctx, "failed to remove the deleted session's workspace",
					"adk_session", req.SessionID, "error", err)
			}
		})
		s.sweeper.Go(func() { ws.Run(s.stop, workspace.SweepInterval(ws.Retention())) })
	}
	s.agent, s.control, err = gooseagent.NewWithController(gooseagent.Config{
		Name:                cfg.AppName,
		Description:         cfg.Description,
		Backend:             cfg.Backend,
		StartOptions:        cfg.StartOptions,
		Store:               s.budget.Store(s.usage),
		Observer:            s.activity,
		Logger:              cfg.Logger,
		ConfirmationTimeout: cfg.ConfirmationTimeout,
		SessionService:      s.sessions,
		Workspaces:          workspaces,
		TracerProvider:      tracerProvider(cfg.TracerProvider),
		StartGooseOnCreate:  cfg.StartGooseOnCreate,
		EarlySessions:       s.usage,
		IdleSessions:        cfg.IdleSessions,
		AdmitLiveTurn:       s.admitLiveTurn,
	})
	if err != nil {
		return nil, err
	}
	// Read before this process starts any: what is listed now, an earlier
	// process started and did not delete (it died, or goose was down).
	leftEarly, err := s.usage.ListEarly(ctx)
	if err != nil {
		return nil, err
	}
	if len(leftEarly) > 0 {
		s.sweeper.Go(func() { s.deleteLeftEarly(leftEarly) })
	}
	// Deleting an ADK session (the REST route) also deletes its goose
	// session and releases what the agent holds for it, so the same id
	// created again starts a fresh goose conversation.
	s.adkSessions = s.control.SessionService(s.sessions)

	rest, err := adkrest.NewServer(adkrest.ServerConfig{
		SessionService:  s.adkSessions,
		AgentLoader:     agent.NewSingleLoader(s.agent),
		SSEWriteTimeout: cfg.SSEWriteTimeout,
		DebugConfig:     adkrest.DebugTelemetryConfig{TraceCapacity: cfg.DebugTraces},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create ADK REST server: %w", err)
	}
	if tp := cfg.TracerProvider; tp != nil {
		debug := rest.SpanProcessor()
		tp.RegisterSpanProcessor(debug)
		s.untrace = func() { tp.UnregisterSpanProcessor(debug) }
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /stats", s.stats)
	mux.HandleFunc("GET "+identity.WhoAmIPath, s.whoAmI)
	mux.Handle("GET /metrics", s.metrics.handler())
	if err := s.mountA2A(mux); err != nil {
		return nil, err
	}
	mux.Handle("/", s.guardSessions(s.guardRuns(rest)))
	mux.Handle("GET "+LivePath, s.guardLive(rest))
	mux.Handle("GET "+peering.OwnerPath, peering.OwnerHandler(s, s.log))
	mux.Handle("GET "+budget.UsagePath, s.budget.Handler())

	var h http.Handler = mux
	if cfg.Peers != nil {
		h = peering.New(peering.Config{
			AppName:      cfg.AppName,
			A2APaths:     []string{A2APathV1, A2APathV03},
			Owner:        s,
			Peers:        cfg.Peers,
			Self:         cfg.PeerURL,
			Token:        cfg.AuthToken,
			MaxBodyBytes: cfg.MaxMessageBytes,
			RunKey:       runPeerKey,
			Forwarded:    func(outcome string) { s.metrics.peerLookups.WithLabelValues(outcome).Inc() },
			Tracer:       tracerProvider(cfg.TracerProvider).Tracer(TracerName),
			Logger:       s.log,
		}).Wrap(h)
	}
	h = s.ownUser(h)
	h = jsonErrors(h)
	h = decodeRuns(h)
	limits := bodyLimits{message: cfg.MaxMessageBytes, other: cfg.MaxOtherBodyBytes, timeout: cfg.BodyReadTimeout}
	h = noteRPCID(h)
	h = limits.buffer(h)
	if cfg.TracerProvider != nil {
		h = traceTurns(h, cfg.TracerProvider)
	}
	h = authenticate(h, cfg.AuthToken, cfg.Identity, s.log)
	h = liveEntry(h, cfg.CORSOrigins)
	h = limits.readDeadline(h)
	h = cors(h, cfg.CORSOrigins)
	h = s.meterAndDrain(h)
	h = recoverPanics(h, s.log)
	s.handler = h
	ok = true
	return s, nil
}

// Handler is the server's http.Handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Agent is the goose agent the server runs.
func (s *Server) Agent() agent.Agent { return s.agent }

// SessionService is the ADK session service (SQLite). It wraps adk-go's
// database service, so database.AutoMigrate does not accept it (New has
// migrated the database already).
func (s *Server) SessionService() session.Service { return s.adkSessions }

// Serve serves on ln until ctx is done, then drains: it stops accepting,
// lets running requests and streams finish for up to drain, then ends what
// is left cleanly (an SSE error frame / a FAILED A2A task) and returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("serving", "addr", ln.Addr().String(), "app", s.cfg.AppName, "auth", s.authMode())

	select {
	case err := <-errc:
		return fmt.Errorf("failed to serve: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("draining", "timeout", drain.String())
	// Shutdown does not see hijacked connections: live sockets close here,
	// each once its running turn has ended.
	s.live.drain()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	s.closeAgent(dctx)
	err := srv.Shutdown(dctx)
	// A2A executions run detached from their HTTP requests, so Shutdown does
	// not wait for them; they get the rest of the drain window.
	if err == nil {
		err = s.a2aExec.wait(dctx)
	}
	if err != nil {
		s.log.Warn("drain timeout reached, ending open streams")
	}
	s.cancelStop(ErrDraining)
	// Streams now end by themselves; give them a moment to send their last
	// frame before the connections are closed.
	gctx, cancel2 := context.WithTimeout(context.Background(), lastFrameGrace)
	defer cancel2()
	if err := srv.Shutdown(gctx); err != nil {
		_ = srv.Close()
	}
	_ = s.a2aExec.wait(gctx)
	_ = waitgroup.Wait(gctx, &s.inflight)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("server stopped with an error", "error", err)
	}
	s.log.Info("stopped")
	return nil
}

// Drain readies the server for goose to stop; a pod's goose asks for it in
// its preStop hook (internal/prestop), because goose serve ends every turn
// at once on SIGTERM. /readyz answers 503, a new turn (a run, an A2A
// message, a session write) is refused with 503 and Retry-After, held tool
// confirmations are denied as Serve's drain denies them, and Drain returns
// once no turn is running. When ctx ends first, the turns still running
// are ended with an ErrDraining error event. Serve still drains the
// connections when its own context ends.
func (s *Server) Drain(ctx context.Context) error {
	idle := s.turns.drain()
	s.log.Info("draining turns before goose stops")
	s.live.drain()
	s.closeAgent(ctx)
	select {
	case <-idle:
		s.log.Info("drained: no turn is running")
		return nil
	case <-ctx.Done():
	}
	s.log.Warn("drain timeout reached, ending the turns still running")
	s.cancelStop(ErrDraining)
	gctx, cancel := context.WithTimeout(context.Background(), lastFrameGrace)
	defer cancel()
	select {
	case <-idle:
		return nil
	case <-gctx.Done():
		return fmt.Errorf("failed to end the running turns: %w", gctx.Err())
	}
}

// deleteLeftEarly deletes the goose sessions an earlier process started
// early and left (gooseagent.Controller.DeleteLeftEarly), again while goose
// is unavailable (it may start after this sidecar), until the server stops.
func (s *Server) deleteLeftEarly(ids []string) {
	s.log.Info("deleting goose sessions an earlier adk2goose process started early and left", "sessions", len(ids))
	wait := time.Second
	for {
		var err error
		if ids, err = s.control.DeleteLeftEarly(s.stop, ids); len(ids) == 0 {
			return
		}
		s.log.Info("goose is not reachable yet to delete the sessions an earlier process left; trying again", "sessions", len(ids), "error", err)
		select {
		case <-s.stop.Done():
			return // they stay listed for the next start
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// lastFrameGrace is how long streams ended by a drain's timeout get to send
// their error event.
const lastFrameGrace = 5 * time.Second

// closeAgent tells goose at once (deny, then cancel) about the tool
// approvals held for an answer: they are not requests, and nobody can
// answer them once the server stops taking turns. It also deletes the goose
// sessions started early for ADK sessions that ran no turn, which nothing
// would reach after this process (gooseagent.Controller.Close).
func (s *Server) closeAgent(ctx context.Context) {
	if err := s.control.Close(ctx); err != nil {
		s.log.Warn("failed to close the goose agent's pending work", "error", err)
	}
}

// Close cancels anything still running and closes the stores.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.cancelStop(ErrDraining)
		if s.control != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = errors.Join(err, s.control.Close(ctx))
			cancel()
		}
		if s.a2aExec != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.a2aExec.wait(ctx)
			cancel()
		}
		s.sweeper.Wait()
		if s.usage != nil {
			err = errors.Join(err, s.usage.Close())
		}
		err = errors.Join(err, s.closeBudget())
		if s.untrace != nil {
			s.untrace()
		}
		for _, db := range s.sessDBs {
			err = errors.Join(err, db.Close())
		}
	})
	return err
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	jsonhttp.Write(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.turns.isDraining() {
		jsonhttp.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "draining", "reason": errDraining.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := s.cfg.Backend.Health(ctx); err != nil {
		jsonhttp.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "goose: " + err.Error()})
		return
	}
	jsonhttp.Write(w, http.StatusOK, map[string]string{"status": "ok", "goose": string(s.cfg.Backend.Flavor())})
}

func recoverPanics(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v))
				jsonhttp.Write(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}
