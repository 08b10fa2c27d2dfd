package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
)

// TestReviewFinalizerKeepsOtherFinalizers: another controller adds its
// finalizer between the reconciler's read of an agent and its patch adding
// the review finalizer. A merge patch replaces the whole list, so without a
// resourceVersion in it the other finalizer would be lost; with it the
// patch conflicts, the reconcile is retried, and both stay.
func TestReviewFinalizerKeepsOtherFinalizers(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "finalizers")
	const other = "example.com/other"
	ctx := context.Background()
	var raced atomic.Bool
	startManager(t, harnessOpts{wrap: func(c client.WithWatch) client.WithWatch {
		return interceptor.NewClient(c, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
				a, ok := o.(*agentsv1alpha1.GooseAgent)
				if ok && a.Namespace == ns && raced.CompareAndSwap(false, true) {
					if err := addFinalizer(ctx, a, other); err != nil {
						return err
					}
				}
				return c.Patch(ctx, o, p, opts...)
			},
		})
	}})
	c := loadCase(t, "auth-kubernetes")
	createCase(t, c, ns)
	poll.UntilNil(t, "both finalizers", func() error {
		a := getAgent(t, ns, c.Agent.Name)
		if !raced.Load() {
			return fmt.Errorf("no finalizer patch yet")
		}
		if !controllerutil.ContainsFinalizer(a, controllers.ReviewFinalizer) || !controllerutil.ContainsFinalizer(a, other) {
			return fmt.Errorf("finalizers %v, want %s and %s", a.Finalizers, controllers.ReviewFinalizer, other)
		}
		return nil
	})
	// Let the agent go at the end of the test.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		a := getAgent(t, ns, c.Agent.Name)
		a.Finalizers = slices.DeleteFunc(a.Finalizers, func(f string) bool { return f == other })
		return env.Client.Update(ctx, a)
	}); err != nil {
		t.Fatal(err)
	}
}

// addFinalizer adds f to the live agent, as another controller would.
func addFinalizer(ctx context.Context, a *agentsv1alpha1.GooseAgent, f string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live := &agentsv1alpha1.GooseAgent{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), live); err != nil {
			return err
		}
		controllerutil.AddFinalizer(live, f)
		return env.Client.Update(ctx, live)
	})
}
