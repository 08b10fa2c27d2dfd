package stats_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adk2goose/goose-operator/controllers/stats"
	"github.com/adk2goose/goose-operator/internal/testing/metricsdoc"
)

// The docs' metrics table names every series the manager exports for an
// agent, with its labels.
func TestDocsNameEveryMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := stats.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	metricsdoc.Check(t, "goose_operator_", reg)
}
