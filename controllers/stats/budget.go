package stats

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	agentsv1alpha1ac "github.com/adk2goose/goose-operator/api/v1alpha1/applyconfiguration/api/v1alpha1"
)

// BudgetSample is the "budget" object of a sidecar's /stats: the budget it
// enforces and the whole agent's use of it as that pod knows it (the pods
// share their usage with each other, see sidecar/budget).
type BudgetSample struct {
	Limits struct {
		Period       string `json:"period"`
		TotalTokens  int64  `json:"totalTokens"`
		InputTokens  *int64 `json:"inputTokens,omitempty"`
		OutputTokens *int64 `json:"outputTokens,omitempty"`
	} `json:"limits"`
	PeriodStart time.Time `json:"periodStart"`
	ResetsAt    time.Time `json:"resetsAt"`
	Used        struct {
		Input  int64 `json:"input"`
		Output int64 `json:"output"`
		Total  int64 `json:"total"`
	} `json:"used"`
	Exhausted bool `json:"exhausted"`
}

// mergeBudget folds one pod's budget view into the agent's. Every pod
// reports agent-wide usage that may lag its peers', so the freshest period
// wins and, within it, the largest figures; the budget is spent when any
// pod refuses turns.
func mergeBudget(agent, pod *BudgetSample) *BudgetSample {
	switch {
	case pod == nil:
		return agent
	case agent == nil || pod.PeriodStart.After(agent.PeriodStart):
		c := *pod
		return &c
	case pod.PeriodStart.Before(agent.PeriodStart):
		return agent // a last-known figure from a period that has ended
	}
	agent.Used.Input = max(agent.Used.Input, pod.Used.Input)
	agent.Used.Output = max(agent.Used.Output, pod.Used.Output)
	agent.Used.Total = max(agent.Used.Total, pod.Used.Total)
	agent.Exhausted = agent.Exhausted || pod.Exhausted
	return agent
}

// budgetStatus computes status.budget and the BudgetExhausted condition;
// both are nil without spec.budget (then server-side apply removes them).
// Until a pod reports the budget, the status already held is kept and the
// condition is Unknown.
func budgetStatus(a *agentsv1alpha1.GooseAgent, res Result, now time.Time) (*agentsv1alpha1ac.BudgetStatusApplyConfiguration, *metav1.Condition) {
	if a.Spec.Budget == nil {
		return nil, nil
	}
	st := a.Status.Budget
	c := metav1.Condition{Type: agentsv1alpha1.ConditionBudgetExhausted, ObservedGeneration: a.Generation,
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}
	if b := res.Totals.Budget; res.Known && b != nil {
		st = &agentsv1alpha1.BudgetStatus{
			Period:      agentsv1alpha1.BudgetPeriod(b.Limits.Period),
			PeriodStart: metav1.NewTime(b.PeriodStart.UTC()),
			ResetsAt:    metav1.NewTime(b.ResetsAt.UTC()),
			Used:        agentsv1alpha1.TokenStats{Input: b.Used.Input, Output: b.Used.Output, Total: b.Used.Total},
		}
		usage := fmt.Sprintf("%d of %d tokens used this %s", b.Used.Total, b.Limits.TotalTokens, strings.ToLower(b.Limits.Period))
		resets := b.ResetsAt.UTC().Format(time.RFC3339)
		if b.Exhausted {
			c.Status, c.Reason = metav1.ConditionTrue, agentsv1alpha1.ReasonBudgetSpent
			c.Message = usage + "; new turns are refused until " + resets + " or the budget is raised"
		} else {
			c.Status, c.Reason = metav1.ConditionFalse, agentsv1alpha1.ReasonWithinBudget
			c.Message = usage + "; the period ends at " + resets
		}
	} else {
		c.Status, c.Reason = metav1.ConditionUnknown, agentsv1alpha1.ReasonStatsNotCollected
		c.Message = "no pod has reported the budget yet"
	}
	if st == nil {
		return nil, &c
	}
	return agentsv1alpha1ac.BudgetStatus().
		WithPeriod(st.Period).
		WithPeriodStart(st.PeriodStart).
		WithResetsAt(st.ResetsAt).
		WithUsed(tokenStats(st.Used)), &c
}
