package gooseagent

import (
	"context"
	"testing"
)

// countingCtx counts the lookups that reach it.
type countingCtx struct {
	context.Context
	lookups int
}

func (c *countingCtx) Value(key any) any {
	c.lookups++
	return c.Context.Value(key)
}

type key string

func TestRememberedValues(t *testing.T) {
	parent := &countingCtx{Context: context.WithValue(context.Background(), key("held"), "v")}
	ctx := rememberValues(parent)
	for range 3 {
		if got := ctx.Value(key("held")); got != "v" {
			t.Fatalf("held = %v", got)
		}
		if got := ctx.Value(key("missing")); got != nil {
			t.Fatalf("missing = %v", got)
		}
	}
	if parent.lookups != 2 {
		t.Errorf("%d lookups reached the parent, want one per key", parent.lookups)
	}
	// A key no map can hold is passed on, not a panic.
	if got := ctx.Value([]int{1}); got != nil {
		t.Errorf("slice key = %v", got)
	}
	if got := ctx.Value(nil); got != nil {
		t.Errorf("nil key = %v", got)
	}
}
