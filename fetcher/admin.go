package fetcher

// The admin goroutine does the Copier's slow, rare requests: metadata after
// leadership errors (and the source topic id check), source ListOffsets after
// OFFSET_OUT_OF_RANGE (the retention rule), and DeleteRecords on the
// destination once a filled gap has been passed. The helpers below are also
// used by Start and Align.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

func (c *Copier) adminLoop() {
	defer c.wg.Done()
	for {
		if !c.sleep(c.adminWake, time.Second) {
			return
		}
		c.adminPass()
	}
}

// adminTodo is what the admin goroutine does for one partition in a pass.
type adminTodo struct {
	p                      *partition
	srcMeta, dstMeta, offs bool
	trimTo                 int64
}

func (c *Copier) adminPass() {
	work := c.adminWork()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	for _, t := range work {
		if t.srcMeta {
			c.refreshSource(ctx, t.p)
		}
		if t.dstMeta {
			c.refreshDestination(ctx, t.p)
		}
		if t.offs {
			c.relistOffsets(ctx, t.p)
		}
		if t.trimTo > 0 {
			c.trimDestination(ctx, t.p, t.trimTo)
		}
	}
}

// adminWork lists what the running partitions need.
func (c *Copier) adminWork() []adminTodo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var work []adminTodo
	for _, p := range c.parts {
		if p.state != stateRunning {
			continue
		}
		t := adminTodo{p: p, srcMeta: p.srcLeader < 0, dstMeta: p.dstLeader < 0, offs: p.needOffsets}
		if p.trimTo > 0 && p.progress.DestinationLogEnd >= p.trimTo {
			t.trimTo = p.trimTo
		}
		if t.srcMeta || t.dstMeta || t.offs || t.trimTo > 0 {
			work = append(work, t)
		}
	}
	return work
}

// refreshSource looks the partition's source leader up (and checks the
// source topic is still the one copied).
func (c *Copier) refreshSource(ctx context.Context, p *partition) {
	m, err := partitionMetadata(ctx, c.cfg.Source, p.tp.topic, p.tp.partition)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && m.topicID != p.srcTopicID:
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: %s now has id %s on the source, the mirror copied %s",
			ErrSourceTopicChanged, p.tp.topic, kadm.TopicID(m.topicID), kadm.TopicID(p.srcTopicID)))
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: %s/%d is gone from the source: %v", ErrSourceTopicChanged, p.tp.topic, p.tp.partition, err))
	case err != nil:
		c.retryLocked(p, fmt.Errorf("source metadata: %w", err))
	case m.leader >= 0:
		p.srcLeader, p.srcLeaderEpoch = m.leader, m.leaderEpoch
		c.wakeSrcLocked(m.leader)
	}
}

// refreshDestination looks the partition's destination leader up (and
// checks the destination topic is still the one written).
func (c *Copier) refreshDestination(ctx context.Context, p *partition) {
	m, err := partitionMetadata(ctx, c.cfg.Destination, p.tp.topic, p.tp.partition)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && m.topicID != p.dstTopicID:
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: destination topic %s was deleted or re-created under the mirror (id %s, was %s)",
			ErrDiverged, p.tp.topic, kadm.TopicID(m.topicID), kadm.TopicID(p.dstTopicID)))
	case err != nil:
		c.retryLocked(p, fmt.Errorf("destination metadata: %w", err))
	case m.leader >= 0:
		p.dstLeader = m.leader
		c.wakeDstLocked(p)
	}
}

// relistOffsets reads the source offsets after OFFSET_OUT_OF_RANGE: below
// the log start is a retention gap to fill, above the high watermark a
// leader catching up (or a truncated source).
func (c *Copier) relistOffsets(ctx context.Context, p *partition) {
	offs, err := listOffsets(ctx, c.cfg.Source, nil, p.tp.topic, p.tp.partition)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.retryLocked(p, fmt.Errorf("source offsets: %w", err))
	case p.fetchOffset < offs.srcStart:
		// Retention (or DeleteRecords) on the source passed offsets
		// not copied yet: they are gone. Fill them, loudly.
		p.progress.SourceLogStart, p.progress.SourceHighWatermark = offs.srcStart, offs.srcHW
		if p.gap == nil {
			p.gap = &pendingGap{from: p.fetchOffset}
		} // else the log start moved again before the gap was filled
		p.gap.logStart = offs.srcStart
		p.fetchOffset = offs.srcStart
		p.needOffsets = false
		c.log.Warn("source log start passed the copy", "topic", p.tp.topic, "partition", p.tp.partition,
			"next_offset", p.gap.from, "source_log_start", offs.srcStart)
		c.wakeSrcLocked(p.srcLeader)
	case p.fetchOffset > offs.srcHW:
		// Source high watermark below what we copied: a new leader
		// may still be catching up, or the source was truncated.
		p.needOffsets = false
		c.retryLocked(p, fmt.Errorf("%w: next offset %d is above the source high watermark %d of %s/%d", ErrDiverged, p.fetchOffset, offs.srcHW, p.tp.topic, p.tp.partition))
	default:
		p.needOffsets = false
		c.retryLocked(p, fmt.Errorf("offset %d out of range on the source (log start %d, high watermark %d)", p.fetchOffset, offs.srcStart, offs.srcHW))
	}
}

// trimDestination moves the destination log start to trimTo (the source
// log start after a filled gap).
func (c *Copier) trimDestination(ctx context.Context, p *partition, trimTo int64) {
	err := deleteRecords(ctx, c.cfg.Destination, p.tp.topic, p.tp.partition, trimTo)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.retryLocked(p, fmt.Errorf("align destination log start: %w", err))
	} else if p.trimTo == trimTo {
		p.trimTo = 0
		c.log.Info("destination log start aligned", "topic", p.tp.topic, "partition", p.tp.partition, "log_start", trimTo)
	}
}
