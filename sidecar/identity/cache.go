package identity

import (
	"fmt"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// reviewCache keeps the answers of an authority for a while and asks it once
// for any number of concurrent identical questions. Errors are not kept. Its
// LRU expires entries on read, not with a goroutine of its own (as
// lru/expirable's would, forever), and bounds the entries kept.
type reviewCache[V any] struct {
	entries *lru.Cache[string, reviewEntry[V]]
	flight  singleflight.Group
}

type reviewEntry[V any] struct {
	value   V
	expires time.Time
}

func newReviewCache[V any](size int) (*reviewCache[V], error) {
	entries, err := lru.New[string, reviewEntry[V]](size)
	if err != nil {
		return nil, fmt.Errorf("failed to create review cache: %w", err)
	}
	return &reviewCache[V]{entries: entries}, nil
}

// get returns the kept answer to key, or asks load, which returns the answer
// and how long it stays good.
func (c *reviewCache[V]) get(key string, load func() (V, time.Duration, error)) (V, error) {
	if v, ok := c.lookup(key); ok {
		return v, nil
	}
	v, err, _ := c.flight.Do(key, func() (any, error) {
		// A flight that ended just before this one began has kept its answer.
		if v, ok := c.lookup(key); ok {
			return v, nil
		}
		v, ttl, err := load()
		if err != nil {
			return nil, err
		}
		c.entries.Add(key, reviewEntry[V]{value: v, expires: time.Now().Add(ttl)})
		return v, nil
	})
	if err != nil {
		var zero V
		return zero, err
	}
	return v.(V), nil
}

func (c *reviewCache[V]) lookup(key string) (V, bool) {
	e, ok := c.entries.Get(key)
	if !ok || !time.Now().Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.value, true
}
