package goose

import "context"

type waitHookKey struct{}

// WithWaitHook returns a copy of ctx carrying f, which BeforeWait(ctx) calls.
//
// adk2goose uses it to batch the writes of an SSE response: events that
// reach it together go out in one write instead of one write and flush
// each, and whatever is batched goes out before the turn waits for goose
// (Backend.Reply calls BeforeWait) or does other slow work.
func WithWaitHook(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, waitHookKey{}, f)
}

// BeforeWait tells ctx's consumer, if it asked (WithWaitHook), that what it
// has been given so far is all it gets for a while: the caller is about to
// wait for goose or to do slow work of its own.
func BeforeWait(ctx context.Context) {
	if f := WaitHook(ctx); f != nil {
		f()
	}
}

// WaitHook is the func WithWaitHook put in ctx, or nil: for a caller that
// calls it often, as finding it walks ctx's chain.
func WaitHook(ctx context.Context) func() {
	f, _ := ctx.Value(waitHookKey{}).(func())
	return f
}
