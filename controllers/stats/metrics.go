package stats

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// Metrics exports each agent's figures. Labels are the agent's namespace and
// name only: never pods or sessions, which would grow without bound.
type Metrics struct {
	sessions       *prometheus.GaugeVec
	activeSessions *prometheus.GaugeVec
	tokens         *prometheus.GaugeVec
	stale          *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg (the manager's
// registry, sigs.k8s.io/controller-runtime/pkg/metrics.Registry, in production).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	labels := []string{"namespace", "name"}
	m := &Metrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goose_operator_agent_sessions", Help: "ADK sessions stored by a GooseAgent's sidecars.",
		}, labels),
		activeSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goose_operator_agent_active_sessions", Help: "Sessions of a GooseAgent with a reply in flight or used recently.",
		}, labels),
		tokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goose_operator_agent_tokens", Help: "LLM tokens a GooseAgent has used, by direction (input, output, total), as goose counts them.",
		}, append(labels, "direction")),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goose_operator_agent_stats_stale", Help: "1 when a GooseAgent's figures could not be collected from every pod at the last poll.",
		}, labels),
	}
	for _, c := range []prometheus.Collector{m.sessions, m.activeSessions, m.tokens, m.stale} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(k types.NamespacedName, f figures) {
	if m == nil {
		return
	}
	m.sessions.WithLabelValues(k.Namespace, k.Name).Set(float64(f.Sessions.Total))
	m.activeSessions.WithLabelValues(k.Namespace, k.Name).Set(float64(f.Sessions.Active))
	m.tokens.WithLabelValues(k.Namespace, k.Name, "input").Set(float64(f.Tokens.Input))
	m.tokens.WithLabelValues(k.Namespace, k.Name, "output").Set(float64(f.Tokens.Output))
	m.tokens.WithLabelValues(k.Namespace, k.Name, "total").Set(float64(f.Tokens.Total))
	stale := 0.0
	if f.Condition.Status != "True" {
		stale = 1
	}
	m.stale.WithLabelValues(k.Namespace, k.Name).Set(stale)
}

func (m *Metrics) forget(k types.NamespacedName) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"namespace": k.Namespace, "name": k.Name}
	m.sessions.DeletePartialMatch(l)
	m.activeSessions.DeletePartialMatch(l)
	m.tokens.DeletePartialMatch(l)
	m.stale.DeletePartialMatch(l)
}
