package controllers_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// BenchmarkScale creates BENCH_AGENTS (default 500) GooseAgents at once
// against envtest and reports the time until every agent's children are
// applied, then the API writes of one no-op resync of all agents. Run it once:
//
//	KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh) go test ./controllers/ -run '^$' -bench Scale -benchtime 1x
func BenchmarkScale(b *testing.B) {
	needEnv(b)
	big, err := testenv.New(testenv.WideServiceRange())
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := big.Stop(); err != nil {
			b.Errorf("failed to stop envtest: %v", err)
		}
	}()
	shared := env
	env = big
	defer func() { env = shared }()
	n := 500
	if v, err := strconv.Atoi(os.Getenv("BENCH_AGENTS")); err == nil && v > 0 {
		n = v
	}
	for b.Loop() {
		benchScale(b, n)
	}
}

// benchDeadline bounds the wait for all children.
const benchDeadline = 3 * time.Minute

func benchScale(b *testing.B, n int) {
	b.Helper()
	ctx := context.Background()
	ns := newNamespace(b, "scale")
	h := startManager(b, harnessOpts{concurrency: 4}) // the manager's default
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "openai", Namespace: ns}, StringData: map[string]string{"api-key": "sk"}}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a := &agentsv1alpha1.GooseAgent{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("agent-%03d", i), Namespace: ns},
				Spec: agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{
					Name: "openai", Model: "gpt-4o",
					APIKeySecretRef: &agentsv1alpha1.SecretKeyRef{Name: "openai", Key: "api-key"},
				}},
			}
			if err := env.Client.Create(ctx, a); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	created := time.Since(start)
	// The StatefulSet is the last child applied for these agents.
	poll.Within(b, benchDeadline, fmt.Sprintf("%d StatefulSets", n), func() error {
		// Metadata only: full StatefulSet lists would load the apiserver the
		// benchmark measures.
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("StatefulSetList"))
		if err := env.Client.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
			return err
		}
		if len(l.Items) == n {
			return nil
		}
		have := map[string]bool{}
		for _, it := range l.Items {
			have[it.Name] = true
		}
		for i := range n {
			if name := fmt.Sprintf("agent-%03d", i); !have[name] {
				a := &agentsv1alpha1.GooseAgent{}
				_ = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, a)
				return fmt.Errorf("only %d; %s has status %+v", len(l.Items), name, a.Status)
			}
		}
		return fmt.Errorf("%d", len(l.Items))
	})
	applied := time.Since(start)
	writesToConverge := h.writes.Load()

	resync := func() int64 {
		before := h.writes.Load()
		for i := range n {
			req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("agent-%03d", i)}}
			if _, err := h.r.Reconcile(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		return h.writes.Load() - before
	}
	// Let queued reconciles (status writes after the last apply) finish.
	poll.Within(b, 2*time.Minute, "the reconciles to settle", func() error {
		if w := resync(); w != 0 {
			return fmt.Errorf("a resync still wrote %d objects", w)
		}
		return nil
	})
	resyncStart := time.Now()
	w := resync()
	resyncTime := time.Since(resyncStart)

	b.ReportMetric(float64(n), "agents")
	b.ReportMetric(created.Seconds(), "s-create")
	b.ReportMetric(applied.Seconds(), "s-all-children-applied")
	b.ReportMetric(float64(writesToConverge)/float64(n), "writes/agent-to-converge")
	b.ReportMetric(float64(w), "writes/noop-resync-of-all")
	b.ReportMetric(float64(resyncTime.Milliseconds())/float64(n), "ms/agent-noop-reconcile")
	h.stop()
}
