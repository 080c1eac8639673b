package fetcher

// Destination side: one worker per destination leader sends acks=all
// Produce requests holding the head batch of every partition it leads (one
// batch per partition per request), and checks the base offset the broker
// assigned against the source offset (invariant 1). A batch keeps its
// sequence across resends, so a retried append that already landed is
// deduplicated by the broker, which answers with the original offset.

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type sendPart struct {
	p    *partition
	it   *item
	next int64 // destination log end after this append
}

func (c *Copier) destinationLoop(w *worker) {
	defer c.wg.Done()
	for {
		sends := c.collectSends(w.id)
		if len(sends) == 0 {
			if !c.sleep(w.wake, 250*time.Millisecond) {
				return
			}
			continue
		}
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = int32(c.cfg.ProduceTimeout / time.Millisecond)
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
			pp.Records = s.it.raw
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, pp)
		}
		kresp, err := c.cfg.Destination.Broker(int(w.id)).Request(c.ctx, req)
		c.mu.Lock()
		if err != nil {
			for _, s := range sends {
				s.p.inFlight = false
				if c.ctx.Err() == nil && s.p.state == stateRunning {
					s.p.dstLeader = -1
					c.retryLocked(s.p, fmt.Errorf("produce to destination broker %d: %w", w.id, err))
				}
				c.maybeDoneLocked(s.p)
			}
			signal(c.adminWake)
		} else {
			c.handleProduceLocked(w.id, sends, kresp.(*kmsg.ProduceResponse))
		}
		c.mu.Unlock()
		if c.ctx.Err() != nil {
			return
		}
	}
}

// collectSends takes the head item of every ready partition this leader
// leads, marks them in flight, and prepares their bytes outside the lock.
func (c *Copier) collectSends(leader int32) []sendPart {
	c.mu.Lock()
	now := time.Now()
	var ps []*partition
	for _, p := range c.parts {
		if p.state == stateRunning && p.dstLeader == leader && !p.inFlight && len(p.queue) > 0 && !now.Before(p.retryAt) && !c.holdProduce[p.tp] {
			ps = append(ps, p)
		}
	}
	sortedParts(ps)
	sends := make([]sendPart, 0, len(ps))
	type rewrite struct {
		raw   []byte
		pid   int64
		epoch int16
		seq   int32
	}
	var rewrites []rewrite
	var fills []*sendPart
	for _, p := range ps {
		it := p.queue[0]
		p.inFlight = true
		if it.fill {
			if it.raw == nil { // next filler chunk: sequence taken now
				it.chunkN = int32(min(it.fillTo-it.base, int64(it.fillerMaxCount)))
				it.seq, p.nextSeq = p.nextSeq, nextSequence(p.nextSeq, it.chunkN-1)
				it.seqSet = true
			}
			sends = append(sends, sendPart{p: p, it: it, next: it.base + int64(it.chunkN)})
			if it.raw == nil {
				fills = append(fills, &sends[len(sends)-1])
			}
			continue
		}
		if !it.seqSet {
			it.seq, p.nextSeq = p.nextSeq, nextSequence(p.nextSeq, it.lastOffsetDelta)
			it.seqSet = true
			rewrites = append(rewrites, rewrite{it.raw, p.producerID, p.producerEpoch, it.seq})
		}
		sends = append(sends, sendPart{p: p, it: it, next: it.base + int64(it.lastOffsetDelta) + 1})
	}
	ids := make([][2]int64, len(fills))
	for i, f := range fills {
		ids[i] = [2]int64{f.p.producerID, int64(f.p.producerEpoch)}
	}
	c.mu.Unlock()

	// The items are ours while in flight: rewrite outside the lock.
	for _, r := range rewrites {
		Rewrite(r.raw, r.pid, r.epoch, r.seq)
	}
	for i, f := range fills {
		f.it.raw = fillerBatch(f.it.chunkN, time.Now().UnixMilli(), ids[i][0], int16(ids[i][1]), f.it.seq)
	}
	return sends
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
		p.inFlight = false
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
			c.retryLocked(p, fmt.Errorf("produce to destination broker %d: no answer for %s/%d", leader, p.tp.topic, p.tp.partition))
		default:
			c.handlePartitionProduceLocked(leader, s, r)
		}
		c.maybeDoneLocked(p)
	}
}

func (c *Copier) handlePartitionProduceLocked(leader int32, s sendPart, r *kmsg.ProduceResponseTopicPartition) {
	p, it := s.p, s.it
	err := kerr.ErrorForCode(r.ErrorCode)
	msg := ""
	if r.ErrorMessage != nil {
		msg = ": " + *r.ErrorMessage
	}
	switch {
	case err == nil:
	case errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.ProducerFenced):
		c.failLocked(p, EventFenced, fmt.Errorf("%w: %s/%d: producer %d epoch %d was replaced (transactional id %q): %v",
			ErrFenced, p.tp.topic, p.tp.partition, p.producerID, p.producerEpoch, p.task.TransactionalID, err))
		return
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		c.failLocked(p, EventNonRetriable, fmt.Errorf("%w: %s/%d: batch at source offset %d is %d bytes; raise the destination topic's max.message.bytes to at least the source's: %v%s",
			ErrBatchTooLarge, p.tp.topic, p.tp.partition, it.base, len(it.raw), err, msg))
		return
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.LeaderNotAvailable),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.KafkaStorageError), errors.Is(err, kerr.FencedLeaderEpoch):
		p.dstLeader = -1
		signal(c.adminWake)
		c.retryLocked(p, fmt.Errorf("produce %s/%d: %w%s", p.tp.topic, p.tp.partition, err, msg))
		return
	case errors.Is(err, kerr.OutOfOrderSequenceNumber), errors.Is(err, kerr.UnknownProducerID):
		// Our sequence and the partition's disagree: a restart takes a new
		// epoch (sequence 0) and resumes from the destination log end.
		c.failLocked(p, EventRetriable, fmt.Errorf("%s/%d: destination refused sequence %d of producer %d epoch %d at source offset %d: %w%s",
			p.tp.topic, p.tp.partition, it.seq, p.producerID, p.producerEpoch, it.base, err, msg))
		return
	case kerr.IsRetriable(err):
		c.retryLocked(p, fmt.Errorf("produce %s/%d: %w%s", p.tp.topic, p.tp.partition, err, msg))
		return
	default:
		c.failLocked(p, EventNonRetriable, fmt.Errorf("%w: %s/%d: batch at source offset %d: %v%s",
			ErrDestinationRejected, p.tp.topic, p.tp.partition, it.base, err, msg))
		return
	}
	if r.BaseOffset != it.base {
		c.failLocked(p, EventNonRetriable, fmt.Errorf("%w: %s/%d: the batch of source offset %d was appended at destination offset %d; the destination partition was written by someone else (or diverged); nothing more is appended",
			ErrOffsetMismatch, p.tp.topic, p.tp.partition, it.base, r.BaseOffset))
		return
	}
	p.errStreak = 0
	now := time.Now()
	p.progress.DestinationLogEnd = s.next
	p.progress.UpdatedAt = now
	if it.fill {
		p.progress.FillerRecords += int64(it.chunkN)
		it.base += int64(it.chunkN)
		it.raw = nil
		if it.base < it.fillTo {
			return // more chunks
		}
		p.queue = p.queue[1:]
		p.trimTo = it.fillTrimTo
		signal(c.adminWake)
		c.emitLocked(p, Event{Kind: EventGapFilled, From: it.fillFrom, To: it.fillTo})
	} else {
		p.queue = p.queue[1:]
		p.buffered -= int64(len(it.raw))
		c.reserved -= int64(len(it.raw))
		p.progress.RecordsCopied += int64(it.records)
		p.progress.BytesCopied += int64(len(it.raw))
		p.progress.LastCopiedTimestamp = time.UnixMilli(it.maxTimestamp)
		if p.trimTo > 0 && s.next >= p.trimTo {
			signal(c.adminWake)
		}
		c.wakeSrcLocked(p.srcLeader)
	}
	if len(p.queue) > 0 {
		signal(c.dstWorkers[leader].wake)
	}
	c.maybeFailBlockedLocked(p)
}
