package acp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// Tests that a fault in one session's goose traffic ends that session's turn
// at most, with a clear error, while three other sessions, mid-reply, keep
// streaming (goosetest.RunBystanders). These are the faults only goose serve
// has (frames, its outbound queue); contract_isolation_test.go runs the ones
// every flavour shares. goleak (TestMain) checks nothing is left behind.

func newIsolationPair(t *testing.T, cfg Config, opts ...goosetest.ServeOption) (*goosetest.Serve, *Client) {
	t.Helper()
	srv := goosetest.NewServe(t, opts...)
	cfg.URL, cfg.SecretKey = srv.URL, srv.Secret
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

// A line over acp-go-sdk's 10 MiB scanner limit used to end the shared
// connection ("bufio.Scanner: token too long") and every turn on it. It is
// under goose's own 16 MiB frame limit, a message goose may send: it arrives.
func TestLineOverSDKLimitIsDelivered(t *testing.T) {
	big := strings.Repeat("z", 11<<20)
	script := goosetest.WithBystanders(func(string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{{Text: big}}}
	})
	_, c := newIsolationPair(t, Config{}, goosetest.WithServeScript(script))
	victim := startSession(t, c)
	goosetest.RunBystanders(t, c, func() {
		evs, err := collect(c.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}))
		if err != nil || len(evs) < 2 || evs[0].(*goose.TextDelta).Text != big {
			t.Errorf("11 MiB delta: %d events, err %v", len(evs), err)
		}
	})
}

func TestUndecodableFrameEndsOnlyItsSession(t *testing.T) {
	script := goosetest.WithBystanders(func(string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "ok"}, {Delay: time.Hour, Text: "late"}}}
	})
	srv, c := newIsolationPair(t, Config{}, goosetest.WithServeScript(script))
	victim := startSession(t, c)
	goosetest.RunBystanders(t, c, func() {
		var gotErr error
		for ev, err := range c.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}) {
			if err != nil {
				gotErr = err
				break
			}
			if d, ok := ev.(*goose.TextDelta); ok && d.Text == "ok" && !srv.SendRaw(victim, []byte(`{"jsonrpc":"2.0","method":`)) {
				t.Error("no run to send the broken frame to")
			}
		}
		if !errors.Is(gotErr, goose.ErrStreamBroken) || !strings.Contains(gotErr.Error(), "failed to decode a frame from goose") {
			t.Errorf("err = %v, want ErrStreamBroken naming the undecodable frame", gotErr)
		}
	})
}

// A frame with a field of the wrong type is skipped (it is logged): the
// reply it came in goes on, on the same connection.
func TestWrongTypedFrameFailsOnlyItself(t *testing.T) {
	script := goosetest.WithBystanders(func(string) goosetest.Reply {
		return goosetest.Reply{Steps: []goosetest.Step{{Text: "ok"}, {Delay: time.Hour, Text: "late"}}}
	})
	srv, c := newIsolationPair(t, Config{}, goosetest.WithServeScript(script))
	victim := startSession(t, c)
	chunk := func(text string) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + victim +
			`","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":` + text + `}}}}`)
	}
	goosetest.RunBystanders(t, c, func() {
		var texts []string
		for ev, err := range c.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}) {
			if err != nil {
				t.Errorf("reply failed after a wrong-typed frame: %v", err)
				break
			}
			d, ok := ev.(*goose.TextDelta)
			if !ok {
				continue
			}
			texts = append(texts, d.Text)
			if d.Text == "ok" && (!srv.SendRaw(victim, chunk(`7`)) || !srv.SendRaw(victim, chunk(`"after"`))) {
				t.Error("no run to send the frames to")
			}
			if d.Text == "after" {
				break
			}
		}
		if strings.Join(texts, ",") != "ok,after" {
			t.Errorf("texts %q, want ok then after", texts)
		}
	})
}

// A notification flood from a goose with its 1024-frame outbound queue: whatever
// happens to the flooded session (all events, or goose dropping its
// connection when the queue fills), it is reported, and the others stream.
func TestNotificationFloodWithGooseQueueOthersStream(t *testing.T) {
	const flood = 20000
	_, c := newIsolationPair(t, Config{},
		goosetest.WithServeOutboundQueue(goosetest.ServeOutboundCapacity),
		goosetest.WithServeScript(goosetest.WithBystanders(func(string) goosetest.Reply { return goosetest.Deltas(flood, "f") })))
	victim := startSession(t, c)
	goosetest.RunBystanders(t, c, func() {
		evs, err := collect(c.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}))
		n := 0
		for _, ev := range evs {
			if _, ok := ev.(*goose.TextDelta); ok {
				n++
			}
		}
		if err == nil && n != flood || err != nil && !errors.Is(err, goose.ErrStreamBroken) {
			t.Errorf("flood: %d of %d deltas, err %v", n, flood, err)
		}
	})
}

// A reader that stops reading holds back only its own session: the client
// queues a bounded number of its events and stops reading its connection;
// the others complete meanwhile, and the slow reader then gets everything.
func TestSlowReaderHoldsOnlyItsSession(t *testing.T) {
	const n = 5000
	_, c := newIsolationPair(t, Config{MaxQueuedEvents: 16},
		goosetest.WithServeScript(goosetest.WithBystanders(func(string) goosetest.Reply { return goosetest.Deltas(n, "s") })))
	victim := startSession(t, c)
	resume := make(chan struct{})
	got := make(chan int, 1)
	go func() {
		count, first := 0, true
		var err error
		for ev, e := range c.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}) {
			if e != nil {
				err = e
				break
			}
			if first {
				first = false
				<-resume
			}
			if _, ok := ev.(*goose.TextDelta); ok {
				count++
			}
		}
		if err != nil {
			t.Errorf("slow reader: %v", err)
		}
		got <- count
	}()
	poll.Until(t, "the slow reader's queue to fill", func() bool {
		c.mu.Lock()
		r := c.replies[victim]
		c.mu.Unlock()
		if r == nil {
			return false
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.items) >= 16
	})
	goosetest.RunBystanders(t, c, func() {})
	c.mu.Lock()
	r := c.replies[victim]
	c.mu.Unlock()
	r.mu.Lock()
	queued := len(r.items)
	r.mu.Unlock()
	if queued > 16 {
		t.Errorf("%d events queued for a reader that does not read, bound 16", queued)
	}
	close(resume)
	if count := <-got; count != n {
		t.Errorf("slow reader got %d of %d deltas", count, n)
	}
}

// With goose's bounded outbound queue a reader that stops long enough makes
// goose drop that session's connection; its turn ends with ErrStreamBroken
// once it reads again, after the events that arrived. The others complete.
func TestSlowReaderWithGooseQueueLosesOnlyItsConnection(t *testing.T) {
	const n = 60000
	srv, c := newIsolationPair(t, Config{MaxQueuedEvents: 16},
		goosetest.WithServeOutboundQueue(goosetest.ServeOutboundCapacity),
		goosetest.WithServeScript(goosetest.WithBystanders(func(string) goosetest.Reply { return goosetest.Deltas(n, "s") })))
	victim := startSession(t, c)
	resume := make(chan struct{})
	type outcome struct {
		deltas int
		err    error
	}
	got := make(chan outcome, 1)
	go func() {
		var o outcome
		first := true
		for ev, err := range c.Reply(context.Background(), victim, goose.UserMessage{Text: "go"}) {
			if err != nil {
				o.err = err
				break
			}
			if first {
				first = false
				<-resume
			}
			if _, ok := ev.(*goose.TextDelta); ok {
				o.deltas++
			}
		}
		got <- o
	}()
	poll.Until(t, "goose to drop the slow session's connection", func() bool { return srv.OutboundDrops() == 1 })
	goosetest.RunBystanders(t, c, func() {})
	close(resume)
	o := <-got
	// How many deltas got through before the queue filled depends on timing;
	// never all of them, and the end is reported.
	if !errors.Is(o.err, goose.ErrStreamBroken) || o.deltas >= n {
		t.Errorf("slow reader: %d deltas, err %v; want fewer than %d, then ErrStreamBroken", o.deltas, o.err, n)
	}
	if d := srv.OutboundDrops(); d != 1 {
		t.Errorf("goose dropped %d connections, want only the slow one", d)
	}
}

func TestIdleSessionConnectionCloses(t *testing.T) {
	srv, c := newIsolationPair(t, Config{IdleTimeout: 20 * time.Millisecond})
	id := startSession(t, c)
	if _, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "one"})); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the idle connection to close", func() bool { return srv.OpenConnections() == 0 && c.openConns() == 0 })
	if _, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "two"})); err != nil {
		t.Fatalf("reply after the idle close: %v", err)
	}
	if len(srv.Loads()) != 0 {
		t.Errorf("session/load %v: goose activates the session on the prompt", srv.Loads())
	}
}

// A session started ahead of its first turn (as an ADK session's creation
// starts one) gives goose its agent back sooner than a session in use.
func TestUnusedSessionConnectionClosesSooner(t *testing.T) {
	srv, c := newIsolationPair(t, Config{IdleTimeout: time.Hour, UnusedIdleTimeout: 20 * time.Millisecond})
	used := startSession(t, c)
	if _, err := collect(c.Reply(context.Background(), used, goose.UserMessage{Text: "one"})); err != nil {
		t.Fatal(err)
	}
	unused := startSession(t, c)
	poll.Until(t, "the unused session's connection to close", func() bool {
		return srv.OpenConnections() == 1 && c.openConns() == 1
	})
	if !c.hasConn(used) {
		t.Fatal("the connection that ran a reply closed; want it kept for IdleTimeout")
	}
	if _, err := collect(c.Reply(context.Background(), unused, goose.UserMessage{Text: "two"})); err != nil {
		t.Fatalf("first reply after the unused connection closed: %v", err)
	}
	if len(srv.Loads()) != 0 {
		t.Errorf("session/load %v: goose activates the session on the prompt", srv.Loads())
	}
}

// Once a session's connection has closed, the client keeps nothing of it
// that would pile up over every session a sidecar serves; what it kept is
// asked of goose again when needed.
func TestClosedSessionConnectionForgetsTheSession(t *testing.T) {
	_, c := newIsolationPair(t, Config{IdleTimeout: 20 * time.Millisecond})
	id := startSession(t, c)
	evs, err := collect(c.Reply(context.Background(), id, goose.UserMessage{Text: "one"}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.remembers(id) {
		t.Fatal("no usage or working dir kept while the session's connection is open")
	}
	poll.Until(t, "the idle connection to close", func() bool { return c.openConns() == 0 })
	poll.Until(t, "the session to be forgotten", func() bool { return !c.remembers(id) })
	var last *goose.UsageUpdate
	for _, ev := range evs {
		if u, ok := ev.(*goose.UsageUpdate); ok && u.HasAccumulated {
			last = u
		}
	}
	u, err := c.Usage(context.Background(), id)
	if err != nil || last == nil || u != last.Accumulated {
		t.Fatalf("Usage after the close = %+v, %v; the reply's last accumulated usage %+v", u, err, last)
	}
	if c.remembers(id) {
		t.Error("Usage without the session's connection kept its answer")
	}
	if _, err := c.ResumeSession(context.Background(), id); err != nil {
		t.Fatalf("ResumeSession after the close: %v", err)
	}
}

// slowExtensions take goose as long as they say to start (on session/new
// and session/load).
type slowExtensions struct{ start time.Duration }

func (x slowExtensions) Activate(string, string) []goosetest.ExtensionResult {
	time.Sleep(x.start) // how long goose takes to start them: the scenario, not a wait
	return nil
}

func (slowExtensions) Release(string) {}

// A call that takes goose longer than the idle timeout (a session/load
// replaying a long history, extensions slow to start) is not cut short by
// it: a connection waiting for an answer is not idle.
func TestIdleTimeoutSparesACallUnderWay(t *testing.T) {
	// Long enough that the connection is not idle between its dial and the
	// session/load sent on it, even on a loaded machine.
	const idle = 20 * time.Millisecond
	_, c := newIsolationPair(t, Config{IdleTimeout: idle}, goosetest.WithServeExtensions(slowExtensions{start: 25 * idle}))
	id := startSession(t, c)
	// The session's own connection: a call made after it closed (the
	// session info ResumeSession ends with) goes over the control one.
	sessionConnClosed := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.sessions[id] == nil
	}
	poll.Until(t, "the idle connection to close", sessionConnClosed)
	if _, err := c.ResumeSession(context.Background(), id); err != nil {
		t.Fatalf("ResumeSession whose session/load outlasts the idle timeout: %v", err)
	}
	poll.Until(t, "the resumed connection to close once idle", sessionConnClosed)
}

// The control connection (session info, usage export, delete of a session
// without a connection of its own) closes after IdleTimeout without a call,
// as session connections do; the next call dials it again. A connection
// handed to a caller is in use before the caller's request goes out, so the
// timer never closes it under the caller.
func TestIdleControlConnectionCloses(t *testing.T) {
	const idle = 50 * time.Millisecond
	srv, c := newIsolationPair(t, Config{IdleTimeout: idle})
	id := startSession(t, c)
	poll.Until(t, "the session's connection to close", func() bool { return !c.hasConn(id) })
	if _, err := c.Usage(context.Background(), id); err != nil { // an export on the control connection
		t.Fatal(err)
	}
	poll.Until(t, "the idle control connection to close", func() bool {
		return srv.OpenConnections() == 0 && c.openConns() == 0
	})

	// Handed out while its idle timer runs (a call has just released it),
	// then held past the idle timeout before its request.
	var cn *conn
	poll.Until(t, "a control connection handed out while its idle timer runs", func() bool {
		if _, err := c.Usage(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		var err error
		if cn, err = c.live(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		armed := cn.idle != nil
		c.mu.Unlock()
		if !armed { // the first call's connection closed before live: again
			c.release(cn)
		}
		return armed
	})
	handed := time.Now()
	poll.Until(t, "the idle timeout to pass several times", func() bool { return time.Since(handed) > 10*idle })
	_, err := call[infoResult](context.Background(), c, cn, "get session", methodSessionInfo, sessionIDParams{SessionID: id})
	c.release(cn)
	if err != nil {
		t.Fatalf("a call on a control connection handed out before the idle timeout: %v", err)
	}
	poll.Until(t, "the control connection to close once released", func() bool {
		return srv.OpenConnections() == 0 && c.openConns() == 0
	})
}

func TestUnusedIdleTimeoutDefaults(t *testing.T) {
	for _, tc := range []struct {
		idle, unused, want time.Duration
	}{
		{0, 0, 2 * time.Minute},
		{30 * time.Second, 0, 30 * time.Second}, // never longer than IdleTimeout
		{time.Hour, 5 * time.Minute, 5 * time.Minute},
		{-1, 0, 2 * time.Minute}, // IdleTimeout never closes; it is not used
	} {
		c, err := New(Config{URL: "http://127.0.0.1:1", IdleTimeout: tc.idle, UnusedIdleTimeout: tc.unused})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.cfg.UnusedIdleTimeout; got != tc.want {
			t.Errorf("IdleTimeout %v, UnusedIdleTimeout %v: got %v, want %v", tc.idle, tc.unused, got, tc.want)
		}
	}
}

func TestDeleteClosesTheSessionConnection(t *testing.T) {
	srv, c := newIsolationPair(t, Config{})
	id := startSession(t, c)
	if err := c.DeleteSession(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// The delete went on the session's own connection, which then closes.
	poll.Until(t, "the session connection to close", func() bool { return srv.OpenConnections() == 0 })
}

func TestDialBackoff(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 6: 3200 * time.Millisecond, 7: 5 * time.Second, 100: 5 * time.Second} {
		if got := dialBackoff(failures); got != want {
			t.Errorf("dialBackoff(%d) = %v, want %v", failures, got, want)
		}
	}
}

// hasConn reports whether session id has a connection of its own.
func (c *Client) hasConn(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[id] != nil
}

// remembers reports whether the client keeps usage or a working dir for
// session id.
func (c *Client) remembers(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, usage := c.usage[id]
	_, cwd := c.cwd[id]
	return usage || cwd
}

// openConns counts the connections the client holds open.
func (c *Client) openConns() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.sessions)
	if c.control != nil {
		n++
	}
	return n
}
