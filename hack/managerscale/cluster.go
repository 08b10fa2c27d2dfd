package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// playedStatusWrites is the key of the requests the tool makes itself while
// it plays the StatefulSet controller; they are not the manager's.
const playedStatusWrites = "PUT statefulsets/status"

// cluster is the tool's view of the agents namespace: one watch of the
// GooseAgents, to tell when they converged without listing 10,000 objects
// every second, and one of the StatefulSets, whose status it writes as
// Kubernetes' StatefulSet controller (which envtest does not run) would once
// the pods were ready. With that, agents settle as on a cluster, and no
// rollout deadline passes while a run is measured.
type cluster struct {
	c      client.Client
	cache  cache.Cache
	queue  workqueue.TypedRateLimitingInterface[client.ObjectKey]
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startCluster(ctx context.Context, env *testenv.Env) (*cluster, error) {
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme,
		DefaultNamespaces: map[string]cache.Config{"agents": {}}})
	if err != nil {
		return nil, fmt.Errorf("failed to make the tool's cache: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cl := &cluster{c: env.Client, cache: c, cancel: cancel,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[client.ObjectKey]())}
	sts, err := c.GetInformer(ctx, &appsv1.StatefulSet{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("failed to watch StatefulSets: %w", err)
	}
	enqueue := func(o any) {
		if s, ok := o.(*appsv1.StatefulSet); ok && !rolledOut(s) {
			cl.queue.Add(client.ObjectKeyFromObject(s))
		}
	}
	if _, err := sts.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("failed to handle StatefulSets: %w", err)
	}
	if _, err := c.GetInformer(ctx, &agentsv1alpha1.GooseAgent{}); err != nil {
		cancel()
		return nil, fmt.Errorf("failed to watch GooseAgents: %w", err)
	}
	cl.wg.Go(func() { _ = c.Start(ctx) })
	if !c.WaitForCacheSync(ctx) {
		cl.stop()
		return nil, fmt.Errorf("the tool's cache did not sync")
	}
	for range 8 {
		cl.wg.Go(func() {
			for cl.rollOut(ctx) {
			}
		})
	}
	return cl, nil
}

func (cl *cluster) stop() {
	cl.queue.ShutDown()
	cl.cancel()
	cl.wg.Wait()
}

// rolledOut reports whether s's status says what the StatefulSet controller
// says once every wanted pod is ready at the current revision.
func rolledOut(s *appsv1.StatefulSet) bool {
	want := wantedReplicas(s)
	st := s.Status
	return st.ObservedGeneration == s.Generation && st.Replicas == want && st.ReadyReplicas == want &&
		st.AvailableReplicas == want && st.UpdatedReplicas == want && st.CurrentRevision == st.UpdateRevision
}

// wantedReplicas is spec.replicas, whose default is 1.
func wantedReplicas(s *appsv1.StatefulSet) int32 {
	if s.Spec.Replicas != nil {
		return *s.Spec.Replicas
	}
	return 1
}

// rollOut writes the status of one queued StatefulSet; false once the queue
// is shut down.
func (cl *cluster) rollOut(ctx context.Context) bool {
	key, shutdown := cl.queue.Get()
	if shutdown {
		return false
	}
	defer cl.queue.Done(key)
	s := &appsv1.StatefulSet{}
	if err := cl.cache.Get(ctx, key, s); err != nil || rolledOut(s) {
		cl.queue.Forget(key)
		return true
	}
	want := wantedReplicas(s)
	rev := fmt.Sprintf("%s-%d", s.Name, s.Generation)
	s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: want, ReadyReplicas: want,
		AvailableReplicas: want, CurrentReplicas: want, UpdatedReplicas: want, CurrentRevision: rev, UpdateRevision: rev}
	switch err := cl.c.Status().Update(ctx, s); {
	case err == nil, apierrors.IsNotFound(err):
		cl.queue.Forget(key)
	default: // a conflict: the cache has not seen the newest spec yet
		cl.queue.AddRateLimited(key)
	}
	return true
}

// waitConverged waits until every agent's status is at its generation with
// a condition, as the tool's watch of the agents has them.
func (cl *cluster) waitConverged(ctx context.Context, o options) error {
	deadline := time.Now().Add(o.timeout)
	for {
		var list agentsv1alpha1.GooseAgentList
		if err := cl.cache.List(ctx, &list); err != nil {
			return fmt.Errorf("failed to list cached GooseAgents: %w", err)
		}
		done := 0
		for _, a := range list.Items {
			if a.Status.ObservedGeneration == a.Generation && len(a.Status.Conditions) > 0 {
				done++
			}
		}
		if done == o.agents {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d agents converged within %s", done, o.agents, o.timeout)
		}
		time.Sleep(time.Second) //nolint:forbidigo // polling another process's work
	}
}
