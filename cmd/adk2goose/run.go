package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/adk2goose/goose-operator/cmd/adk2goose/internal/options"
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

func newLogger(o *options.Options, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return nil, fmt.Errorf("failed to parse log level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	switch o.LogFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("unknown log format %q", o.LogFormat)
}

// run is the whole program; main only wires signals. It returns after a
// graceful drain once ctx is done.
func run(ctx context.Context, args []string, getenv func(string) string) error {
	return runWith(ctx, args, getenv, os.Stderr, nil)
}

func runWith(ctx context.Context, args []string, getenv func(string) string, logw io.Writer, onListen func(net.Addr)) error {
	o, err := options.Parse(args, getenv, logw)
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
	secret := o.GooseSecretEnv
	if o.GooseSecretFile != "" {
		if secret, err = secretfile.Read(o.GooseSecretFile, "goose secret"); err != nil {
			return err
		}
	}
	var token string
	if o.AuthTokenFile != "" {
		if token, err = secretfile.Read(o.AuthTokenFile, "auth token"); err != nil {
			return err
		}
	} else {
		log.Warn("inbound auth is disabled")
	}
	var auth identity.Settings
	if o.AuthConfigFile != "" {
		if auth, err = identity.ReadSettings(o.AuthConfigFile); err != nil {
			return err
		}
	}
	verifier, err := auth.Verifier(ctx)
	if err != nil {
		return err
	}

	var backend goose.Backend
	switch goose.Flavor(o.GooseFlavor) {
	case goose.FlavorGoosed:
		backend, err = rest.New(rest.Config{URL: o.GooseURL, SecretKey: secret})
	default:
		backend, err = acp.New(acp.Config{URL: o.GooseURL, SecretKey: secret, ClientName: "adk2goose", ClientVersion: version, Logger: log,
			IdleTimeout: o.GooseIdleTimeout, UnusedIdleTimeout: o.GooseUnusedIdleTimeout})
	}
	if err != nil {
		return fmt.Errorf("failed to create goose client: %w", err)
	}
	defer func() { _ = backend.Close() }() // sessions persist in goose; a failed close loses nothing

	workspaces, err := workspace.New(workspace.Config{
		Root: o.GooseWorkDir, Scope: workspace.Scope(o.WorkspaceScope),
		Retention: o.WorkspaceRetention, SeedDir: o.WorkspaceSeedDir, Logger: log,
	})
	if err != nil {
		return err
	}
	defer func() { _ = workspaces.Close() }() // directories stay; closing only releases the handle

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("failed to listen: %w", err)
	}
	if o.PublicBaseURL == "" {
		// A2A clients require the card's URLs to have the origin they fetched
		// it from; the listen host is the best guess when none is configured.
		host := "localhost"
		if ta := ln.Addr().(*net.TCPAddr); !ta.IP.IsUnspecified() {
			host = ta.IP.String()
		}
		o.PublicBaseURL = "http://" + net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	peers, peerURL := agentPeers(o, ln.Addr().(*net.TCPAddr).Port)
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
	if o.CORSOrigins != "" {
		origins = strings.Split(o.CORSOrigins, ",")
	}
	srv, err := server.New(ctx, server.Config{
		Backend:             backend,
		AppName:             o.AppName,
		Description:         o.Description,
		Version:             version,
		DataDir:             o.DataDir,
		PublicBaseURL:       o.PublicBaseURL,
		AuthToken:           token,
		Identity:            verifier,
		AdminGroups:         auth.AdminGroups,
		CORSOrigins:         origins,
		ActiveWindow:        o.ActiveWindow,
		SSEWriteTimeout:     o.SSEWriteTimeout,
		DebugTraces:         o.DebugTraces,
		ConfirmationTimeout: o.ConfirmationTimeout,
		MaxMessageBytes:     o.MaxMessageBody,
		MaxOtherBodyBytes:   o.MaxOtherBody,
		BodyReadTimeout:     o.BodyReadTimeout,
		TurnWait:            o.TurnWait,
		LiveConnsPerUser:    o.LiveConnsPerUser,
		LiveWriteTimeout:    o.LiveWriteTimeout,
		LiveIdleTimeout:     o.LiveIdleTimeout,
		StartGooseOnCreate:  o.StartGooseOnCreate,
		StartOptions:        goose.StartOptions{WorkingDir: o.GooseWorkDir},
		Peers:               peers,
		PeerURL:             peerURL,
		Workspaces:          workspaces,
		PodName:             o.PodName,
		Budget:              budget.Config{File: o.BudgetFile, SyncInterval: o.BudgetSyncInterval},
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
	log.Info("starting adk2goose", "version", version, "goose_url", o.GooseURL, "goose_flavor", o.GooseFlavor,
		"data_dir", o.DataDir, "public_base_url", o.PublicBaseURL, "app", o.AppName,
		"goose_secret_set", secret != "", "cors_origins", origins, "peers_host", o.PeersHost,
		"workspace", o.GooseWorkDir, "workspace_scope", o.WorkspaceScope, "workspace_retention", o.WorkspaceRetention.String(),
		"budget_file", o.BudgetFile)
	serveCtx, stopServing := context.WithCancelCause(ctx)
	defer stopServing(nil)
	if o.DrainDir != "" {
		stopWatch := drainOnRequest(ctx, log, srv, o, stopServing)
		defer stopWatch()
	}
	// Told once goose's preStop hook would find the drain directory watched.
	if onListen != nil {
		onListen(ln.Addr())
	}
	if err := srv.Serve(serveCtx, ln, o.DrainTimeout); err != nil {
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
func drainOnRequest(ctx context.Context, log *slog.Logger, srv *server.Server, o *options.Options, stopServing context.CancelCauseFunc) (stop func()) {
	if err := prestop.Watch(o.DrainDir); err != nil {
		log.Warn("goose's preStop hook will not wait for running turns", "error", err)
		return func() {}
	}
	return inBackground(ctx, func(ctx context.Context) {
		if prestop.AwaitRequest(ctx, o.DrainDir, drainRequestInterval) != nil {
			return // ctx ended: no drain asked for
		}
		log.Info("goose's preStop hook asks for a drain", "timeout", o.DrainTimeout.String())
		dctx, cancelDrain := context.WithTimeout(ctx, o.DrainTimeout)
		err := srv.Drain(dctx)
		cancelDrain()
		if err != nil {
			log.Warn("failed to drain before goose stops", "error", err)
		}
		if err := prestop.Done(o.DrainDir); err != nil {
			log.Error("goose will stop only when its preStop hook gives up", "error", err)
		}
		t := time.NewTimer(o.DrainStopWait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return // the pod's stop
		case <-t.C:
		}
		if err := prestop.Withdraw(o.DrainDir); err != nil {
			log.Error("the restarted sidecar will drain again", "error", err)
		}
		log.Error("the pod did not stop after a drain", "waited", o.DrainStopWait.String(), "error", errDrainNotFollowed)
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

// agentPeers lists the agent's other sidecars, which listen on port as this
// one does, and gives this one's URL as they list it (empty without a pod
// IP); nil with no peers host: one replica.
func agentPeers(o *options.Options, port int) (peering.Peers, string) {
	if o.PeersHost == "" {
		return nil, ""
	}
	self := ""
	if o.PodIP != "" {
		self = peering.URL(o.PodIP, port)
	}
	return peering.DNSPeers(o.PeersHost, port, o.PodIP), self
}
