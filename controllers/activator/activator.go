// Package activator answers for parked GooseAgents. While an agent is
// parked its Service has no selector and an EndpointSlice sends its traffic
// to the manager's pods, where the activator runs in every replica (not
// only the leader). A request is authenticated exactly as the agent's
// sidecar would (sidecar/server's Door, the same token or identity mode);
// the probes and the A2A agent card are answered here without waking
// anything. Any other request is held, the agent is woken once per burst
// (the wake-requested-at annotation, which the reconciler acts on), and the
// request goes on to a ready pod as soon as there is one, streams flushed
// event by event. Requests beyond the per-agent bound, or still waiting
// after the hold timeout, get 503 with Retry-After. An awake agent's Service
// keeps its selector, so its traffic never passes through here.
//
// This is Knative's activator in small: like it, the activator holds
// requests and forwards them to a pod once one is ready; unlike it, it is
// on the path only while the agent is parked.
package activator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/activator/servicehost"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/jsonhttp"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// The activator reads agents, their pods and Services from the manager's
// cache, reads the agent's token Secret (through package references) and
// writes the wake request on the agent; in the kubernetes auth mode it
// reviews callers' tokens as the sidecar does.
// +kubebuilder:rbac:groups=agents.adk2goose.dev,resources=gooseagents,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods;services,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Defaults of Config.
const (
	DefaultMaxHeld     = 256
	DefaultHoldTimeout = 2 * time.Minute
	// DefaultDoors is how many agents' authentication (token, verifier with
	// its caches, card) are kept between requests.
	DefaultDoors = 1024
)

// retryAfter is the Retry-After of a 503 for a full hold or a timeout;
// retryAfterParked that of a manually parked agent, which only a person
// wakes.
const (
	retryAfter       = "5"
	retryAfterParked = "60"
)

// Codes of the activator's JSON errors ({"error", "code", "detail"}, as the
// sidecar writes them).
const (
	codeUnknownAgent = "AGENT_NOT_FOUND"
	codeParked       = "AGENT_PARKED"
	codeHoldFull     = "TOO_MANY_HELD"
	codeWakeTimeout  = "WAKE_TIMEOUT"
	codeWakeFailed   = "WAKE_FAILED"
	codeAuthUnknown  = "AUTH_UNAVAILABLE"
	codeStopping     = "ACTIVATOR_STOPPING"
	codeBadGateway   = "BAD_GATEWAY"
)

// Tokens reads an agent's sidecar token (references.Tracker).
type Tokens interface {
	SidecarToken(ctx context.Context, a *agentsv1alpha1.GooseAgent) (string, error)
}

// Config configures New.
type Config struct {
	// Addr is the listen address, e.g. :8085.
	Addr string
	// Client reads GooseAgents, Pods and Services (from the manager's
	// cache) and patches GooseAgents. Required.
	Client client.Client
	// Cache is the manager's cache, for the pod events that end a hold.
	// Required.
	Cache cache.Cache
	// Tokens reads the agents' sidecar tokens. Required.
	Tokens Tokens
	// REST reaches the API server for the kubernetes auth mode's reviews.
	// Required.
	REST *rest.Config
	// MaxHeld bounds the requests held per agent. Default DefaultMaxHeld.
	MaxHeld int
	// HoldTimeout is how long a request waits for a ready pod. Default
	// DefaultHoldTimeout.
	HoldTimeout time.Duration
	// CardVersion is the agent card's version, as the sidecar's binary
	// gives it.
	CardVersion string
	// Doors bounds the agents whose authentication is kept. Default
	// DefaultDoors.
	Doors int
	// Transport reaches the pods. Default: a clone of
	// http.DefaultTransport that never uses an HTTP proxy.
	Transport http.RoundTripper
	// Logger defaults to a discarding one.
	Logger logr.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Activator is the manager runnable; see the package comment.
type Activator struct {
	cfg   Config
	log   logr.Logger
	slog  *slog.Logger
	doors *doors
	proxy http.Handler

	mu sync.Mutex
	// holds has an entry per agent with requests held (and none other).
	holds map[types.NamespacedName]*hold

	// stopping is closed when Start's context ends: held requests are
	// answered at once, so that clients retry on another replica.
	stopping chan struct{}
	// ctx lives as long as Start: the verifiers' background work uses it.
	ctx context.Context

	listening chan struct{}
	addr      net.Addr
}

var (
	_ manager.Runnable               = (*Activator)(nil)
	_ manager.LeaderElectionRunnable = (*Activator)(nil)
)

// New returns an Activator; add it to the manager with SetupWithManager.
func New(cfg Config) (*Activator, error) {
	switch {
	case cfg.Client == nil, cfg.Cache == nil, cfg.Tokens == nil, cfg.REST == nil:
		return nil, errors.New("failed to create activator: Client, Cache, Tokens and REST are required")
	case cfg.Addr == "":
		return nil, errors.New("failed to create activator: no listen address")
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	if cfg.HoldTimeout <= 0 {
		cfg.HoldTimeout = DefaultHoldTimeout
	}
	if cfg.Doors <= 0 {
		cfg.Doors = DefaultDoors
	}
	if cfg.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		// A burst goes to one pod at once.
		t.MaxIdleConnsPerHost = 64
		cfg.Transport = t
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = logr.Discard()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Activator{
		cfg:       cfg,
		log:       cfg.Logger,
		slog:      slog.New(logr.ToSlogHandler(cfg.Logger)),
		holds:     map[types.NamespacedName]*hold{},
		stopping:  make(chan struct{}),
		listening: make(chan struct{}),
		ctx:       context.Background(),
	}
	d, err := newDoors(cfg.Doors)
	if err != nil {
		return nil, err
	}
	a.doors = d
	a.proxy = newProxy(cfg.Transport, a.slog)
	return a, nil
}

// Cache indexes: agents by name (a Host of a bare Service name names no
// namespace) and Services by ClusterIP (a Host that is an address).
const (
	indexAgentName = "activator.metadata.name"
	indexClusterIP = "activator.spec.clusterIPs"
)

// SetupWithManager adds the activator's cache indexes and the activator
// itself to mgr.
func (a *Activator) SetupWithManager(ctx context.Context, mgr manager.Manager) error {
	if err := indexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.Add(a); err != nil {
		return fmt.Errorf("failed to add activator to manager: %w", err)
	}
	return nil
}

func indexFields(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &agentsv1alpha1.GooseAgent{}, indexAgentName, func(o client.Object) []string {
		return []string{o.GetName()}
	}); err != nil {
		return fmt.Errorf("failed to index GooseAgents by name: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Service{}, indexClusterIP, func(o client.Object) []string {
		svc, ok := o.(*corev1.Service)
		if !ok {
			return nil
		}
		var ips []string
		for _, ip := range svc.Spec.ClusterIPs {
			if ip != "" && ip != corev1.ClusterIPNone {
				ips = append(ips, ip)
			}
		}
		return ips
	}); err != nil {
		return fmt.Errorf("failed to index Services by ClusterIP: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica answers, so that a parked
// agent's slice can list them all.
func (a *Activator) NeedLeaderElection() bool { return false }

// Addr is the address the activator listens on, once it does (Listening).
func (a *Activator) Addr() net.Addr {
	<-a.listening
	return a.addr
}

// Listening is closed once the activator accepts connections.
func (a *Activator) Listening() <-chan struct{} { return a.listening }

// shutdownGrace is how long forwarded streams get to finish when the
// manager stops.
const shutdownGrace = 20 * time.Second

// Start serves until ctx ends.
func (a *Activator) Start(ctx context.Context) error {
	a.ctx = ctx
	inf, err := a.cfg.Cache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("failed to watch pods: %w", err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.podChanged(obj) },
		UpdateFunc: func(_, obj any) { a.podChanged(obj) },
		DeleteFunc: func(obj any) { a.podChanged(obj) },
	})
	if err != nil {
		return fmt.Errorf("failed to watch pods: %w", err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	// The other informers start now, not on a first request.
	for _, obj := range []client.Object{&agentsv1alpha1.GooseAgent{}, &corev1.Service{}} {
		if _, err := a.cfg.Cache.GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("failed to watch %T: %w", obj, err)
		}
	}

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", a.cfg.Addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", a.cfg.Addr, err)
	}
	srv := &http.Server{
		Handler:           a,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.slog.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	a.addr = ln.Addr()
	close(a.listening)
	a.log.Info("activator serving", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("failed to serve activator: %w", err)
	case <-ctx.Done():
	}
	close(a.stopping)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-errc
	if t, ok := a.cfg.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return nil
}

// ServeHTTP finds the agent the request's Host names and lets the agent's
// door (its authentication) pass the request on.
func (a *Activator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, err := a.agentFor(ctx, r.Host)
	if err != nil {
		a.log.V(1).Info("no agent for host", "host", r.Host, "reason", err.Error())
		server.WriteError(w, r, http.StatusNotFound, codeUnknownAgent, err.Error())
		return
	}
	var ga agentsv1alpha1.GooseAgent
	if err := a.cfg.Client.Get(ctx, key, &ga); err != nil {
		msg := fmt.Sprintf("failed to get GooseAgent %s: %v", key, err)
		if apierrors.IsNotFound(err) {
			msg = fmt.Sprintf("no GooseAgent %s", key)
		}
		server.WriteError(w, r, http.StatusNotFound, codeUnknownAgent, msg)
		return
	}
	if !ga.DeletionTimestamp.IsZero() {
		server.WriteError(w, r, http.StatusNotFound, codeUnknownAgent, fmt.Sprintf("GooseAgent %s is being deleted", key))
		return
	}
	d, err := a.doorFor(ctx, &ga)
	if err != nil {
		// Without the agent's credentials nobody can be told apart: refuse
		// rather than let anyone in.
		a.log.Error(err, "cannot authenticate requests", "agent", key.String())
		w.Header().Set("Retry-After", retryAfter)
		server.WriteError(w, r, http.StatusServiceUnavailable, codeAuthUnknown, fmt.Sprintf("cannot authenticate requests to %s now", key))
		return
	}
	// The door drops an api_key query parameter it accepted, as the
	// sidecar does before its handlers; the pod must get it again.
	ctx = context.WithValue(ctx, requestKey{}, &request{agent: &ga, rawQuery: r.URL.RawQuery})
	d.handler.ServeHTTP(w, r.WithContext(ctx))
}

type requestKey struct{}

// request is what ServeHTTP learned, for the handlers behind the door.
type request struct {
	agent    *agentsv1alpha1.GooseAgent
	rawQuery string
}

func requestOf(r *http.Request) *request {
	v, _ := r.Context().Value(requestKey{}).(*request)
	return v
}

// serve handles what passed the agent's door: open routes and preflights,
// which never wake the agent, and authenticated requests.
func (a *Activator) serve(w http.ResponseWriter, r *http.Request, d *door) {
	req := requestOf(r)
	ga := req.agent
	pod, err := a.readyPod(r.Context(), ga)
	if err != nil {
		w.Header().Set("Retry-After", retryAfter)
		server.WriteError(w, r, http.StatusServiceUnavailable, codeWakeFailed, err.Error())
		return
	}
	if pod != nil {
		a.forward(w, r, req, pod)
		return
	}
	if server.IsOpenPath(r.URL.Path) || r.Method == http.MethodOptions {
		a.serveOpen(w, r, d)
		return
	}
	if ga.Spec.Idle != nil && ga.Spec.Idle.Parked {
		w.Header().Set("Retry-After", retryAfterParked)
		server.WriteError(w, r, http.StatusServiceUnavailable, codeParked,
			fmt.Sprintf("GooseAgent %s/%s is parked by hand (spec.idle.parked); requests do not wake it", ga.Namespace, ga.Name))
		return
	}
	a.hold(w, r, req)
}

// serveOpen answers the open routes and preflights of an agent with no
// ready pod, as a parked sidecar would.
func (a *Activator) serveOpen(w http.ResponseWriter, r *http.Request, d *door) {
	switch {
	case r.Method == http.MethodOptions:
		// Allowed origins' preflights were answered by the door.
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/readyz":
		jsonhttp.Write(w, http.StatusServiceUnavailable, map[string]string{"status": "parked", "reason": "the agent is parked: no pod runs"})
	case r.URL.Path == "/healthz" || r.URL.Path == "/health":
		jsonhttp.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	default:
		d.card.ServeHTTP(w, r)
	}
}

// agentFor is the agent r.Host names (servicehost.Parse).
func (a *Activator) agentFor(ctx context.Context, hostport string) (types.NamespacedName, error) {
	h, err := servicehost.Parse(hostport)
	switch {
	case err != nil:
		return types.NamespacedName{}, err
	case h.IP != "":
		return a.agentByClusterIP(ctx, h.IP)
	case h.Namespace == "":
		return a.agentByName(ctx, h.Name)
	}
	return types.NamespacedName{Namespace: h.Namespace, Name: h.Name}, nil
}

func (a *Activator) agentByName(ctx context.Context, name string) (types.NamespacedName, error) {
	var list agentsv1alpha1.GooseAgentList
	if err := a.cfg.Client.List(ctx, &list, client.MatchingFields{indexAgentName: name}); err != nil {
		return types.NamespacedName{}, fmt.Errorf("failed to look up GooseAgent %s: %w", name, err)
	}
	switch len(list.Items) {
	case 0:
		return types.NamespacedName{}, fmt.Errorf("no GooseAgent named %q", name)
	case 1:
		return client.ObjectKeyFromObject(&list.Items[0]), nil
	}
	return types.NamespacedName{}, fmt.Errorf("GooseAgents named %q exist in %d namespaces: name the namespace (%s.<namespace>)", name, len(list.Items), name)
}

func (a *Activator) agentByClusterIP(ctx context.Context, ip string) (types.NamespacedName, error) {
	var list corev1.ServiceList
	if err := a.cfg.Client.List(ctx, &list, client.MatchingFields{indexClusterIP: ip}); err != nil {
		return types.NamespacedName{}, fmt.Errorf("failed to look up the Service of %s: %w", ip, err)
	}
	for i := range list.Items {
		svc := &list.Items[i]
		if svc.Labels[render.LabelManagedBy] == render.ManagedBy && svc.Labels[render.LabelInstance] == svc.Name {
			return types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, nil
		}
	}
	return types.NamespacedName{}, fmt.Errorf("no agent's Service has address %s", ip)
}

// readyPod is a ready pod of the agent, nil when none is.
func (a *Activator) readyPod(ctx context.Context, ga *agentsv1alpha1.GooseAgent) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := a.cfg.Client.List(ctx, &pods, client.InNamespace(ga.Namespace), client.MatchingLabels(render.SelectorLabels(ga))); err != nil {
		return nil, fmt.Errorf("failed to list the pods of %s/%s: %w", ga.Namespace, ga.Name, err)
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp.IsZero() && p.Status.PodIP != "" && podReady(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return nil, nil
	}
	return ready[a.pick(len(ready))], nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
