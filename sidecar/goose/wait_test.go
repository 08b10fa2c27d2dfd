package goose_test

import (
	"context"
	"testing"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

func TestBeforeWaitCallsTheHookOfItsContext(t *testing.T) {
	goose.BeforeWait(context.Background()) // no hook: nothing to call
	if goose.WaitHook(context.Background()) != nil {
		t.Fatal("a hook without WithWaitHook")
	}
	calls := 0
	ctx := goose.WithWaitHook(context.Background(), func() { calls++ })
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	goose.BeforeWait(child)
	goose.WaitHook(child)()
	if calls != 2 {
		t.Fatalf("hook called %d times, want 2", calls)
	}
}
