package sample

import "time"

// Budget is the "budget" object of a sidecar's /stats: the budget it
// enforces and the whole agent's use of it as that pod knows it (the pods
// share their usage with each other, see sidecar/budget).
type Budget struct {
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
func mergeBudget(agent, pod *Budget) *Budget {
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
