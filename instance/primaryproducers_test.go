package instance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// fakePrimary is a primary whose producer state the test sets; asked counts its answers.
type fakePrimary struct {
	mu    sync.Mutex
	state map[int64]producerState
	err   error
	asked atomic.Int32
	hold  chan struct{} // non-nil: each answer waits for a receive
}

func (f *fakePrimary) describe(ctx context.Context, _ *kgo.Client, _ string, _ int32) (map[int64]producerState, error) {
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	defer f.asked.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int64]producerState{}
	for id, s := range f.state {
		out[id] = s
	}
	return out, f.err
}

func (f *fakePrimary) set(id int64, s producerState, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nil {
		f.state = map[int64]producerState{}
	}
	f.state[id], f.err = s, err
}

func testPrimaryProducers(t *testing.T, f *fakePrimary) *primaryProducers {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := newPrimaryProducers(ctx, func() (*kgo.Client, error) { return nil, nil }, slog.New(slog.DiscardHandler))
	p.describe, p.every = f.describe, time.Millisecond
	return p
}

// Written answers from what the primary said last, never waiting for it: an unknown batch is
// refused at once and starts a refresh; once the primary's answer is in, the batch is known.
func TestPrimaryProducersAnswersWithoutWaiting(t *testing.T) {
	f := &fakePrimary{hold: make(chan struct{})}
	f.set(7, producerState{epoch: 2, lastSeq: 104}, nil)
	p := testPrimaryProducers(t, f)
	held := enforcement.ProducerBatch{ProducerID: 7, Epoch: 2, FirstSeq: 100, LastSeq: 104}
	if p.Written(context.Background(), "orders", 0, held) {
		t.Fatal("a batch was known written before the primary was asked")
	}
	for range 3 { // a refresh is in flight: no second one starts
		p.Written(context.Background(), "orders", 0, held)
	}
	f.hold <- struct{}{}
	polltest.Until(t, 10*time.Second, "the primary's answer is kept", func() bool { return p.Written(context.Background(), "orders", 0, held) })
	if n := f.asked.Load(); n != 1 {
		t.Errorf("the primary was asked %d times while one question was in flight", n)
	}
	close(f.hold)
	for _, b := range []enforcement.ProducerBatch{
		{ProducerID: 7, Epoch: 2, FirstSeq: 105, LastSeq: 106}, // after the last sequence
		{ProducerID: 7, Epoch: 3, FirstSeq: 0, LastSeq: 1},     // another epoch
		{ProducerID: 8, Epoch: 2, FirstSeq: 100, LastSeq: 104}, // another producer
	} {
		if p.Written(context.Background(), "orders", 0, b) {
			t.Errorf("%+v taken for written: the primary's producer 7 wrote up to sequence 104 in epoch 2", b)
		}
	}
	if p.Written(context.Background(), "orders", 1, held) {
		t.Error("a batch taken for written on a partition the primary was not asked about")
	}
}

// An answer of the primary never shrinks what is known (a slow answer from before a later
// one), and a failed question leaves the answer as it was.
func TestPrimaryProducersKeepsTheNewest(t *testing.T) {
	f := &fakePrimary{}
	f.set(7, producerState{epoch: 2, lastSeq: 104}, nil)
	p := testPrimaryProducers(t, f)
	b := enforcement.ProducerBatch{ProducerID: 7, Epoch: 2, FirstSeq: 100, LastSeq: 104}
	polltest.Until(t, 10*time.Second, "the primary's answer is kept", func() bool { return p.Written(context.Background(), "orders", 0, b) })
	f.set(7, producerState{epoch: 2, lastSeq: 90}, nil)
	asked := f.asked.Load()
	later := enforcement.ProducerBatch{ProducerID: 7, Epoch: 2, FirstSeq: 105, LastSeq: 105}
	polltest.Until(t, 10*time.Second, "the primary is asked again", func() bool { p.Written(context.Background(), "orders", 0, later); return f.asked.Load() > asked+1 })
	if !p.Written(context.Background(), "orders", 0, b) {
		t.Error("an older answer made a batch known written unknown again")
	}
	f.set(7, producerState{}, errors.New("primary unreachable"))
	asked = f.asked.Load()
	polltest.Until(t, 10*time.Second, "the primary is asked again", func() bool { p.Written(context.Background(), "orders", 0, later); return f.asked.Load() > asked+1 })
	if !p.Written(context.Background(), "orders", 0, b) {
		t.Error("a failed question forgot what the primary had said")
	}
}

// TestRealPrimaryProducers: against real Kafka, a batch an idempotent producer wrote is known
// written once asked for, with its producer id and epoch; its next sequence is not.
func TestRealPrimaryProducers(t *testing.T) {
	kafkatest.RequireReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kafkatest.Start(t)
	c.CreateKeptTopic(t, "orders", 1)
	prod := c.Client(t, kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 10 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	id, epoch, err := prod.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client(t)
	p := newPrimaryProducers(ctx, func() (*kgo.Client, error) { return cl, nil }, slog.New(slog.DiscardHandler))
	last := enforcement.ProducerBatch{ProducerID: id, Epoch: epoch, FirstSeq: 9, LastSeq: 9}
	polltest.Until(t, 30*time.Second, "the primary's producer state is known", func() bool { return p.Written(ctx, "orders", 0, last) })
	got, err := describeProducers(ctx, cl, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if s := got[id]; s.epoch != epoch || s.lastSeq != 9 {
		t.Fatalf("producer %d on the primary: %+v, want epoch %d last sequence 9", id, s, epoch)
	}
	if p.Written(ctx, "orders", 0, enforcement.ProducerBatch{ProducerID: id, Epoch: epoch, FirstSeq: 10, LastSeq: 10}) {
		t.Error("sequence 10, never written, taken for written")
	}
	all, err := describeAll(ctx, cl, []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	if s := all[topicPartition{"orders", 0}][id]; len(all) != 1 || s.epoch != epoch || s.lastSeq != 9 {
		t.Fatalf("every partition of orders on the primary: %+v, want orders/0 with producer %d at epoch %d last sequence 9", all, id, epoch)
	}
}

// sweep learns every partition of the frozen topics at once, and again while the freeze
// lasts: a resend of a write made before the freeze is known at its first try, without a
// question of its own, even when the write landed after the first answer (CI saw one land
// 0.2 s after it). It stops with the freeze.
func TestPrimaryProducersSweep(t *testing.T) {
	f := &fakePrimary{}
	p := testPrimaryProducers(t, f)
	ctx, stop := context.WithCancel(context.Background())
	p.ctx = ctx
	var sweeps atomic.Int32
	late := make(chan struct{})
	p.describeAll = func(_ context.Context, _ *kgo.Client, topics []string) (map[topicPartition]map[int64]producerState, error) {
		sweeps.Add(1)
		if len(topics) != 1 || topics[0] != "orders" {
			t.Errorf("sweep asked about %v", topics)
		}
		got := map[topicPartition]map[int64]producerState{
			{"orders", 0}: {7: {epoch: 2, lastSeq: 104}},
			{"orders", 3}: {9: {epoch: 0, lastSeq: 5}},
		}
		select {
		case <-late: // a write forwarded before the freeze has landed since
			got[topicPartition{"orders", 3}][9] = producerState{epoch: 0, lastSeq: 8}
		default:
		}
		return got, nil
	}
	stopped := p.sweep([]string{"orders"})
	polltest.Until(t, 10*time.Second, "the first sweep's answer is kept", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.parts) == 2
	})
	for _, c := range []struct {
		partition int32
		b         enforcement.ProducerBatch
	}{{0, enforcement.ProducerBatch{ProducerID: 7, Epoch: 2, FirstSeq: 100, LastSeq: 104}}, {3, enforcement.ProducerBatch{ProducerID: 9, FirstSeq: 5, LastSeq: 5}}} {
		if !p.Written(context.Background(), "orders", c.partition, c.b) {
			t.Errorf("orders/%d %+v unknown after the first sweep", c.partition, c.b)
		}
	}
	if n := f.asked.Load(); n != 0 {
		t.Errorf("the primary was asked %d times partition by partition for batches the sweep knew", n)
	}
	close(late)
	after := sweeps.Load()
	polltest.Until(t, 10*time.Second, "two more sweeps", func() bool { return sweeps.Load() >= after+2 })
	if b := (enforcement.ProducerBatch{ProducerID: 9, FirstSeq: 6, LastSeq: 8}); !p.Written(context.Background(), "orders", 3, b) {
		t.Errorf("orders/3 %+v, landed after the first sweep, unknown after later ones", b)
	}
	stop()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatalf("the sweep goes on after the freeze ended (%d sweeps)", sweeps.Load())
	}
}
