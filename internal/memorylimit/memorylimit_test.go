package memorylimit_test

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/adk2goose/goose-operator/internal/memorylimit"
)

// The Go runtime gets 90% of the container's memory limit; none when it
// has none; a GOMEMLIMIT set in the environment is left alone.
func TestMemoryLimitFromTheContainer(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	t.Setenv("GOMEMLIMIT", "") // restored after the test
	if err := os.Unsetenv("GOMEMLIMIT"); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel() // stops the refresh

	const limit = 1 << 30
	got, err := memorylimit.Set(ctx, log, memlimit.Limit(limit))
	if want := int64(limit * 9 / 10); err != nil || got != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("container limit 1 GiB: set %d (in force %d), %v; want %d", got, debug.SetMemoryLimit(-1), err, want)
	}

	got, err = memorylimit.Set(ctx, log, func() (uint64, error) { return 0, memlimit.ErrNoLimit })
	if err != nil || got != math.MaxInt64 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("no container limit: set %d, %v; want none", got, err)
	}

	debug.SetMemoryLimit(123 << 20) // what the runtime made of GOMEMLIMIT=123MiB
	t.Setenv("GOMEMLIMIT", "123MiB")
	if got, err = memorylimit.Set(ctx, log, memlimit.Limit(limit)); err != nil || got != 123<<20 || debug.SetMemoryLimit(-1) != 123<<20 {
		t.Fatalf("GOMEMLIMIT set: in force %d (returned %d, %v), want it kept", debug.SetMemoryLimit(-1), got, err)
	}
}
