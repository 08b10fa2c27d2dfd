package activator

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/sidecar/server"
)

// hold is the state of an agent with requests held: a burst. It exists
// only while requests are held, so a parked agent nobody calls costs
// nothing here.
type hold struct {
	held int
	// wokeAt is when this burst asked for the wake; zero before. A burst
	// asks again once a hold timeout has passed since, so a burst that
	// outlives a failed start (or a new park) still wakes the agent.
	wokeAt time.Time
	// changed is closed, and replaced, when a pod of the agent changes or a
	// wake failed: the waiters look again.
	changed chan struct{}
}

// hold keeps r until a pod of the agent is ready, waking the agent once per
// burst, then forwards it; it answers 503 when the hold is full, the wake
// cannot be written, or the timeout passes first.
func (a *Activator) hold(w http.ResponseWriter, r *http.Request, req *request) {
	ga := req.agent
	key := types.NamespacedName{Namespace: ga.Namespace, Name: ga.Name}
	if !a.enter(key) {
		w.Header().Set("Retry-After", retryAfter)
		server.WriteError(w, r, http.StatusServiceUnavailable, codeHoldFull,
			fmt.Sprintf("%d requests are already waiting for GooseAgent %s to wake", a.cfg.MaxHeld, key))
		return
	}
	defer a.leave(key)
	timer := time.NewTimer(a.cfg.HoldTimeout)
	defer timer.Stop()
	ctx := r.Context()
	for {
		// Take the channel before looking, so that a change right after the
		// look is not missed.
		changed := a.changedOf(key)
		pod, err := a.readyPod(ctx, ga)
		if err != nil {
			w.Header().Set("Retry-After", retryAfter)
			server.WriteError(w, r, http.StatusServiceUnavailable, codeWakeFailed, err.Error())
			return
		}
		if pod != nil {
			a.forward(w, r, req, pod)
			return
		}
		if a.takeWake(key) {
			if err := a.wake(ctx, ga); err != nil {
				a.wakeFailed(key)
				a.log.Error(err, "failed to wake agent", "agent", key.String())
				w.Header().Set("Retry-After", retryAfter)
				server.WriteError(w, r, http.StatusServiceUnavailable, codeWakeFailed,
					fmt.Sprintf("failed to wake GooseAgent %s", key))
				return
			}
		}
		select {
		case <-changed:
		case <-timer.C:
			w.Header().Set("Retry-After", retryAfter)
			server.WriteError(w, r, http.StatusServiceUnavailable, codeWakeTimeout,
				fmt.Sprintf("GooseAgent %s had no ready pod within %s", key, a.cfg.HoldTimeout))
			return
		case <-a.stopping:
			w.Header().Set("Retry-After", "1")
			server.WriteError(w, r, http.StatusServiceUnavailable, codeStopping,
				"this activator is stopping: send the request again")
			return
		case <-ctx.Done():
			return
		}
	}
}

// enter counts a held request of key, false when the hold is full.
func (a *Activator) enter(key types.NamespacedName) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.holds[key]
	if h == nil {
		h = &hold{changed: make(chan struct{})}
		a.holds[key] = h
	}
	if h.held >= a.cfg.MaxHeld {
		return false
	}
	h.held++
	return true
}

// leave ends a held request; the last one ends the burst.
func (a *Activator) leave(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := a.holds[key]; h != nil {
		if h.held--; h.held <= 0 {
			delete(a.holds, key)
		}
	}
}

func (a *Activator) changedOf(key types.NamespacedName) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.holds[key].changed
}

// takeWake reports whether the caller is to write this burst's wake.
func (a *Activator) takeWake(key types.NamespacedName) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.holds[key]
	now := a.cfg.Now()
	if !h.wokeAt.IsZero() && now.Sub(h.wokeAt) < a.cfg.HoldTimeout {
		return false
	}
	h.wokeAt = now
	return true
}

// wakeFailed lets the next waiter of the burst try again.
func (a *Activator) wakeFailed(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := a.holds[key]; h != nil {
		h.wokeAt = time.Time{}
		close(h.changed)
		h.changed = make(chan struct{})
	}
}

// podChanged wakes the waiters of the pod's agent, if any.
func (a *Activator) podChanged(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj // a deletion the informer saw late
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	name := p.Labels[render.LabelInstance]
	if name == "" {
		return
	}
	key := types.NamespacedName{Namespace: p.Namespace, Name: name}
	a.mu.Lock()
	defer a.mu.Unlock()
	if h := a.holds[key]; h != nil {
		close(h.changed)
		h.changed = make(chan struct{})
	}
}

// wake asks the reconciler to wake the agent: it scales the agent up when
// the annotation is after status.idle.parkedAt. A merge patch touches that
// annotation alone and needs no resourceVersion.
func (a *Activator) wake(ctx context.Context, ga *agentsv1alpha1.GooseAgent) error {
	at := a.cfg.Now().UTC().Format(time.RFC3339Nano)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{agentsv1alpha1.WakeRequestedAtAnnotation: at},
	}})
	if err != nil {
		return fmt.Errorf("failed to encode wake request: %w", err)
	}
	err = retry.OnError(retry.DefaultBackoff, func(err error) bool { return !apierrors.IsNotFound(err) && ctx.Err() == nil }, func() error {
		target := &agentsv1alpha1.GooseAgent{}
		target.Namespace, target.Name = ga.Namespace, ga.Name
		return a.cfg.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch))
	})
	if err != nil {
		return fmt.Errorf("failed to write wake request: %w", err)
	}
	a.log.Info("woke agent", "agent", ga.Namespace+"/"+ga.Name, "wakeRequestedAt", at)
	return nil
}

// pick is a random index below n: a burst's requests spread over the
// pods that are ready.
func (a *Activator) pick(n int) int {
	if n == 1 {
		return 0
	}
	return rand.IntN(n)
}
