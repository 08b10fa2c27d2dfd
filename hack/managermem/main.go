// Command managermem measures the manager's memory in a cluster that holds
// many GooseAgents and many Secrets the operator has no business with, and
// prints a table. Give it one or more manager binaries to compare them side
// by side on the same control plane:
//
//	go build -o /tmp/manager-old ./cmd/manager   # on the old commit
//	make build
//	KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh) go run ./hack/managermem \
//	  --manager /tmp/manager-old,bin/manager --agents 1000 --secrets 5000
//
// The cluster is converged once (by the last binary) before anything is
// measured, so every measured manager does the same work: an initial list of
// everything it watches and a no-op reconcile of every agent. A manager is
// measured once its gooseagent controller has reconciled every agent and its
// queue is empty; the figures are read from its own /metrics.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "managermem:", err)
		os.Exit(1)
	}
}

type options struct {
	managers    []string
	agents      int
	secrets     int
	secretBytes int
	timeout     time.Duration
}

func run() error {
	var o options
	var managers string
	flag.StringVar(&managers, "manager", "bin/manager", "comma-separated manager binaries to measure, in order")
	flag.IntVar(&o.agents, "agents", 1000, "GooseAgents in the cluster")
	flag.IntVar(&o.secrets, "secrets", 5000, "Secrets no agent references (another application's)")
	flag.IntVar(&o.secretBytes, "secret-bytes", 2048, "size of each unrelated Secret's value")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "time allowed for one manager to converge")
	flag.Parse()
	o.managers = strings.Split(managers, ",")
	env, err := testenv.New(testenv.WideServiceRange())
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubeconfig, c := env.Kubeconfig, env.Client

	ctx := context.Background()
	start := time.Now()
	if err := populate(ctx, c, o); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "created %d agents and %d unrelated Secrets in %s\n", o.agents, o.secrets, time.Since(start).Round(time.Millisecond))
	warm := o.managers[len(o.managers)-1]
	fmt.Fprintf(os.Stderr, "converging the cluster once with %s (not measured)\n", warm)
	if _, err := measure(ctx, warm, kubeconfig, o); err != nil {
		return err
	}
	var rows []figures
	for _, m := range o.managers {
		fmt.Fprintf(os.Stderr, "measuring %s\n", m)
		f, err := measure(ctx, m, kubeconfig, o)
		if err != nil {
			return err
		}
		rows = append(rows, f)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "manager\tagents\tunrelated Secrets\tRSS MiB\theap in use MiB\tvs first (RSS)\ttime to converge\n")
	for _, f := range rows {
		fmt.Fprintf(w, "%s\t%d\t%d\t%.1f\t%.1f\t%.2f×\t%s\n", f.manager, o.agents, o.secrets, mib(f.rss), mib(f.heap),
			f.rss/rows[0].rss, f.converge.Round(time.Millisecond))
	}
	return w.Flush()
}

func mib(b float64) float64 { return b / (1 << 20) }

// populate creates the agents (each reading one API-key Secret) and the
// unrelated Secrets, in parallel.
func populate(ctx context.Context, c client.Client, o options) error {
	for _, ns := range []string{"agents", "other-apps"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("failed to create namespace %s: %w", ns, err)
		}
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "openai", Namespace: "agents"},
		StringData: map[string]string{"api-key": "sk-test"}}); err != nil {
		return fmt.Errorf("failed to create API-key Secret: %w", err)
	}
	value := strings.Repeat("x", o.secretBytes)
	objs := make(chan client.Object)
	go func() {
		defer close(objs)
		for i := range o.secrets {
			objs <- &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: "other-apps"},
				StringData: map[string]string{"value": value}}
		}
		for i := range o.agents {
			objs <- &agentsv1alpha1.GooseAgent{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("agent-%04d", i), Namespace: "agents"},
				Spec: agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{
					Name: "openai", Model: "gpt-4o", APIKeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "openai", Key: "api-key"}}},
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for obj := range objs {
				if err := c.Create(ctx, obj); err != nil {
					errs <- fmt.Errorf("failed to create %s: %w", obj.GetName(), err)
					for range objs { //nolint:revive // drain so the producer ends
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

type figures struct {
	manager   string
	rss, heap float64
	converge  time.Duration
}

// measure runs one manager until it has reconciled every agent with an
// empty queue, then reads its memory from /metrics and stops it.
func measure(ctx context.Context, bin, kubeconfig string, o options) (figures, error) {
	port, err := freePort(ctx)
	if err != nil {
		return figures{}, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.CommandContext(ctx, bin, "--metrics-bind-address="+addr, "--metrics-secure=false",
		"--health-probe-bind-address=0", "--stats-interval=1h", "--kube-api-qps=200", "--kube-api-burst=400")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stderr = nil // its log is not part of the table
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return figures{}, fmt.Errorf("failed to start %s: %w", bin, err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	url := "http://" + addr + "/metrics"
	deadline := time.Now().Add(o.timeout)
	for {
		m, err := scrape(ctx, url)
		if err == nil && m.reconciled >= float64(o.agents) && m.depth == 0 {
			converge := time.Since(start)
			// Let the heap settle after the burst of reconciles, then take
			// the figures the process reports of itself.
			time.Sleep(3 * time.Second) //nolint:forbidigo // a measurement tool, not a test
			if m, err = scrape(ctx, url); err != nil {
				return figures{}, err
			}
			return figures{manager: bin, rss: m.rss, heap: m.heap, converge: converge}, nil
		}
		if time.Now().After(deadline) {
			stuck := fmt.Errorf("%s did not converge within %s (reconciled %v, queue %v)", bin, o.timeout, m.reconciled, m.depth)
			return figures{}, errors.Join(stuck, err)
		}
		time.Sleep(200 * time.Millisecond) //nolint:forbidigo // polling another process
	}
}

type metricsFigures struct {
	reconciled, depth, rss, heap float64
}

// scrape reads the few series the table needs from Prometheus text format.
func scrape(ctx context.Context, url string) (metricsFigures, error) {
	var m metricsFigures
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return m, fmt.Errorf("failed to build metrics request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, fmt.Errorf("failed to read metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := cutValue(line)
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, `controller_runtime_reconcile_total{controller="gooseagent"`):
			m.reconciled += value
		case name == `workqueue_depth{controller="gooseagent",name="gooseagent"}`:
			m.depth = value
		case name == "process_resident_memory_bytes":
			m.rss = value
		case name == "go_memstats_heap_inuse_bytes":
			m.heap = value
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("failed to read metrics: %w", err)
	}
	return m, nil
}

func cutValue(line string) (string, float64, bool) {
	if strings.HasPrefix(line, "#") {
		return "", 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return "", 0, false
	}
	return line[:i], v, true
}

func freePort(ctx context.Context) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("failed to find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
