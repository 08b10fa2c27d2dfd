// Command streampaths compares, in one run, three ways of consuming the same
// fake goose reply stream, with every server in its own process as deployed
// (BenchmarkStreamPaths measures the same paths inside one process, where
// the fake goose, the clients and the sidecar share one Go scheduler):
//
//	direct     this process reads goose itself, with the sidecar's goose client:
//	           ACP over a WebSocket per session (-flavor serve, the default) or
//	           goosed's /reply SSE (-flavor goosed)
//	proxy      the same client through a plain reverse proxy process
//	adk2goose  /run_sse of the real adk2goose binary on the same goose
//	adk-only   /run_sse of adk-go's own REST server in a process of its own,
//	           whose agent makes the same reply with no goose behind it: what
//	           serving ADK's REST API costs before any goose is read (the
//	           floor under adk2goose)
//
// It prints a table per run: time to first event p50/p99, per-event latency
// inside a stream, time to a reply's last delta p50, events/s over all
// streams (goose's deltas as they reach the client: an adk2goose partial
// event that carries several counts each), memory per open stream (RSS of
// the process in the middle with -held streams open at once) and CPU per
// reply (every process: this one, the fake goose, the middle one); then each
// path's ratios to direct and to the proxy; with -runs above 1, the median
// and range of each ratio over the runs follow. With -breakdown it then splits
// adk2goose's time to first event into the stages its spans mark (the
// sidecar's request span, adk-go's invoke_agent, goose.prompt and its time
// to first event), read from the sidecar's trace view as the ADK web UI
// reads them.
//
//	go run ./hack/streampaths -adk2goose bin/adk2goose     (or: make stream-paths)
//
// The fake goose, the proxy and the ADK-only server are this binary started
// again in another role (streampaths fake-goose | proxy | adk-only); they
// exit when this process does.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adk2goose/goose-operator/hack/internal/selfproc"
	"github.com/adk2goose/goose-operator/hack/internal/sidecarproc"
	"github.com/adk2goose/goose-operator/internal/relay"
	"github.com/adk2goose/goose-operator/internal/testing/percentile"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/goose/rest"
	"github.com/adk2goose/goose-operator/sidecar/server/servertest/ttfestages"
)

type config struct {
	binary      string
	replies     int
	deltas      int
	concurrency int
	held        int
	runs        int
	paths       string
	replyTime   time.Duration
	arrivals    string
	flavor      string
	// idleTimeout, goose serve: how long a session's goose connection
	// outlives its last reply, in the sidecar and the direct and proxy
	// clients alike; 0 for the client's default.
	idleTimeout time.Duration
	// breakdown: split adk2goose's time to first event by stage.
	breakdown bool
	// targets: after the runs, check the binding targets (bindingTargets)
	// against each figure's median over the runs.
	targets bool
}

func main() {
	if len(os.Args) > 1 {
		if role, ok := roles[os.Args[1]]; ok {
			if err := role(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "streampaths:", os.Args[1]+":", err)
				os.Exit(2)
			}
			return
		}
	}
	var cfg config
	flag.StringVar(&cfg.binary, "adk2goose", "bin/adk2goose", "the adk2goose binary")
	flag.IntVar(&cfg.replies, "replies", 200, "replies per path in the throughput phase")
	flag.IntVar(&cfg.deltas, "deltas", 100, "text events per reply")
	flag.DurationVar(&cfg.replyTime, "reply-time", 0, "how long goose takes to stream one reply, its events evenly spread; 0: as fast as it can (the machine saturated)")
	flag.IntVar(&cfg.concurrency, "concurrency", 50, "replies streamed at once")
	flag.StringVar(&cfg.arrivals, "arrivals", "together", "together (a closed loop at -concurrency: each round of replies arrives in one instant) "+
		"or poisson (replies arrive at random, at the rate that keeps -concurrency in flight on average; needs -reply-time) "+
		"or poisson:R (at random, R replies a second)")
	flag.IntVar(&cfg.held, "held", 1000, "streams held open at once for the memory phase")
	flag.IntVar(&cfg.runs, "runs", 1, "runs (a table each; with more than one, then each ratio's median, lowest and highest over them)")
	flag.StringVar(&cfg.paths, "paths", "direct,proxy,adk2goose,adk-only", "the paths to measure, comma-separated")
	flag.StringVar(&cfg.flavor, "flavor", "serve", "the fake goose: serve (ACP over WebSocket, goose serve) or goosed (REST)")
	flag.DurationVar(&cfg.idleTimeout, "goose-idle-timeout", 0, "goose serve: close a session's goose connection after it ran no reply for this long, on every path "+
		"(0: the client's default, 10 minutes); every reply has a session of its own, so runs of thousands of replies need a few seconds here")
	flag.BoolVar(&cfg.breakdown, "breakdown", false, "after each run, split adk2goose's time to first event in the throughput phase into the stages "+
		"its spans mark, read from its trace view (/debug/trace, as the ADK web UI reads them)")
	flag.BoolVar(&cfg.targets, "targets", false, "after the runs, check adk2goose's binding targets against the medians over the runs "+
		"(needs every path); exit 1 when one is missed")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "streampaths:", err)
		os.Exit(1)
	}
}

// roles are the servers this binary runs when started as
// `streampaths <role>`.
var roles = map[string]func(args []string) error{
	"fake-goose": serveFake,
	"proxy":      serveProxy,
	"adk-only":   serveADKOnly,
}

// holdText asks the fake for a reply that sends one event and then waits
// (until the stream is closed): the memory phase's streams.
const holdText = "hold"

// child is this binary running in another role.
type child struct {
	*selfproc.Proc
	info childInfo
}

// childInfo is the first line a child prints.
type childInfo struct {
	URL     string `json:"url"`
	Secret  string `json:"secret,omitempty"`
	Control string `json:"control,omitempty"`
}

func startChild(ctx context.Context, args ...string) (*child, error) {
	c := &child{}
	p, err := selfproc.Start(ctx, &c.info, args...)
	if err != nil {
		return nil, err
	}
	c.Proc = p
	return c, nil
}

// serveFake runs the fake goose of -flavor: replies of -deltas text events
// sent as fast as possible (or over -reply-time), or held open after one
// event (holdText). Its control address answers GET /starts with how many
// sessions were started.
func serveFake(args []string) error {
	fs := flag.NewFlagSet("fake-goose", flag.ContinueOnError)
	flavor := fs.String("flavor", "serve", "serve or goosed")
	deltas := fs.Int("deltas", 100, "text events per reply")
	replyTime := fs.Duration("reply-time", 0, "how long one reply takes, its events evenly spread")
	if err := fs.Parse(args); err != nil {
		return err
	}
	script := func(_ string, text string) goosetest.Reply {
		if text == holdText {
			return goosetest.Reply{Steps: []goosetest.Step{{Text: "first"}, {Delay: time.Hour, Text: "last"}}}
		}
		return goosetest.PacedDeltas(*deltas, *replyTime)
	}
	var (
		url, secret string
		starts      func() int
	)
	switch *flavor {
	case "serve":
		fake := goosetest.NewServe(nil, goosetest.WithServeScript(script))
		defer fake.Close()
		url, secret = fake.URL, fake.Secret
		starts = func() int { return fake.Calls("session/new") }
	case "goosed":
		fake := goosetest.NewGoosed(goosetest.GoosedOptions{Script: script, PingInterval: time.Minute})
		defer fake.Close()
		url, secret = fake.URL, fake.SecretKey
		starts = func() int {
			n := 0
			for _, r := range fake.Requests() {
				if r.Path == "/agent/resume" { // every session start ends with it
					n++
				}
			}
			return n
		}
	default:
		return fmt.Errorf("-flavor %q: want serve or goosed", *flavor)
	}
	control := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, starts()) })
	return serveRole(control, func(control string) childInfo {
		return childInfo{URL: url, Secret: secret, Control: control}
	})
}

// serveProxy runs a plain reverse proxy to -target that flushes every
// write, as an SSE proxy must; it passes WebSocket upgrades through
// (net/http's ReverseProxy copies both ways once goose switched protocols).
func serveProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	target := fs.String("target", "", "the URL to proxy to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("invalid -target %q", *target)
	}
	proxy := &httputil.ReverseProxy{
		// LimitBody, as every proxy of this repository: without it a stream
		// is cut now and then (golang/go#40747).
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); relay.LimitBody(pr.Out) },
		FlushInterval: -1,
	}
	// An idle pool smaller than the streams in flight makes net/http close
	// connections as streams end, one of which a new request may have been
	// given (golang/go#42650); the sidecar's goose REST client does the same.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.IdleConnTimeout = 0, 1<<16, 10*time.Second
	proxy.Transport = tr
	return serveRole(proxy, func(u string) childInfo { return childInfo{URL: u} })
}

// serveRole serves h on a new loopback port, prints info(its URL) as the
// child's first line, and serves until the parent closes stdin.
func serveRole(h http.Handler, info func(url string) childInfo) error {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("failed to listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	if err := json.NewEncoder(os.Stdout).Encode(info("http://" + ln.Addr().String())); err != nil {
		return err
	}
	selfproc.UntilStdinCloses()
	return nil
}

// path is one way of consuming a reply.
type path struct {
	name string
	// pid is the process in the middle; 0 for none.
	pid int
	// setup prepares the i-th stream: a goose session, or an ADK session
	// whose goose session the sidecar starts at its creation. Held streams
	// get connections of their own (hold).
	setup func(ctx context.Context, i int, hold bool) (streamFunc, error)
	// noGoose: the path's streams have no goose session (adk-only).
	noGoose bool
}

// streamFunc streams one reply to text, calling onEvent for each text event.
type streamFunc func(ctx context.Context, text string, onEvent func()) error

type result struct {
	ttfe, perEvent []time.Duration
	last           []time.Duration // to a reply's last delta
	events         int
	wall, cpu      time.Duration
	middleCPU      time.Duration // of the process in the middle alone; 0 without one
	mibPerStream   float64       // of the middle process; -1 without one
	inFlight       goosetest.InFlight
}

// rate is goose's deltas a second that reached the client.
func (r *result) rate() float64 { return float64(r.events) / r.wall.Seconds() }

// perReplyMS is d (CPU time) per reply, in milliseconds.
func (r *result) perReplyMS(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond) / float64(len(r.ttfe))
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	pace := "as fast as goose can send them"
	if cfg.replyTime > 0 {
		pace = "spread over " + cfg.replyTime.String()
	}
	arrivals, err := goosetest.ParseArrivals(cfg.arrivals, cfg.concurrency, cfg.replyTime)
	if err != nil {
		return fmt.Errorf("-arrivals: %w", err)
	}
	if cfg.flavor != "serve" && cfg.flavor != "goosed" {
		return fmt.Errorf("-flavor %q: want serve or goosed", cfg.flavor)
	}
	fmt.Fprintf(out, "fake goose %s; %d replies x %d text events (%s), %s; memory with %d streams open; each server in its own process, started anew for each run\n",
		cfg.flavor, cfg.replies, cfg.deltas, pace, arrivals, cfg.held)
	fmt.Fprintf(out, "CPU per reply is every process's (this client, the fake goose, the proxy, adk2goose, the ADK-only server), middle the proxy's, adk2goose's or the ADK-only server's alone; memory is the RSS growth of the process in the middle\n")
	var runs [][]figure
	for r := 1; r <= cfg.runs; r++ {
		figs, err := oneRun(ctx, cfg, arrivals, r, out)
		if err != nil {
			return fmt.Errorf("run %d: %w", r, err)
		}
		runs = append(runs, figs)
	}
	if len(runs) > 1 {
		printSummary(out, runs)
	}
	if cfg.targets {
		return checkTargets(out, runs)
	}
	return nil
}

// oneRun measures the selected paths once and prints their table; it
// returns the ratios under the table.
func oneRun(ctx context.Context, cfg config, arrivals goosetest.Arrivals, runNo int, out io.Writer) ([]figure, error) {
	fake, err := startChild(ctx, "fake-goose", "-flavor", cfg.flavor, "-deltas", strconv.Itoa(cfg.deltas), "-reply-time", cfg.replyTime.String())
	if err != nil {
		return nil, err
	}
	defer fake.Stop()
	proxy, err := startChild(ctx, "proxy", "-target", fake.info.URL)
	if err != nil {
		return nil, err
	}
	defer proxy.Stop()
	var extra []string
	if cfg.idleTimeout > 0 && cfg.flavor == "serve" {
		extra = append(extra, "-goose-idle-timeout", cfg.idleTimeout.String())
	}
	sc, err := sidecarproc.Start(ctx, sidecarproc.Options{Binary: cfg.binary, Flavor: cfg.flavor, GooseURL: fake.info.URL, GooseSecret: fake.info.Secret, Args: extra})
	if err != nil {
		return nil, err
	}
	defer sc.Stop()

	// Streams reuse connections as clients do; held ones open their own.
	// The idle pool is not capped, as the proxy's (golang/go#42650).
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.IdleConnTimeout = 0, 1<<16, 10*time.Second
	defer tr.CloseIdleConnections()
	clients := map[bool]*http.Client{false: {Transport: tr}, true: {Transport: &http.Transport{DisableKeepAlives: true}}}
	// gooseClient is the sidecar's own goose client of cfg.flavor, at u.
	// A goose serve session has a WebSocket of its own whatever hc is.
	var opened []interface{ Close() error }
	defer func() {
		for _, c := range opened {
			_ = c.Close()
		}
	}()
	gooseClient := func(u string, hc *http.Client) (goose.Backend, error) {
		var (
			c interface {
				goose.Backend
				Close() error
			}
			err error
		)
		if cfg.flavor == "serve" {
			c, err = acp.New(acp.Config{URL: u, SecretKey: fake.info.Secret, IdleTimeout: cfg.idleTimeout})
		} else {
			c, err = rest.New(rest.Config{URL: u, SecretKey: fake.info.Secret, HTTPClient: hc})
		}
		if err != nil {
			return nil, fmt.Errorf("failed to make a goose client: %w", err)
		}
		opened = append(opened, c)
		return c, nil
	}
	viaGoose := func(u string, streams *http.Client) (func(context.Context, int, bool) (streamFunc, error), error) {
		var rc [2]goose.Backend
		for i, hc := range []*http.Client{streams, clients[true]} {
			c, err := gooseClient(u, hc)
			if err != nil {
				return nil, err
			}
			rc[i] = c
		}
		return func(ctx context.Context, _ int, hold bool) (streamFunc, error) {
			c := rc[0]
			if hold {
				c = rc[1]
			}
			s, err := c.StartSession(ctx, goose.StartOptions{WorkingDir: os.TempDir()})
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, text string, onEvent func()) error {
				return goosetest.ReplyDeltas(ctx, c, s.ID, text, onEvent)
			}, nil
		}, nil
	}
	direct, err := viaGoose(fake.info.URL, clients[false])
	if err != nil {
		return nil, err
	}
	// The proxy's streams reuse connections as the other paths' do. (They
	// once opened one each, after streams through net/http's ReverseProxy
	// broke now and then on pooled ones; not seen again in 9,500 streams on
	// Go 1.26. A handshake per stream added about 0.8 ms to the proxy's
	// first event at concurrency 1.)
	proxied, err := viaGoose(proxy.info.URL, clients[false])
	if err != nil {
		return nil, err
	}
	var stages *ttfestages.Clients
	if cfg.breakdown {
		stages = &ttfestages.Clients{}
	}
	// viaADK streams /run_sse from an ADK REST server at base; stages, when
	// set, takes the client's marks of each turn.
	viaADK := func(base string, stages *ttfestages.Clients) func(ctx context.Context, i int, hold bool) (streamFunc, error) {
		return func(ctx context.Context, i int, hold bool) (streamFunc, error) {
			id := fmt.Sprintf("paths-%d-%d", time.Now().UnixNano(), i)
			hc := clients[hold]
			if err := sidecarproc.CreateSession(ctx, hc, base, id); err != nil {
				return nil, err
			}
			return func(ctx context.Context, text string, onEvent func()) error {
				if stages == nil || hold {
					_, err := sidecarproc.Stream(ctx, hc, base, id, text, onEvent)
					return err
				}
				stages.Sent(id, time.Now())
				_, err := sidecarproc.Stream(ctx, hc, base, id, text, func() {
					stages.Received(id, time.Now())
					onEvent()
				})
				return err
			}, nil
		}
	}
	selected := strings.Split(cfg.paths, ",")
	paths := []path{
		{name: "direct", setup: direct},
		{name: "proxy", pid: proxy.Pid(), setup: proxied},
		{name: "adk2goose", pid: sc.Pid(), setup: viaADK(sc.URL, stages)},
	}
	pids := []int{os.Getpid(), fake.Pid(), proxy.Pid(), sc.Pid()}
	if slices.Contains(selected, "adk-only") {
		adkOnly, err := startChild(ctx, "adk-only", "-deltas", strconv.Itoa(cfg.deltas), "-reply-time", cfg.replyTime.String())
		if err != nil {
			return nil, err
		}
		defer adkOnly.Stop()
		paths = append(paths, path{name: "adk-only", pid: adkOnly.Pid(), setup: viaADK(adkOnly.info.URL, nil), noGoose: true})
		pids = append(pids, adkOnly.Pid())
	}
	paths = slices.DeleteFunc(paths, func(p path) bool { return !slices.Contains(selected, p.name) })
	m := &measurer{cfg: cfg, arrivals: arrivals, fake: fake, pids: pids}
	results := map[string]*result{}
	for _, p := range paths {
		res, err := m.measure(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		results[p.name] = res
	}
	printTable(out, runNo, arrivals, paths, results)
	figs := ratios(results)
	printFigures(out, figs)
	if stages != nil && results["adk2goose"] != nil {
		return figs, reportStages(ctx, clients[false], sc.URL, stages, out)
	}
	return figs, nil
}

// reportStages completes the client's marks of each turn with the
// sidecar's, read from its trace view, and prints the stages.
func reportStages(ctx context.Context, hc *http.Client, base string, clients *ttfestages.Clients, out io.Writer) error {
	var turns []ttfestages.Turn
	gone := 0
	for _, id := range clients.Sessions() {
		spans, err := sidecarproc.TraceView(ctx, hc, base, id)
		if err != nil {
			return err
		}
		t, err := ttfestages.FromDebugSpans(spans)
		if errors.Is(err, ttfestages.ErrIncompleteTurn) {
			gone++ // the sidecar keeps the newest turns' traces only
			continue
		}
		if err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
		client, _ := clients.Turn(id)
		t.Sent, t.Received = client.Sent, client.Received
		turns = append(turns, t)
	}
	title := "adk2goose time to first event by stage, from its trace view"
	if gone > 0 {
		title += fmt.Sprintf(" (%d older turns' traces no longer all kept)", gone)
	}
	return ttfestages.Report(out, title, turns)
}

type measurer struct {
	cfg      config
	arrivals goosetest.Arrivals
	fake     *child
	pids     []int
}

// starts is how many goose sessions the fake has started.
func (m *measurer) starts(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.fake.info.Control, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("failed to ask the fake goose: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// prepare sets up n streams of p and waits until their goose sessions have
// started (the sidecar starts them in the background), so that every path's
// timed phase finds its sessions ready.
func (m *measurer) prepare(ctx context.Context, p path, n int, hold bool) ([]streamFunc, error) {
	before, err := m.starts(ctx)
	if err != nil {
		return nil, err
	}
	runs := make([]streamFunc, n)
	for i := range runs {
		if runs[i], err = p.setup(ctx, i, hold); err != nil {
			return nil, fmt.Errorf("failed to prepare stream %d: %w", i, err)
		}
	}
	if p.noGoose {
		return runs, nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		now, err := m.starts(ctx)
		if err != nil {
			return nil, err
		}
		if now >= before+n {
			return runs, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d goose sessions started", now-before, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cpu is the CPU time all processes have used so far, and of them the
// process middle (0: none).
func (m *measurer) cpu(middle int) (total, ofMiddle time.Duration, err error) {
	for _, pid := range m.pids {
		s, err := sidecarproc.ReadProc(pid)
		if err != nil {
			return 0, 0, err
		}
		total += s.CPU
		if pid == middle {
			ofMiddle = s.CPU
		}
	}
	return total, ofMiddle, nil
}

// measure measures p's memory on the fresh process first (Go keeps the
// heap it grew), then its throughput.
func (m *measurer) measure(ctx context.Context, p path) (*result, error) {
	res := &result{mibPerStream: -1}
	if p.pid != 0 {
		var err error
		if res.mibPerStream, err = m.memory(ctx, p); err != nil {
			return nil, err
		}
	}
	runs, err := m.prepare(ctx, p, m.cfg.replies, false)
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		first error
	)
	cpu0, middle0, err := m.cpu(p.pid)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res.inFlight = m.arrivals.Run(len(runs), func(i int) {
		t0 := time.Now()
		tm, err := goosetest.TimeStream(func(onEvent func()) error { return runs[i](ctx, "go", onEvent) })
		mu.Lock()
		defer mu.Unlock()
		if err == nil && tm.Events != m.cfg.deltas {
			err = fmt.Errorf("%d of %d text events", tm.Events, m.cfg.deltas)
		}
		if err != nil {
			err = fmt.Errorf("after %d text events in %s: %w", tm.Events, time.Since(t0).Round(time.Millisecond), err)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			return
		}
		res.ttfe = append(res.ttfe, tm.First)
		res.perEvent = append(res.perEvent, tm.PerEvent)
		res.last = append(res.last, tm.Last)
		res.events += tm.Events
	})
	res.wall = time.Since(start)
	cpu1, middle1, err := m.cpu(p.pid)
	if err != nil {
		return nil, err
	}
	res.cpu, res.middleCPU = cpu1-cpu0, middle1-middle0
	if first != nil {
		return nil, fmt.Errorf("a stream failed: %w", first)
	}
	return res, nil
}

// memory holds cfg.held streams open after their first event and returns
// the middle process's RSS growth per stream, from before their sessions
// were set up: a goose serve session's WebSocket, which the proxy relays
// and the sidecar holds, opens with the session, not with its first reply.
func (m *measurer) memory(ctx context.Context, p path) (float64, error) {
	before, err := sidecarproc.ReadProc(p.pid)
	if err != nil {
		return 0, err
	}
	holds, err := m.prepare(ctx, p, m.cfg.held, true)
	if err != nil {
		return 0, err
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var opened, wg sync.WaitGroup
	opened.Add(len(holds))
	errs := make(chan error, len(holds))
	for _, h := range holds {
		wg.Go(func() {
			once := sync.OnceFunc(opened.Done)
			defer once()
			if err := h(hctx, holdText, once); err != nil && hctx.Err() == nil {
				errs <- err
			}
		})
	}
	opened.Wait()
	during, err := sidecarproc.ReadProc(p.pid)
	cancel()
	wg.Wait()
	close(errs)
	if err != nil {
		return 0, err
	}
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("a held stream failed: %w", err)
	}
	return (during.RSSMiB - before.RSSMiB) / float64(len(holds)), nil
}

func printTable(out io.Writer, runNo int, arrivals goosetest.Arrivals, paths []path, results map[string]*result) {
	fmt.Fprintf(out, "\nrun %d\n%-10s %10s %10s %14s %10s %10s %16s %13s %16s\n", runNo, "path", "TTFE p50", "TTFE p99", "per-event p50", "last p50", "events/s", "KiB/open stream", "CPU ms/reply", "middle ms/reply")
	for _, p := range paths {
		r := results[p.name]
		mem, middle := "-", "-"
		if r.mibPerStream >= 0 {
			mem = fmt.Sprintf("%.1f", r.mibPerStream*1024)
		}
		if p.pid != 0 {
			middle = fmt.Sprintf("%.2f", r.perReplyMS(r.middleCPU))
		}
		fmt.Fprintf(out, "%-10s %10s %10s %14s %10s %10.0f %16s %13.2f %16s\n", p.name,
			percentile.Of(r.ttfe, 50).Round(10*time.Microsecond), percentile.Of(r.ttfe, 99).Round(10*time.Microsecond),
			percentile.Of(r.perEvent, 50).Round(time.Microsecond), percentile.Of(r.last, 50).Round(10*time.Microsecond), r.rate(), mem, r.perReplyMS(r.cpu), middle)
	}
	if arrivals.Rate > 0 { // an open loop: a path that serves slower has more in flight
		fmt.Fprint(out, "in flight as each reply started (mean, max):")
		for _, p := range paths {
			fmt.Fprintf(out, " %s %s;", p.name, results[p.name].inFlight)
		}
		fmt.Fprintln(out)
	}
}

// A figure is one of the ratios a run prints under its table: what path's
// text says, with its value in place of the %s.
type figure struct {
	path, text string
	verb       string // formats the value
	value      float64
}

// ratios are the paths' ratios to direct and to the proxy, when a run
// measured both.
func ratios(results map[string]*result) []figure {
	d, px, a := results["direct"], results["proxy"], results["adk2goose"]
	if d == nil || px == nil {
		return nil
	}
	// Every process's CPU per reply, or the middle one's own.
	cpu := func(r *result) float64 { return r.perReplyMS(r.cpu) }
	own := func(r *result) float64 { return r.perReplyMS(r.middleCPU) }
	addedMS := func(r *result) float64 {
		return float64(percentile.Of(r.ttfe, 50)-percentile.Of(d.ttfe, 50)) / float64(time.Millisecond)
	}
	p99 := func(r *result) float64 { return ratio(percentile.Of(r.ttfe, 99), percentile.Of(d.ttfe, 99)) }
	addedP99MS := func(r *result) float64 {
		return float64(percentile.Of(r.ttfe, 99)-percentile.Of(d.ttfe, 99)) / float64(time.Millisecond)
	}
	var figs []figure
	add := func(path, text, verb string, v float64) {
		figs = append(figs, figure{path: path, text: text, verb: verb, value: v})
	}
	if a != nil {
		add("adk2goose", "TTFE p50 %s ms over direct", "%+.2f", addedMS(a))
		add("adk2goose", "p99 x%s direct's", "%.1f", p99(a))
		add("adk2goose", "p99 %s ms over direct's", "%+.2f", addedP99MS(a))
		add("adk2goose", "events/s x%s the proxy's", "%.2f", a.rate()/px.rate())
		add("adk2goose", "memory/stream x%s the proxy's", "%.1f", a.mibPerStream/px.mibPerStream)
		add("adk2goose", "CPU/reply x%s direct's", "%.2f", cpu(a)/cpu(d))
		add("adk2goose", "its own CPU/reply x%s the proxy's", "%.1f", own(a)/own(px))
		if o := results["adk-only"]; o != nil {
			add("adk2goose", "its own CPU/reply x%s adk-only's", "%.2f", own(a)/own(o))
		}
	}
	add("proxy", "TTFE p50 %s ms over direct", "%+.2f", addedMS(px))
	add("proxy", "p99 x%s direct's", "%.1f", p99(px))
	add("proxy", "events/s x%s direct's", "%.2f", px.rate()/d.rate())
	add("proxy", "CPU/reply x%s direct's", "%.2f", cpu(px)/cpu(d))
	if o := results["adk-only"]; o != nil {
		// Its CPU/reply leaves the fake goose out (no goose sends its
		// reply): only its own compares.
		add("adk-only", "TTFE p50 %s ms over direct", "%+.2f", addedMS(o))
		add("adk-only", "p99 x%s direct's", "%.1f", p99(o))
		add("adk-only", "its own CPU/reply x%s the proxy's", "%.1f", own(o)/own(px))
		if a != nil {
			add("adk-only", "x%s adk2goose's own", "%.2f", own(o)/own(a))
		}
		// adk2goose relays goose's events as the proxy does and serves ADK
		// as adk-only does: the sum is a floor under its own CPU target.
		add("adk-only", "with the proxy's, x%s its own (the floor under adk2goose's)", "%.2f", (own(o)+own(px))/own(o))
	}
	return figs
}

// printFigures prints a run's figures, a line for each path.
func printFigures(out io.Writer, figs []figure) {
	printLines(out, figs, func(f figure) string { return fmt.Sprintf(f.verb, f.value) })
}

// printSummary prints, for each figure of the runs, its median over the
// runs and its lowest and highest value: one run's ratios move with the
// machine's other load (at concurrency 1 the time to first event over
// direct by up to 0.4 ms from run to run).
func printSummary(out io.Writer, runs [][]figure) {
	if len(runs) == 0 || len(runs[0]) == 0 {
		return // the runs measured no two paths that compare
	}
	type key struct{ path, text string }
	values := map[key][]float64{}
	for _, figs := range runs {
		for _, f := range figs {
			k := key{f.path, f.text}
			values[k] = append(values[k], f.value)
		}
	}
	fmt.Fprintf(out, "\nover the %d runs, median [lowest, highest]:\n", len(runs))
	printLines(out, runs[0], func(f figure) string {
		vs := slices.Clone(values[key{f.path, f.text}])
		slices.Sort(vs)
		return fmt.Sprintf(f.verb+" ["+f.verb+", "+f.verb+"]", median(vs), vs[0], vs[len(vs)-1])
	})
}

// printLines prints figs a line for each path, in their order, each
// figure's text with its value as show gives it.
func printLines(out io.Writer, figs []figure, show func(figure) string) {
	var b strings.Builder
	for i, f := range figs {
		if i == 0 || figs[i-1].path != f.path {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "%-10s ", f.path+":")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, f.text, show(f))
	}
	if len(figs) > 0 {
		b.WriteString("\n")
	}
	_, _ = io.WriteString(out, b.String())
}

// median of sorted vs, which is not empty.
func median(vs []float64) float64 {
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
