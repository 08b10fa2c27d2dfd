// Command manager runs the goose-operator: it reconciles GooseAgents into goose
// server pods with the adk2goose sidecar.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	activatorsrv "github.com/adk2goose/goose-operator/controllers/activator"
	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/controllers/stats"
	"github.com/adk2goose/goose-operator/internal/memorylimit"
)

// DefaultGooseImage is the official goose image, pinned: the ACP transport
// changed between releases. goose publishes images only for pushed v*.*.*
// tags (.github/workflows/publish-docker.yml); this tag is one seen in use:
// public build notes dated 2026-09-11 rebase onto
// ghcr.io/aaif-goose/goose:v1.48.0 and measure it (496 MB; goose, git, curl
// and bash, no node or python). It is the one place naming the default:
// config/manager, the chart's values and docs/operations.md are checked against it
// by TestDefaultGooseImageIsNamedOnce.
const DefaultGooseImage = "ghcr.io/aaif-goose/goose:v1.48.0"

// version is set at build time with -ldflags "-X main.version=…", as
// adk2goose's is: the activator's agent cards name it, as the sidecar's do.
var version = "dev"

// DefaultSidecarImage is the adk2goose image built with this operator.
const DefaultSidecarImage = "ghcr.io/adk2goose/adk2goose:dev"

type options struct {
	gooseImage, sidecarImage    string
	metricsAddr, probeAddr      string
	pprofAddr                   string
	secureMetrics, enableHTTP2  bool
	leaderElect                 bool
	leaderElectionID            string
	leaderElectionNamespace     string
	concurrency                 int
	qps                         float64
	burst                       int
	statsInterval, statsTimeout time.Duration
	statsConcurrency            int
	activatorAddr               string
	activatorSelector           string
	activatorMaxHeld            int
	activatorHoldTimeout        time.Duration
	zap                         zap.Options
}

func parse(args []string, out io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.gooseImage, "goose-image", DefaultGooseImage, "goose image for agents with flavor serve and no spec.server.image")
	fs.StringVar(&o.sidecarImage, "adk2goose-image", DefaultSidecarImage, "adk2goose sidecar image for agents without spec.sidecar.image")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "address of the metrics endpoint (:8443 for HTTPS, :8080 for HTTP); 0 disables it")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true, "serve metrics over HTTPS with Kubernetes authentication and authorization")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "allow HTTP/2 on the metrics server (off: HTTP/2 rapid-reset mitigations)")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "address of Go's /debug/pprof endpoints, unauthenticated: bind it to localhost and port-forward; 0 disables it")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader so that only one manager replica reconciles")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "goose-operator.agents.adk2goose.dev", "name of the leader election Lease")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the manager's namespace)")
	fs.IntVar(&o.concurrency, "max-concurrent-reconciles", 16, "GooseAgents reconciled in parallel")
	// client-go's default of 5 QPS would make creating hundreds of agents
	// (about nine requests each) take minutes; at 50, 10,000 agents take
	// half an hour whatever the apiserver can do.
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "sustained requests per second to the apiserver")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "request burst to the apiserver")
	fs.DurationVar(&o.statsInterval, "stats-interval", stats.DefaultInterval, "how often each agent's sidecars are asked for session and token figures")
	fs.DurationVar(&o.statsTimeout, "stats-timeout", 2*time.Second, "timeout of one sidecar /stats request")
	fs.IntVar(&o.statsConcurrency, "stats-max-concurrent", 64, "sidecar /stats requests in flight at once, across all agents")
	fs.StringVar(&o.activatorAddr, "activator-bind-address", "0", "address of the activator, which holds requests for parked agents and wakes them (:8085 in the install and the chart); 0 turns it off")
	fs.StringVar(&o.activatorSelector, "activator-pod-selector", "app.kubernetes.io/name=goose-operator,app.kubernetes.io/component=manager",
		"label selector of the manager's own pods in its namespace (env POD_NAMESPACE): a parked agent's Service points at the ready ones, on the activator's port")
	fs.IntVar(&o.activatorMaxHeld, "activator-max-held", activatorsrv.DefaultMaxHeld, "requests the activator holds per parked agent while it wakes; more get 503")
	fs.DurationVar(&o.activatorHoldTimeout, "activator-hold-timeout", activatorsrv.DefaultHoldTimeout, "how long the activator holds a request for a waking agent before it answers 503")
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.concurrency < 1 {
		return nil, errors.New("--max-concurrent-reconciles must be at least 1")
	}
	if o.statsInterval < time.Second || o.statsTimeout <= 0 || o.statsConcurrency < 1 {
		return nil, errors.New("--stats-interval must be at least 1s, --stats-timeout positive and --stats-max-concurrent at least 1")
	}
	if _, err := labels.Parse(o.activatorSelector); err != nil {
		return nil, fmt.Errorf("--activator-pod-selector: %w", err)
	}
	if _, err := activatorPort(o.activatorAddr); err != nil {
		return nil, err
	}
	if o.activatorMaxHeld < 1 || o.activatorHoldTimeout <= 0 {
		return nil, errors.New("--activator-max-held must be at least 1 and --activator-hold-timeout positive")
	}
	if o.gooseImage == "" || o.sidecarImage == "" {
		return nil, errors.New("--goose-image and --adk2goose-image must not be empty")
	}
	return o, nil
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("failed to add client-go types to scheme: %w", err)
	}
	if err := agentsv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("failed to add GooseAgent types to scheme: %w", err)
	}
	return s, nil
}

func run(ctx context.Context, args []string) error {
	o, err := parse(args, os.Stderr)
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	// The manager's cache grows with the agents; near the container's limit
	// the GC works harder instead of the pod being OOM-killed.
	if _, err := memorylimit.Set(ctx, slog.New(logr.ToSlogHandler(ctrl.Log.WithName("memory-limit"))), memlimit.FromCgroup); err != nil {
		ctrl.Log.Info("failed to give the Go runtime the container's memory limit; its GC does not know it", "error", err.Error())
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	var tlsOpts []func(*tls.Config)
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.secureMetrics, TLSOpts: tlsOpts}
	if o.secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		// The manager exits right after losing the lease, so a new leader can
		// start without waiting for this one's reconciles to drain.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	refs, err := references.ForManager(mgr)
	if err != nil {
		return err
	}
	statsMetrics, err := stats.NewMetrics(metrics.Registry)
	if err != nil {
		return fmt.Errorf("failed to register stats metrics: %w", err)
	}
	sr := &stats.Reconciler{
		Client:     mgr.GetClient(),
		References: refs,
		Collector:  stats.New(stats.Options{Timeout: o.statsTimeout, MaxConcurrent: o.statsConcurrency}),
		Interval:   o.statsInterval,
		Metrics:    statsMetrics,
	}
	if err := sr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up GooseAgent stats controller: %w", err)
	}
	act, err := activator(o, os.Getenv("POD_NAMESPACE"))
	if err != nil {
		return err
	}
	r := &controllers.GooseAgentReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		References:              refs,
		Recorder:                mgr.GetEventRecorder("goose-operator"),
		Defaults:                render.Defaults{GooseImage: o.gooseImage, SidecarImage: o.sidecarImage, ActivatorPeer: activatorPeer(o, act)},
		MaxConcurrentReconciles: o.concurrency,
		Activity:                sr,
		Activator:               act,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("failed to set up GooseAgent controller: %w", err)
	}
	if err := addActivator(ctx, mgr, o, refs); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add ready check: %w", err)
	}
	ctrl.Log.WithName("setup").Info("starting manager", "gooseImage", o.gooseImage, "adk2gooseImage", o.sidecarImage,
		"leaderElection", o.leaderElect, "activator", o.activatorAddr, "maxConcurrentReconciles", o.concurrency, "statsInterval", o.statsInterval,
		"activatorSlices", act != nil)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("failed to run manager: %w", err)
	}
	return nil
}

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}
