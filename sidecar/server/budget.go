package server

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/adk2goose/goose-operator/internal/jsonhttp"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	adka2a "google.golang.org/adk/server/adka2a/v2"

	"github.com/adk2goose/goose-operator/sidecar/budget"
)

// openBudget opens the token ledger and the budget (package budget). The
// ledger records every turn even without a budget, so a budget set later
// counts the period's earlier turns.
func (s *Server) openBudget(ctx context.Context) error {
	self := s.cfg.PodName
	if self == "" {
		h, err := os.Hostname() // a StatefulSet pod's hostname is its stable name
		if err != nil {
			return fmt.Errorf("failed to name this pod for the budget ledger: %w", err)
		}
		self = h
	}
	var err error
	s.ledger, err = budget.OpenLedger(ctx, filepath.Join(s.cfg.DataDir, budget.LedgerFile), self)
	if err != nil {
		return err
	}
	bc := s.cfg.Budget
	bc.Peers, bc.Token, bc.Logger = s.cfg.Peers, s.cfg.AuthToken, s.log
	s.budget, err = budget.New(bc, s.ledger)
	if err != nil {
		return fmt.Errorf("failed to load token budget: %w", err)
	}
	s.metrics.reg.MustRegister(s.budget.Collectors()...)
	s.budgetDone = make(chan struct{})
	go func() {
		defer close(s.budgetDone)
		s.budget.Run(s.stop)
	}()
	return nil
}

// closeBudget stops the sync loop (s.stop is cancelled) and closes the ledger.
func (s *Server) closeBudget() error {
	if s.budgetDone != nil {
		<-s.budgetDone
	}
	if s.ledger != nil {
		return s.ledger.Close()
	}
	return nil
}

// BudgetRefusal is the JSON body of a /run or /run_sse refused because the
// agent's token budget is spent (HTTP 429).
type BudgetRefusal struct {
	Error    string        `json:"error"`
	Code     string        `json:"code"`
	ResetsAt string        `json:"resetsAt"`
	Budget   budget.Limits `json:"budget"`
	Used     budget.Tokens `json:"used"`
	// Detail repeats Error, as every JSON error of the sidecar does (ADK
	// clients of the FastAPI server read "detail").
	Detail string `json:"detail"`
}

// refuseRunOverBudget answers 429 to a run while the agent's token budget is
// spent, with the reason and Retry-After, and reports whether it did.
func (s *Server) refuseRunOverBudget(w http.ResponseWriter) bool {
	refusal := s.budget.Check()
	if refusal == nil {
		return false
	}
	s.budget.Refused("rest")
	w.Header().Set("Retry-After", strconv.FormatInt(refusal.RetryAfter(s.budget.Now()), 10))
	jsonhttp.Write(w, http.StatusTooManyRequests, BudgetRefusal{
		Error: refusal.Error(), Code: budget.ReasonExhausted,
		ResetsAt: refusal.ResetsAt.UTC().Format(time.RFC3339),
		Budget:   refusal.Limits, Used: refusal.Used, Detail: refusal.Error(),
	})
	return true
}

// refuseOverBudget returns the events that end an A2A execution failed when
// the budget is spent, nil when it may run. A task waiting in input-required
// is a turn held at a tool approval: answering it continues that turn.
func refuseOverBudget(b *budget.Budget, ec *a2asrv.ExecutorContext) []a2a.Event {
	refusal := b.Check()
	if refusal == nil {
		return nil
	}
	if t := ec.StoredTask; t != nil && t.Status.State == a2a.TaskStateInputRequired {
		return nil
	}
	b.Refused("a2a")
	var evs []a2a.Event
	if ec.StoredTask == nil {
		evs = append(evs, a2a.NewSubmittedTask(ec, ec.Message))
	}
	// The shape adka2a gives a failed turn, so ADK's remoteagent reads the
	// code into the event's ErrorCode and the text into its ErrorMessage.
	part := a2a.NewTextPart(refusal.Error())
	part.Metadata = map[string]any{adka2a.ToA2AMetaKey("is_error_message"): true}
	failed := a2a.NewStatusUpdateEvent(ec, a2a.TaskStateFailed, a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, part))
	failed.Metadata = map[string]any{
		adka2a.ToA2AMetaKey("error_code"): budget.ReasonExhausted,
		"adk2goose_budget": map[string]any{
			"resetsAt":          refusal.ResetsAt.UTC().Format(time.RFC3339),
			"retryAfterSeconds": refusal.RetryAfter(b.Now()),
		},
	}
	return append(evs, failed)
}

// eventsOf streams evs.
func eventsOf(evs []a2a.Event) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	}
}
