package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/adk2goose/goose-operator/internal/jsonhttp"

	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/peering"
)

// UsagePath answers a peer's request for ledger rows: GET ?since=YYYY-MM-DD
// returns {"pod": name, "rows": [Row...]} for the days from since on.
const UsagePath = "/peer/v1/usage"

// maxAnswerBytes bounds one peer's answer: at most 32 replicas' pods × 62
// days of rows is well under it.
const maxAnswerBytes = 1 << 20

// Config configures a Budget.
type Config struct {
	// File holds the budget as JSON (Limits); it is re-read every
	// SyncInterval, so a changed ConfigMap takes effect without a restart.
	// Empty, missing or blank: no budget (usage is still recorded).
	File string
	// Peers lists the agent's other sidecars; nil for one replica.
	Peers peering.Peers
	// Token authenticates requests to peers; the agent's sidecars share it.
	Token string
	// SyncInterval is how often the file is re-read and peers are asked.
	// Default 5s. It bounds how stale a pod's view of its peers is.
	SyncInterval time.Duration
	// LookupTimeout bounds one round of peer requests. Default 3s.
	LookupTimeout time.Duration
	// Now is the clock (tests fake it). Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Budget enforces Limits over the ledger; see the package doc.
type Budget struct {
	cfg     Config
	ledger  *Ledger
	log     *slog.Logger
	client  *http.Client
	metrics *metrics

	mu         sync.Mutex
	limits     *Limits
	syncedAt   time.Time // last round in which every peer answered
	unanswered int       // peers that did not answer the last round
	prunedAt   time.Time
}

// New returns a Budget over ledger and reads the budget file once.
func New(cfg Config, ledger *Ledger) (*Budget, error) {
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = 5 * time.Second
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = 3 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Budget{cfg: cfg, ledger: ledger, log: cfg.Logger, client: &http.Client{Timeout: cfg.LookupTimeout}}
	b.metrics = newMetrics(b)
	if err := b.Reload(); err != nil {
		return nil, err
	}
	return b, nil
}

// Reload re-reads the budget file. A file that cannot be read or parsed
// keeps the budget in force before it and returns the error.
func (b *Budget) Reload() error {
	if b.cfg.File == "" {
		return nil
	}
	l, err := ReadLimits(b.cfg.File)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !equalLimits(b.limits, l) {
		b.log.Info("token budget set", "budget", l)
	}
	b.limits = l
	return nil
}

func equalLimits(a, b *Limits) bool {
	if a == nil || b == nil {
		return a == b
	}
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Period == b.Period && a.TotalTokens == b.TotalTokens && eq(a.InputTokens, b.InputTokens) && eq(a.OutputTokens, b.OutputTokens)
}

func (b *Budget) current() *Limits {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limits
}

// Check returns a Refusal when the agent's budget for the current period is
// spent, nil when a new turn may start.
func (b *Budget) Check() *Refusal {
	st := b.Status()
	if st == nil || !st.Exhausted {
		return nil
	}
	return &Refusal{Limits: st.Limits, Used: st.Used, Kind: st.Limits.exceeded(st.Used), ResetsAt: st.ResetsAt}
}

// Refused counts a refusal on api ("rest" or "a2a") for the metrics.
func (b *Budget) Refused(api string) { b.metrics.refusals.WithLabelValues(api).Inc() }

// Now is the budget's clock.
func (b *Budget) Now() time.Time { return b.cfg.Now() }

// Status is the budget as /stats reports it.
type Status struct {
	Limits      Limits    `json:"limits"`
	PeriodStart time.Time `json:"periodStart"`
	ResetsAt    time.Time `json:"resetsAt"`
	// Used is the whole agent's usage in the period, as this pod knows it.
	Used      Tokens `json:"used"`
	Exhausted bool   `json:"exhausted"`
	// PeersSyncedAt is when every peer last answered; PeersUnanswered how
	// many did not in the last round.
	PeersSyncedAt   *time.Time `json:"peersSyncedAt,omitempty"`
	PeersUnanswered int        `json:"peersUnanswered"`
}

// Status returns the budget's state now, nil when there is no budget.
func (b *Budget) Status() *Status {
	b.mu.Lock()
	l, synced, unanswered := b.limits, b.syncedAt, b.unanswered
	b.mu.Unlock()
	if l == nil {
		return nil
	}
	start, end, err := l.Period.Bounds(b.cfg.Now())
	if err != nil {
		return nil // ParseLimits rejected unknown periods
	}
	used := b.ledger.Sum(start, end)
	st := &Status{Limits: *l, PeriodStart: start, ResetsAt: end, Used: used, Exhausted: l.exceeded(used) != "", PeersUnanswered: unanswered}
	if !synced.IsZero() {
		st.PeersSyncedAt = &synced
	}
	return st
}

// Store wraps a UsageStore so that every turn's tokens also reach the ledger.
func (b *Budget) Store(inner gooseagent.UsageStore) gooseagent.UsageStore {
	return &store{inner: inner, b: b}
}

type store struct {
	inner gooseagent.UsageStore
	b     *Budget
}

func (s *store) RecordUsage(ctx context.Context, r gooseagent.UsageRecord) error {
	var err error
	if s.inner != nil {
		err = s.inner.RecordUsage(ctx, r)
	}
	u := Tokens{Input: r.Turn.InputTokens, Output: r.Turn.OutputTokens, Total: r.Turn.Total()}
	return errors.Join(err, s.b.ledger.Add(ctx, s.b.cfg.Now(), u))
}

// Run re-reads the budget file and syncs with the peers every SyncInterval
// until ctx ends.
func (b *Budget) Run(ctx context.Context) {
	t := time.NewTicker(b.cfg.SyncInterval)
	defer t.Stop()
	for {
		b.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *Budget) tick(ctx context.Context) {
	if err := b.Reload(); err != nil {
		b.log.Error("failed to reload the token budget; the previous one stays in force", "file", b.cfg.File, "error", err)
	}
	if err := b.Sync(ctx); err != nil && ctx.Err() == nil {
		b.log.Warn("failed to learn the peers' token usage", "error", err)
	}
	now := b.cfg.Now()
	if now.Sub(b.prunedAt) > time.Hour {
		if err := b.ledger.Prune(ctx, now); err != nil {
			b.log.Warn("failed to prune the budget ledger", "error", err)
		} else {
			b.prunedAt = now
		}
	}
}

// Sync asks every peer for its ledger rows of the current period and merges
// them. Without a budget or peers it does nothing.
func (b *Budget) Sync(ctx context.Context) error {
	l := b.current()
	if l == nil || b.cfg.Peers == nil {
		return nil
	}
	start, _, err := l.Period.Bounds(b.cfg.Now())
	if err != nil {
		return err
	}
	peers, err := b.cfg.Peers(ctx)
	if err != nil {
		b.setSynced(time.Time{}, 1)
		return fmt.Errorf("failed to list peer pods: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.LookupTimeout)
	defer cancel()
	type answer struct {
		rows []Row
		err  error
	}
	answers := make([]answer, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			rows, err := b.ask(ctx, p, dayOf(start))
			answers[i] = answer{rows, err}
		})
	}
	wg.Wait()
	var errs []error
	for i, a := range answers {
		if a.err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", peers[i], a.err))
			continue
		}
		if _, err := b.ledger.Merge(ctx, a.rows, b.cfg.Now()); err != nil {
			errs = append(errs, err)
		}
	}
	at := time.Time{}
	if len(errs) == 0 {
		at = b.cfg.Now()
	}
	b.setSynced(at, len(errs))
	return errors.Join(errs...)
}

func (b *Budget) setSynced(at time.Time, unanswered int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !at.IsZero() {
		b.syncedAt = at
	}
	b.unanswered = unanswered
}

// answer is UsagePath's JSON body.
type answer struct {
	Pod  string `json:"pod"`
	Rows []Row  `json:"rows"`
}

func (b *Budget) ask(ctx context.Context, peer, since string) ([]Row, error) {
	u, err := url.Parse(peer)
	if err != nil {
		return nil, fmt.Errorf("failed to parse peer URL: %w", err)
	}
	u.Path, u.RawQuery = UsagePath, url.Values{"since": {since}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("failed to build usage request: %w", err)
	}
	req.Header.Set(peering.HopHeader, "1")
	if b.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.Token)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to ask usage: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("failed to ask usage: %s", resp.Status)
	}
	var a answer
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&a); err != nil {
		return nil, fmt.Errorf("failed to decode usage: %w", err)
	}
	for _, r := range a.Rows {
		if err := validRow(r); err != nil {
			return nil, fmt.Errorf("failed to decode usage: %w", err)
		}
	}
	return a.Rows, nil
}

func validRow(r Row) error {
	if r.Pod == "" || len(r.Pod) > 253 {
		return fmt.Errorf("bad pod name %q", r.Pod)
	}
	if _, err := time.Parse(dayLayout, r.Day); err != nil {
		return fmt.Errorf("bad day %q", r.Day)
	}
	if !r.valid() {
		return fmt.Errorf("negative count for %s on %s", r.Pod, r.Day)
	}
	return nil
}

// Handler serves UsagePath: this pod's ledger (its own rows and what it
// learned of others) from a day on.
func (b *Budget) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		since := r.URL.Query().Get("since")
		if _, err := time.Parse(dayLayout, since); err != nil {
			jsonhttp.Write(w, http.StatusBadRequest, map[string]string{"error": "since must be a day, YYYY-MM-DD"})
			return
		}
		jsonhttp.Write(w, http.StatusOK, answer{Pod: b.ledger.Self(), Rows: b.ledger.Since(since)})
	})
}
