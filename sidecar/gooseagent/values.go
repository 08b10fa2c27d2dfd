package gooseagent

import (
	"context"
	"reflect"
	"sync"
)

// rememberedValues is a context whose Value remembers what its parent
// answered for each key. adk-go reads an event's id and time providers
// (platform.NewUUID, platform.Now) from the context on every new event; a
// turn's invocation context sits under the HTTP server's, the middleware's,
// tracing's and the runner's values, and a key that none of them holds (the
// usual case: no provider installed) was looked for through all of them for
// each delta. A context's values never change, so the first answer for a key
// is its answer for good.
type rememberedValues struct {
	context.Context
	mu   sync.Mutex
	seen map[any]any
}

func rememberValues(ctx context.Context) context.Context {
	return &rememberedValues{Context: ctx, seen: map[any]any{}}
}

func (r *rememberedValues) Value(key any) any {
	if key == nil || !reflect.TypeOf(key).Comparable() {
		return r.Context.Value(key) // no map key; nothing holds it anyway
	}
	r.mu.Lock()
	v, ok := r.seen[key]
	r.mu.Unlock()
	if ok {
		return v
	}
	v = r.Context.Value(key)
	r.mu.Lock()
	r.seen[key] = v
	r.mu.Unlock()
	return v
}
