package flight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/polltest"
)

// recorder is a run that answers each item with its double and records the batches it was
// given; it holds each batch until released.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	release chan struct{}
}

func (r *recorder) run(_ context.Context, ins []int) []Result[int] {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(ins))
	r.mu.Unlock()
	<-r.release
	out := make([]Result[int], len(ins))
	for i, v := range ins {
		out[i] = Result[int]{Val: 2 * v}
		if v < 0 {
			out[i] = Result[int]{Err: fmt.Errorf("negative %d", v)}
		}
	}
	return out
}

func (r *recorder) sent() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func waiting(b *Batcher[int, int], key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.keys[key]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// The first call goes alone and at once; the calls made while it is in flight go
// together in the next batch, each getting its own item's answer, errors included.
func TestBatcherMergesCallsMadeDuringAFlight(t *testing.T) {
	var b Batcher[int, int]
	r := &recorder{release: make(chan struct{})}
	type answer struct {
		v   int
		err error
	}
	answers := make(map[int]chan answer)
	call := func(in int) {
		ch := make(chan answer, 1)
		answers[in] = ch
		go func() {
			v, err := b.Do(context.Background(), "k", in, time.Minute, r.run)
			ch <- answer{v, err}
		}()
	}
	call(1)
	polltest.Eventually(t, 10*time.Second, "the first call is sent", func() (bool, string) {
		return len(r.sent()) == 1, fmt.Sprint(r.sent())
	})
	for _, in := range []int{2, 3, -4, 5} {
		call(in)
	}
	polltest.Eventually(t, 10*time.Second, "four calls wait for the next batch", func() (bool, string) {
		n := waiting(&b, "k")
		return n == 4, fmt.Sprint(n, " waiting")
	})
	close(r.release)
	for in, ch := range answers {
		a := <-ch
		switch {
		case in < 0 && (a.err == nil || a.err.Error() != fmt.Sprintf("negative %d", in)):
			t.Errorf("item %d: got %v, want its own error", in, a.err)
		case in >= 0 && (a.err != nil || a.v != 2*in):
			t.Errorf("item %d: got %d, %v; want %d", in, a.v, a.err, 2*in)
		}
	}
	got := r.sent()
	if len(got) != 2 || !slices.Equal(got[0], []int{1}) || len(got[1]) != 4 {
		t.Fatalf("batches sent: %v; want [1] then the four others together", got)
	}
	polltest.Eventually(t, 10*time.Second, "the key is forgotten once idle", func() (bool, string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.keys) == 0, fmt.Sprint(len(b.keys), " keys")
	})
}

// A caller that gives up returns at once and its item is left out of the batch it
// was waiting for; the batch in flight is not cancelled for the others.
func TestBatcherCallerGivingUp(t *testing.T) {
	var b Batcher[int, int]
	r := &recorder{release: make(chan struct{})}
	first := make(chan error, 1)
	go func() {
		_, err := b.Do(context.Background(), "k", 1, time.Minute, r.run)
		first <- err
	}()
	polltest.Eventually(t, 10*time.Second, "the first call is sent", func() (bool, string) {
		return len(r.sent()) == 1, ""
	})
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := b.Do(ctx, "k", 2, time.Minute, r.run)
		gaveUp <- err
	}()
	stays := make(chan int, 1)
	go func() {
		v, _ := b.Do(context.Background(), "k", 3, time.Minute, r.run)
		stays <- v
	}()
	polltest.Eventually(t, 10*time.Second, "two calls wait", func() (bool, string) {
		return waiting(&b, "k") == 2, ""
	})
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v", err)
	}
	close(r.release)
	if err := <-first; err != nil {
		t.Fatalf("the call in flight failed: %v", err)
	}
	if v := <-stays; v != 6 {
		t.Fatalf("the caller that stayed got %d, want 6", v)
	}
	if got := r.sent(); len(got) != 2 || !slices.Equal(got[1], []int{3}) {
		t.Fatalf("batches sent: %v; want [1] then [3] (2 gave up)", got)
	}
}

// Keys are independent: a call of another key does not wait for this key's flight.
func TestBatcherKeysAreIndependent(t *testing.T) {
	var b Batcher[int, int]
	held := &recorder{release: make(chan struct{})}
	defer close(held.release)
	go func() { _, _ = b.Do(context.Background(), "a", 1, time.Minute, held.run) }()
	polltest.Eventually(t, 10*time.Second, "key a is in flight", func() (bool, string) {
		return len(held.sent()) == 1, ""
	})
	free := &recorder{release: make(chan struct{})}
	close(free.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := b.Do(ctx, "b", 5, time.Minute, free.run); err != nil || v != 10 {
		t.Fatalf("key b: got %d, %v while key a was in flight", v, err)
	}
}

// A run that answers fewer items than it was given fails the unanswered ones
// instead of leaving them waiting.
func TestBatcherShortAnswer(t *testing.T) {
	var b Batcher[int, int]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := b.Do(ctx, "k", 1, time.Minute, func(context.Context, []int) []Result[int] { return nil })
	if !errors.Is(err, errShortBatch) {
		t.Fatalf("got %v, want errShortBatch", err)
	}
}
