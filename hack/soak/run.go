package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/adk2goose/goose-operator/hack/internal/sidecarproc"
)

// config is a soak run's settings.
type config struct {
	binary       string
	seed         uint64
	schedule     ScheduleConfig
	workers      int
	turnDeadline time.Duration
	settle       time.Duration
	keep         bool // keep the run's directory
}

// Sidecar settings short enough for faults to play out within a run.
const (
	gooseIdleTimeout    = 2 * time.Second
	confirmationTimeout = 3 * time.Second
	drainTimeout        = 3 * time.Second
)

// replica is one sidecar and its goose, on loopback address ip; the two
// replicas peer through each other's address (-peers-host).
type replica struct {
	idx        int
	ip, listen string
	peerIP     string
	dir        string
	gooseAddr  string
	secret     string
	sc         *sidecarproc.Sidecar
	goose      *gooseProc
	// Baselines of the first start, before any turn.
	goroutines int
	fds        descriptors
}

// soak is one run under way.
type soak struct {
	cfg   config
	sched Schedule
	reps  []*replica
	hc    *http.Client
	a2a   *a2aClients

	faultMu sync.Mutex // one fault at a time; replicas are started and stopped under it
	// procCtx is the run's context: processes started under it outlive the
	// fault injection's.
	procCtx context.Context

	mu          sync.Mutex
	records     []TurnRecord
	excused     []Window
	integrity   map[string]string
	agentTotals []int64
	injected    map[string]int
	sessions    []*sessionState

	ended atomic.Int64 // turns ended
}

// sessionState is what the client knows of a scripted session.
type sessionState struct {
	Session
	id      string // the ADK session id (REST) or A2A context id; "" before it exists
	user    string
	created bool
}

// runSoak runs the schedule against two replicas and returns the history.
func runSoak(ctx context.Context, cfg config, logf func(string, ...any)) (History, error) {
	cfg.schedule.Replicas = 2
	s := &soak{procCtx: ctx, cfg: cfg, sched: NewSchedule(cfg.seed, cfg.schedule), integrity: map[string]string{}, injected: map[string]int{}}
	for _, sess := range s.sched.Sessions {
		st := &sessionState{Session: sess}
		if sess.Protocol == REST {
			st.id, st.user = sess.Name, "u"
		}
		s.sessions = append(s.sessions, st)
	}
	root, err := os.MkdirTemp("", "adk2goose-soak-")
	if err != nil {
		return History{}, fmt.Errorf("failed to create the run's directory: %w", err)
	}
	if cfg.keep {
		logf("run directory (kept): %s", root)
	} else {
		defer func() { _ = os.RemoveAll(root) }()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	s.hc = &http.Client{Transport: tr}
	defer s.hc.CloseIdleConnections()
	s.a2a = newA2AClients(s.hc)

	if err := s.startReplicas(ctx, root); err != nil {
		return History{}, err
	}
	defer s.stopReplicas()

	start := time.Now()
	sampling, stopSampling := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { s.sampleTotals(sampling) })
	bg.Go(func() { s.injectFaults(sampling, logf) })
	var workers sync.WaitGroup
	for w := range cfg.workers {
		workers.Go(func() { s.work(ctx, w) })
	}
	workers.Wait()
	stopSampling()
	bg.Wait()
	elapsed := time.Since(start)
	logf("%d turns in %s: %.1f turns/s", len(s.sched.Turns), elapsed.Round(time.Millisecond), float64(len(s.sched.Turns))/elapsed.Seconds())

	h := History{Seed: cfg.seed, Turns: s.records, Excused: s.excused, AgentTotals: s.agentTotals, Injected: s.injected}
	if err := s.settle(ctx, &h); err != nil {
		return h, err
	}
	if err := s.collect(ctx, &h); err != nil {
		return h, err
	}
	s.stopReplicas()
	for _, r := range s.reps {
		s.checkIntegrity(r, "end")
	}
	h.Integrity = s.integrity
	return h, nil
}

// startReplicas starts each replica's goose and sidecar and takes their
// baselines.
func (s *soak) startReplicas(ctx context.Context, root string) error {
	port, err := freePort(ctx)
	if err != nil {
		return err
	}
	ips := []string{"127.0.0.1", "127.0.0.2"}
	for i, ip := range ips {
		gp, err := freePort(ctx)
		if err != nil {
			return err
		}
		r := &replica{
			idx: i, ip: ip, peerIP: ips[1-i], listen: net.JoinHostPort(ip, strconv.Itoa(port)),
			dir: filepath.Join(root, "r"+strconv.Itoa(i)), gooseAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(gp)), secret: randomHex(16),
		}
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			return fmt.Errorf("failed to create the replica's directory: %w", err)
		}
		s.reps = append(s.reps, r)
		if err := s.startGoose(r); err != nil {
			return err
		}
		if err := s.startSidecar(r); err != nil {
			return err
		}
	}
	for _, r := range s.reps {
		smp, err := r.sc.Sample(ctx, s.hc)
		if err != nil {
			return err
		}
		r.goroutines = smp.Goroutines
		if r.fds, err = countFDs(r.sc.Pid()); err != nil {
			return err
		}
	}
	return nil
}

func (s *soak) startGoose(r *replica) error {
	g, err := startGoose(s.procCtx, r.gooseAddr, r.secret, filepath.Join(r.dir, "goose-state.json"))
	if err != nil {
		return err
	}
	r.goose = g
	return nil
}

func (s *soak) startSidecar(r *replica) error {
	sc, err := sidecarproc.Start(s.procCtx, sidecarproc.Options{
		Binary: s.cfg.binary, Flavor: "serve", GooseURL: "http://" + r.gooseAddr, GooseSecret: r.secret,
		Dir: r.dir, Listen: r.listen,
		Args: []string{
			"-peers-host", r.peerIP, "-pod-ip", r.ip, "-pod-name", "r" + strconv.Itoa(r.idx),
			"-goose-idle-timeout", gooseIdleTimeout.String(), "-goose-unused-idle-timeout", gooseIdleTimeout.String(),
			"-confirmation-timeout", confirmationTimeout.String(), "-drain-timeout", drainTimeout.String(),
		},
	})
	if err != nil {
		return fmt.Errorf("failed to start replica %d: %w", r.idx, err)
	}
	r.sc = sc
	return nil
}

// stopReplicas stops what still runs; it may be called twice.
func (s *soak) stopReplicas() {
	for _, r := range s.reps {
		if r.sc != nil {
			r.sc.Stop()
			r.sc = nil
		}
		if r.goose != nil {
			r.goose.Stop()
			r.goose = nil
		}
	}
}

// work runs the turns of the sessions of worker w, in schedule order.
func (s *soak) work(ctx context.Context, w int) {
	for _, t := range s.sched.Turns {
		if t.Session%s.cfg.workers != w {
			continue
		}
		rec := s.turn(ctx, t)
		s.mu.Lock()
		s.records = append(s.records, rec)
		s.mu.Unlock()
		s.ended.Add(1)
	}
}

// turn runs one turn under its deadline.
func (s *soak) turn(ctx context.Context, t Turn) TurnRecord {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.turnDeadline)
	defer cancel()
	sess := s.sessions[t.Session]
	rec := TurnRecord{Turn: t, Start: time.Now()}
	if sess.Protocol == A2A {
		s.a2aTurn(ctx, &rec, sess)
	} else {
		s.restTurn(ctx, &rec, sess)
	}
	rec.Session = sess.id
	rec.End = time.Now()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && rec.Outcome != Answered {
		rec.Outcome, rec.Detail = Hung, fmt.Sprintf("no end within %s (%s)", s.cfg.turnDeadline, rec.Detail)
	}
	return rec
}

// injectFaults injects each scheduled fault once its turns have ended.
func (s *soak) injectFaults(ctx context.Context, logf func(string, ...any)) {
	for _, f := range s.sched.Faults {
		for s.ended.Load() < int64(f.After) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		if err := s.inject(ctx, f); err != nil {
			logf("fault %s on replica %d after turn %d: %v", f.Kind, f.Replica, f.After, err)
		}
	}
}

// inject injects one fault and waits until the replica serves again.
func (s *soak) inject(ctx context.Context, f Fault) error {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	r := s.reps[f.Replica]
	start := time.Now()
	s.mu.Lock()
	s.injected[string(f.Kind)]++
	s.mu.Unlock()
	excuse := func() {
		s.mu.Lock()
		s.excused = append(s.excused, Window{Replica: r.idx, Kind: f.Kind, Start: start, End: time.Now()})
		s.mu.Unlock()
	}
	switch f.Kind {
	case GooseKill:
		if err := r.goose.crash(ctx); err != nil {
			return err
		}
		return s.startGoose(r)
	case GooseStall:
		return pause(ctx, r.goose.Cmd.Process, f.For)
	case SidecarTerm:
		return s.restartSidecar(ctx, r, syscall.SIGTERM)
	case SidecarKill:
		defer excuse()
		return s.restartSidecar(ctx, r, syscall.SIGKILL)
	case PeerUnreachable:
		defer excuse()
		return pause(ctx, r.sc, f.For)
	}
	return fmt.Errorf("unknown fault %q", f.Kind)
}

// restartSidecar stops the replica's sidecar with sig, checks a copy of its
// SQLite files and starts it again on the same directory and address.
// The caller holds faultMu.
func (s *soak) restartSidecar(ctx context.Context, r *replica, sig os.Signal) error {
	if err := r.sc.Signal(sig); err != nil {
		return err
	}
	exit := r.sc.Wait(drainTimeout + 30*time.Second)
	if sig == syscall.SIGTERM && exit != nil {
		s.mu.Lock()
		s.integrity[fmt.Sprintf("r%d exit after SIGTERM", r.idx)] = exit.Error()
		s.mu.Unlock()
	}
	s.checkIntegrity(r, sig.String())
	// Pooled connections to the old process are dead.
	s.hc.CloseIdleConnections()
	return s.startSidecar(r)
}

// pause stops a process for d (SIGSTOP), then lets it go on.
func pause(ctx context.Context, p interface{ Signal(os.Signal) error }, d time.Duration) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("failed to stop a process: %w", err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("failed to continue a process: %w", err)
	}
	return nil
}

// sampleTotals records the agent's token total (both replicas' /stats)
// every half second while both answer.
func (s *soak) sampleTotals(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		if !s.faultMu.TryLock() {
			continue // a replica may be down
		}
		total, err := s.agentTotal(ctx)
		s.faultMu.Unlock()
		if err == nil {
			s.mu.Lock()
			s.agentTotals = append(s.agentTotals, total)
			s.mu.Unlock()
		}
	}
}

// settle waits for goose's connections to close (the sidecar's idle
// timeout) and the sidecars' goroutines to come back, then records each
// resource against its baseline.
func (s *soak) settle(ctx context.Context, h *History) error {
	deadline := time.Now().Add(s.cfg.settle)
	for _, r := range s.reps {
		var open int
		for {
			st, err := r.goose.stats(ctx)
			if err != nil {
				return err
			}
			open = st.OpenConnections
			if open == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		smp, err := r.sc.Settle(ctx, s.hc, r.goroutines, time.Until(deadline))
		if err != nil {
			return err
		}
		fds, err := countFDs(r.sc.Pid())
		if err != nil {
			return err
		}
		name := "replica " + strconv.Itoa(r.idx)
		st, err := s.stats(ctx, r)
		if err != nil {
			return err
		}
		h.Resources = append(h.Resources,
			Resource{What: name + " turns in flight (/stats)", Baseline: 0, After: st.Sessions.InFlight},
			Resource{What: name + " goose connections", Baseline: 0, After: open},
			// Slack: what a sidecar that has served keeps open on purpose,
			// which a leak over the run outgrows: keep-alive connections to
			// its peer, and the pool of 8 SQLite connections that read
			// sessions (up to 3 files each: the database, its WAL and
			// shared memory), opened as the load asks for them.
			Resource{What: name + " goroutines", Baseline: r.goroutines, After: smp.Goroutines, Slack: 10},
			Resource{What: name + " sockets", Baseline: r.fds.sockets, After: fds.sockets, Slack: 8},
			Resource{What: name + " open files", Baseline: r.fds.files, After: fds.files, Slack: 24},
		)
	}
	return nil
}

// collect reads the stored sessions, goose's approvals and the agent's
// token total.
func (s *soak) collect(ctx context.Context, h *History) error {
	h.Stored = map[string]StoredSession{}
	for _, sess := range s.sessions {
		if sess.id == "" {
			continue
		}
		st, err := s.stored(ctx, sess)
		if err != nil {
			st.FetchFailed = err.Error()
		}
		h.Stored[sess.id] = st
	}
	h.Permissions = map[string][]PermissionAnswer{}
	for _, r := range s.reps {
		st, err := r.goose.stats(ctx)
		if err != nil {
			return err
		}
		for _, p := range st.Permissions {
			h.Permissions[p.ToolCallID] = append(h.Permissions[p.ToolCallID], p)
		}
	}
	total, err := s.agentTotal(ctx)
	if err != nil {
		return err
	}
	h.AgentTotal = total
	return nil
}

// descriptors are a process's open file descriptors (Linux /proc), told
// apart: a leak of connections shows in sockets, while files are what the
// SQLite pools hold.
type descriptors struct{ sockets, files int }

func countFDs(pid int) (descriptors, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return descriptors{}, fmt.Errorf("failed to count process %d's descriptors: %w", pid, err)
	}
	var d descriptors
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		switch {
		case err != nil: // closed meanwhile
		case strings.HasPrefix(target, "socket:"):
			d.sockets++
		default:
			d.files++
		}
	}
	return d, nil
}

// freePort is a TCP port nobody listens on at 127.0.0.1.
func freePort(ctx context.Context) (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("failed to find a free port: %w", err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
