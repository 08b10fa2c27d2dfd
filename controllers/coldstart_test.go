package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/stats"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// statusApplies counts status applies by field owner and agent.
type statusApplies struct {
	mu sync.Mutex
	n  map[string]map[string]int
}

func (s *statusApplies) wrap(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			owner := ""
			for _, opt := range opts {
				if f, ok := opt.(client.FieldOwner); ok {
					owner = string(f)
				}
			}
			name := ""
			if a, ok := o.(interface{ GetName() *string }); ok {
				name = ptr.Deref(a.GetName(), "")
			}
			s.mu.Lock()
			if s.n[owner] == nil {
				s.n[owner] = map[string]int{}
			}
			s.n[owner][name]++
			s.mu.Unlock()
			return c.SubResource(sub).Apply(ctx, o, opts...)
		},
	})
}

func (s *statusApplies) of(owner string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.n[owner] {
		out[k] = v
	}
	return out
}

// reconciles is the number of reconciles controller-runtime counted for a
// controller, and how many run now.
func reconciles(t *testing.T, controller string) (total, active float64) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	has := func(m *dto.Metric) bool {
		for _, l := range m.GetLabel() {
			if l.GetName() == "controller" && l.GetValue() == controller {
				return true
			}
		}
		return false
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if !has(m) {
				continue
			}
			switch f.GetName() {
			case "controller_runtime_reconcile_total":
				total += m.GetCounter().GetValue()
			case "controller_runtime_active_workers":
				active += m.GetGauge().GetValue()
			}
		}
	}
	return total, active
}

// TestColdStartStatusWrites: 20 new agents with no pods get one status
// apply each from the main reconciler, however many times the events of
// their children reconcile them before the cache has seen that write, and
// none from the stats reconciler, which has nothing to say before a pod is
// ready.
func TestColdStartStatusWrites(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "coldstart")
	counts := &statusApplies{n: map[string]map[string]int{}}
	startManager(t, harnessOpts{wrap: counts.wrap, stats: true, concurrency: 4, namespace: ns})
	const agents = 20
	for i := range agents {
		c := loadCase(t, "minimal")
		c.Agent.Name = fmt.Sprintf("cold-%02d", i)
		createCase(t, c, ns)
	}
	poll.UntilNil(t, "every agent's status at its generation", func() error {
		for i := range agents {
			a := getAgent(t, ns, fmt.Sprintf("cold-%02d", i))
			c := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionReady)
			if a.Status.ObservedGeneration != a.Generation || c == nil || c.Reason != agentsv1alpha1.ReasonPodsNotReady {
				return fmt.Errorf("%s: status %+v", a.Name, a.Status)
			}
		}
		return nil
	})
	// Wait until both controllers are idle: no reconcile running, and the
	// count unchanged across polls.
	var last float64 = -1
	poll.Until(t, "the controllers to settle", func() bool {
		m, ma := reconciles(t, "gooseagent")
		s, sa := reconciles(t, "gooseagent-stats")
		settled := ma == 0 && sa == 0 && m+s == last
		last = m + s
		return settled
	})
	main := counts.of(controllers.FieldOwner)
	for i := range agents {
		name := fmt.Sprintf("cold-%02d", i)
		if main[name] != 1 {
			t.Errorf("%s: %d status applies by %s, want 1", name, main[name], controllers.FieldOwner)
		}
	}
	if s := counts.of(stats.FieldOwner); len(s) != 0 {
		t.Errorf("status applies by %s: %v, want none before a pod is ready", stats.FieldOwner, s)
	}
}
