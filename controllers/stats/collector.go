// Package stats collects session and token figures from the adk2goose
// sidecars of each GooseAgent's pods (GET /stats) and sums them per agent.
//
// Status is pulled, not pushed: agent pods need no RBAC, and the controller
// decides how often to ask. The last figures of every pod are kept, so a pod
// that is restarting or unreachable keeps contributing its last known totals
// (they are durable in the sidecar and never go backwards) and the agent's
// figures are marked stale instead of dropping.
package stats

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Sample is what one sidecar's /stats reports (the fields the operator uses).
type Sample struct {
	Sessions struct {
		Total  int64 `json:"total"`
		Active int64 `json:"active"`
		// InFlight counts the turns running now.
		InFlight int64 `json:"inFlight"`
	} `json:"sessions"`
	Users int64 `json:"users"`
	// UserHashes name up to maxUserHashes of those users by a keyed hash
	// (the sidecar's server.UserHash), so that a user with sessions on two
	// replicas counts once. Decoded into userKeys.
	UserHashes []string `json:"userHashes,omitempty"`
	Tokens     struct {
		Input  int64 `json:"input"`
		Output int64 `json:"output"`
		Total  int64 `json:"total"`
	} `json:"tokens"`
	Budget *BudgetSample `json:"budget,omitempty"`

	// userKeys are UserHashes as numbers: what the collector keeps of each
	// pod, 8 bytes a user.
	userKeys []uint64
	// LastTurnAt is when the pod's last turn ended, from its usage.db; nil
	// before the first.
	LastTurnAt *time.Time `json:"lastTurnAt,omitempty"`
}

// maxUserHashes is the most user hashes a sidecar sends (server.MaxUserHashes).
const maxUserHashes = 1000

// Pod is one replica of an agent. URL is its sidecar's /stats URL, empty when
// the pod has no IP or is not ready (it then keeps its last known figures).
type Pod struct {
	Name string
	URL  string
}

// Totals are an agent's figures, summed over its pods; Users counts each
// user once (countUsers).
type Totals struct {
	SessionsTotal, SessionsActive, Users   int64
	TokensInput, TokensOutput, TokensTotal int64
	// Budget is the agent's budget use, nil when no pod reports a budget.
	Budget *BudgetSample
	// InFlight counts the turns running; LastTurnAt is the latest turn's
	// end on any pod, zero before the first.
	InFlight   int64
	LastTurnAt time.Time
}

// Result is one collection for one agent.
type Result struct {
	Totals Totals
	// Known is false until at least one pod has ever answered.
	Known bool
	// Stale lists why figures are not fresh, one entry a pod, sorted; empty
	// when every pod answered now.
	Stale []string
	// CollectedAt is when the freshest figure was fetched.
	CollectedAt time.Time
}

// Options configure a Collector.
type Options struct {
	// Client is used for every fetch. Default: a client with keep-alives.
	Client *http.Client
	// Timeout bounds one fetch. Default 2 s.
	Timeout time.Duration
	// MaxConcurrent bounds fetches in flight across all agents. Default 64.
	MaxConcurrent int
	// Now returns the current time (tests). Default time.Now.
	Now func() time.Time
}

// Collector fetches and remembers figures. It is safe for concurrent use.
type Collector struct {
	client  *http.Client
	timeout time.Duration
	sem     chan struct{}
	now     func() time.Time

	mu     sync.Mutex
	agents map[types.NamespacedName]map[string]podFigures
}

type podFigures struct {
	sample Sample
	at     time.Time
}

// New returns a Collector.
func New(o Options) *Collector {
	if o.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 2
		o.Client = &http.Client{Transport: tr}
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Collector{
		client: o.Client, timeout: o.Timeout, now: o.Now,
		sem:    make(chan struct{}, o.MaxConcurrent),
		agents: map[types.NamespacedName]map[string]podFigures{},
	}
}

// Collect fetches /stats from every pod with a URL, in parallel, and returns
// the agent's totals over all its current pods. Pods no longer listed are
// forgotten (scaled away or deleted).
func (c *Collector) Collect(ctx context.Context, agent types.NamespacedName, token string, pods []Pod) Result {
	type answer struct {
		pod    string
		sample Sample
		err    error
		at     time.Time
	}
	answers := make([]answer, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		answers[i].pod = p.Name
		if p.URL == "" {
			answers[i].err = errors.New("not ready")
			continue
		}
		wg.Go(func() {
			s, err := c.fetch(ctx, p.URL, token)
			answers[i] = answer{pod: p.Name, sample: s, err: err, at: c.now()}
		})
	}
	wg.Wait()

	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.agents[agent]
	next := make(map[string]podFigures, len(pods))
	var res Result
	var users userCount
	for _, a := range answers {
		f, had := prev[a.pod]
		if a.err == nil {
			f, had = podFigures{sample: a.sample, at: a.at}, true
		} else {
			res.Stale = append(res.Stale, fmt.Sprintf("%s: %v", a.pod, a.err))
		}
		if !had {
			continue
		}
		next[a.pod] = f
		res.Known = true
		res.Totals.add(f.sample)
		users.add(f.sample)
		if f.at.After(res.CollectedAt) {
			res.CollectedAt = f.at
		}
	}
	if len(pods) == 0 {
		delete(c.agents, agent)
	} else {
		c.agents[agent] = next
	}
	res.Totals.Users = users.total()
	sort.Strings(res.Stale)
	return res
}

// userCount counts an agent's distinct users over its pods: the union of
// the pods' user hashes, plus the users a pod counted beyond the hashes it
// sent (more than maxUserHashes, or a sidecar that sends none), which may
// count a user twice. Exact while no pod has more than maxUserHashes users.
type userCount struct {
	seen  map[uint64]struct{}
	extra int64
}

func (u *userCount) add(s Sample) {
	if u.seen == nil {
		u.seen = map[uint64]struct{}{}
	}
	for _, k := range s.userKeys {
		u.seen[k] = struct{}{}
	}
	u.extra += max(0, s.Users-int64(len(s.userKeys)))
}

func (u *userCount) total() int64 { return int64(len(u.seen)) + u.extra }

// Forget drops what is known of an agent (it was deleted).
func (c *Collector) Forget(agent types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.agents, agent)
}

func (t *Totals) add(s Sample) {
	t.SessionsTotal += s.Sessions.Total
	t.SessionsActive += s.Sessions.Active
	t.TokensInput += s.Tokens.Input
	t.TokensOutput += s.Tokens.Output
	t.TokensTotal += s.Tokens.Total
	t.Budget = mergeBudget(t.Budget, s.Budget)
	t.InFlight += s.Sessions.InFlight
	if s.LastTurnAt != nil && s.LastTurnAt.After(t.LastTurnAt) {
		t.LastTurnAt = *s.LastTurnAt
	}
}

// maxStatsBody bounds what is read of a /stats answer: it is a few hundred bytes.
const maxStatsBody = 64 << 10

func (c *Collector) fetch(ctx context.Context, url, token string) (Sample, error) {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return Sample{}, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, fmt.Errorf("failed to build stats request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("failed to get stats: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatsBody))
	if err != nil {
		return Sample{}, fmt.Errorf("failed to read stats: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("stats answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return decodeSample(body)
}

// decodeSample reads a /stats answer: figures the collector can add up, or
// an error.
func decodeSample(body []byte) (Sample, error) {
	var s Sample
	if err := json.Unmarshal(body, &s); err != nil {
		return Sample{}, fmt.Errorf("failed to decode stats: %w", err)
	}
	if s.Sessions.Total < 0 || s.Sessions.Active < 0 || s.Sessions.InFlight < 0 || s.Tokens.Input < 0 || s.Tokens.Output < 0 || s.Tokens.Total < 0 {
		return Sample{}, errors.New("stats hold a negative count")
	}
	if b := s.Budget; b != nil && (b.Used.Input < 0 || b.Used.Output < 0 || b.Used.Total < 0) {
		return Sample{}, errors.New("stats hold a negative budget count")
	}
	if s.Users < 0 || len(s.UserHashes) > maxUserHashes {
		return Sample{}, fmt.Errorf("stats hold %d users with %d user hashes (at most %d)", s.Users, len(s.UserHashes), maxUserHashes)
	}
	s.userKeys = make([]uint64, 0, len(s.UserHashes))
	for _, h := range s.UserHashes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 8 {
			return Sample{}, fmt.Errorf("stats hold a user hash %.40q that is not 8 bytes in hex", h)
		}
		s.userKeys = append(s.userKeys, binary.BigEndian.Uint64(b))
	}
	s.UserHashes = nil
	return s, nil
}

// unwrapURLError drops url.Error's "Get \"http://...\":" prefix, which only
// repeats the pod URL that the caller already names.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
