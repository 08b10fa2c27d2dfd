// Package retry holds the workqueue rate limiter of the operator's
// controllers: how soon an agent whose reconcile failed is tried again.
package retry

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// MaxDelay caps the delay before an agent whose reconciles keep failing is
// tried again. controller-runtime's default doubles up to 1,000 s, so an
// agent that failed through an apiserver outage could wait a quarter of an
// hour after the apiserver was back.
const MaxDelay = time.Minute

// Limiter is controller-runtime's default rate limiter (per-item exponential
// backoff from 5 ms, and 10 retries a second overall with bursts of 100),
// with the per-item backoff capped at MaxDelay.
func Limiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
