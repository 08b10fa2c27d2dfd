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

	"github.com/adk2goose/goose-operator/controllers/stats/sample"
)

// Pod is one replica of an agent. URL is its sidecar's /stats URL, empty when
// the pod has no IP or is not ready (it then keeps its last known figures).
type Pod struct {
	Name string
	URL  string
}

// Result is one collection for one agent.
type Result struct {
	Totals sample.Totals
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
	sample sample.Sample
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
		sample sample.Sample
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
		res.Totals.Add(f.sample)
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
// sent (more than sample.MaxUserHashes, or a sidecar that sends none), which
// may count a user twice. Exact while no pod has more than
// sample.MaxUserHashes users.
type userCount struct {
	seen  map[uint64]struct{}
	extra int64
}

func (u *userCount) add(s sample.Sample) {
	if u.seen == nil {
		u.seen = map[uint64]struct{}{}
	}
	for _, k := range s.UserKeys {
		u.seen[k] = struct{}{}
	}
	u.extra += max(0, s.Users-int64(len(s.UserKeys)))
}

func (u *userCount) total() int64 { return int64(len(u.seen)) + u.extra }

// Forget drops what is known of an agent (it was deleted).
func (c *Collector) Forget(agent types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.agents, agent)
}

// maxStatsBody bounds what is read of a /stats answer: it is a few hundred bytes.
const maxStatsBody = 64 << 10

func (c *Collector) fetch(ctx context.Context, url, token string) (sample.Sample, error) {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return sample.Sample{}, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sample.Sample{}, fmt.Errorf("failed to build stats request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.client.Do(req)
	if err != nil {
		return sample.Sample{}, fmt.Errorf("failed to get stats: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatsBody))
	if err != nil {
		return sample.Sample{}, fmt.Errorf("failed to read stats: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return sample.Sample{}, fmt.Errorf("stats answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return sample.Decode(body)
}

// unwrapURLError drops url.Error's "Get \"http://...\":" prefix, which only
// repeats the pod URL that the caller already names.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
