package percentile_test

import (
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/internal/testing/percentile"
)

func TestOf(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{0, 1}, {50, 6}, {90, 10}, {99, 10}, {100, 10}} {
		if got := percentile.Of(ds, c.p); got != c.want {
			t.Errorf("p%d = %v, want %v", c.p, got, c.want)
		}
	}
	if ds[0] != 5 {
		t.Error("Of reordered its input")
	}
	if got := percentile.Of(nil, 50); got != 0 {
		t.Errorf("no samples: %v, want 0", got)
	}
}
