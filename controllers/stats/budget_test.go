package stats_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

func budgetCondition(st agentsv1alpha1.GooseAgentStatus) *metav1.Condition {
	return meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionBudgetExhausted)
}

// TestBudgetStatusFromTwoReplicas: the agent's budget use in status is the
// whole agent's (the pods share usage; the controller does not add their
// views up), BudgetExhausted follows the pods' refusals, the metric and
// `kubectl get -o wide` show it, and removing spec.budget removes both.
func TestBudgetStatusFromTwoReplicas(t *testing.T) {
	f := newFixture(t, 0)
	ctx := context.Background()
	c := sharedEnv(t).Client
	f.agent.Spec.Budget = &agentsv1alpha1.BudgetSpec{Period: agentsv1alpha1.BudgetPeriodDay, TotalTokens: 50}
	if err := c.Update(ctx, f.agent); err != nil {
		t.Fatal(err)
	}
	// The file the operator renders from spec.budget (controllers/render).
	file := filepath.Join(t.TempDir(), "budget.json")
	if err := os.WriteFile(file, []byte(`{"period":"Day","totalTokens":50}`), 0o600); err != nil {
		t.Fatal(err)
	}
	monday10 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	fake := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	for i := range 2 {
		b, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		name := fmt.Sprintf("talker-%d", i)
		sc := &sidecar{t: t, dataDir: t.TempDir(), backend: b}
		sc.configure = func(cfg *server.Config) {
			cfg.PodName = name
			cfg.Budget = budget.Config{File: file, SyncInterval: 20 * time.Millisecond, Now: func() time.Time { return monday10 }}
			cfg.Peers = func(context.Context) ([]string, error) {
				other := f.sidecars[fmt.Sprintf("talker-%d", 1-i)]
				if other == nil {
					return nil, nil
				}
				return []string{other.baseURL()}, nil
			}
		}
		f.sidecars[name] = sc
	}
	for name, sc := range f.sidecars {
		sc.start()
		t.Cleanup(sc.halt)
		f.createReadyPod(name)
	}

	f.reconcile()
	st := f.status()
	if bc := budgetCondition(st); bc == nil || bc.Status != metav1.ConditionFalse || bc.Reason != agentsv1alpha1.ReasonWithinBudget ||
		st.Budget == nil || st.Budget.Used.Total != 0 || st.Budget.Period != agentsv1alpha1.BudgetPeriodDay ||
		!st.Budget.ResetsAt.Equal(ptrTime(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))) {
		t.Fatalf("before any turn: %+v %+v", bc, st.Budget)
	}

	f.sidecars["talker-0"].converse("alice", "s1", "hello there")       // 10+11 in, 11 out
	f.sidecars["talker-1"].converse("bob", "s2", "what is the weather") // 10+19 in, 19 out
	for name, sc := range f.sidecars {
		poll.UntilNil(t, name+" to agree the budget is spent", func() error {
			if b := sc.figures().Budget; b == nil || !b.Exhausted || b.Used.Total != 80 {
				return fmt.Errorf("budget %+v", b)
			}
			return nil
		})
	}
	f.reconcile()
	st = f.status()
	bc := budgetCondition(st)
	if bc == nil || bc.Status != metav1.ConditionTrue || bc.Reason != agentsv1alpha1.ReasonBudgetSpent ||
		bc.Message != "80 of 50 tokens used this day; new turns are refused until 2026-11-24T00:00:00Z or the budget is raised" {
		t.Fatalf("BudgetExhausted = %+v", bc)
	}
	if st.Budget.Used != (agentsv1alpha1.TokenStats{Input: 50, Output: 30, Total: 80}) {
		t.Fatalf("status.budget %+v: want the agent's 80 tokens, not the sum of both pods' views", st.Budget)
	}
	if got := metricValue(t, f.reg, "goose_operator_agent_budget_exhausted", ""); got != 1 {
		t.Errorf("budget exhausted metric %v, want 1", got)
	}
	if got := metricValue(t, f.reg, "goose_operator_agent_budget_used_tokens", "total"); got != 80 {
		t.Errorf("budget used metric %v, want 80", got)
	}
	before := f.applies.Load()
	f.reconcile()
	if n := f.applies.Load() - before; n != 0 {
		t.Fatalf("%d status writes when nothing changed, want 0", n)
	}
	out, err := exec.Command(sharedEnv(t).Kubectl(), "--kubeconfig", sharedEnv(t).Kubeconfig, "-n", f.agent.Namespace,
		"get", "gooseagents", "-o", "wide").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl: %v\n%s", err, out)
	}
	if cell := tableRow(string(out)); cell["USED"] != "80" || cell["BUDGET"] != "50" || cell["PERIOD"] != "Day" {
		t.Fatalf("kubectl -o wide does not show the budget:\n%s", out)
	}

	// Without spec.budget, neither the condition nor status.budget remain.
	var a agentsv1alpha1.GooseAgent
	if err := c.Get(ctx, client.ObjectKeyFromObject(f.agent), &a); err != nil {
		t.Fatal(err)
	}
	a.Spec.Budget = nil
	if err := c.Update(ctx, &a); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	if st := f.status(); budgetCondition(st) != nil || st.Budget != nil || condition(st) == nil {
		t.Fatalf("after removing spec.budget: %+v", st)
	}
}

func ptrTime(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }
