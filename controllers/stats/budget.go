package stats

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	agentsv1alpha1ac "github.com/adk2goose/goose-operator/api/v1alpha1/applyconfiguration/api/v1alpha1"
)

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
