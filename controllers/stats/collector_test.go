package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"

	"github.com/adk2goose/goose-operator/controllers/stats/sample"
)

// fakeSidecar serves /stats like adk2goose's GET /stats (sidecar/server/stats.go).
type fakeSidecar struct {
	*httptest.Server
	mu     sync.Mutex
	body   map[string]any
	status int
	token  string
	hits   atomic.Int64
	// block, when set, holds requests until their context ends.
	block atomic.Bool
}

// newFakeSidecar serves /stats to the bearer token "tok".
func newFakeSidecar(t testing.TB, sessions, active, in, out int64) *fakeSidecar {
	t.Helper()
	f := &fakeSidecar{token: "tok", status: http.StatusOK}
	f.set(sessions, active, in, out)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		if f.block.Load() {
			<-r.Context().Done()
			return
		}
		if r.URL.Path != "/stats" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"unauthorized"}`))
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		_ = json.NewEncoder(w).Encode(f.body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeSidecar) set(sessions, active, in, out int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.body = map[string]any{
		"appName":  "goose",
		"sessions": map[string]int64{"total": sessions, "active": active, "inFlight": 0},
		"users":    active, // any figure the sums can be told by
		"tokens":   map[string]int64{"input": in, "output": out, "total": in + out},
	}
}

func (f *fakeSidecar) pod(name string) Pod { return Pod{Name: name, URL: f.URL + "/stats"} }

// noLeaks fails the test if it leaves goroutines behind. Registered first, it
// runs after every other cleanup (the fake servers' Close).
func noLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

var agent = types.NamespacedName{Namespace: "ns", Name: "a"}

func TestCollectSumsReplicas(t *testing.T) {
	noLeaks(t)
	p0 := newFakeSidecar(t, 3, 1, 100, 20)
	p1 := newFakeSidecar(t, 4, 2, 1000, 200)
	c := New(Options{})
	res := c.Collect(context.Background(), agent, "tok", []Pod{p0.pod("a-0"), p1.pod("a-1")})
	want := sample.Totals{SessionsTotal: 7, SessionsActive: 3, Users: 3, TokensInput: 1100, TokensOutput: 220, TokensTotal: 1320}
	if res.Totals != want || !res.Known || len(res.Stale) != 0 {
		t.Fatalf("got %+v, want totals %+v, known and fresh", res, want)
	}
}

func TestUnreachablePodKeepsLastKnownFigures(t *testing.T) {
	noLeaks(t)
	p0 := newFakeSidecar(t, 3, 1, 100, 20)
	p1 := newFakeSidecar(t, 4, 0, 1000, 200)
	c := New(Options{Timeout: 200 * time.Millisecond})
	pods := []Pod{p0.pod("a-0"), p1.pod("a-1")}
	first := c.Collect(context.Background(), agent, "tok", pods)

	p0.set(5, 1, 150, 30) // a conversation happened on a-0
	p1.Close()            // a-1 went away
	second := c.Collect(context.Background(), agent, "tok", pods)
	want := sample.Totals{SessionsTotal: 9, SessionsActive: 1, Users: 1, TokensInput: 1150, TokensOutput: 230, TokensTotal: 1380}
	if second.Totals != want {
		t.Fatalf("totals %+v, want %+v (a-1's last figures kept)", second.Totals, want)
	}
	if len(second.Stale) != 1 || !strings.HasPrefix(second.Stale[0], "a-1: ") {
		t.Fatalf("stale = %q, want one entry for a-1", second.Stale)
	}
	if second.Totals.TokensTotal < first.Totals.TokensTotal {
		t.Fatal("token totals went backwards")
	}

	// A pod that is not ready (no URL) also keeps its figures.
	third := c.Collect(context.Background(), agent, "tok", []Pod{p0.pod("a-0"), {Name: "a-1"}})
	if third.Totals != want || len(third.Stale) != 1 || third.Stale[0] != "a-1: not ready" {
		t.Fatalf("not-ready pod: got %+v", third)
	}

	// Scaled down: a-1 is no longer a pod of the agent and is forgotten.
	fourth := c.Collect(context.Background(), agent, "tok", []Pod{p0.pod("a-0")})
	if fourth.Totals.SessionsTotal != 5 || len(fourth.Stale) != 0 {
		t.Fatalf("after scale-down: got %+v", fourth)
	}
}

func TestNeverAnsweredIsUnknown(t *testing.T) {
	noLeaks(t)
	c := New(Options{})
	res := c.Collect(context.Background(), agent, "tok", []Pod{{Name: "a-0"}})
	if res.Known || res.Totals != (sample.Totals{}) || len(res.Stale) != 1 {
		t.Fatalf("got %+v, want unknown and stale", res)
	}
}

func TestBadAnswersAreStaleWithReason(t *testing.T) {
	noLeaks(t)
	cases := []struct {
		name    string
		setup   func(*fakeSidecar)
		token   string
		wantErr string
	}{
		{"wrong token", func(*fakeSidecar) {}, "nope", "HTTP 401"},
		{"server error", func(f *fakeSidecar) { f.status = http.StatusInternalServerError }, "tok", "HTTP 500"},
		{"negative counts", func(f *fakeSidecar) { f.set(-1, 0, 0, 0) }, "tok", "negative"},
		{"timeout", func(f *fakeSidecar) { f.block.Store(true) }, "tok", "deadline exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSidecar(t, 1, 0, 1, 1)
			tc.setup(f)
			c := New(Options{Timeout: 100 * time.Millisecond})
			res := c.Collect(context.Background(), agent, tc.token, []Pod{f.pod("a-0")})
			if res.Known || len(res.Stale) != 1 || !strings.Contains(res.Stale[0], tc.wantErr) {
				t.Fatalf("got %+v, want stale with %q", res, tc.wantErr)
			}
		})
	}
}

func TestConcurrencyIsBounded(t *testing.T) {
	noLeaks(t)
	var inFlight, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		_, _ = w.Write([]byte(`{"sessions":{"total":1},"tokens":{}}`))
	}))
	defer srv.Close()
	c := New(Options{MaxConcurrent: 3})
	pods := make([]Pod, 20)
	for i := range pods {
		pods[i] = Pod{Name: fmt.Sprintf("a-%d", i), URL: srv.URL + "/stats"}
	}
	res := c.Collect(context.Background(), agent, "tok", pods)
	if res.Totals.SessionsTotal != 20 {
		t.Fatalf("sessions %d, want 20", res.Totals.SessionsTotal)
	}
	if p := peak.Load(); p > 3 || p < 1 {
		t.Fatalf("peak concurrent fetches %d, want 1..3", p)
	}
}

// BenchmarkCollect1000Agents polls 1,000 agents (one in-process fake sidecar
// each) the way the stats controller does, with 16 workers, and reports how
// long one sweep over all of them takes. The interval is 30 s by default.
func BenchmarkCollect1000Agents(b *testing.B) {
	const agents, workers = 1000, 16
	fakes := make([]*fakeSidecar, agents)
	for i := range fakes {
		fakes[i] = newFakeSidecar(b, int64(i), 0, int64(i), int64(i))
	}
	c := New(Options{MaxConcurrent: 64})
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		work := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range work {
					key := types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("a%d", i)}
					res := c.Collect(context.Background(), key, "tok", []Pod{fakes[i].pod("p-0")})
					if len(res.Stale) != 0 {
						b.Errorf("agent %d stale: %v", i, res.Stale)
					}
				}
			})
		}
		for i := range agents {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	sweep := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(sweep.Milliseconds()), "ms/sweep")
	b.ReportMetric(float64(agents)/sweep.Seconds(), "agents/s")
}

// TestCollectActivity: the turns in flight add up over the pods and the last
// turn is the latest any pod reports; a pod before its first turn reports
// none.
func TestCollectActivity(t *testing.T) {
	noLeaks(t)
	a, b, fresh := newFakeSidecar(t, 1, 1, 1, 1), newFakeSidecar(t, 1, 1, 1, 1), newFakeSidecar(t, 0, 0, 0, 0)
	early, late := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), time.Date(2026, 12, 3, 11, 30, 0, 500_000_000, time.UTC)
	a.mu.Lock()
	a.body["sessions"] = map[string]int64{"total": 1, "active": 1, "inFlight": 2}
	a.body["lastTurnAt"] = late
	a.mu.Unlock()
	b.mu.Lock()
	b.body["sessions"] = map[string]int64{"total": 1, "active": 1, "inFlight": 1}
	b.body["lastTurnAt"] = early
	b.mu.Unlock()
	c := New(Options{})
	res := c.Collect(t.Context(), types.NamespacedName{Namespace: "ns", Name: "a"}, "tok", []Pod{a.pod("a-0"), b.pod("a-1"), fresh.pod("a-2")})
	if len(res.Stale) != 0 || res.Totals.InFlight != 3 || !res.Totals.LastTurnAt.Equal(late) {
		t.Fatalf("totals %+v stale %v, want 3 in flight and the last turn %v", res.Totals, res.Stale, late)
	}
	none := c.Collect(t.Context(), types.NamespacedName{Namespace: "ns", Name: "b"}, "tok", []Pod{fresh.pod("b-0")})
	if !none.Totals.LastTurnAt.IsZero() || none.Totals.InFlight != 0 {
		t.Fatalf("a pod before its first turn: %+v", none.Totals)
	}
}
