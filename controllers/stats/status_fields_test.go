package stats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/controllers/internal/fixtures"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/controllers/stats"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
	"github.com/adk2goose/goose-operator/sidecar/budget"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// conditionTypes are the condition types GooseAgentStatus documents.
var conditionTypes = []string{
	agentsv1alpha1.ConditionReady, agentsv1alpha1.ConditionProgressing, agentsv1alpha1.ConditionDegraded,
	agentsv1alpha1.ConditionStatsAvailable, agentsv1alpha1.ConditionBudgetExhausted, agentsv1alpha1.ConditionParked,
}

// statusFields are the JSON names of GooseAgentStatus's fields.
func statusFields() []string {
	var out []string
	st := reflect.TypeFor[agentsv1alpha1.GooseAgentStatus]()
	for field := range st.Fields() {
		out = append(out, strings.Split(field.Tag.Get("json"), ",")[0])
	}
	return out
}

// ownedStatus reads, from a's managed fields, the status fields and
// condition types each field owner applied.
func ownedStatus(t *testing.T, a *agentsv1alpha1.GooseAgent) (fields, conditions map[string][]string) {
	t.Helper()
	fields, conditions = map[string][]string{}, map[string][]string{}
	for _, m := range a.ManagedFields {
		if m.Subresource != "status" || m.FieldsV1 == nil {
			continue
		}
		var set struct {
			Status map[string]json.RawMessage `json:"f:status"`
		}
		if err := json.Unmarshal(m.FieldsV1.GetRawBytes(), &set); err != nil {
			t.Fatal(err)
		}
		for f, sub := range set.Status {
			name := strings.TrimPrefix(f, "f:")
			fields[name] = append(fields[name], m.Manager)
			if name != "conditions" {
				continue
			}
			var items map[string]json.RawMessage
			if err := json.Unmarshal(sub, &items); err != nil {
				t.Fatal(err)
			}
			for k := range items {
				var key struct{ Type string }
				if err := json.Unmarshal([]byte(strings.TrimPrefix(k, "k:")), &key); err == nil && key.Type != "" {
					conditions[key.Type] = append(conditions[key.Type], m.Manager)
				}
			}
		}
	}
	return fields, conditions
}

// TestEveryStatusFieldIsWritten runs both reconcilers on an agent that uses
// every feature with a status field (a budget, spec.idle, a ready pod that reports
// figures) and checks, in the managed fields, that every field of
// GooseAgentStatus and every condition type was written, each by exactly one
// field owner. A status field no reconciler writes fails here.
func TestEveryStatusFieldIsWritten(t *testing.T) {
	f := newFixture(t, 0)
	ctx := context.Background()
	env := sharedEnv(t)
	// The main reconciler makes the agent's Secret itself.
	if err := env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.agent.Namespace, Name: render.SecretName(f.agent)}}); err != nil {
		t.Fatal(err)
	}
	f.agent.Spec.Budget = &agentsv1alpha1.BudgetSpec{Period: agentsv1alpha1.BudgetPeriodDay, TotalTokens: 50}
	f.agent.Spec.Idle = &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: time.Hour}}
	if err := env.Client.Update(ctx, f.agent); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "budget.json")
	if err := os.WriteFile(file, []byte(`{"period":"Day","totalTokens":50}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fake := goosetest.NewServe(t, goosetest.WithServeScript(goosetest.Echo))
	b, err := acp.New(acp.Config{URL: fake.URL, SecretKey: fake.Secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sc := &sidecar{t: t, dataDir: t.TempDir(), backend: b, configure: func(cfg *server.Config) {
		cfg.Budget = budget.Config{File: file, SyncInterval: 20 * time.Millisecond}
	}}
	sc.start()
	t.Cleanup(sc.halt)
	f.sidecars["talker-0"] = sc
	f.createReadyPod("talker-0")

	main := &controllers.GooseAgentReconciler{
		Client: cachedClient(t, env), APIReader: env.Client, References: startReferences(t, env.Client), Defaults: fixtures.Defaults,
		GenerateToken: func(string) (string, error) { return token, nil },
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(f.agent)}
	var a agentsv1alpha1.GooseAgent
	// The stats reconciler reads the token Secret through a watch: poll
	// until the budget is in.
	poll.UntilNil(t, "the budget in the status", func() error {
		if _, err := main.Reconcile(ctx, req); err != nil {
			return err
		}
		f.reconcile()
		if err := env.Client.Get(ctx, req.NamespacedName, &a); err != nil {
			return err
		}
		if a.Status.Budget == nil || a.Status.StatsUpdatedAt == nil {
			return fmt.Errorf("budget %+v, updated at %v", a.Status.Budget, a.Status.StatsUpdatedAt)
		}
		return nil
	})

	fields, conditions := ownedStatus(t, &a)
	owners := []string{controllers.FieldOwner, stats.FieldOwner}
	for _, name := range statusFields() {
		switch got := fields[name]; {
		case name == "conditions":
			if len(got) != 2 {
				t.Errorf("status.conditions written by %v, want both reconcilers %v", got, owners)
			}
		case len(got) != 1:
			t.Errorf("status.%s written by %v, want exactly one of %v", name, got, owners)
		}
	}
	for _, typ := range conditionTypes {
		if got := conditions[typ]; len(got) != 1 {
			t.Errorf("condition %s written by %v, want exactly one of %v", typ, got, owners)
		}
	}
	if t.Failed() {
		t.Logf("status: %+v", a.Status)
	}
}

// cachedClient reads through a cache scoped and indexed as the manager's
// (controllers.CacheOptions, controllers.IndexByAgent), as the main
// reconciler's Client must, and writes to the API server.
func cachedClient(t *testing.T, env *testenv.Env) client.Client {
	t.Helper()
	opts := controllers.CacheOptions()
	opts.Scheme = env.Scheme
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := controllers.IndexByAgent(ctx, c); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	cl, err := client.New(env.Config, client.Options{Scheme: env.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
