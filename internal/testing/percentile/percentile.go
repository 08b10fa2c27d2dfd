// Package percentile computes nearest-rank percentiles of durations, for the
// tools and benchmarks that print latency tables.
package percentile

import (
	"slices"
	"time"
)

// Of returns the p-th percentile (0–100) of ds by nearest rank, or 0 for no
// samples. ds is not reordered.
func Of(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
