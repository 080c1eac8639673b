package flight

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Batcher merges calls of one key that are made while an earlier call of that
// key is in flight into a single call. The first call runs at once (nothing
// waits for a batch to fill); the calls that arrive while it runs go together as
// soon as it returns, and so on. Under load the batches grow by themselves, and
// a lone caller pays nothing.
//
// It is for requests that carry many items, such as ListOffsets or
// DescribeProducers for many partitions of one broker: a broker serves one
// connection's requests one at a time, so 64 one-partition requests queue up
// behind each other where one 64-partition request costs about as much as one.
//
// Each caller keeps its own context: a caller that gives up returns at once and
// its item is left out of batches not yet sent. The batch runs under a context
// of its own, bounded by the timeout of the call that started the run.
type Batcher[In, Out any] struct {
	mu   sync.Mutex
	keys map[string]*batchQueue[In, Out]
}

// Result is one item's answer in a batch.
type Result[T any] struct {
	Val T
	Err error
}

type batchQueue[In, Out any] struct {
	waiting []*batchCall[In, Out]
}

type batchCall[In, Out any] struct {
	ctx  context.Context
	in   In
	res  Result[Out]
	done chan struct{}
}

// errShortBatch means run answered fewer items than it was given: a bug in run.
var errShortBatch = errors.New("flight: batch answered fewer items than it was asked")

// Do adds in to the next batch of key and returns its answer. run sends one
// batch and answers its items in order; every caller of a key must pass the same
// run (the batch uses that of whichever caller sent it).
func (b *Batcher[In, Out]) Do(ctx context.Context, key string, in In, timeout time.Duration, run func(ctx context.Context, ins []In) []Result[Out]) (Out, error) {
	c := &batchCall[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	b.mu.Lock()
	if b.keys == nil {
		b.keys = map[string]*batchQueue[In, Out]{}
	}
	q, running := b.keys[key]
	if !running {
		q = &batchQueue[In, Out]{}
		b.keys[key] = q
	}
	q.waiting = append(q.waiting, c)
	b.mu.Unlock()
	if !running {
		go b.drain(context.WithoutCancel(ctx), key, q, timeout, run)
	}
	var zero Out
	select {
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-c.done:
		return c.res.Val, c.res.Err
	}
}

// drain sends the queue's batches until no caller waits, then forgets the key.
func (b *Batcher[In, Out]) drain(base context.Context, key string, q *batchQueue[In, Out], timeout time.Duration, run func(context.Context, []In) []Result[Out]) {
	for {
		b.mu.Lock()
		var calls []*batchCall[In, Out]
		for _, c := range q.waiting {
			if c.ctx.Err() == nil { // a caller that left needs no answer
				calls = append(calls, c)
			}
		}
		q.waiting = nil
		if len(calls) == 0 {
			delete(b.keys, key)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ins := make([]In, len(calls))
		for i, c := range calls {
			ins[i] = c.in
		}
		ctx, cancel := context.WithTimeout(base, timeout)
		res := run(ctx, ins)
		cancel()
		for i, c := range calls {
			if i < len(res) {
				c.res = res[i]
			} else {
				c.res.Err = errShortBatch
			}
			close(c.done)
		}
	}
}
