// Package memrelease gives the memory a burst of requests left in the Go
// heap back to the system once the sidecar is idle.
//
// Why: the runtime returns free heap only after a garbage collection has
// lowered its heap goal, and a process that allocates nothing runs one
// only every two minutes (the forced GC). After 2,000 streams (make load)
// the sidecar kept 256 MiB resident for two minutes, 114 MiB after the
// first forced GC and 88 MiB after the second, against 27 MiB at rest: the
// pod's working set, which the kubelet's eviction and autoscalers read,
// stayed at the burst's for minutes. Freeing it while requests still run
// would only make the runtime take it back, so this waits for a quiet
// period.
package memrelease

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Defaults: how often the sidecar looks, and the growth of the heap below
// which a release is not worth a collection.
const (
	DefaultEvery     = 15 * time.Second
	DefaultMinGrowth = 64 << 20
)

// Activity is how many requests have started so far and how many are
// running now.
type Activity func() (started uint64, running int64)

// Config says when to release.
type Config struct {
	// Every is how often the activity is looked at. The sidecar is idle
	// when no request ran at any time during a whole period: none running
	// now and none started since the last look.
	Every time.Duration
	// MinGrowth: release only when the heap (objects, dead or alive, and
	// free spans not yet returned) holds at least this much more than the
	// last release left (the live heap then; nothing before the first), so
	// a collection is made only when it can give back that much.
	MinGrowth uint64
	// Activity reports the requests (the server's).
	Activity Activity
	// OnRelease, when set, is told the heap before and after each release.
	OnRelease func(before, after uint64)

	// heap and release default to the runtime's (tests replace them).
	heap    func() uint64
	release func()
}

// Run looks every cfg.Every until ctx ends, and releases the heap's free
// memory at the first idle look after activity, when the heap has grown
// enough (Config.MinGrowth).
func Run(ctx context.Context, cfg Config) {
	if cfg.heap == nil {
		cfg.heap = heapBytes
	}
	if cfg.release == nil {
		cfg.release = debug.FreeOSMemory
	}
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	r := releaser{cfg: cfg}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.look()
		}
	}
}

// releaser is Run's state between looks.
type releaser struct {
	cfg Config
	// lastStarted and lastRunning are the counts at the previous look.
	lastStarted uint64
	lastRunning int64
	// releasedAt is the started count at the last release (0 before the
	// first): a request ran since then unless it is still the count.
	releasedAt uint64
	// left is the heap the last release left.
	left uint64
}

func (r *releaser) look() {
	started, running := r.cfg.Activity()
	quiet := running == 0 && r.lastRunning == 0 && started == r.lastStarted
	r.lastStarted, r.lastRunning = started, running
	if !quiet || started == r.releasedAt {
		return
	}
	before := r.cfg.heap()
	if before < r.left+r.cfg.MinGrowth {
		return
	}
	r.cfg.release()
	r.releasedAt = started
	r.left = r.cfg.heap()
	if r.cfg.OnRelease != nil {
		r.cfg.OnRelease(before, r.left)
	}
}

// heapMetrics are the runtime's classes of heap memory that are resident
// or may be: everything the heap holds but what it returned.
var heapMetrics = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

// heapBytes is the heap's memory not returned to the system.
func heapBytes() uint64 {
	samples := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var total uint64
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			total += s.Value.Uint64()
		}
	}
	return total
}
