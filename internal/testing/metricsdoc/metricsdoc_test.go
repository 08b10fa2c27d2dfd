package metricsdoc

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Rows reads the labels cell's names (none for "none"); Described the
// series and variable labels a collector describes.
func TestRowsAndDescribed(t *testing.T) {
	rows := Rows("| metric | labels | what |\n|---|---|---|\n| `a2_total` | `route`, `code` | x |\n| `b` | none | y |\n| `-flag` | `x` | z |\n")
	if len(rows) != 2 || !slices.Equal(rows["a2_total"], []string{"code", "route"}) || rows["b"] != nil {
		t.Errorf("rows: %v", rows)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a2_total", Help: "h"}, []string{"route", "code"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "b", Help: "h"}),
	)
	got := Described(reg)
	if len(got) != 2 || !slices.Equal(got["a2_total"], []string{"code", "route"}) || got["b"] != nil {
		t.Errorf("described: %v", got)
	}
}
