package goose

// Usage counts tokens. Cost is in USD and nil when goose does not know it.
//
// TotalTokens is goose's own total, 0 when goose gave none; Total derives it
// then. Every use of usage goes through these methods, so the rule "the
// total is input + output when goose gave no total" lives here alone.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	TotalTokens  int64
	Cost         *float64
}

// Total is the total token count: goose's when it gave one, otherwise input
// plus output.
func (u Usage) Total() int64 {
	if u.TotalTokens == 0 {
		return u.InputTokens + u.OutputTokens
	}
	return u.TotalTokens
}

// Normalized returns u with TotalTokens set to Total, which is how the
// clients hand on the usage they decode.
func (u Usage) Normalized() Usage {
	u.TotalTokens = u.Total()
	return u
}

// HasSplit reports whether u divides its tokens into input and output.
// Per-call figures do; ACP's stable usage_update carries only a total.
func (u Usage) HasSplit() bool {
	return u.InputTokens != 0 || u.OutputTokens != 0
}

// Add returns the sum of u and o with a normalised total. Its cost is known
// when either cost is (an unknown one counts as 0).
func (u Usage) Add(o Usage) Usage {
	sum := Usage{
		InputTokens:  u.InputTokens + o.InputTokens,
		OutputTokens: u.OutputTokens + o.OutputTokens,
		TotalTokens:  u.Total() + o.Total(),
	}
	if u.Cost != nil || o.Cost != nil {
		c := costOf(u) + costOf(o)
		sum.Cost = &c
	}
	return sum
}

// Since returns what accumulated totals u grew by since the earlier totals
// prev. Each count is floored at 0: a prev that ran ahead of goose's count
// (an estimate, say) means no growth, never negative use. Its cost is known
// when u's is.
func (u Usage) Since(prev Usage) Usage {
	d := Usage{
		InputTokens:  max(0, u.InputTokens-prev.InputTokens),
		OutputTokens: max(0, u.OutputTokens-prev.OutputTokens),
		TotalTokens:  max(0, u.Total()-prev.Total()),
	}
	if u.Cost != nil {
		c := max(0, *u.Cost-costOf(prev))
		d.Cost = &c
	}
	return d
}

func costOf(u Usage) float64 {
	if u.Cost == nil {
		return 0
	}
	return *u.Cost
}
