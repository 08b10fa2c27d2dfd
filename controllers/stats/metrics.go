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
	budgetUsed     *prometheus.GaugeVec
	budgetSpent    *prometheus.GaugeVec
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
		budgetUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goose_operator_agent_budget_used_tokens", Help: "Tokens a GooseAgent used in its current budget period, by direction (input, output, total); absent without spec.budget.",
		}, append(labels, "direction")),
		budgetSpent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goose_operator_agent_budget_exhausted", Help: "1 while a GooseAgent's token budget is spent and its sidecars refuse new turns.",
		}, labels),
	}
	for _, c := range []prometheus.Collector{m.sessions, m.activeSessions, m.tokens, m.stale, m.budgetUsed, m.budgetSpent} {
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
	l := prometheus.Labels{"namespace": k.Namespace, "name": k.Name}
	if f.Budget == nil || f.BudgetCondition == nil {
		m.budgetUsed.DeletePartialMatch(l)
		m.budgetSpent.DeletePartialMatch(l)
		return
	}
	m.budgetUsed.WithLabelValues(k.Namespace, k.Name, "input").Set(float64(f.Budget.Used.Input))
	m.budgetUsed.WithLabelValues(k.Namespace, k.Name, "output").Set(float64(f.Budget.Used.Output))
	m.budgetUsed.WithLabelValues(k.Namespace, k.Name, "total").Set(float64(f.Budget.Used.Total))
	spent := 0.0
	if f.BudgetCondition.Status == "True" {
		spent = 1
	}
	m.budgetSpent.WithLabelValues(k.Namespace, k.Name).Set(spent)
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
	m.budgetUsed.DeletePartialMatch(l)
	m.budgetSpent.DeletePartialMatch(l)
}
