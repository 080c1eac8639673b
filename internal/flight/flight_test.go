package flight

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Callers of one key get the result of the call they joined (sharing itself is
// singleflight's, tested there), and nothing is cached for later callers.
func TestConcurrentCallersGetTheResult(t *testing.T) {
	var g Group
	var calls atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]int, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := Do(context.Background(), &g, "k", time.Minute, func(context.Context) (int, error) {
				calls.Add(1)
				<-release
				return 42, nil
			})
			if err != nil {
				t.Error(err)
			}
			results[i] = v
		}()
	}
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i, v := range results {
		if v != 42 {
			t.Fatalf("caller %d got %d", i, v)
		}
	}
	// A later call runs again: nothing is cached.
	v, _ := Do(context.Background(), &g, "k", time.Minute, func(context.Context) (int, error) { return 7, nil })
	if v != 7 {
		t.Fatalf("a later call got %d, want a fresh 7", v)
	}
}

// A caller that gives up returns at once, and the call goes on under a context
// of its own, so that the callers still waiting on it are not failed.
func TestCallerGivingUpDoesNotFailTheOthers(t *testing.T) {
	var g Group
	started, release := make(chan struct{}), make(chan struct{})
	callCtxErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := Do(ctx, &g, "k", time.Minute, func(ctx context.Context) (string, error) {
			close(started)
			<-release
			callCtxErr <- ctx.Err()
			return "done", nil
		})
		first <- err
	}()
	<-started
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v", err)
	}
	close(release)
	if err := <-callCtxErr; err != nil {
		t.Fatalf("the shared call's context ended with its first caller: %v", err)
	}
}
