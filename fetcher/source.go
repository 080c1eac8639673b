package fetcher

// Source side: one worker per source leader sends sessionless
// READ_UNCOMMITTED Fetch requests (up to the high watermark) for all the
// partitions it leads, and queues the raw batches it gets back. Topic name
// and topic id are both set: Fetch v13+ names topics by id, and an
// UNKNOWN_TOPIC_ID then tells a re-created source topic apart.

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type fetchPart struct {
	p           *partition
	offset      int64
	leaderEpoch int32 // read under the lock: the admin goroutine updates it
}

func (c *Copier) sourceLoop(w *worker) {
	defer c.wg.Done()
	for {
		fetch, reservation := c.collectFetch(w.id)
		if len(fetch) == 0 {
			if !c.sleep(w.wake, 250*time.Millisecond) {
				return
			}
			continue
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = int32(c.cfg.FetchMaxWait / time.Millisecond)
		req.MinBytes = 1
		req.MaxBytes = int32(reservation)
		req.IsolationLevel = 0 // READ_UNCOMMITTED: up to the high watermark
		req.SessionID = 0
		req.SessionEpoch = -1 // no fetch session: every request is a full fetch
		byTopic := map[string]int{}
		for _, f := range fetch {
			i, ok := byTopic[f.p.tp.topic]
			if !ok {
				t := kmsg.NewFetchRequestTopic()
				t.Topic = f.p.tp.topic
				t.TopicID = f.p.srcTopicID
				req.Topics = append(req.Topics, t)
				i = len(req.Topics) - 1
				byTopic[f.p.tp.topic] = i
			}
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition = f.p.tp.partition
			fp.CurrentLeaderEpoch = f.leaderEpoch
			fp.FetchOffset = f.offset
			fp.PartitionMaxBytes = c.cfg.FetchMaxBytes
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, fp)
		}
		kresp, err := c.cfg.Source.Broker(int(w.id)).Request(c.ctx, req)
		if c.ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.reserved -= reservation
		if err != nil {
			for _, f := range fetch {
				if f.p.state == stateRunning && f.p.srcLeader == w.id {
					f.p.srcLeader = -1
					c.retryLocked(f.p, fmt.Errorf("fetch from source broker %d: %w", w.id, err))
				}
			}
			signal(c.adminWake)
		} else {
			c.handleFetchLocked(w.id, fetch, kresp.(*kmsg.FetchResponse))
		}
		c.mu.Unlock()
	}
}

// collectFetch picks the partitions this leader should fetch now and
// reserves buffer budget for the response.
func (c *Copier) collectFetch(leader int32) ([]fetchPart, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var ps []*partition
	for _, p := range c.parts {
		if p.state == stateRunning && p.srcLeader == leader && !p.needOffsets && p.blocked == nil && !now.Before(p.retryAt) &&
			p.buffered < int64(c.cfg.FetchMaxBytes) && !c.holdFetch[p.tp] {
			ps = append(ps, p)
		}
	}
	sortedParts(ps)
	var out []fetchPart
	var want int64
	for _, p := range ps {
		next := min(want+int64(c.cfg.FetchMaxBytes), int64(c.cfg.FetchResponseMaxBytes))
		if c.reserved+next > c.cfg.MaxBufferedBytes {
			break
		}
		want = next
		out = append(out, fetchPart{p, p.fetchOffset, p.srcLeaderEpoch})
	}
	c.reserved += want
	return out, want
}

func (c *Copier) handleFetchLocked(leader int32, fetch []fetchPart, resp *kmsg.FetchResponse) {
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		for _, f := range fetch {
			f.p.srcLeader = -1
			c.retryLocked(f.p, fmt.Errorf("fetch from source broker %d: %w", leader, err))
		}
		signal(c.adminWake)
		return
	}
	type key struct {
		topic     string
		id        [16]byte
		partition int32
	}
	got := map[key]*kmsg.FetchResponseTopicPartition{}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			got[key{t.Topic, t.TopicID, t.Partitions[j].Partition}] = &t.Partitions[j]
		}
	}
	for _, f := range fetch {
		p := f.p
		var k key
		if resp.Version >= 13 {
			k = key{"", p.srcTopicID, p.tp.partition}
		} else {
			k = key{p.tp.topic, [16]byte{}, p.tp.partition}
		}
		r, ok := got[k]
		if !ok || p.state != stateRunning || p.fetchOffset != f.offset || c.parts[p.tp] != p {
			continue // not answered, or stale: the partition moved on
		}
		c.handlePartitionFetchLocked(p, r)
	}
}

func (c *Copier) handlePartitionFetchLocked(p *partition, r *kmsg.FetchResponseTopicPartition) {
	err := kerr.ErrorForCode(r.ErrorCode)
	switch {
	case err == nil:
	case errors.Is(err, kerr.OffsetOutOfRange):
		// Below the log start (retention) or above the high watermark
		// (source truncation): the admin loop lists the source offsets.
		p.needOffsets = true
		signal(c.adminWake)
		return
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.FencedLeaderEpoch),
		errors.Is(err, kerr.UnknownLeaderEpoch), errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.LeaderNotAvailable),
		errors.Is(err, kerr.KafkaStorageError), errors.Is(err, kerr.OffsetNotAvailable),
		errors.Is(err, kerr.InconsistentTopicID), errors.Is(err, kerr.ReplicaNotAvailable):
		p.srcLeader = -1
		c.retryLocked(p, fmt.Errorf("fetch %s/%d: %w", p.tp.topic, p.tp.partition, err))
		signal(c.adminWake)
		return
	default:
		c.retryLocked(p, fmt.Errorf("fetch %s/%d: %w", p.tp.topic, p.tp.partition, err))
		return
	}
	p.errStreak = 0
	p.progress.SourceHighWatermark = r.HighWatermark
	if r.LogStartOffset >= 0 {
		p.progress.SourceLogStart = r.LogStartOffset
	}
	p.progress.UpdatedAt = time.Now()

	it := NewBatchIterator(r.RecordBatches)
	var b Batch
	n := 0
batches:
	for it.Next(&b) {
		n++
		if b.NextOffset() <= p.fetchOffset {
			continue // a batch before the fetch offset (already queued or written)
		}
		if p.gap != nil {
			if b.BaseOffset < p.gap.from {
				c.failLocked(p, EventNonRetriable, fmt.Errorf("%w: %s/%d: source batch %d..%d overlaps destination offsets already written up to %d",
					ErrDiverged, p.tp.topic, p.tp.partition, b.BaseOffset, b.LastOffset(), p.gap.from))
				return
			}
			c.queueFillLocked(p, b.BaseOffset, p.gap.logStart)
			p.fetchOffset = b.BaseOffset
		}
		switch {
		case b.BaseOffset < p.fetchOffset:
			c.failLocked(p, EventNonRetriable, fmt.Errorf("%w: %s/%d: the destination log ends at %d, inside source batch %d..%d (batches are copied whole)",
				ErrDiverged, p.tp.topic, p.tp.partition, p.fetchOffset, b.BaseOffset, b.LastOffset()))
			return
		case b.BaseOffset > p.fetchOffset:
			c.blockLocked(p, fmt.Errorf("%s/%d: %w (offset %d: source offsets %d..%d are missing from the log)",
				p.tp.topic, p.tp.partition, ErrUnsupportedBatch, p.fetchOffset, p.fetchOffset, b.BaseOffset-1))
			break batches
		}
		if err := b.CheckCopyable(); err != nil {
			c.blockLocked(p, fmt.Errorf("%s/%d: %w", p.tp.topic, p.tp.partition, err))
			break batches
		}
		p.queue = append(p.queue, &item{
			raw:             b.Raw,
			base:            b.BaseOffset,
			lastOffsetDelta: b.LastOffsetDelta,
			records:         b.NumRecords,
			maxTimestamp:    b.MaxTimestamp,
		})
		p.buffered += int64(len(b.Raw))
		c.reserved += int64(len(b.Raw))
		p.fetchOffset = b.NextOffset()
	}
	if err := it.Err(); err != nil && p.blocked == nil {
		c.failLocked(p, EventNonRetriable, fmt.Errorf("%s/%d at offset %d: %w", p.tp.topic, p.tp.partition, p.fetchOffset, err))
		return
	}
	p.bigFirst = n == 0 && it.Remaining() > 0
	c.log.Debug("fetched", "topic", p.tp.topic, "partition", p.tp.partition, "batches", n, "partial_bytes", it.Remaining(),
		"next_offset", p.fetchOffset, "high_watermark", r.HighWatermark)
	if n == 0 && p.gap != nil && r.HighWatermark <= p.fetchOffset && r.HighWatermark >= 0 {
		// The source is empty from its log start on: fill up to it.
		c.queueFillLocked(p, p.gap.logStart, p.gap.logStart)
	}
	if len(p.queue) > 0 {
		c.wakeDstLocked(p.dstLeader)
	}
}

// queueFillLocked ends the pending gap: it queues filler offsets from the
// gap's start up to fillTo (the first source batch at or below the source log
// start), and arranges DeleteRecords(trimTo) on the destination once the
// destination log end has reached trimTo (the source log start).
func (c *Copier) queueFillLocked(p *partition, fillTo, trimTo int64) {
	from := p.gap.from
	p.gap = nil
	if fillTo > from {
		p.queue = append(p.queue, &item{fill: true, base: from, fillFrom: from, fillTo: fillTo, fillTrimTo: trimTo, fillerMaxCount: p.fillerMax})
		c.log.Info("filling retention gap", "topic", p.tp.topic, "partition", p.tp.partition, "from", from, "to", fillTo, "source_log_start", trimTo)
		return
	}
	p.trimTo = trimTo
}
