package fetcher

// Destination side: one sink per destination leader (and lane) sends acks=all
// Produce requests, each holding the next append of every partition that
// broker leads (the broker takes one batch per partition per request), and
// keeps up to maxRequestsInFlight of them in flight. Order is what makes
// this safe: kgo writes a broker's requests in the order they are issued,
// and the sink issues a request only once the previous one is on the wire,
// so a partition's batches reach the broker in sequence order; answers are
// handled in the same order. The broker's idempotence does the rest: a
// batch whose predecessor failed is refused (OUT_OF_ORDER_SEQUENCE_NUMBER),
// and a resent batch that had landed is answered with its original offset.
// Every answer's base offset is checked against the source offset
// (invariant 1).

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

type sendPart struct {
	p    *partition
	o    *op
	gen  int
	next int64 // destination log end after this append
}

// sink is the produce side of one destination broker over one lane: a
// goroutine (run) that issues pipelined Produce requests, each on its own
// goroutine until answered, holding the next appends of every partition the
// broker leads. inFlight and lastReply are under Copier.mu like the
// partitions; writes and wrote are set by the lane's write hook.
type sink struct {
	c    *Copier
	id   int32
	lane int // the lane (Copier.lanes) it produces over
	wake chan struct{}
	// Produce requests written to this broker's connection (OnBrokerWrite),
	// so the next request is enqueued only after the previous one is on the
	// wire: kgo writes a broker's requests in the order they are issued.
	writes    atomic.Int64
	wrote     chan struct{}
	inFlight  int           // requests in flight (under Copier.mu)
	lastReply chan struct{} // closed once the last issued request is handled
}

func (k *sink) run() {
	c := k.c
	defer c.wg.Done()
	for {
		if c.ctx.Err() != nil {
			return
		}
		sends, txnID, prev, handled, wait := k.collect()
		if len(sends) == 0 {
			if !c.sleep(k.wake, wait) {
				return
			}
			continue
		}
		before := k.writes.Load()
		issued := make(chan struct{})
		c.wg.Add(1)
		go k.produce(k.request(sends, txnID), sends, issued, prev, handled)
		// Issue the next request only once this one is written (or failed
		// before it could be).
	written:
		for k.writes.Load() == before {
			select {
			case <-k.wrote:
			case <-issued: // answered (or failed unwritten): nothing of ours is pending
				break written
			case <-c.ctx.Done():
				return
			}
		}
	}
}

// request is the Produce of the appends collect picked.
func (k *sink) request(sends []sendPart, txnID string) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(k.c.cfg.ProduceTimeout / time.Millisecond)
	if txnID != "" {
		// The broker verifies transactional batches against this id
		// (KIP-890), so a request carries one transaction's batches.
		req.TransactionID = &txnID
	}
	req.Topics = groupByTopic(sends, func(s sendPart) string { return s.p.tp.topic }, func(s sendPart) kmsg.ProduceRequestTopic {
		t := kmsg.NewProduceRequestTopic()
		t.Topic, t.TopicID = s.p.tp.topic, s.p.dstTopicID
		return t
	}, func(t *kmsg.ProduceRequestTopic, s sendPart) {
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition, pp.Records = s.p.tp.partition, s.o.raw
		t.Partitions = append(t.Partitions, pp)
	})
	return req
}

// produce sends one request and handles its answer after the answer of
// the request before it (prev), so a partition's answers are handled in
// sequence order.
func (k *sink) produce(req *kmsg.ProduceRequest, sends []sendPart, issued, prev, handled chan struct{}) {
	c := k.c
	defer c.wg.Done()
	kresp, err := c.lanes[k.lane].Broker(int(k.id)).Request(c.ctx, req)
	close(issued)
	if prev != nil {
		select {
		case <-prev:
		case <-c.ctx.Done():
		}
	}
	c.mu.Lock()
	k.inFlight--
	if err != nil {
		k.failedLocked(sends, err)
	} else {
		k.handleLocked(sends, kresp.(*kmsg.ProduceResponse))
	}
	c.mu.Unlock()
	close(handled)
	signal(k.wake)
}

// collect takes the next append of every ready partition this broker leads
// (at most one transactional id per request), marks them in flight, and
// prepares their bytes outside the lock. Control operations that reached a
// partition's head are started on the way.
func (k *sink) collect() (sends []sendPart, txnID string, prev, handled chan struct{}, wait time.Duration) {
	c := k.c
	if err := c.lease(); err != nil {
		c.log.Debug("holding writes", "err", err)
		return nil, "", nil, nil, 100 * time.Millisecond
	}
	c.mu.Lock()
	ps, wait := k.readyLocked(time.Now())
	if k.inFlight >= maxRequestsInFlight || len(ps) == 0 {
		c.mu.Unlock()
		return nil, "", nil, nil, wait
	}
	sortedParts(ps)
	sends, txnID, preps := k.takeLocked(ps)
	if len(sends) == 0 {
		c.mu.Unlock()
		return nil, "", nil, nil, wait
	}
	k.inFlight++
	prev, handled = k.lastReply, make(chan struct{})
	k.lastReply = handled
	c.mu.Unlock()

	// The ops are ours while in flight: their bytes are made outside the lock.
	for _, pr := range preps {
		pr.apply()
	}
	return sends, txnID, prev, handled, wait
}

// readyLocked lists the partitions this sink serves that have an op to
// send, and how long to wait at most before looking again.
func (k *sink) readyLocked(now time.Time) (ps []*partition, wait time.Duration) {
	c := k.c
	// Everything that makes an op sendable wakes the sink (kickLocked); the
	// timed look is for retries and pauses that run out of time, both
	// counted into wait. Looking every 250 ms cost an idle instance of 2,000
	// partitions 32,000 partition checks a second over its four lanes.
	wait = time.Second
	for _, p := range c.parts {
		if p.dstLeader != k.id || p.lane != k.lane {
			continue
		}
		if p.quiet {
			c.maybeDoneLocked(p) // pausing: stop at a quiet point, or when out of time
			wait = min(wait, max(p.quietBy.Sub(now), time.Millisecond))
		}
		if now.Before(p.retryAt) {
			wait = min(wait, p.retryAt.Sub(now))
			continue
		}
		c.kickControlLocked(p)
		if p.sendable() {
			ps = append(ps, p)
		}
	}
	return ps, wait
}

// takeLocked marks the next op of each partition in flight, up to
// maxRequestBytes, and takes the sequences of those sent for the first time.
func (k *sink) takeLocked(ps []*partition) (sends []sendPart, txnID string, preps []batchPrep) {
	var reqBytes int
	for _, p := range ps {
		if reqBytes >= maxRequestBytes {
			break // the rest go in the next request, in flight behind this one
		}
		o := p.queue[p.inFlight]
		switch {
		case o.control() || k.c.cfg.hooks.opHeld(p.tp, o.base):
			continue // a control op runs when everything before it is answered
		case o.kind == opRetentionFill && p.inFlight > 0:
			continue // one filler chunk at a time
		case o.txn != nil && (!o.txn.open || (txnID != "" && txnID != o.txn.id)):
			continue
		}
		if o.txn != nil {
			txnID = o.txn.id
		}
		p.inFlight++
		next, prep := p.sequence(o)
		if prep != nil {
			preps = append(preps, *prep)
		}
		if o.kind != opRetentionFill {
			reqBytes += len(o.raw)
		}
		sends = append(sends, sendPart{p: p, o: o, gen: p.gen, next: next})
	}
	return sends, txnID, preps
}

// batchPrep is what a send's bytes need before they go: the writer's id,
// epoch and sequence written into a source batch, or a filler chunk made.
type batchPrep struct {
	o      *op
	raw    []byte // source batch to rewrite; nil: make o's filler chunk
	pid    int64
	epoch  int16
	seq    int32
	chunkN int32
	keyed  bool
}

func (b batchPrep) apply() {
	if b.raw != nil {
		Rewrite(b.raw, b.pid, b.epoch, b.seq)
		return
	}
	b.o.raw = fillerBatch(b.chunkN, time.Now().UnixMilli(), b.pid, b.epoch, b.seq, b.keyed)
}

// failedLocked: the request got no answer; its sends go again once the
// partitions' leaders are looked up again.
func (k *sink) failedLocked(sends []sendPart, err error) {
	c := k.c
	for _, s := range sends {
		if !s.p.answered(s.gen) {
			c.maybeDoneLocked(s.p)
			continue
		}
		s.p.rewind()
		if c.ctx.Err() == nil && s.p.state == stateRunning {
			s.p.dstLeader = -1
			c.retryLocked(s.p, fmt.Errorf("produce to destination broker %d: %w", k.id, err))
		}
		c.maybeDoneLocked(s.p)
	}
	signal(c.adminWake)
}

// handleLocked hands each partition its answer.
func (k *sink) handleLocked(sends []sendPart, resp *kmsg.ProduceResponse) {
	c := k.c
	got := indexAnswers(resp.Topics, func(t *kmsg.ProduceResponseTopic) (string, [16]byte, []kmsg.ProduceResponseTopicPartition) {
		return t.Topic, t.TopicID, t.Partitions
	}, func(p *kmsg.ProduceResponseTopicPartition) int32 { return p.Partition })
	for _, s := range sends {
		p := s.p
		if !s.p.answered(s.gen) {
			c.maybeDoneLocked(p)
			continue
		}
		r, ok := got[answerKeyOf(resp.Version, p.tp, p.dstTopicID)]
		switch {
		case p.state == stateDone:
		case !ok:
			p.rewind()
			c.retryLocked(p, fmt.Errorf("produce to destination broker %d: no answer for %s/%d", k.id, p.tp.topic, p.tp.partition))
		default:
			c.handlePartitionProduceLocked(s, r)
		}
		c.maybeDoneLocked(p)
	}
}

func (c *Copier) handlePartitionProduceLocked(s sendPart, r *kmsg.ProduceResponseTopicPartition) {
	p, o := s.p, s.o
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		p.rewind() // whatever follows this batch cannot land before it
		c.produceRefusedLocked(p, o, err, r.ErrorMessage)
		return
	}
	if r.BaseOffset != o.base {
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: %s/%d: the batch of source offset %d was appended at destination offset %d; the destination partition was written by someone else, diverged, or got a transaction marker twice (a destination transaction coordinator that fails over between writing a transaction's markers and completing it makes its successor write them again); nothing more is appended, and the destination topic must be re-created to mirror it again",
			ErrOffsetMismatch, p.tp.topic, p.tp.partition, o.base, r.BaseOffset))
		return
	}
	if len(p.queue) == 0 || p.queue[0] != o {
		c.failLocked(p, datapath.Transient, fmt.Errorf("%s/%d: internal: answer for offset %d is not the queue head", p.tp.topic, p.tp.partition, o.base))
		return
	}
	c.appendedLocked(s)
	c.kickLocked(p)
	c.maybeFailBlockedLocked(p)
}

// produceRefusedLocked decides what a refused append means: fenced, a
// batch the destination will never take, a leader that moved, or a
// disagreement about sequences (a restart reads them again).
func (c *Copier) produceRefusedLocked(p *partition, o *op, err error, message *string) {
	msg := ""
	if message != nil {
		msg = ": " + *message
	}
	who := fmt.Sprintf("producer %d epoch %d", p.writer.ID, p.writer.Epoch)
	if o.txn != nil {
		who = fmt.Sprintf("producer %d epoch %d (transactional id %q)", o.txn.pid, o.seqEpoch, o.txn.id)
	}
	switch {
	case errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.ProducerFenced):
		c.fencedLocked(p, fmt.Errorf("%w: %s/%d: %s was replaced: %v", ErrFenced, p.tp.topic, p.tp.partition, who, err))
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: %s/%d: batch at source offset %d is %d bytes; raise the destination topic's max.message.bytes to at least the source's: %v%s",
			ErrBatchTooLarge, p.tp.topic, p.tp.partition, o.base, len(o.raw), err, msg))
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.LeaderNotAvailable),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.KafkaStorageError), errors.Is(err, kerr.FencedLeaderEpoch):
		p.dstLeader = -1
		signal(c.adminWake)
		c.retryLocked(p, fmt.Errorf("produce %s/%d: %w%s", p.tp.topic, p.tp.partition, err, msg))
	case errors.Is(err, kerr.OutOfOrderSequenceNumber), errors.Is(err, kerr.UnknownProducerID):
		// This is the partition's oldest unanswered batch (a later one's
		// refusal is not current after the rewind above): our sequence and
		// the partition's disagree. A restart reads the partition's
		// sequences again.
		c.failLocked(p, datapath.Transient, fmt.Errorf("%s/%d: destination refused sequence %d of %s at source offset %d: %w%s",
			p.tp.topic, p.tp.partition, o.seq, who, o.base, err, msg))
	case errors.Is(err, kerr.CorruptMessage) && o.kind == opAppend && !crcMatches(o.raw):
		// The destination checks every batch's CRC, and Rewrite patched the
		// source's CRC instead of computing one for whatever bytes arrived: these
		// bytes are not the ones the source's producer wrote. Sending them again
		// cannot help (Kafka calls the error retriable, for a client whose own
		// bytes were damaged on the way).
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w; nothing from that offset on is copied (kafka-dump-log.sh --deep-iteration on the source's segment shows the batch): %v%s",
			errCRCMismatch(p.tp.topic, p.tp.partition, o.base, len(o.raw)), err, msg))
	case kerr.IsRetriable(err):
		c.retryLocked(p, fmt.Errorf("produce %s/%d: %w%s", p.tp.topic, p.tp.partition, err, msg))
	default:
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: %s/%d: batch at source offset %d: %v%s",
			ErrDestinationRejected, p.tp.topic, p.tp.partition, o.base, err, msg))
	}
}

// appendedLocked moves the partition past an append that landed where it
// should: progress, the queue head, and for filler the next chunk or the
// trim of the destination log start.
func (c *Copier) appendedLocked(s sendPart) {
	p, o := s.p, s.o
	p.errStreak = 0
	p.progress.DestinationLogEnd = s.next
	p.progress.UpdatedAt = time.Now()
	if o.kind != opRetentionFill {
		c.popLocked(p)
		p.progress.RecordsCopied += int64(o.records)
		p.progress.BytesCopied += int64(len(o.raw))
		p.progress.LastCopiedTimestamp = time.UnixMilli(o.maxTimestamp)
		if p.trimTo > 0 && s.next >= p.trimTo {
			signal(c.adminWake)
		}
		return
	}
	p.progress.FillerRecords += int64(o.chunkN)
	o.base += int64(o.chunkN)
	o.raw = nil
	if o.base < o.fillTo {
		return // more chunks (the caller kicks the partition)
	}
	c.popLocked(p)
	p.trimTo = o.fillTrimTo
	signal(c.adminWake)
	c.emitLocked(p, datapath.Event{Kind: datapath.EventGapFilled, From: o.fillFrom, To: o.fillTo})
}

// popLocked removes the queue head (answered) and returns its bytes to the
// buffer budget.
func (c *Copier) popLocked(p *partition) {
	o := p.pop()
	c.reserved -= int64(o.bytes)
	c.wakeSrcLocked(p.srcLeader)
}

// kickLocked gets a partition's next operation going: the destination
// sink for appends, the control goroutine for a control operation.
func (c *Copier) kickLocked(p *partition) {
	c.kickControlLocked(p)
	if len(p.queue) > p.inFlight {
		c.wakeDstLocked(p)
	}
}
