package fetcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"golang.org/x/sync/errgroup"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

// startPoint is what Start learns about a partition before it copies.
type startPoint struct {
	src, dst partitionMeta
	rp       resumePoint
	offs     offsets
	limits   topicLimits
}

// Start begins copying a partition: it settles the partition's destination
// transactions left in flight by an earlier owner, reads the destination log
// end (the next source offset to copy, by offset identity) with the writers'
// sequences, checks it against the source, and starts the pipeline; a
// destination behind the source log start is aligned first
// (EventGapFilled). Errors found here are returned; later ones arrive as
// Events on onEvent, which must not block for long.
func (c *Copier) Start(ctx context.Context, task Task, onEvent func(datapath.Event)) error {
	tp := topicPartition{task.Topic, task.Partition}
	if onEvent == nil {
		onEvent = func(datapath.Event) {}
	}
	if err := c.checkStartable(tp); err != nil {
		return err
	}
	if task.TransactionalID == "" {
		return fmt.Errorf("fetcher: %s/%d: Task.TransactionalID is required (it names the partition's writers)", task.Topic, task.Partition)
	}
	if task.Writer == nil {
		w, err := NewWriter(ctx, c.cfg.Destination)
		if err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		task.Writer = &w
	}
	if err := c.awaitLease(ctx); err != nil {
		return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
	}
	sp, err := c.lookUp(ctx, task)
	if err != nil {
		return err
	}
	p, err := c.newPartition(task, onEvent, sp)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkStartableLocked(tp); err != nil {
		return err
	}
	if old, ok := c.parts[tp]; ok {
		c.releaseLocked(old)
	}
	c.parts[tp] = p
	c.wakeSrcLocked(p.srcLeader)
	return nil
}

func (c *Copier) checkStartable(tp topicPartition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkStartableLocked(tp)
}

// checkStartableLocked refuses a start on a closed copier or of a partition
// that still runs (a done one is replaced).
func (c *Copier) checkStartableLocked(tp topicPartition) error {
	if c.closed {
		return errors.New("fetcher: copier is closed")
	}
	if old, ok := c.parts[tp]; ok && old.state != stateDone {
		return fmt.Errorf("fetcher: %s/%d is already being copied", tp.topic, tp.partition)
	}
	return nil
}

// lookUp reads what a start needs from both clusters. The lookups that do
// not depend on each other go at once: a partition's start is a chain of
// round trips, and 64 partitions starting together meet brokers busy with
// the first ones' copies.
func (c *Copier) lookUp(ctx context.Context, task Task) (sp startPoint, err error) {
	meta, mctx := errgroup.WithContext(ctx)
	meta.Go(func() (err error) {
		sp.src, err = c.sourceMetadata(mctx, task)
		return err
	})
	meta.Go(func() (err error) {
		if sp.dst, err = partitionMetadata(mctx, c.cfg.Destination, task.Topic, task.Partition); err != nil {
			return fmt.Errorf("fetcher: destination %s/%d (prepare it with EnsureDestinationTopic): %w", task.Topic, task.Partition, err)
		}
		return nil
	})
	if err := meta.Wait(); err != nil {
		return sp, err
	}
	look, lctx := errgroup.WithContext(ctx)
	look.Go(func() (err error) {
		if sp.limits, err = destinationTopicLimits(lctx, c.dstAdm, task.Topic); err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		return nil
	})
	look.Go(func() (err error) {
		if sp.rp, err = c.resume(lctx, task); err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		// The source's offsets are read after the destination's log end: every
		// record on the destination came from the source before, so a
		// destination ahead of this high watermark truly diverged.
		if sp.offs, err = listOffsets(lctx, c.cfg.Source, nil, task.Topic, task.Partition); err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		return nil
	})
	if err := look.Wait(); err != nil {
		return sp, err
	}
	if sp.rp.logEnd > sp.offs.srcHW {
		return sp, fmt.Errorf("%w: destination log of %s/%d has %d records more than the source (destination log end %d, source high watermark %d); it diverged",
			ErrDiverged, task.Topic, task.Partition, sp.rp.logEnd-sp.offs.srcHW, sp.rp.logEnd, sp.offs.srcHW)
	}
	if err := c.verifyTail(ctx, task, sp); err != nil {
		return sp, err
	}
	return sp, nil
}

// sourceMetadata finds the partition's source leader and checks the source
// topic is still the one the mirror recorded.
func (c *Copier) sourceMetadata(ctx context.Context, task Task) (partitionMeta, error) {
	src, err := partitionMetadata(ctx, c.cfg.Source, task.Topic, task.Partition)
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) && task.SourceTopicID != ([16]byte{}) {
			return src, fmt.Errorf("%w: %s/%d is not on the source: %v", ErrSourceTopicChanged, task.Topic, task.Partition, err)
		}
		return src, fmt.Errorf("fetcher: source %s/%d: %w", task.Topic, task.Partition, err)
	}
	if task.SourceTopicID != ([16]byte{}) && src.topicID != task.SourceTopicID {
		return src, fmt.Errorf("%w: %s has id %s on the source, the mirror recorded %s", ErrSourceTopicChanged,
			task.Topic, kadm.TopicID(src.topicID), kadm.TopicID(task.SourceTopicID))
	}
	return src, nil
}

// newPartition builds the running partition from what lookUp found.
func (c *Copier) newPartition(task Task, onEvent func(datapath.Event), sp startPoint) (*partition, error) {
	tp := topicPartition{task.Topic, task.Partition}
	rp, offs := sp.rp, sp.offs
	p := &partition{
		partitionID: partitionID{tp: tp, task: task, onEvent: onEvent, lane: laneOf(tp, len(c.lanes)),
			srcTopicID: sp.src.topicID, dstTopicID: sp.dst.topicID,
			srcLeader: sp.src.leader, srcLeaderEpoch: sp.src.leaderEpoch, dstLeader: sp.dst.leader},
		partitionWriters: partitionWriters{writer: *task.Writer, nextSeq: rp.writerNextSeq, txns: rp.txns, seqHints: rp.seqHints,
			fillerMax: fillerRecordsFor(sp.limits.maxMessageBytes), keyedFiller: sp.limits.compacted},
		fetchPosition: fetchPosition{fetchOffset: rp.logEnd},
		lifecycle:     lifecycle{done: make(chan struct{})},
		progress: datapath.Progress{SourceTopicID: sp.src.topicID, SourceLogStart: offs.srcStart, SourceHighWatermark: offs.srcHW,
			SourceLastStable: offs.srcHW, DestinationLogEnd: rp.logEnd, UpdatedAt: time.Now(),
			ProducerID: task.Writer.ID, ProducerEpoch: task.Writer.Epoch},
	}
	for k := range c.cfg.FillerTransactions {
		p.fillers = append(p.fillers, &destTxn{id: fillerIDFor(task.TransactionalID, k), sourcePID: -1})
	}
	if rp.logEnd < offs.srcStart {
		if len(rp.txns) > 0 && p.openTxns() > 0 {
			return nil, fmt.Errorf("%w: %s/%d: the source log start %d passed the destination log end %d while a destination transaction is open",
				ErrDiverged, task.Topic, task.Partition, offs.srcStart, rp.logEnd)
		}
		p.gap = &pendingGap{from: rp.logEnd, logStart: offs.srcStart}
		p.fetchOffset = offs.srcStart
	}
	c.log.Info("copy starting", "topic", task.Topic, "partition", task.Partition, "producer_id", task.Writer.ID,
		"producer_epoch", task.Writer.Epoch, "next_sequence", rp.writerNextSeq, "open_transactions", p.openTxns(),
		"destination_log_end", rp.logEnd, "source_log_start", offs.srcStart, "source_high_watermark", offs.srcHW)
	return p, nil
}

// errLeaseLapsed marks a write not made because this instance's ownership
// lease lapsed: another instance may own the partitions now.
var errLeaseLapsed = errors.New("not writing to the destination")

func (c *Copier) lease() error {
	if c.cfg.Lease == nil {
		return nil
	}
	if err := c.cfg.Lease(); err != nil {
		return fmt.Errorf("%w: %w", errLeaseLapsed, err)
	}
	return nil
}

// leaseWait is how long a start waits for the write lease. An instance
// gets its partitions before its first heartbeat confirms the membership;
// a start that failed there instead waited out the retry back-off (1–2 s,
// a warning each time) on every fresh instance.
const leaseWait = 2 * time.Second

// awaitLease waits up to leaseWait for the lease; the error is the last
// refusal.
func (c *Copier) awaitLease(ctx context.Context) error {
	deadline := time.Now().Add(leaseWait)
	for {
		err := c.lease()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return err
		}
	}
}
