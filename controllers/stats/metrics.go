package stats

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
)

// Metrics exports each agent's figures. Labels are the agent's namespace and
// name only: never pods or sessions, which would grow without bound.
type Metrics struct {
	sessions       *prometheus.GaugeVec
	activeSessions *prometheus.GaugeVec
	users          *prometheus.GaugeVec
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
		users: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goose_operator_agent_users", Help: "Distinct ADK users with a session on a GooseAgent, each counted once across its replicas (user ids are never labels).",
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
	for _, c := range []prometheus.Collector{m.sessions, m.activeSessions, m.users, m.tokens, m.stale, m.budgetUsed, m.budgetSpent} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe exports the figures of st, the status the reconciler applies.
func (m *Metrics) observe(k types.NamespacedName, st agentsv1alpha1.GooseAgentStatus) {
	if m == nil {
		return
	}
	m.sessions.WithLabelValues(k.Namespace, k.Name).Set(float64(st.Sessions.Total))
	m.activeSessions.WithLabelValues(k.Namespace, k.Name).Set(float64(st.Sessions.Active))
	m.users.WithLabelValues(k.Namespace, k.Name).Set(float64(st.Sessions.Users))
	m.tokens.WithLabelValues(k.Namespace, k.Name, "input").Set(float64(st.Tokens.Input))
	m.tokens.WithLabelValues(k.Namespace, k.Name, "output").Set(float64(st.Tokens.Output))
	m.tokens.WithLabelValues(k.Namespace, k.Name, "total").Set(float64(st.Tokens.Total))
	stale := 0.0
	if !meta.IsStatusConditionTrue(st.Conditions, agentsv1alpha1.ConditionStatsAvailable) {
		stale = 1
	}
	m.stale.WithLabelValues(k.Namespace, k.Name).Set(stale)
	l := prometheus.Labels{"namespace": k.Namespace, "name": k.Name}
	spent := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionBudgetExhausted)
	if st.Budget == nil || spent == nil {
		m.budgetUsed.DeletePartialMatch(l)
		m.budgetSpent.DeletePartialMatch(l)
		return
	}
	m.budgetUsed.WithLabelValues(k.Namespace, k.Name, "input").Set(float64(st.Budget.Used.Input))
	m.budgetUsed.WithLabelValues(k.Namespace, k.Name, "output").Set(float64(st.Budget.Used.Output))
	m.budgetUsed.WithLabelValues(k.Namespace, k.Name, "total").Set(float64(st.Budget.Used.Total))
	spentValue := 0.0
	if spent.Status == metav1.ConditionTrue {
		spentValue = 1
	}
	m.budgetSpent.WithLabelValues(k.Namespace, k.Name).Set(spentValue)
}

func (m *Metrics) forget(k types.NamespacedName) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"namespace": k.Namespace, "name": k.Name}
	m.sessions.DeletePartialMatch(l)
	m.activeSessions.DeletePartialMatch(l)
	m.users.DeletePartialMatch(l)
	m.tokens.DeletePartialMatch(l)
	m.stale.DeletePartialMatch(l)
	m.budgetUsed.DeletePartialMatch(l)
	m.budgetSpent.DeletePartialMatch(l)
}
