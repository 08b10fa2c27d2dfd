package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/adk/agent"

	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// fakeClock is the budget's clock in these tests: periods roll over when a
// test says so.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// monday10 is Monday 2026-11-23 10:00 UTC: 14 h before the day ends.
var monday10 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// spendScript answers "spend N" with one provider call of N tokens (3/4
// input, 1/4 output), as goose reports a model call's usage. "slow spend N"
// first tells started and waits for release, so a test can hold a turn
// running.
func spendScript(started chan<- string, release <-chan struct{}) goosetest.Script {
	return func(sid, text string) goosetest.Reply {
		var n int64
		_, count, found := strings.Cut(text, "spend ")
		if _, err := fmt.Sscan(count, &n); !found || err != nil {
			return goosetest.Reply{Steps: []goosetest.Step{{Error: "bad test prompt " + text}}}
		}
		if strings.HasPrefix(text, "slow ") {
			started <- sid
			<-release
		}
		return goosetest.Reply{Steps: []goosetest.Step{
			{Text: "spent " + text},
			{Usage: &goosetest.UsageStep{Input: n * 3 / 4, Output: n - n*3/4}},
		}}
	}
}

func writeBudget(t *testing.T, path, period string, total int64) {
	t.Helper()
	b, _ := json.Marshal(budget.Limits{Period: budget.Period(period), TotalTokens: total})
	// Like a ConfigMap volume: the new content appears at once, whole.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// budgeted configures a sidecar with the budget file and clock, re-read
// every 20 ms.
func budgeted(file string, clock *fakeClock, pod string) option {
	return func(c *server.Config) {
		c.PodName = pod
		c.Budget = budget.Config{File: file, SyncInterval: 20 * time.Millisecond, Now: clock.Now}
	}
}

// spend runs one turn of user "u" over /run_sse and fails the test unless
// it ran.
func (s *sidecar) spend(sess string, n int) {
	s.t.Helper()
	code, frames := s.runSSE(runBody("u", sess, fmt.Sprintf("spend %d", n), true))
	if code != http.StatusOK || len(frames) == 0 || frames[len(frames)-1].Data["errorCode"] != nil {
		s.t.Fatalf("turn spending %d on %s: %d %v", n, sess, code, frames)
	}
}

// refused asserts that path answers a new turn of user "u" 429 with the
// budget's JSON reason and the seconds left in the period.
func (s *sidecar) refused(path, sess string, wantRetryAfter string) server.BudgetRefusal {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(s.t.Context(), http.MethodPost, s.URL+path, strings.NewReader(mustJSON(s.t, runBody("u", sess, "spend 1", path == "/run_sse"))))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.httpc().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r server.BudgetRefusal
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		s.t.Fatalf("%s: decode: %v", path, err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || r.Code != budget.ReasonExhausted ||
		resp.Header.Get("Retry-After") != wantRetryAfter || resp.Header.Get("Content-Type") != "application/json" {
		s.t.Fatalf("%s: %d Retry-After %q %+v, want 429 %s with Retry-After %s", path, resp.StatusCode, resp.Header.Get("Retry-After"), r, budget.ReasonExhausted, wantRetryAfter)
	}
	return r
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (s *sidecar) metricLine(series string) string {
	s.t.Helper()
	_, body := s.do(http.MethodGet, "/metrics", nil)
	for line := range strings.SplitSeq(string(body), "\n") {
		if after, ok := strings.CutPrefix(line, series+" "); ok {
			return after
		}
	}
	return ""
}

// TestBudgetSpentMidConversation: the turn that crosses the budget
// finishes; the next turn of the same conversation gets 429 over REST and a
// FAILED task over A2A (read by adk-go's own A2A client), goose is never
// asked, and a turn that was already running when the budget ran out
// finishes with its answer.
func TestBudgetSpentMidConversation(t *testing.T) {
	started, release := make(chan string, 1), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	f := goosetest.NewServe(t, goosetest.WithServeScript(spendScript(started, release)))
	b, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	file := filepath.Join(t.TempDir(), "budget.json")
	writeBudget(t, file, "Day", 100)
	clock := &fakeClock{t: monday10}
	sc := startSidecar(t, b, t.TempDir(), budgeted(file, clock, "goose-0"))
	t.Cleanup(releaseOnce) // a failing test must not leave goose's reply hanging

	sc.createSession("u", "talk")
	sc.createSession("u", "long")
	sc.spend("talk", 40)
	sc.spend("talk", 40)
	if st := sc.stats().Budget; st == nil || st.Used.Total != 80 || st.Exhausted || st.Limits.TotalTokens != 100 ||
		!st.ResetsAt.Equal(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("after 80 of 100 tokens: %+v", st)
	}

	// A turn that is running when the budget runs out.
	longDone := make(chan []sseFrame, 1)
	go func() {
		_, frames := sc.runSSE(runBody("u", "long", "slow spend 40", true))
		longDone <- frames
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the long turn did not reach goose")
	}

	sc.spend("talk", 40) // 80 < 100: admitted; it ends at 120
	st := sc.stats().Budget
	if st == nil || st.Used.Total != 120 || st.Used.Input != 90 || st.Used.Output != 30 || !st.Exhausted {
		t.Fatalf("after crossing the budget: %+v", st)
	}
	const left = "50400" // 14 h to the end of the day
	r := sc.refused("/run_sse", "talk", left)
	if !strings.Contains(r.Error, "120 of 100 total tokens used this day") || r.ResetsAt != "2026-11-24T00:00:00Z" ||
		r.Used.Total != 120 || r.Budget.TotalTokens != 100 || r.Budget.Period != budget.Day {
		t.Fatalf("refusal: %+v", r)
	}
	sc.refused("/run", "talk", left)

	// A2A, through adk-go's remoteagent: the task fails with the same reason.
	evs := remoteRun(t, sc.URL, "spend 1", agent.StreamingModeSSE)
	last := evs[len(evs)-1]
	if last.ErrorCode != budget.ReasonExhausted || !strings.Contains(last.ErrorMessage, "120 of 100 total tokens") {
		t.Fatalf("A2A refusal as the ADK client sees it: %s", dumpEvents(evs))
	}

	releaseOnce()
	frames := <-longDone
	if len(frames) == 0 || !strings.Contains(mustJSON(t, frames), "spent slow spend 40") || frames[len(frames)-1].Data["errorCode"] != nil {
		t.Fatalf("the turn running when the budget ran out did not finish: %v", frames)
	}
	if n := len(f.Prompts()); n != 4 {
		t.Fatalf("goose got %d prompts, want 4: refused turns must not reach it", n)
	}
	if st := sc.stats().Budget; st.Used.Total != 160 {
		t.Fatalf("the running turn's tokens must count: %+v", st)
	}
	for series, want := range map[string]string{
		"adk2goose_budget_exhausted":                                              "1",
		`adk2goose_budget_refusals_total{api="rest"}`:                             "2",
		`adk2goose_budget_refusals_total{api="a2a"}`:                              "1",
		`adk2goose_budget_used_tokens{kind="total"}`:                              "160",
		`adk2goose_budget_limit_tokens{kind="total"}`:                             "100",
		`adk2goose_http_requests_total{code="429",method="POST",route="run_sse"}`: "1",
	} {
		if got := sc.metricLine(series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}
}

// TestBudgetApprovalAnswerPassesWhenSpent: a turn held at a tool approval
// is a running turn; answering it continues goose's reply even after the
// budget ran out.
func TestBudgetApprovalAnswerPassesWhenSpent(t *testing.T) {
	script := func(_, text string) goosetest.Reply {
		if text == "spend 200" {
			return goosetest.Reply{Steps: []goosetest.Step{{Text: "done"}, {Usage: &goosetest.UsageStep{Input: 150, Output: 50}}}}
		}
		return goosetest.Reply{Steps: []goosetest.Step{
			{Tool: &goosetest.ToolStep{ID: "c1", Name: "shell", Extension: "developer", Arguments: json.RawMessage(`{"command":"rm x"}`), Result: "removed", NeedsApproval: true}},
			{Text: "it is gone"},
			{Usage: &goosetest.UsageStep{Input: 10, Output: 5}},
		}}
	}
	b := flavours[0].start(t, script)
	file := filepath.Join(t.TempDir(), "budget.json")
	writeBudget(t, file, "Month", 100)
	clock := &fakeClock{t: monday10}
	sc := startSidecar(t, b, t.TempDir(), approveMode, budgeted(file, clock, "goose-0"))
	sc.createSession("u", "tool")
	sc.createSession("u", "big")

	_, frames := sc.runSSE(runBody("u", "tool", "remove x", true))
	id := confirmationFrame(t, frames)
	sc.spend("big", 200)
	// Month of November: 7 days and 14 h left.
	sc.refused("/run_sse", "tool", "655200")

	code, frames := sc.runSSE(answerBody("tool", id, map[string]any{"confirmed": true}))
	if code != http.StatusOK || !strings.Contains(mustJSON(t, frames), "it is gone") {
		t.Fatalf("answering the held approval: %d %v", code, frames)
	}
	if st := sc.stats().Budget; st.Used.Total != 215 {
		t.Fatalf("used after the held turn finished: %+v", st)
	}
}

// TestBudgetRaisedRolledOverAndRestarted: raising the budget in the file
// lifts the refusal without a restart; the spent budget survives a restart;
// the next day starts from zero; a longer period counts the days before.
func TestBudgetRaisedRolledOverAndRestarted(t *testing.T) {
	f := goosetest.NewServe(t, goosetest.WithServeScript(spendScript(nil, nil)))
	backend := func() goose.Backend {
		b, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	file := filepath.Join(t.TempDir(), "budget.json")
	data := t.TempDir()
	writeBudget(t, file, "Day", 100)
	clock := &fakeClock{t: monday10}
	sc := startSidecar(t, backend(), data, budgeted(file, clock, "goose-0"))
	sc.createSession("u", "s")
	sc.spend("s", 120)
	sc.refused("/run_sse", "s", "50400")

	writeBudget(t, file, "Day", 200)
	poll.Until(t, "the raised budget to be read", func() bool {
		st := sc.stats().Budget
		return st.Limits.TotalTokens == 200 && !st.Exhausted
	})
	sc.spend("s", 90) // 210 of 200
	sc.refused("/run", "s", "50400")

	// A restart keeps what was spent.
	sc.stop()
	sc = startSidecar(t, backend(), data, budgeted(file, clock, "goose-0"))
	if st := sc.stats().Budget; st.Used.Total != 210 || !st.Exhausted {
		t.Fatalf("after a restart: %+v", st)
	}
	sc.refused("/run_sse", "s", "50400")

	// Tuesday: a new day, a new budget.
	clock.Set(monday10.Add(24 * time.Hour))
	if st := sc.stats().Budget; st.Used.Total != 0 || st.Exhausted || !st.PeriodStart.Equal(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("after the day rolled over: %+v", st)
	}
	sc.spend("s", 50)

	// The same spend seen by the week (from Monday): 260 of 250.
	writeBudget(t, file, "Week", 250)
	poll.Until(t, "the weekly budget to be read", func() bool {
		st := sc.stats().Budget
		return st.Limits.Period == budget.Week && st.Used.Total == 260 && st.Exhausted
	})
	sc.refused("/run_sse", "s", "482400") // to Monday 2026-11-30 00:00
}

// budgetPods are two sidecars of one agent, each over its own goose, that
// find each other as peers (the headless Service in a cluster).
type budgetPods struct {
	t        *testing.T
	file     string
	clock    *fakeClock
	data     [2]string
	backends [2]goose.Backend
	pods     [2]*sidecar
	mu       sync.Mutex
	urls     [2]string
}

func (p *budgetPods) start(i int) {
	p.t.Helper()
	// A pod's goose keeps its sessions on the pod's volume: a restarted
	// sidecar finds the same goose.
	if p.backends[i] == nil {
		p.backends[i] = flavours[0].start(p.t, spendScript(nil, nil))
	}
	p.pods[i] = startSidecar(p.t, p.backends[i], p.data[i], budgeted(p.file, p.clock, fmt.Sprintf("goose-%d", i)), func(c *server.Config) {
		c.Peers = func(context.Context) ([]string, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.urls[1-i] == "" {
				return nil, nil
			}
			return []string{p.urls[1-i]}, nil
		}
	})
	p.mu.Lock()
	p.urls[i] = p.pods[i].URL
	p.mu.Unlock()
}

func (p *budgetPods) stop(i int) {
	p.pods[i].stop()
	// The address stays listed, as a pod's does while it restarts: its
	// peer's requests now fail.
}

// TestBudgetTwoReplicas: a budget of 100 is 100 for the agent, not per pod.
// Each pod learns the other's usage, refuses once the sum is spent, and
// remembers the other's usage across its own restart while the other is
// down.
func TestBudgetTwoReplicas(t *testing.T) {
	p := &budgetPods{t: t, file: filepath.Join(t.TempDir(), "budget.json"), clock: &fakeClock{t: monday10}}
	writeBudget(t, p.file, "Day", 100)
	p.data = [2]string{t.TempDir(), t.TempDir()}
	p.start(0)
	p.start(1)
	for i, sc := range p.pods {
		sc.createSessionHere("u", fmt.Sprint("s", i))
	}
	p.pods[0].spend("s0", 60)
	p.pods[1].spend("s1", 30)
	for i, sc := range p.pods {
		poll.Until(t, fmt.Sprintf("pod %d to count both pods' 90 tokens", i), func() bool {
			st := sc.stats().Budget
			return st.Used.Total == 90 && !st.Exhausted && st.PeersUnanswered == 0
		})
	}
	p.pods[1].spend("s1", 30) // 90 < 100: admitted; the agent is at 120
	p.pods[1].refused("/run_sse", "s1", "50400")
	poll.Until(t, "pod 0 to learn the budget is spent", func() bool { return p.pods[0].stats().Budget.Exhausted })
	// Pod 0 itself used only 60 of 100.
	r := p.pods[0].refused("/run_sse", "s0", "50400")
	if r.Used.Total != 120 {
		t.Fatalf("pod 0's refusal: %+v", r)
	}

	// Pod 1 goes away; pod 0 restarts meanwhile and still counts pod 1's 60.
	p.stop(1)
	p.stop(0)
	p.start(0)
	st := p.pods[0].stats().Budget
	if st.Used.Total != 120 || !st.Exhausted {
		t.Fatalf("pod 0 after its restart with its peer down: %+v", st)
	}
	p.pods[0].refused("/run", "s0", "50400")
	poll.Until(t, "pod 0 to notice its peer does not answer", func() bool {
		return p.pods[0].stats().Budget.PeersUnanswered == 1
	})

	// A new day, and pod 1 is back with its volume.
	p.clock.Set(monday10.Add(24 * time.Hour))
	p.start(1)
	p.pods[1].spend("s1", 70)
	poll.Until(t, "pod 0 to count pod 1's new day", func() bool {
		st := p.pods[0].stats().Budget
		return st.Used.Total == 70 && st.PeersUnanswered == 0
	})
	p.pods[0].spend("s0", 40) // 70 < 100: admitted; 110
	for i, sc := range p.pods {
		poll.Until(t, fmt.Sprintf("pod %d to refuse on the new day", i), func() bool { return sc.stats().Budget.Exhausted })
		sc.refused("/run_sse", fmt.Sprint("s", i), "50400")
	}
}
