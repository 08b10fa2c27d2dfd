package budget

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPeriodBounds(t *testing.T) {
	utc := func(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }
	cases := []struct {
		p          Period
		at         time.Time
		start, end time.Time
	}{
		{Day, utc(2026, 11, 23, 10), utc(2026, 11, 23, 0), utc(2026, 11, 24, 0)},
		{Day, utc(2026, 12, 31, 23), utc(2026, 12, 31, 0), utc(2027, 1, 1, 0)},
		// Another zone's wall clock is converted: 01:00 in UTC+2 is the day before.
		{Day, time.Date(2026, 11, 23, 1, 0, 0, 0, time.FixedZone("EET", 2*3600)), utc(2026, 11, 22, 0), utc(2026, 11, 23, 0)},
		{Week, utc(2026, 11, 23, 10), utc(2026, 11, 23, 0), utc(2026, 11, 30, 0)}, // a Monday
		{Week, utc(2026, 11, 29, 23), utc(2026, 11, 23, 0), utc(2026, 11, 30, 0)}, // the Sunday after
		{Week, utc(2027, 1, 1, 0), utc(2026, 12, 28, 0), utc(2027, 1, 4, 0)},      // across a year
		{Month, utc(2026, 11, 23, 10), utc(2026, 11, 1, 0), utc(2026, 12, 1, 0)},
		{Month, utc(2028, 2, 29, 12), utc(2028, 2, 1, 0), utc(2028, 3, 1, 0)},
	}
	for _, c := range cases {
		start, end, err := c.p.Bounds(c.at)
		if err != nil || !start.Equal(c.start) || !end.Equal(c.end) {
			t.Errorf("%s at %s: [%s, %s) %v, want [%s, %s)", c.p, c.at, start, end, err, c.start, c.end)
		}
	}
	if _, _, err := Period("Year").Bounds(time.Now()); err == nil {
		t.Error("an unknown period has bounds")
	}
}

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits([]byte(`{"period":"Week","totalTokens":1000,"outputTokens":200}`))
	if err != nil || l.Period != Week || l.TotalTokens != 1000 || l.InputTokens != nil || *l.OutputTokens != 200 {
		t.Fatalf("%+v %v", l, err)
	}
	for in, want := range map[string]string{
		`{"period":"Year","totalTokens":1}`:                   "unknown budget period",
		`{"period":"Day","totalTokens":0}`:                    "totalTokens must be positive",
		`{"period":"Day","totalTokens":5,"inputTokens":-1}`:   "inputTokens must be positive",
		`{"period":"Day","totalTokens":5,"tokens":3}`:         "unknown field",
		`{"period":"Day","totalTokens":"5"}`:                  "cannot unmarshal",
		`[]`:                                                  "cannot unmarshal",
		`{"period":"Day","totalTokens":5,"outputTokens":0}`:   "outputTokens must be positive",
		`{"period":"Day","totalTokens":5} {"period":"Week"}`:  "", // one document is read
		`{"period":"Day","totalTokens":9223372036854775807}`:  "",
		`{"period":"Day","totalTokens":9223372036854775808}`:  "cannot unmarshal",
		`{"period":"day","totalTokens":5}`:                    "unknown budget period",
		`{"period":"Month","totalTokens":5,"inputTokens":1}`:  "",
		`{"period":"Month","totalTokens":5,"inputTokens":1,}`: "invalid character",
	} {
		_, err := ParseLimits([]byte(in))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	dir := t.TempDir()
	if l, err := ReadLimits(filepath.Join(dir, "absent")); l != nil || err != nil {
		t.Errorf("a missing file: %v %v, want no budget", l, err)
	}
}

func FuzzParseLimits(f *testing.F) {
	f.Add([]byte(`{"period":"Day","totalTokens":100,"inputTokens":50}`))
	f.Add([]byte(`{"period":"Month","totalTokens":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseLimits(b)
		if err != nil {
			return
		}
		// What is accepted is usable: it has bounds and a positive limit.
		if _, _, err := l.Period.Bounds(time.Now()); err != nil || l.TotalTokens <= 0 {
			t.Fatalf("accepted %+v from %q", l, b)
		}
		if l.exceeded(Tokens{}) != "" {
			t.Fatalf("zero usage exceeds %+v", l)
		}
	})
}

func openLedger(t testing.TB, path, self string) *Ledger {
	t.Helper()
	l, err := OpenLedger(t.Context(), path, self)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestLedgerMergeIsAGrowOnlyCounter: merging keeps the larger figure per
// pod and day, so repeated, reordered and transitive merges agree, and a
// pod's own count never goes down.
func TestLedgerMergeIsAGrowOnlyCounter(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	a := openLedger(t, filepath.Join(dir, "a.db"), "goose-0")
	b := openLedger(t, filepath.Join(dir, "b.db"), "goose-1")
	c := openLedger(t, filepath.Join(dir, "c.db"), "goose-2")
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.Add(ctx, now, Tokens{Input: 30, Output: 10, Total: 40}))
	must(a.Add(ctx, now.Add(-24*time.Hour), Tokens{Input: 3, Output: 1, Total: 4}))
	must(b.Add(ctx, now, Tokens{Input: 6, Output: 2, Total: 8}))

	// b learns a's rows twice, c learns them only through b.
	for range 2 {
		if _, err := b.Merge(ctx, a.Since("2026-11-01"), now); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.Merge(ctx, b.Since("2026-11-01"), now); err != nil || n != 3 {
		t.Fatalf("c merged %d rows, %v; want 3", n, err)
	}
	day := func(l *Ledger) Tokens {
		return l.Sum(now.Truncate(24*time.Hour), now.Truncate(24*time.Hour).Add(24*time.Hour))
	}
	if got := day(c); got != (Tokens{Input: 36, Output: 12, Total: 48}) {
		t.Fatalf("c's day: %+v", got)
	}
	if got := c.Sum(now.Add(-48*time.Hour), now.Add(24*time.Hour)); got.Total != 52 {
		t.Fatalf("c's two days: %+v", got)
	}
	// An old figure for a's row does not lower it; a's own later turn grows it.
	if n, _ := a.Merge(ctx, []Row{{Pod: "goose-0", Day: "2026-11-23", Tokens: Tokens{Total: 1}}}, now); n != 0 {
		t.Fatal("a smaller figure was merged")
	}
	must(a.Add(ctx, now, Tokens{Total: 2}))
	if got := day(a).Total; got != 42 {
		t.Fatalf("a's day: %d", got)
	}
	// Days older than any period are neither merged nor kept.
	if n, _ := c.Merge(ctx, []Row{{Pod: "goose-9", Day: "2026-01-01", Tokens: Tokens{Total: 5}}}, now); n != 0 {
		t.Fatal("an expired day was merged")
	}
	must(c.Prune(ctx, now.AddDate(0, 0, keepDays)))
	if rows := c.Since(""); len(rows) != 2 || rows[0].Day != "2026-11-23" {
		t.Fatalf("after pruning: %+v", rows)
	}
}

// TestLedgerSurvivesReopen: what a pod spent and learned is on its volume.
func TestLedgerSurvivesReopen(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), LedgerFile)
	l, err := OpenLedger(t.Context(), path, "goose-0")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add(t.Context(), now, Tokens{Input: 5, Output: 5, Total: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Merge(t.Context(), []Row{{Pod: "goose-1", Day: "2026-11-23", Tokens: Tokens{Total: 7}}}, now); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLedger(t, path, "goose-0")
	if got := l.Sum(now.Add(-time.Hour), now.Add(time.Hour)); got.Total != 17 {
		t.Fatalf("after reopening: %+v", got)
	}
}

// TestPeerAnswersAreChecked: a peer's malformed ledger is not merged.
func TestPeerAnswersAreChecked(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	var body string
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != UsagePath || r.URL.Query().Get("since") != "2026-11-23" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unexpected request "+r.URL.String(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer peer.Close()
	file := filepath.Join(t.TempDir(), "budget.json")
	writeFile(t, file, `{"period":"Day","totalTokens":100}`)
	l := openLedger(t, filepath.Join(t.TempDir(), LedgerFile), "goose-0")
	b, err := New(Config{File: file, Token: "tok", Now: func() time.Time { return now },
		Peers: func(context.Context) ([]string, error) { return []string{peer.URL}, nil }}, l)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"pod":"goose-1","rows":[{"pod":"goose-1","day":"23.11.2026","total":5}]}`,
		`{"pod":"goose-1","rows":[{"pod":"","day":"2026-11-23","total":5}]}`,
		`{"pod":"goose-1","rows":[{"pod":"goose-1","day":"2026-11-23","total":-5}]}`,
		`not json`,
	} {
		body = bad
		if err := b.Sync(t.Context()); err == nil {
			t.Errorf("%s was accepted", bad)
		}
		if st := b.Status(); st.Used.Total != 0 || st.PeersUnanswered != 1 || st.PeersSyncedAt != nil {
			t.Errorf("after %s: %+v", bad, st)
		}
	}
	good, _ := json.Marshal(answer{Pod: "goose-1", Rows: []Row{{Pod: "goose-1", Day: "2026-11-23", Tokens: Tokens{Total: 100}}}})
	body = string(good)
	if err := b.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := b.Status()
	if st.Used.Total != 100 || !st.Exhausted || st.PeersUnanswered != 0 || st.PeersSyncedAt == nil {
		t.Fatalf("after a good answer: %+v", st)
	}
	if r := b.Check(); r == nil || r.Kind != "total" || r.RetryAfter(now) != 14*3600 {
		t.Fatalf("refusal: %+v", r)
	}

	// A broken budget file keeps the budget before it.
	writeFile(t, file, `{"period":"Fortnight","totalTokens":100}`)
	if err := b.Reload(); err == nil || b.Status().Limits.Period != Day {
		t.Fatalf("a bad file: %v, %+v", err, b.Status())
	}
}

// TestInputAndOutputLimits: either optional limit refuses on its own.
func TestInputAndOutputLimits(t *testing.T) {
	in, out := int64(50), int64(10)
	l := Limits{Period: Day, TotalTokens: 1000, InputTokens: &in, OutputTokens: &out}
	for used, want := range map[Tokens]string{
		{Input: 49, Output: 9, Total: 58}:   "",
		{Input: 50, Output: 0, Total: 50}:   "input",
		{Input: 0, Output: 10, Total: 10}:   "output",
		{Input: 0, Output: 0, Total: 1000}:  "total",
		{Input: 99, Output: 99, Total: 999}: "input",
	} {
		if got := l.exceeded(used); got != want {
			t.Errorf("%+v: %q, want %q", used, got, want)
		}
	}
	r := Refusal{Limits: l, Used: Tokens{Input: 60, Total: 60}, Kind: "input", ResetsAt: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	if want := "60 of 50 input tokens used this day"; !strings.Contains(r.Error(), want) {
		t.Errorf("%q does not say %q", r.Error(), want)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerAddWithEndedContext: a turn whose context ended records
// nothing, in the file or in memory.
func TestLedgerAddWithEndedContext(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	l := openLedger(t, filepath.Join(t.TempDir(), LedgerFile), "goose-0")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.Add(ctx, now, Tokens{Input: 5, Output: 5, Total: 10}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Add with an ended context: %v", err)
	}
	if got := l.Sum(now.Add(-time.Hour), now.Add(time.Hour)); got != (Tokens{}) {
		t.Fatalf("recorded %+v", got)
	}
}

// BenchmarkLedgerAdd is a turn's write to the ledger, with a context that
// has a deadline, as a turn's has.
func BenchmarkLedgerAdd(b *testing.B) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	l := openLedger(b, filepath.Join(b.TempDir(), LedgerFile), "goose-0")
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
		if err := l.Add(ctx, now, Tokens{Input: 5, Output: 5, Total: 10}); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}
