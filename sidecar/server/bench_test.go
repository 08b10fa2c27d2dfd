package server_test

import (
	"bufio"
	"bytes"
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
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/adk/model"
	"google.golang.org/adk/session"
	"google.golang.org/genai"

	"github.com/adk2goose/goose-operator/internal/relay"
	"github.com/adk2goose/goose-operator/internal/testing/percentile"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/goose/rest"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// BenchmarkStreamPaths compares the ways of consuming the same fake goose
// reply stream (goosed flavour, REST + SSE, unless -stream-flavor says
// serve), in one run:
//
//	direct     the goose client reads goose's reply itself
//	proxy      the same client through a plain httputil.ReverseProxy
//	adk2goose  an HTTP client reads /run_sse of the full sidecar
//	           (auth, run decoding, adkrest, runner, SQLite sessions, gooseagent)
//	forwarded  the same /run_sse sent to a second replica's sidecar, which
//	           finds the session's owner (an owner query) and forwards the stream
//
// It prints a table: time to first event p50/p99, per-event latency inside a
// stream, events/s over all streams, heap+stack per open stream with 1,000
// streams held open at once, and process CPU per reply; then each path's
// ratios to direct. Everything (fake goose, proxy or sidecar, clients)
// shares one process, so memory and CPU are compared as differences between
// paths. On a shared machine the wall-clock figures move with other load;
// CPU per reply moves much less. Flags: -stream-concurrency (streams in
// flight at once, default 50), -stream-arrivals (together, default: a
// closed loop whose rounds arrive in one instant; poisson: random arrivals
// keeping that many in flight on average, with paced replies; poisson:R, R
// replies a second), -stream-replies (per throughput phase,
// default 200), -stream-deltas (text events per reply, default 100; 1
// shows what a turn costs apart from its events), -stream-reply-time
// (goose's pace: a reply's deltas spread over it; default 0, as fast as it
// can, which saturates the machine),
// -stream-history (events of earlier sessions stored first, default 0),
// -stream-flavor (the goose read: goosed, its REST /reply, the default; or
// serve, ACP over a WebSocket per session, which the proxy tunnels),
// -stream-cpuprofile (a CPU profile of each path's throughput phase),
// -stream-trace (an execution trace of it), -stream-memprofile (heap and
// goroutine profiles with the streams held open), -stream-breakdown (the
// adk2goose path's time to first event by stage, from the sidecar's spans).
// hack/streampaths measures the same paths with each server in its own
// process. Run: go test -run '^$' -bench StreamPaths -benchtime 1x ./sidecar/server/
func BenchmarkStreamPaths(b *testing.B) {
	const held = 1000 // streams open at once for the memory phase
	deltas := *benchDeltas
	streams := *benchReplies
	arrivals, err := goosetest.ParseArrivals(*benchArrivals, *benchConcurrency, *benchReplyTime)
	if err != nil {
		b.Fatalf("-stream-arrivals: %v", err)
	}
	script := func(_ string, text string) goosetest.Reply {
		if text == "hold" {
			// Held until the phase cancels it: a stream that finished while
			// the others were still opening would not count in the memory.
			return goosetest.Reply{Steps: []goosetest.Step{{Text: "first"}, {Delay: 10 * time.Minute, Text: "last"}}}
		}
		return goosetest.PacedDeltas(deltas, *benchReplyTime)
	}
	fake := newBenchGoose(b, *benchFlavor, script, held+10)
	target, _ := url.Parse(fake.url)
	proxy := &httputil.ReverseProxy{
		// LimitBody, as every proxy of this repository: without it a stream
		// is cut now and then (golang/go#40747; at concurrency 1, paced, 2
		// of 60).
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target); relay.LimitBody(pr.Out) },
		FlushInterval: -1, // flush every write, as an SSE proxy must
	}
	// Its own pool, large enough for every stream: with http.DefaultTransport's
	// two idle connections per host, net/http closes connections as streams
	// end, one of which a new request may have been given (golang/go#42650),
	// and that stream fails with "use of closed network connection".
	proxyTr := http.DefaultTransport.(*http.Transport).Clone()
	proxyTr.MaxIdleConns, proxyTr.MaxIdleConnsPerHost = 0, held+10
	proxy.Transport = proxyTr
	defer proxyTr.CloseIdleConnections()
	proxySrv := &http.Server{Handler: proxy}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go proxySrv.Serve(pln)
	defer proxySrv.Close()

	newClient := func(u string) goose.Backend { return fake.connect(b, u, true) }
	breakdown := newTTFEBreakdown()
	// The sidecar's goose client as the binary makes it.
	sc := startSidecar(b, fake.connect(b, fake.url, false), b.TempDir(), func(cfg *server.Config) {
		cfg.StartGooseOnCreate = *benchEarly
		breakdown.configure(cfg)
	})
	seedHistory(b, sc.srv.SessionService(), *benchHistory)

	type path struct {
		name  string
		setup func(i int) (func(ctx context.Context, text string, onEvent func()) error, error)
		// startsGoose: each setup starts a goose session (directly, or
		// through the sidecar's early start), which the timed phase then
		// finds ready on every path.
		startsGoose bool
	}
	gooseStarts := fake.starts
	// settle waits until n more goose sessions than before were started.
	settle := func(p path, before, n int) {
		if !p.startsGoose {
			return
		}
		poll.Until(b, fmt.Sprintf("%s: %d goose sessions to start", p.name, n), func() bool { return gooseStarts() >= before+n })
	}
	viaGoose := func(c goose.Backend) func(int) (func(context.Context, string, func()) error, error) {
		return func(int) (func(context.Context, string, func()) error, error) {
			s, err := c.StartSession(context.Background(), goose.StartOptions{WorkingDir: "/tmp"})
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, text string, onEvent func()) error {
				return goosetest.ReplyDeltas(ctx, c, s.ID, text, onEvent)
			}, nil
		}
	}
	sseTr := http.DefaultTransport.(*http.Transport).Clone()
	sseTr.MaxIdleConnsPerHost = held + 10
	sseClient := &http.Client{Transport: sseTr}
	defer sseTr.CloseIdleConnections()
	// A second replica, whose own goose is never used: it forwards to sc.
	peer := startSidecar(b, newClient(fake.url), b.TempDir(), func(cfg *server.Config) {
		cfg.Peers = func(context.Context) ([]string, error) { return []string{sc.URL}, nil }
	})
	viaSidecar := func(entry *sidecar) func(i int) (func(context.Context, string, func()) error, error) {
		return func(i int) (func(context.Context, string, func()) error, error) {
			id := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
			code, body := sc.do(http.MethodPost, "/apps/"+appName+"/users/u/sessions/"+id, nil)
			if code != 200 {
				return nil, fmt.Errorf("create session: %d %s", code, body)
			}
			return func(ctx context.Context, text string, onEvent func()) error {
				j, _ := json.Marshal(runBody("u", id, text, true))
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, entry.URL+"/run_sse", bytes.NewReader(j))
				req.Header.Set("X-API-Key", testToken)
				breakdown.sent(id, time.Now())
				resp, err := sseClient.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				// The buffer the goose REST client reads /reply with (8 KiB):
				// the paths' clients hold the same per stream.
				r := bufio.NewReaderSize(resp.Body, 8<<10)
				var long []byte // a line longer than the buffer, so far
				for {
					line, err := r.ReadSlice('\n')
					if errors.Is(err, bufio.ErrBufferFull) {
						long = append(long, line...)
						continue
					}
					if err != nil {
						return nil
					}
					if long != nil {
						line, long = append(long, line...), nil
					}
					if bytes.HasPrefix(line, []byte(`data: {`)) && bytes.Contains(line, []byte(`"partial":true`)) {
						breakdown.firstEvent(id, time.Now())
						// Deltas that reached the sidecar together come
						// in one event: each counts, as on the other paths.
						// (A held stream's "first" is one.)
						for range goosetest.PacedDeltasIn(line) {
							onEvent()
						}
					}
				}
			}, nil
		}
	}
	paths := []path{
		{"direct", viaGoose(newClient(fake.url)), true},
		{"proxy", viaGoose(newClient("http://" + pln.Addr().String())), true},
		{"adk2goose", viaSidecar(sc), *benchEarly},
		{"forwarded", viaSidecar(peer), *benchEarly},
	}

	type result struct {
		ttfe           []time.Duration
		last           []time.Duration // to the reply's last delta
		perEvent       []time.Duration
		events         int
		wall           time.Duration
		cpu            time.Duration // process CPU during the throughput phase
		bytesPerStream float64
		inFlight       goosetest.InFlight // as each reply started
	}
	results := map[string]*result{}
	var breakdownOut strings.Builder
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			res := &result{}
			for range b.N {
				runs := make([]func(context.Context, string, func()) error, streams)
				started := gooseStarts()
				for i := range runs {
					if runs[i], err = p.setup(i); err != nil {
						b.Fatal(err)
					}
				}
				settle(p, started, len(runs))
				var mu sync.Mutex
				stopProfile := startPhaseProfile(b, p.name)
				stopTrace := startPhaseTrace(b, p.name)
				if p.name == "adk2goose" {
					breakdown.reset()
				}
				start, cpu0 := time.Now(), processCPU()
				res.inFlight = arrivals.Run(len(runs), func(i int) {
					tm, err := goosetest.TimeStream(func(onEvent func()) error { return runs[i](context.Background(), "go", onEvent) })
					mu.Lock()
					defer mu.Unlock()
					if err != nil || tm.Events != deltas {
						b.Errorf("%s: stream got %d events: %v", p.name, tm.Events, err)
						return
					}
					res.ttfe = append(res.ttfe, tm.First)
					res.last = append(res.last, tm.Last)
					res.perEvent = append(res.perEvent, tm.PerEvent)
					res.events += tm.Events
				})
				res.wall += time.Since(start)
				res.cpu += processCPU() - cpu0
				stopProfile()
				stopTrace()
				if p.name == "adk2goose" {
					if err := breakdown.report(&breakdownOut); err != nil {
						b.Error(err)
					}
				}

				// Memory: hold `held` streams open after their first event.
				holds := make([]func(context.Context, string, func()) error, held)
				started = gooseStarts()
				for i := range holds {
					if holds[i], err = p.setup(i); err != nil {
						b.Fatal(err)
					}
				}
				settle(p, started, len(holds))
				runtime.GC()
				var before, during runtime.MemStats
				runtime.ReadMemStats(&before)
				ctx, cancel := context.WithCancel(context.Background())
				var opened, hwg sync.WaitGroup
				opened.Add(held)
				for _, h := range holds {
					hwg.Go(func() {
						once := sync.OnceFunc(opened.Done)
						defer once()
						_ = h(ctx, "hold", once)
					})
				}
				opened.Wait()
				runtime.GC()
				runtime.ReadMemStats(&during)
				writeHeldProfiles(b, p.name)
				cancel()
				hwg.Wait()
				inuse := func(m runtime.MemStats) float64 { return float64(m.HeapInuse + m.StackInuse) }
				res.bytesPerStream = (inuse(during) - inuse(before)) / held
			}
			p50, p99 := percentile.Of(res.ttfe, 50), percentile.Of(res.ttfe, 99)
			b.ReportMetric(ms(p50), "ttfe-p50-ms")
			b.ReportMetric(ms(p99), "ttfe-p99-ms")
			b.ReportMetric(float64(percentile.Of(res.perEvent, 50).Microseconds()), "event-p50-µs")
			b.ReportMetric(ms(percentile.Of(res.last, 50)), "last-p50-ms")
			b.ReportMetric(float64(res.events)/res.wall.Seconds(), "events/s")
			b.ReportMetric(res.bytesPerStream/1024, "KiB/open-stream")
			b.ReportMetric(ms(res.cpu)/float64(b.N*streams), "cpu-ms/reply")
			results[p.name] = res
		})
	}
	if len(results) != len(paths) {
		return
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\ngoose %s; %d replies x %d deltas, %s; memory with %d streams open (heap+stack, whole process);\n", *benchFlavor, streams, deltas, arrivals, held)
	fmt.Fprintf(&out, "CPU is the whole process's (fake goose and clients included) per reply; events are goose's deltas\n")
	fmt.Fprintf(&out, "as they reach the client (an adk2goose partial event that carries several counts each); last: to a reply's last delta\n")
	fmt.Fprintf(&out, "%-10s %12s %12s %14s %12s %12s %16s %13s\n", "path", "TTFE p50", "TTFE p99", "per-event p50", "last p50", "events/s", "KiB/open stream", "CPU ms/reply")
	d := results["direct"]
	rate := func(r *result) float64 { return float64(r.events) / r.wall.Seconds() }
	cpu := func(r *result) float64 { return ms(r.cpu) / float64(b.N*streams) }
	for _, p := range paths {
		r := results[p.name]
		fmt.Fprintf(&out, "%-10s %12s %12s %14s %12s %12.0f %16.1f %13.2f\n", p.name, percentile.Of(r.ttfe, 50).Round(time.Microsecond), percentile.Of(r.ttfe, 99).Round(time.Microsecond),
			percentile.Of(r.perEvent, 50).Round(100*time.Nanosecond), percentile.Of(r.last, 50).Round(time.Microsecond), rate(r), r.bytesPerStream/1024, cpu(r))
	}
	for _, name := range []string{"proxy", "adk2goose", "forwarded"} {
		r := results[name]
		fmt.Fprintf(&out, "%-10s vs direct: TTFE p50 x%.1f, p99 x%.1f, per-event x%.1f, events/s x%.2f, memory/stream x%.1f, CPU/reply x%.1f\n", name,
			ratio(percentile.Of(r.ttfe, 50), percentile.Of(d.ttfe, 50)), ratio(percentile.Of(r.ttfe, 99), percentile.Of(d.ttfe, 99)),
			ratio(percentile.Of(r.perEvent, 50), percentile.Of(d.perEvent, 50)),
			rate(r)/rate(d), r.bytesPerStream/d.bytesPerStream, ratio(r.cpu, d.cpu))
	}
	if arrivals.Rate > 0 {
		// An open loop: a path that serves slower has more in flight.
		fmt.Fprintf(&out, "in flight as each reply started (mean, max):")
		for _, p := range paths {
			fmt.Fprintf(&out, " %s %s;", p.name, results[p.name].inFlight)
		}
		fmt.Fprintln(&out)
	}
	a, f := results["adk2goose"], results["forwarded"]
	fmt.Fprintf(&out, "forwarded vs adk2goose (the cost of a replica hop): TTFE p50 x%.1f, per-event x%.1f, events/s x%.2f, memory/stream x%.1f, CPU/reply x%.1f\n",
		ratio(percentile.Of(f.ttfe, 50), percentile.Of(a.ttfe, 50)), ratio(percentile.Of(f.perEvent, 50), percentile.Of(a.perEvent, 50)),
		rate(f)/rate(a), f.bytesPerStream/a.bytesPerStream, ratio(f.cpu, a.cpu))
	out.WriteString(breakdownOut.String())
	fmt.Fprint(os.Stdout, out.String())
}

var benchFlavor = flag.String("stream-flavor", "goosed", "BenchmarkStreamPaths: the goose the paths read: goosed (REST /reply) or serve (ACP, goose serve)")

// benchGoose is BenchmarkStreamPaths' fake goose of one flavour.
type benchGoose struct {
	url string
	// connect returns a client of goose at u (goose itself or the proxy);
	// tuned: with room for every stream the benchmark holds open, else as
	// the adk2goose binary makes it.
	connect func(b *testing.B, u string, tuned bool) goose.Backend
	// starts counts the goose sessions started so far.
	starts func() int
}

func newBenchGoose(b *testing.B, flavor string, script goosetest.Script, conns int) benchGoose {
	b.Helper()
	switch flavor {
	case "goosed":
		fake := goosetest.NewGoosed(goosetest.GoosedOptions{Script: script, PingInterval: time.Minute})
		b.Cleanup(fake.Close)
		return benchGoose{
			url: fake.URL,
			connect: func(b *testing.B, u string, tuned bool) goose.Backend {
				b.Helper()
				cfg := rest.Config{URL: u, SecretKey: fake.SecretKey}
				if tuned {
					tr := http.DefaultTransport.(*http.Transport).Clone()
					tr.MaxIdleConnsPerHost = conns
					cfg.HTTPClient = &http.Client{Transport: tr}
					b.Cleanup(tr.CloseIdleConnections)
				}
				c, err := rest.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				return c
			},
			starts: func() int { // each start ends with its /agent/resume
				n := 0
				for _, r := range fake.Requests() {
					if r.Path == "/agent/resume" {
						n++
					}
				}
				return n
			},
		}
	case "serve":
		fake := goosetest.NewServe(b, goosetest.WithServeScript(script))
		return benchGoose{
			url: fake.URL,
			connect: func(b *testing.B, u string, _ bool) goose.Backend {
				b.Helper()
				c, err := acp.New(acp.Config{URL: u, SecretKey: fake.Secret, IdleTimeout: *benchGooseIdle})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				return c
			},
			starts: func() int { return fake.Calls("session/new") },
		}
	}
	b.Fatalf("-stream-flavor %q: want goosed or serve", flavor)
	return benchGoose{}
}

var benchGooseIdle = flag.Duration("stream-goose-idle-timeout", 0,
	"BenchmarkStreamPaths, goose serve: close a session's goose connection after it ran no reply for this long (0: the client's default, 10 minutes). "+
		"Every reply has its own session, so runs of more than about 800 replies (besides the 1,000 streams held) need a short one or run out of file descriptors")

var benchEarly = flag.Bool("stream-early-start", true, "BenchmarkStreamPaths: start goose sessions when ADK sessions are created (adk2goose's default)")

var benchProfile = flag.String("stream-cpuprofile", "",
	"BenchmarkStreamPaths: write a CPU profile of each path's throughput phase to <this prefix>-<path>.prof")

var benchTrace = flag.String("stream-trace", "",
	"BenchmarkStreamPaths: write an execution trace of each path's throughput phase to <this prefix>-<path>.trace "+
		"(go tool trace -pprof=net|sync|sched <file> shows where streams wait)")

var benchMemProfile = flag.String("stream-memprofile", "",
	"BenchmarkStreamPaths: write heap and goroutine profiles of each path's held streams to <this prefix>-<path>.{heap,goroutine}.prof")

// startPhaseProfile starts a CPU profile of one path's throughput phase
// when -stream-cpuprofile is set; the returned func stops it.
func startPhaseProfile(b *testing.B, path string) (stop func()) {
	b.Helper()
	return startCapture(b, *benchProfile, path+".prof", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startPhaseTrace does the same for an execution trace (-stream-trace).
func startPhaseTrace(b *testing.B, path string) (stop func()) {
	b.Helper()
	return startCapture(b, *benchTrace, path+".trace", trace.Start, trace.Stop)
}

// startCapture, when prefix is set, creates <prefix>-<name> and starts
// writing to it; the returned func stops and closes it.
func startCapture(b *testing.B, prefix, name string, start func(io.Writer) error, stop func()) func() {
	b.Helper()
	if prefix == "" {
		return func() {}
	}
	f, err := os.Create(prefix + "-" + name)
	if err != nil {
		b.Fatal(err)
	}
	if err := start(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		stop()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

// writeHeldProfiles writes the heap and goroutine profiles while a path's
// streams are held open, when -stream-memprofile is set.
func writeHeldProfiles(b *testing.B, path string) {
	b.Helper()
	for _, name := range []string{"heap", "goroutine"} {
		startCapture(b, *benchMemProfile, path+"."+name+".prof", func(w io.Writer) error { return pprof.Lookup(name).WriteTo(w, 0) }, func() {})()
	}
}

var benchReplyTime = flag.Duration("stream-reply-time", 0,
	"BenchmarkStreamPaths: how long goose takes to stream one reply, its deltas evenly spread; 0: as fast as it can")

var benchDeltas = flag.Int("stream-deltas", 100, "BenchmarkStreamPaths: text events per reply")

var benchReplies = flag.Int("stream-replies", 200, "BenchmarkStreamPaths: replies per throughput phase")

var benchConcurrency = flag.Int("stream-concurrency", 50, "BenchmarkStreamPaths: replies streamed at once in the throughput phase")

var benchArrivals = flag.String("stream-arrivals", "together",
	"BenchmarkStreamPaths: together (a closed loop at -stream-concurrency: each round of replies arrives in one instant) "+
		"or poisson (replies arrive at random, at the rate that keeps -stream-concurrency in flight on average; needs -stream-reply-time) "+
		"or poisson:R (at random, R replies a second)")

var benchHistory = flag.Int("stream-history", 0,
	"BenchmarkStreamPaths: events of earlier sessions stored before measuring, as on a sidecar that has served for a while")

// seedHistory stores n events spread over n/100 earlier sessions.
func seedHistory(b *testing.B, svc session.Service, n int) {
	b.Helper()
	ctx := b.Context()
	for i := 0; i < n; i += 100 {
		cr, err := svc.Create(ctx, &session.CreateRequest{AppName: appName, UserID: "history", SessionID: fmt.Sprint("h", i)})
		if err != nil {
			b.Fatal(err)
		}
		for j := range min(100, n-i) {
			ev := session.NewEventWithContext(context.Background(), "seed")
			ev.Author = appName
			ev.LLMResponse = model.LLMResponse{Content: genai.NewContentFromText(fmt.Sprintf("earlier reply %d, long enough to look like one", j), genai.RoleModel)}
			if err := svc.AppendEvent(ctx, cr.Session, ev); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// BenchmarkTurnOnLongSession measures the time to the first event of a
// /run_sse on a session that already holds a long history, one turn at a
// time, for several history lengths: what a run loads of its session before
// goose is asked. Run: go test -run '^$' -bench TurnOnLongSession -benchtime 1x ./sidecar/server/
func BenchmarkTurnOnLongSession(b *testing.B) {
	const turns = 30
	fake := goosetest.NewGoosed(goosetest.GoosedOptions{Script: goosetest.Echo, PingInterval: time.Minute})
	defer fake.Close()
	c, err := rest.New(rest.Config{URL: fake.URL, SecretKey: fake.SecretKey})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sc := startSidecar(b, c, b.TempDir())
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-16s %12s %12s\n", "history events", "TTFE p50", "TTFE p99")
	for _, n := range []int{0, 1000, 5000} {
		b.Run(fmt.Sprint("history=", n), func(b *testing.B) {
			var ttfe []time.Duration
			for range b.N {
				id := fmt.Sprintf("long-%d-%d", n, time.Now().UnixNano())
				sc.createSession("u", id)
				got, err := sc.srv.SessionService().Get(b.Context(), &session.GetRequest{AppName: appName, UserID: "u", SessionID: id})
				if err != nil {
					b.Fatal(err)
				}
				for j := range n {
					ev := session.NewEventWithContext(context.Background(), "seed")
					ev.Author = appName
					ev.LLMResponse = model.LLMResponse{Content: genai.NewContentFromText(fmt.Sprintf("earlier reply %d, long enough to look like one", j), genai.RoleModel)}
					if err := sc.srv.SessionService().AppendEvent(b.Context(), got.Session, ev); err != nil {
						b.Fatal(err)
					}
				}
				for i := range turns {
					j, _ := json.Marshal(runBody("u", id, fmt.Sprint("turn ", i), true))
					req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, sc.URL+"/run_sse", bytes.NewReader(j))
					req.Header.Set("X-API-Key", testToken)
					t0 := time.Now()
					resp, err := httpClient.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					r := bufio.NewReader(resp.Body)
					first := time.Duration(0)
					for {
						line, err := r.ReadSlice('\n')
						if err != nil {
							break
						}
						if first == 0 && bytes.HasPrefix(line, []byte("data: {")) {
							first = time.Since(t0)
						}
					}
					resp.Body.Close()
					if first == 0 {
						b.Fatalf("turn %d: no event", i)
					}
					ttfe = append(ttfe, first)
				}
			}
			b.ReportMetric(ms(percentile.Of(ttfe, 50)), "ttfe-p50-ms")
			fmt.Fprintf(&out, "%-16d %12s %12s\n", n, percentile.Of(ttfe, 50).Round(time.Microsecond), percentile.Of(ttfe, 99).Round(time.Microsecond))
		})
	}
	fmt.Fprint(os.Stdout, out.String())
}
