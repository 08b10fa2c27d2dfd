// Command managerscale measures whose work it is to converge many
// GooseAgents from cold, and prints a table. Each run gets a fresh control
// plane (envtest), the same agents, and one manager binary, or `bare`: this
// tool applying the same rendered objects with a plain client and nothing
// else, the floor any manager pays.
//
//	go build -o /tmp/manager-old ./cmd/manager   # on the old commit
//	make build
//	KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh) go run ./hack/managerscale \
//	  --manager bare,/tmp/manager-old,bin/manager --agents 1000
//
// The figures come from the apiserver's own metrics (apiserver_request_total
// by verb and resource, the WATCH requests it holds), the manager's /metrics
// (RSS, reconciles of the stats controller) and /proc (the CPU time of
// kube-apiserver and etcd). The tool plays Kubernetes' StatefulSet controller,
// which envtest lacks (cluster.go); its status writes are shown, not counted
// as the manager's. A run converges when every agent's status is at
// its generation. Then the manager is restarted, which reconciles every
// agent again with nothing to change (the no-op resync), and one stats
// interval is watched.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	agentsv1alpha1ac "github.com/adk2goose/goose-operator/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

func main() {
	log.SetLogger(logr.Discard()) // envtest's own logging is not the table
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "managerscale:", err)
		os.Exit(1)
	}
}

type options struct {
	runs          []string
	agents        int
	timeout       time.Duration
	statsInterval time.Duration
	heapProfiles  string
	parked        int
}

func run() error {
	var o options
	var runs string
	flag.StringVar(&runs, "manager", "bare,bin/manager", "comma-separated runs, in order: bare, or a manager as a command line: [ENV=VALUE ...] BINARY [FLAG ...] (e.g. \"GOMEMLIMIT=576MiB bin/manager --kube-api-qps=1000\")")
	flag.IntVar(&o.agents, "agents", 1000, "GooseAgents to converge")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "time allowed for one run to converge")
	flag.DurationVar(&o.statsInterval, "stats-interval", 30*time.Second, "the managers' --stats-interval, and the no-op window")
	flag.StringVar(&o.heapProfiles, "heap-profiles", "", "a directory to save each manager's heap profile in at the end of its run (go tool pprof reads it)")
	flag.IntVar(&o.parked, "parked-percent", 90, "the share of agents parked by hand (spec.idle.parked), as on a platform where most agents are idle")
	flag.Parse()
	o.runs = strings.Split(runs, ",")
	if o.parked < 0 || o.parked > 100 {
		return errors.New("--parked-percent must be between 0 and 100")
	}
	var rows []figures
	for _, r := range o.runs {
		fmt.Fprintf(os.Stderr, "run %s: %d agents\n", r, o.agents)
		f, err := measure(context.Background(), r, o)
		if err != nil {
			return fmt.Errorf("run %s: %w", r, err)
		}
		rows = append(rows, f)
	}
	return printTables(os.Stdout, rows, o)
}

type figures struct {
	run      string
	converge time.Duration
	// cold counts the requests from the start until every agent has a
	// status (bare) or the manager has settled.
	cold, noop, sweep requests
	// settle is when the manager had no work left after a cold start.
	settle time.Duration
	resync time.Duration
	// events counts the Events recorded by convergence, by reason (a
	// series counts each occurrence).
	events          map[string]float64
	watches         float64
	statsReconciles float64
	rss             float64
	// managerCPU is the manager's CPU time from its start until it settled.
	managerCPU         float64
	apiserverCPU, etcd time.Duration
}

func printTables(out io.Writer, rows []figures, o options) error {
	n := float64(o.agents)
	fmt.Fprintf(out, "%d agents, %d%% of them parked by hand (spec.idle.parked)", o.agents, o.parked)
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "run\tagents\tcold converge\tsettled\twrites/agent\treads/agent\twatches\tno-op resync\tno-op writes/agent\tno-op reads/agent\tstats reconciles/interval\trequests/interval\tmanager RSS MiB\tKiB/agent\tmanager CPU s\tapiserver CPU s\tetcd CPU s\n")
	for _, f := range rows {
		if f.run == "bare" {
			fmt.Fprintf(w, "%s\t%d\t%s\t–\t%.2f\t%.2f\t%.0f\t–\t–\t–\t–\t–\t–\t–\t–\t%.1f\t%.1f\n", f.run, o.agents, f.converge.Round(100*time.Millisecond),
				f.cold.writes()/n, f.cold.reads()/n, f.watches, f.apiserverCPU.Seconds(), f.etcd.Seconds())
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%.2f\t%.2f\t%.0f\t%s\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\n", f.run, o.agents, f.converge.Round(100*time.Millisecond), f.settle.Round(100*time.Millisecond),
			f.cold.writes()/n, f.cold.reads()/n, f.watches, f.resync.Round(100*time.Millisecond), f.noop.writes()/n, f.noop.reads()/n,
			f.statsReconciles, f.sweep.writes()+f.sweep.reads(), f.rss/(1<<20), f.rss/1024/n, f.managerCPU, f.apiserverCPU.Seconds(), f.etcd.Seconds())
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nEvents per agent at cold start, by reason:")
	if err := perAgentTable(out, rows, n, func(f figures) map[string]float64 { return f.events }); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nrequests per agent at cold start, by verb and resource (the apiserver's apiserver_request_total; "+playedStatusWrites+" is the tool playing the StatefulSet controller, not counted in writes/agent):")
	if err := perAgentTable(out, rows, n, func(f figures) map[string]float64 { return f.cold }); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nrequests per agent in the no-op resync (the manager restarted), by verb and resource:")
	return perAgentTable(out, rows, n, func(f figures) map[string]float64 { return f.noop })
}

// perAgentTable prints, for every key of any row's counts, each row's count
// divided by n.
func perAgentTable(out io.Writer, rows []figures, n float64, counts func(figures) map[string]float64) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	keys := map[string]bool{}
	for _, f := range rows {
		for k := range counts(f) {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	fmt.Fprintf(w, "key")
	for _, f := range rows {
		fmt.Fprintf(w, "\t%s", f.run)
	}
	fmt.Fprintln(w)
	for _, k := range sorted {
		// Rows that round to 0.00 everywhere say nothing.
		if !slices.ContainsFunc(rows, func(f figures) bool { return counts(f)[k]/n >= 0.005 }) {
			continue
		}
		fmt.Fprint(w, k)
		for _, f := range rows {
			fmt.Fprintf(w, "\t%.2f", counts(f)[k]/n)
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

// requests counts apiserver requests by "VERB resource[/subresource]".
type requests map[string]float64

func (r requests) sum(write bool) float64 {
	var n float64
	for k, v := range r {
		if k == playedStatusWrites {
			continue
		}
		verb, _, _ := strings.Cut(k, " ")
		switch verb {
		case "GET", "LIST":
			if !write {
				n += v
			}
		case "WATCH", "CONNECT":
		default:
			if write {
				n += v
			}
		}
	}
	return n
}

func (r requests) writes() float64 { return r.sum(true) }
func (r requests) reads() float64  { return r.sum(false) }

func (r requests) minus(before requests) requests {
	out := requests{}
	for k, v := range r {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// measure runs one manager (or bare) on a fresh control plane.
func measure(ctx context.Context, runName string, o options) (figures, error) {
	env, err := testenv.New(testenv.WideServiceRange())
	if err != nil {
		return figures{}, err
	}
	defer func() { _ = env.Stop() }()
	if err := populate(ctx, env.Client, o); err != nil {
		return figures{}, err
	}
	cl, err := startCluster(ctx, env)
	if err != nil {
		return figures{}, err
	}
	defer cl.stop()
	api, err := newAPIMetrics(env.Config)
	if err != nil {
		return figures{}, err
	}
	before, _, err := api.requests(ctx)
	if err != nil {
		return figures{}, err
	}
	cpu0 := controlPlaneCPU()
	f := figures{run: runName}
	start := time.Now()
	var mgr *managerProc
	if runName == "bare" {
		if err := bare(ctx, env.Client, o.agents); err != nil {
			return f, err
		}
	} else {
		if mgr, err = startManager(ctx, runName, env.Kubeconfig, o); err != nil {
			return f, err
		}
		defer mgr.stop()
	}
	if err := cl.waitConverged(ctx, o); err != nil {
		return f, err
	}
	f.converge = time.Since(start)
	cpu1 := controlPlaneCPU()
	f.apiserverCPU, f.etcd = cpu1.apiserver-cpu0.apiserver, cpu1.etcd-cpu0.etcd
	after, watches, err := api.requests(ctx)
	if err != nil {
		return f, err
	}
	f.cold, f.watches = after.minus(before), watches
	if f.events, err = eventsByReason(ctx, env.Client); err != nil {
		return f, err
	}
	if mgr == nil {
		return f, nil
	}
	// Settled: the manager has nothing left to do (the work that follows
	// the first status writes, owned objects' events, included), so that
	// the restart below finds no work left from the cold start.
	var settled requests
	if f.settle, settled, err = mgr.settle(ctx, api, o, start); err != nil {
		return f, err
	}
	f.cold = settled.minus(before)
	m, err := mgr.scrape(ctx)
	if err != nil {
		return f, err
	}
	f.managerCPU = m.cpu
	// A restarted manager reconciles every agent with nothing to change.
	fmt.Fprintf(os.Stderr, "  converged in %s, settled in %s; restarting the manager for a no-op resync\n", f.converge.Round(time.Second), f.settle.Round(time.Second))
	mgr.stop()
	start = time.Now()
	if mgr, err = startManager(ctx, runName, env.Kubeconfig, o); err != nil {
		return f, err
	}
	defer mgr.stop()
	var resynced requests
	if f.resync, resynced, err = mgr.settle(ctx, api, o, start); err != nil {
		return f, err
	}
	f.noop = resynced.minus(settled)
	fmt.Fprintf(os.Stderr, "  resynced in %s; watching one stats interval (%s)\n", f.resync.Round(time.Second), o.statsInterval)
	m0, err := mgr.scrape(ctx)
	if err != nil {
		return f, err
	}
	time.Sleep(o.statsInterval) //nolint:forbidigo // the window measured, not a wait for a condition
	end, _, err := api.requests(ctx)
	if err != nil {
		return f, err
	}
	f.sweep = end.minus(resynced)
	m1, err := mgr.scrape(ctx)
	if err != nil {
		return f, err
	}
	f.rss, f.statsReconciles = m1.rss, m1.statsReconciles-m0.statsReconciles
	if o.heapProfiles != "" {
		return f, mgr.saveHeapProfile(ctx, o.heapProfiles, runName)
	}
	return f, nil
}

// agentSpec is the spec of every measured agent: one referenced API-key
// Secret, as most agents have; parked by hand when parked.
func agentSpec(parked bool) agentsv1alpha1.GooseAgentSpec {
	s := agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{
		Name: "openai", Model: "gpt-4o", APIKeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "openai", Key: "api-key"}}}
	if parked {
		s.Idle = &agentsv1alpha1.IdleSpec{Parked: true}
	}
	return s
}

// isParked spreads the parked agents evenly over the names.
func isParked(i int, o options) bool { return i%100 < o.parked }

func agentName(i int) string { return fmt.Sprintf("agent-%05d", i) }

func populate(ctx context.Context, c client.Client, o options) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents"}}); err != nil {
		return fmt.Errorf("failed to create namespace: %w", err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "openai", Namespace: "agents"},
		StringData: map[string]string{"api-key": "sk-test"}}); err != nil {
		return fmt.Errorf("failed to create API-key Secret: %w", err)
	}
	return parallel(o.agents, func(i int) error {
		a := &agentsv1alpha1.GooseAgent{ObjectMeta: metav1.ObjectMeta{Name: agentName(i), Namespace: "agents"}, Spec: agentSpec(isParked(i, o))}
		if err := c.Create(ctx, a); err != nil {
			return fmt.Errorf("failed to create %s: %w", a.Name, err)
		}
		return nil
	})
}

// parallel runs fn for 0..n-1 on 16 workers and returns the first errors.
func parallel(n int, fn func(int) error) error {
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range n {
			next <- i
		}
	}()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// bare applies each agent's rendered children and one status, with a plain
// client: the requests any operator must make, and nothing else.
func bare(ctx context.Context, c client.Client, agents int) error {
	key := map[render.Ref]string{}
	a0 := &agentsv1alpha1.GooseAgent{Spec: agentSpec(false)}
	for _, r := range render.References(a0) {
		key[r] = "sk-test"
	}
	return parallel(agents, func(i int) error {
		a := &agentsv1alpha1.GooseAgent{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "agents", Name: agentName(i)}, a); err != nil {
			return err
		}
		d, err := render.Build(render.Inputs{Agent: a, Defaults: render.Defaults{GooseImage: "goose:bench", SidecarImage: "adk2goose:bench"},
			Generated: render.Generated{GooseSecretKey: token(), AuthToken: token()}, Values: key})
		if err != nil {
			return err
		}
		for _, obj := range d.Objects() {
			if err := c.Apply(ctx, obj, client.FieldOwner(controllers.FieldOwner), client.ForceOwnership); err != nil {
				return fmt.Errorf("failed to apply a child of %s: %w", a.Name, err)
			}
		}
		st := agentsv1alpha1ac.GooseAgentStatus().WithObservedGeneration(a.Generation).
			WithConditions(readyCondition(a))
		ac := agentsv1alpha1ac.GooseAgent(a.Name, a.Namespace).WithStatus(st)
		return c.Status().Apply(ctx, ac, client.FieldOwner(controllers.FieldOwner), client.ForceOwnership)
	})
}

func token() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// apiMetrics reads the apiserver's /metrics.
type apiMetrics struct {
	hc  *http.Client
	url string
}

func newAPIMetrics(cfg *rest.Config) (*apiMetrics, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to make an apiserver client: %w", err)
	}
	return &apiMetrics{hc: hc, url: strings.TrimSuffix(cfg.Host, "/") + "/metrics"}, nil
}

// requests returns apiserver_request_total by verb and resource, and the
// WATCH requests held now.
func (m *apiMetrics) requests(ctx context.Context) (requests, float64, error) {
	out := requests{}
	var watches float64
	err := scrapeURL(ctx, m.hc, m.url, func(name string, labels map[string]string, v float64) {
		switch name {
		case "apiserver_request_total":
			k := labels["verb"] + " " + labels["resource"]
			if s := labels["subresource"]; s != "" {
				k += "/" + s
			}
			out[k] += v
		case "apiserver_longrunning_requests":
			if labels["verb"] == "WATCH" {
				watches += v
			}
		}
	})
	return out, watches, err
}

// scrapeURL calls fn for every sample of a Prometheus text exposition.
func scrapeURL(ctx context.Context, hc *http.Client, url string, fn func(name string, labels map[string]string, v float64)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("failed to read %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		name, rest, _ := strings.Cut(series, "{")
		labels := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
			k, val, ok := strings.Cut(kv, "=")
			if ok {
				labels[k] = strings.Trim(val, `"`)
			}
		}
		fn(name, labels, v)
	}
	return sc.Err()
}

type managerProc struct {
	cmd       *exec.Cmd
	url       string
	pprofAddr string
}

// saveHeapProfile writes the manager's heap profile into dir.
func (p *managerProc) saveHeapProfile(ctx context.Context, dir, run string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.pprofAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("failed to get the heap profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, run)
	path := filepath.Join(dir, name+".heap")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", path, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	fmt.Fprintf(os.Stderr, "  heap profile: %s\n", path)
	return f.Close()
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(ctx context.Context) (string, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("failed to find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// splitCommandLine splits a run such as "GOMEMLIMIT=576MiB bin/manager
// --kube-api-qps=1000" into its leading environment and its argv.
func splitCommandLine(run string) (env, argv []string) {
	fields := strings.Fields(run)
	for len(fields) > 0 && strings.Contains(fields[0], "=") && !strings.HasPrefix(fields[0], "-") {
		env, fields = append(env, fields[0]), fields[1:]
	}
	return env, fields
}

func startManager(ctx context.Context, run, kubeconfig string, o options) (*managerProc, error) {
	addr, err := freeAddr(ctx)
	if err != nil {
		return nil, err
	}
	pprofAddr, err := freeAddr(ctx)
	if err != nil {
		return nil, err
	}
	env, argv := splitCommandLine(run)
	if len(argv) == 0 {
		return nil, fmt.Errorf("run %q names no manager binary", run)
	}
	cmd := exec.CommandContext(ctx, argv[0], "--metrics-bind-address="+addr, "--metrics-secure=false",
		"--health-probe-bind-address=0", "--stats-interval="+o.statsInterval.String())
	if o.heapProfiles != "" {
		cmd.Args = append(cmd.Args, "--pprof-bind-address="+pprofAddr)
	}
	// The run's own flags come last, so they win over the defaults above.
	cmd.Args = append(cmd.Args, argv[1:]...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), env...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", argv[0], err)
	}
	return &managerProc{cmd: cmd, url: "http://" + addr + "/metrics", pprofAddr: pprofAddr}, nil
}

func (p *managerProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	_ = p.cmd.Wait()
}

type managerFigures struct {
	rss, statsReconciles, cpu float64
	// reconciles and queued are the main controller's finished reconciles
	// and its work queue's depth.
	reconciles, queued float64
}

// settle waits until the manager has reconciled every agent and has nothing
// queued, and returns the time since start and the API server's request
// counts then.
func (p *managerProc) settle(ctx context.Context, api *apiMetrics, o options, start time.Time) (time.Duration, requests, error) {
	if err := p.waitReconciled(ctx, o); err != nil {
		return 0, nil, err
	}
	took := time.Since(start)
	r, _, err := api.requests(ctx)
	return took, r, err
}

// waitReconciled waits until the main controller has reconciled every agent
// and its queue is empty.
func (p *managerProc) waitReconciled(ctx context.Context, o options) error {
	deadline := time.Now().Add(o.timeout)
	for {
		m, err := p.scrape(ctx)
		if err == nil && m.reconciles >= float64(o.agents) && m.queued == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("%.0f of %d agents reconciled after a restart within %s", m.reconciles, o.agents, o.timeout), err)
		}
		time.Sleep(200 * time.Millisecond) //nolint:forbidigo // polling another process
	}
}

func (p *managerProc) scrape(ctx context.Context) (managerFigures, error) {
	var m managerFigures
	err := scrapeURL(ctx, http.DefaultClient, p.url, func(name string, labels map[string]string, v float64) {
		switch {
		case name == "process_resident_memory_bytes":
			m.rss = v
		case name == "process_cpu_seconds_total":
			m.cpu = v
		case name == "controller_runtime_reconcile_total" && labels["controller"] == "gooseagent-stats":
			m.statsReconciles += v
		case name == "controller_runtime_reconcile_total" && labels["controller"] == "gooseagent":
			m.reconciles += v
		case name == "workqueue_depth" && labels["name"] == "gooseagent":
			m.queued += v
		}
	})
	return m, err
}

// eventsByReason counts the agents' Events by reason.
func eventsByReason(ctx context.Context, c client.Client) (map[string]float64, error) {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace("agents")); err != nil {
		return nil, fmt.Errorf("failed to list Events: %w", err)
	}
	out := map[string]float64{}
	for _, e := range list.Items {
		n := 1.0
		if e.Series != nil {
			n = float64(e.Series.Count)
		}
		out[e.Reason] += n
	}
	return out, nil
}

type cpuTimes struct{ apiserver, etcd time.Duration }

// controlPlaneCPU sums the CPU time (user and system) of this process's
// kube-apiserver and etcd children, from /proc.
func controlPlaneCPU() cpuTimes {
	var t cpuTimes
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		open, closeIdx := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closeIdx < open {
			continue
		}
		comm := s[open+1 : closeIdx]
		f := strings.Fields(s[closeIdx+2:])
		// Fields after comm: state(0) ppid(1) ... utime(11) stime(12).
		if len(f) < 13 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		d := time.Duration(ut+st) * time.Second / 100 // USER_HZ
		switch comm {
		case "kube-apiserver":
			t.apiserver += d
		case "etcd":
			t.etcd += d
		}
	}
	return t
}

// readyCondition is the condition bare writes: the one status apply per
// agent an operator cannot avoid.
func readyCondition(a *agentsv1alpha1.GooseAgent) *metav1ac.ConditionApplyConfiguration {
	return metav1ac.Condition().WithType(agentsv1alpha1.ConditionReady).WithStatus(metav1.ConditionFalse).
		WithReason(agentsv1alpha1.ReasonPodsNotReady).WithMessage("0/1 replicas ready").
		WithObservedGeneration(a.Generation).WithLastTransitionTime(metav1.Now())
}
