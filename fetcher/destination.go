package fetcher

// Destination side: one worker per destination leader sends acks=all
// Produce requests, each holding the next append of every partition that
// broker leads (the broker takes one batch per partition per request), and
// keeps up to maxRequestsInFlight of them in flight. Order is what makes
// this safe: kgo writes a broker's requests in the order they are issued,
// and the worker issues a request only once the previous one is on the wire,
// so a partition's batches reach the broker in sequence order; answers are
// handled in the same order. The broker's idempotence does the rest: a
// batch whose predecessor failed is refused (OUT_OF_ORDER_SEQUENCE_NUMBER),
// and a resent batch that had landed is answered with its original offset.
// Every answer's base offset is checked against the source offset
// (invariant 1).

import (
	"errors"
	"fmt"
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

func (c *Copier) destinationLoop(w *worker) {
	defer c.wg.Done()
	for {
		if c.ctx.Err() != nil {
			return
		}
		sends, txnID, prev, handled, wait := c.collectSends(w)
		if len(sends) == 0 {
			if !c.sleep(w.wake, wait) {
				return
			}
			continue
		}
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = int32(c.cfg.ProduceTimeout / time.Millisecond)
		if txnID != "" {
			// The broker verifies transactional batches against this id
			// (KIP-890), so a request carries one transaction's batches.
			req.TransactionID = &txnID
		}
		byTopic := map[string]int{}
		for _, s := range sends {
			i, ok := byTopic[s.p.tp.topic]
			if !ok {
				t := kmsg.NewProduceRequestTopic()
				t.Topic = s.p.tp.topic
				t.TopicID = s.p.dstTopicID
				req.Topics = append(req.Topics, t)
				i = len(req.Topics) - 1
				byTopic[s.p.tp.topic] = i
			}
			pp := kmsg.NewProduceRequestTopicPartition()
			pp.Partition = s.p.tp.partition
			pp.Records = s.o.raw
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, pp)
		}
		before := w.writes.Load()
		issued := make(chan struct{})
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			kresp, err := c.lanes[w.lane].Broker(int(w.id)).Request(c.ctx, req)
			close(issued)
			if prev != nil {
				select {
				case <-prev:
				case <-c.ctx.Done():
				}
			}
			c.mu.Lock()
			w.inFlight--
			if err != nil {
				c.produceFailedLocked(w.id, sends, err)
			} else {
				c.handleProduceLocked(w.id, sends, kresp.(*kmsg.ProduceResponse))
			}
			c.mu.Unlock()
			close(handled)
			signal(w.wake)
		}()
		// Issue the next request only once this one is written (or failed
		// before it could be).
	written:
		for w.writes.Load() == before {
			select {
			case <-w.wrote:
			case <-issued: // answered (or failed unwritten): nothing of ours is pending
				break written
			case <-c.ctx.Done():
				return
			}
		}
	}
}

// collectSends takes the next append of every ready partition this leader
// leads (at most one transactional id per request), marks them in flight,
// and prepares their bytes outside the lock. Control operations that reached
// a partition's head are started on the way.
func (c *Copier) collectSends(w *worker) (sends []sendPart, txnID string, prev, handled chan struct{}, wait time.Duration) {
	if err := c.lease(); err != nil {
		c.log.Debug("holding writes", "err", err)
		return nil, "", nil, nil, 100 * time.Millisecond
	}
	c.mu.Lock()
	now := time.Now()
	wait = 250 * time.Millisecond
	var ps []*partition
	for _, p := range c.parts {
		if p.dstLeader != w.id || p.lane != w.lane {
			continue
		}
		if p.quiet {
			c.maybeDoneLocked(p) // pausing: stop at a quiet point, or when out of time
		}
		if now.Before(p.retryAt) {
			wait = min(wait, p.retryAt.Sub(now))
			continue
		}
		c.kickControlLocked(p)
		if p.state == stateRunning && p.stale == 0 && p.inFlight < min(len(p.queue), maxInFlightPerPartition) {
			ps = append(ps, p)
		}
	}
	if w.inFlight >= maxRequestsInFlight || len(ps) == 0 {
		c.mu.Unlock()
		return nil, "", nil, nil, wait
	}
	sortedParts(ps)
	type rewrite struct {
		raw   []byte
		pid   int64
		epoch int16
		seq   int32
	}
	var rewrites []rewrite
	var fills []*sendPart
	var reqBytes int
	for _, p := range ps {
		if reqBytes >= maxRequestBytes {
			break // the rest go in the next request, in flight behind this one
		}
		o := p.queue[p.inFlight]
		switch {
		case o.control() || c.heldLocked(p, o):
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
		if o.kind == opRetentionFill {
			if o.raw == nil { // next filler chunk: sequence taken now
				o.chunkN = int32(min(o.fillTo-o.base, int64(o.fillerMax)))
				o.seq, p.nextSeq = p.nextSeq, nextSequence(p.nextSeq, o.chunkN-1)
				o.seqSet = true
			}
			sends = append(sends, sendPart{p: p, o: o, gen: p.gen, next: o.base + int64(o.chunkN)})
			if o.raw == nil {
				fills = append(fills, &sends[len(sends)-1])
			}
			continue
		}
		if !o.seqSet {
			pid, epoch := p.writer.ID, p.writer.Epoch
			if x := o.txn; x != nil {
				pid, epoch = x.pid, x.epoch
				o.seq, x.nextSeq = x.nextSeq, nextSequence(x.nextSeq, int32(o.n-1))
			} else {
				o.seq, p.nextSeq = p.nextSeq, nextSequence(p.nextSeq, int32(o.n-1))
			}
			o.seqSet, o.seqEpoch = true, epoch
			rewrites = append(rewrites, rewrite{o.raw, pid, epoch, o.seq})
		}
		reqBytes += len(o.raw)
		sends = append(sends, sendPart{p: p, o: o, gen: p.gen, next: o.base + o.n})
	}
	if len(sends) == 0 {
		c.mu.Unlock()
		return nil, "", nil, nil, wait
	}
	type fillID struct {
		pid   int64
		epoch int16
		keyed bool
	}
	ids := make([]fillID, len(fills))
	for i, f := range fills {
		ids[i] = fillID{f.p.writer.ID, f.p.writer.Epoch, f.p.keyedFiller}
	}
	w.inFlight++
	prev, handled = w.lastReply, make(chan struct{})
	w.lastReply = handled
	c.mu.Unlock()

	// The ops are ours while in flight: rewrite outside the lock.
	for _, r := range rewrites {
		Rewrite(r.raw, r.pid, r.epoch, r.seq)
	}
	for i, f := range fills {
		f.o.raw = fillerBatch(f.o.chunkN, time.Now().UnixMilli(), ids[i].pid, ids[i].epoch, f.o.seq, ids[i].keyed)
	}
	return sends, txnID, prev, handled, wait
}

// rewindLocked gives up a partition's in-flight sends: they are sent again,
// in order, with the same sequences, once their answers are all in.
func (c *Copier) rewindLocked(p *partition) {
	p.stale += p.inFlight
	p.inFlight = 0
	p.gen++
}

// answeredLocked accounts for one answer to a send; it reports whether the
// send is still current (not given up by a rewind).
func (c *Copier) answeredLocked(s sendPart) bool {
	if s.gen != s.p.gen {
		s.p.stale--
		return false
	}
	s.p.inFlight--
	return true
}

func (c *Copier) produceFailedLocked(leader int32, sends []sendPart, err error) {
	for _, s := range sends {
		if !c.answeredLocked(s) {
			c.maybeDoneLocked(s.p)
			continue
		}
		c.rewindLocked(s.p)
		if c.ctx.Err() == nil && s.p.state == stateRunning {
			s.p.dstLeader = -1
			c.retryLocked(s.p, fmt.Errorf("produce to destination broker %d: %w", leader, err))
		}
		c.maybeDoneLocked(s.p)
	}
	signal(c.adminWake)
}

func (c *Copier) handleProduceLocked(leader int32, sends []sendPart, resp *kmsg.ProduceResponse) {
	type key struct {
		topic     string
		id        [16]byte
		partition int32
	}
	got := map[key]*kmsg.ProduceResponseTopicPartition{}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			got[key{t.Topic, t.TopicID, t.Partitions[j].Partition}] = &t.Partitions[j]
		}
	}
	for _, s := range sends {
		p := s.p
		if !c.answeredLocked(s) {
			c.maybeDoneLocked(p)
			continue
		}
		var k key
		if resp.Version >= 13 {
			k = key{"", p.dstTopicID, p.tp.partition}
		} else {
			k = key{p.tp.topic, [16]byte{}, p.tp.partition}
		}
		r, ok := got[k]
		switch {
		case p.state == stateDone:
		case !ok:
			c.rewindLocked(p)
			c.retryLocked(p, fmt.Errorf("produce to destination broker %d: no answer for %s/%d", leader, p.tp.topic, p.tp.partition))
		default:
			c.handlePartitionProduceLocked(leader, s, r)
		}
		c.maybeDoneLocked(p)
	}
}

func (c *Copier) handlePartitionProduceLocked(leader int32, s sendPart, r *kmsg.ProduceResponseTopicPartition) {
	p, o := s.p, s.o
	err := kerr.ErrorForCode(r.ErrorCode)
	msg := ""
	if r.ErrorMessage != nil {
		msg = ": " + *r.ErrorMessage
	}
	who := fmt.Sprintf("producer %d epoch %d", p.writer.ID, p.writer.Epoch)
	if o.txn != nil {
		who = fmt.Sprintf("producer %d epoch %d (transactional id %q)", o.txn.pid, o.seqEpoch, o.txn.id)
	}
	if err != nil {
		c.rewindLocked(p) // whatever follows this batch cannot land before it
	}
	switch {
	case err == nil:
	case errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.ProducerFenced):
		c.fencedLocked(p, fmt.Errorf("%w: %s/%d: %s was replaced: %v", ErrFenced, p.tp.topic, p.tp.partition, who, err))
		return
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: %s/%d: batch at source offset %d is %d bytes; raise the destination topic's max.message.bytes to at least the source's: %v%s",
			ErrBatchTooLarge, p.tp.topic, p.tp.partition, o.base, len(o.raw), err, msg))
		return
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.LeaderNotAvailable),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.KafkaStorageError), errors.Is(err, kerr.FencedLeaderEpoch):
		p.dstLeader = -1
		signal(c.adminWake)
		c.retryLocked(p, fmt.Errorf("produce %s/%d: %w%s", p.tp.topic, p.tp.partition, err, msg))
		return
	case errors.Is(err, kerr.OutOfOrderSequenceNumber), errors.Is(err, kerr.UnknownProducerID):
		// This is the partition's oldest unanswered batch (a later one's
		// refusal is not current after the rewind above): our sequence and
		// the partition's disagree. A restart reads the partition's
		// sequences again.
		c.failLocked(p, datapath.Transient, fmt.Errorf("%s/%d: destination refused sequence %d of %s at source offset %d: %w%s",
			p.tp.topic, p.tp.partition, o.seq, who, o.base, err, msg))
		return
	case kerr.IsRetriable(err):
		c.retryLocked(p, fmt.Errorf("produce %s/%d: %w%s", p.tp.topic, p.tp.partition, err, msg))
		return
	default:
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: %s/%d: batch at source offset %d: %v%s",
			ErrDestinationRejected, p.tp.topic, p.tp.partition, o.base, err, msg))
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
	p.errStreak = 0
	now := time.Now()
	p.progress.DestinationLogEnd = s.next
	p.progress.UpdatedAt = now
	if o.kind == opRetentionFill {
		p.progress.FillerRecords += int64(o.chunkN)
		o.base += int64(o.chunkN)
		o.raw = nil
		if o.base < o.fillTo {
			c.kickLocked(p)
			return // more chunks
		}
		c.popLocked(p)
		p.trimTo = o.fillTrimTo
		signal(c.adminWake)
		c.emitLocked(p, datapath.Event{Kind: datapath.EventGapFilled, From: o.fillFrom, To: o.fillTo})
	} else {
		c.popLocked(p)
		p.progress.RecordsCopied += int64(o.records)
		p.progress.BytesCopied += int64(len(o.raw))
		p.progress.LastCopiedTimestamp = time.UnixMilli(o.maxTimestamp)
		if p.trimTo > 0 && s.next >= p.trimTo {
			signal(c.adminWake)
		}
	}
	c.kickLocked(p)
	c.maybeFailBlockedLocked(p)
}

// popLocked removes the queue head (answered) and returns its bytes to the
// buffer budget.
func (c *Copier) popLocked(p *partition) {
	o := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	p.buffered -= int64(o.bytes)
	c.reserved -= int64(o.bytes)
	c.wakeSrcLocked(p.srcLeader)
}

// kickLocked gets a partition's next operation going: the destination
// worker for appends, the control goroutine for a control operation.
func (c *Copier) kickLocked(p *partition) {
	c.kickControlLocked(p)
	if len(p.queue) > p.inFlight {
		c.wakeDstLocked(p)
	}
}
