// Package flight shares work among the callers that ask at the same moment,
// with each caller keeping its own context: a caller that gives up returns at
// once, and the call it shared goes on for the others under a context of its
// own. Group shares one identical call (golang.org/x/sync/singleflight);
// Batcher merges different items into one request.
package flight

import (
	"context"
	"time"

	"golang.org/x/sync/singleflight"
)

// Group is a set of keyed calls in flight; its zero value is ready.
type Group struct{ g singleflight.Group }

// Do runs fn once for all concurrent callers with the same key and returns its
// result to each. fn gets a context that outlives the callers' (bounded by
// timeout), so its result must be safe to share read-only. A joiner's answer
// may be up to one call older than its question; use Do only where that is
// harmless.
func Do[T any](ctx context.Context, g *Group, key string, timeout time.Duration, fn func(context.Context) (T, error)) (T, error) {
	ch := g.g.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return fn(fctx)
	})
	var zero T
	select {
	case <-ctx.Done():
		return zero, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return zero, r.Err
		}
		return r.Val.(T), nil
	}
}
