package budget

import "github.com/prometheus/client_golang/prometheus"

// metrics export the budget as this pod sees it. Labels are token kinds and
// API names only.
type metrics struct {
	b         *Budget
	refusals  *prometheus.CounterVec
	limit     *prometheus.Desc
	used      *prometheus.Desc
	exhausted *prometheus.Desc
}

func newMetrics(b *Budget) *metrics {
	return &metrics{
		b: b,
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adk2goose_budget_refusals_total", Help: "Turns refused because the agent's token budget was spent, by API (rest, a2a, live).",
		}, []string{"api"}),
		limit: prometheus.NewDesc("adk2goose_budget_limit_tokens",
			"The agent's token budget per period, by kind (total, input, output); absent without a budget.", []string{"kind"}, nil),
		used: prometheus.NewDesc("adk2goose_budget_used_tokens",
			"Tokens the whole agent used in the current budget period, as this pod knows it, by kind.", []string{"kind"}, nil),
		exhausted: prometheus.NewDesc("adk2goose_budget_exhausted",
			"1 while the agent's token budget is spent and new turns are refused.", nil, nil),
	}
}

// Collectors are the budget's Prometheus collectors, for the sidecar's registry.
func (b *Budget) Collectors() []prometheus.Collector {
	return []prometheus.Collector{b.metrics.refusals, b.metrics}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.limit
	ch <- m.used
	ch <- m.exhausted
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.b.Status()
	if st == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(m.limit, st.Limits.TotalTokens, "total")
	if st.Limits.InputTokens != nil {
		gauge(m.limit, *st.Limits.InputTokens, "input")
	}
	if st.Limits.OutputTokens != nil {
		gauge(m.limit, *st.Limits.OutputTokens, "output")
	}
	gauge(m.used, st.Used.Total, "total")
	gauge(m.used, st.Used.Input, "input")
	gauge(m.used, st.Used.Output, "output")
	exhausted := int64(0)
	if st.Exhausted {
		exhausted = 1
	}
	gauge(m.exhausted, exhausted)
}
