package instance

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/enforcement"
)

// primaryProducers answers a frozen route's enforcement.Freeze.Written: does the primary (the
// route's mirror's source) hold an idempotent producer's batch? It asks the partitions'
// leaders for their producer state (DescribeProducers, KIP-664, Kafka 2.8+; the mirror's
// source principal reads the topics, which is what it needs) and keeps the answer: an
// idempotent producer's last sequence only grows within an epoch, so a batch once known to be
// written stays so.
//
// Written never waits on the network: it runs in the proxy's event loop, where a round trip
// to a distant primary would stall every connection of the loop. sweep learns every frozen
// partition when the freeze is installed (a resend is of a write made before it) and again
// every refreshEvery while the freeze lasts: a write forwarded just before the freeze may land
// after the first answer, and its resend come seconds later (CI saw a batch land 0.2 s after
// the first answer and its resend 5.5 s after that: refused, retried after the switch, written
// twice). A batch still unknown starts a refresh of its partition (at most one in flight, at
// most one per every) and is refused, retriably, like any frozen write; the client resends it
// after its backoff, by when the answer is in.
type primaryProducers struct {
	ctx      context.Context // refreshes stop with it
	client   func() (*kgo.Client, error)
	every    time.Duration
	now      func() time.Time
	log      *slog.Logger
	describe func(ctx context.Context, cl *kgo.Client, topic string, partition int32) (map[int64]producerState, error)
	// describeAll is describe for every partition of the topics (warm).
	describeAll func(ctx context.Context, cl *kgo.Client, topics []string) (map[topicPartition]map[int64]producerState, error)

	mu    sync.Mutex
	parts map[topicPartition]*partitionProducers
}

type topicPartition struct {
	topic     string
	partition int32
}

// partitionProducers is what the primary's leader of a partition last said of its producers.
type partitionProducers struct {
	asked     time.Time
	busy      bool
	producers map[int64]producerState
}

// producerState is an idempotent producer's epoch and last sequence on a partition.
type producerState struct {
	epoch   int16
	lastSeq int32
}

// refreshEvery bounds how often a partition's producer state is asked for: a client's retry
// backoff is about as long (Java's retry.backoff.ms is 100 ms, franz-go's 250 ms at first).
const refreshEvery = 250 * time.Millisecond

func newPrimaryProducers(ctx context.Context, client func() (*kgo.Client, error), log *slog.Logger) *primaryProducers {
	return &primaryProducers{ctx: ctx, client: client, every: refreshEvery, now: time.Now, log: log,
		describe: describeProducers, describeAll: describeAll, parts: map[topicPartition]*partitionProducers{}}
}

// Written is enforcement.Freeze.Written.
func (p *primaryProducers) Written(_ context.Context, topic string, partition int32, b enforcement.ProducerBatch) bool {
	k := topicPartition{topic, partition}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.parts[k]
	if e == nil {
		e = &partitionProducers{}
		p.parts[k] = e
	}
	if s, ok := e.producers[b.ProducerID]; ok && s.epoch == b.Epoch && b.LastSeq <= s.lastSeq {
		p.log.Info("route freeze: forwarding a resent write the primary already holds; it answers from its idempotence cache",
			"topic", topic, "partition", partition, "producer_id", b.ProducerID, "epoch", b.Epoch,
			"first_sequence", b.FirstSeq, "last_sequence", b.LastSeq)
		return true
	}
	if !e.busy && p.now().Sub(e.asked) >= p.every {
		e.busy, e.asked = true, p.now()
		go p.refresh(k, e)
	}
	return false
}

// sweep asks the primary for the producers of every partition of topics, in the background,
// at once and then every p.every until p.ctx ends (the freeze is replaced or lifted): so that
// a resend of a write made before the freeze (whose client lost the answer, the instance that
// forwarded it killed) is known at its first try, however late that write landed. On a miss,
// Written asks again for that partition. The channel closes when it has stopped.
func (p *primaryProducers) sweep(topics []string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.every)
		defer t.Stop()
		failing := false
		for {
			err := p.sweepOnce(topics)
			switch {
			case err != nil && !failing && p.ctx.Err() == nil:
				p.log.Warn("route switch: asking the primary which writes it holds failed; resent writes are looked up one by one until it answers",
					"topics", len(topics), "err", err)
			case err == nil && failing:
				p.log.Info("route switch: the primary answers which writes it holds again", "topics", len(topics))
			}
			failing = err != nil
			select {
			case <-p.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}

// sweepOnce is one question of sweep.
func (p *primaryProducers) sweepOnce(topics []string) error {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	cl, err := p.client()
	if err != nil {
		return err
	}
	got, err := p.describeAll(ctx, cl, topics)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, producers := range got {
		e := p.parts[k]
		if e == nil {
			e = &partitionProducers{}
			p.parts[k] = e
		}
		e.keep(producers)
	}
	return nil
}

// refresh asks the primary for k's producers and keeps the answer.
func (p *primaryProducers) refresh(k topicPartition, e *partitionProducers) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	got, err := func() (map[int64]producerState, error) {
		cl, err := p.client()
		if err != nil {
			return nil, err
		}
		return p.describe(ctx, cl, k.topic, k.partition)
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	e.busy = false
	if err != nil {
		p.log.Warn("route switch: asking the primary which writes it holds failed; resent writes stay refused until it answers",
			"topic", k.topic, "partition", k.partition, "err", err)
		return
	}
	e.keep(got)
}

// keep adds an answer of the primary, keeping the newest state of each producer: an answer
// from before a later one must not shrink what is known.
func (e *partitionProducers) keep(got map[int64]producerState) {
	if e.producers == nil {
		e.producers = map[int64]producerState{}
	}
	for id, s := range got {
		if old, ok := e.producers[id]; !ok || s.epoch > old.epoch || (s.epoch == old.epoch && s.lastSeq > old.lastSeq) {
			e.producers[id] = s
		}
	}
}

// describeProducers asks the leader of topic's partition for its producers' states.
func describeProducers(ctx context.Context, cl *kgo.Client, topic string, partition int32) (map[int64]producerState, error) {
	k := topicPartition{topic, partition}
	all, errs, err := describe(ctx, cl, kadm.TopicsSet{topic: {partition: struct{}{}}})
	if err != nil {
		return nil, err
	}
	if err := errs[k]; err != nil {
		return nil, fmt.Errorf("describing the producers of %s/%d on the primary: %w", topic, partition, err)
	}
	got, ok := all[k]
	if !ok {
		return nil, fmt.Errorf("describing the producers of %s/%d on the primary: no answer for the partition", topic, partition)
	}
	return got, nil
}

// describeAll asks the primary for the producers of every partition of topics; a partition
// whose leader could not answer is left out (looked up again on a miss).
func describeAll(ctx context.Context, cl *kgo.Client, topics []string) (map[topicPartition]map[int64]producerState, error) {
	out, _, err := describe(ctx, cl, topicsSet(topics))
	return out, err
}

// topicsSet names every partition of topics (kadm asks the metadata for them).
func topicsSet(topics []string) kadm.TopicsSet {
	set := kadm.TopicsSet{}
	for _, t := range topics {
		set[t] = map[int32]struct{}{}
	}
	return set
}

// describe asks the primary for the producers of the partitions of set: their states, and
// the error of each partition whose leader could not answer.
func describe(ctx context.Context, cl *kgo.Client, set kadm.TopicsSet) (map[topicPartition]map[int64]producerState, map[topicPartition]error, error) {
	described, err := kadm.NewClient(cl).DescribeProducers(ctx, set)
	if err != nil {
		return nil, nil, fmt.Errorf("describing the producers of %v on the primary: %w", set.Topics(), err)
	}
	out, errs := map[topicPartition]map[int64]producerState{}, map[topicPartition]error{}
	for _, t := range described {
		for _, d := range t.Partitions {
			if d.Err != nil {
				errs[topicPartition{d.Topic, d.Partition}] = d.Err
				continue
			}
			states := make(map[int64]producerState, len(d.ActiveProducers))
			for _, ap := range d.ActiveProducers {
				states[ap.ProducerID] = producerState{epoch: ap.ProducerEpoch, lastSeq: ap.LastSequence}
			}
			out[topicPartition{d.Topic, d.Partition}] = states
		}
	}
	return out, errs, nil
}
