// Package memorylimit gives the Go runtime the container's memory limit,
// for the manager and the sidecar alike.
package memorylimit

import (
	"context"
	"log/slog"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// ratio is the share of the container's memory limit the Go heap is kept
// under; the rest is for stacks and what the runtime does not count.
// refresh is how often the limit is read again: a pod's resources can be
// resized in place.
const (
	ratio   = 0.9
	refresh = time.Minute
)

// Set gives the Go runtime the memory limit from (the container's, with
// memlimit.FromCgroup): near it the GC works harder rather than letting the
// heap's garbage take the pod over its limit, into an OOM kill. A
// GOMEMLIMIT in the environment wins, and AUTOMEMLIMIT=off turns this off.
// The limit is read again every minute until ctx ends. It returns the limit
// now in force.
func Set(ctx context.Context, log *slog.Logger, from memlimit.Provider) (int64, error) {
	return memlimit.Set(memlimit.WithProvider(from), memlimit.WithRatio(ratio),
		memlimit.WithLogger(log), memlimit.WithRefreshInterval(ctx, refresh))
}
