package fetcher

// Control operations run one at a time per partition, on a goroutine of
// their own, when everything queued before them has been answered: begin a
// destination transaction (AddPartitionsToTxn), end one (EndTxn, then wait
// until its marker has landed at the source marker's offset: markers are
// written asynchronously after EndTxn returns), fill offsets with markers of
// empty aborted transactions, and, on failover, abort the transactions left
// open. Each is safe to run again after a failure: a begin repeated on an
// open transaction is answered at once, an end is not repeated once sent,
// and a marker filler counts what has landed before it adds more.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

// seqHint is what the destination partition knew of a producer at Start.
type seqHint struct {
	epoch   int16
	lastSeq int32
}

// kickControlLocked starts the control operation at the partition's head
// once nothing before it is in flight.
func (c *Copier) kickControlLocked(p *partition) {
	if !p.controlDue(time.Now()) || c.cfg.hooks.opHeld(p.tp, p.queue[0].base) {
		return
	}
	o := p.queue[0]
	p.control = true
	c.wg.Add(1)
	go c.runControl(p, o)
}

func (c *Copier) runControl(p *partition, o *op) {
	defer c.wg.Done()
	err := c.lease()
	if err == nil {
		switch o.kind {
		case opBegin:
			err = c.beginTxn(p, o.txn)
		case opEnd:
			err = c.endTxn(p, o)
		case opMarkers:
			err = c.fillMarkers(p, o)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p.control = false
	switch {
	case err == nil:
		p.errStreak = 0
		if len(p.queue) > 0 && p.queue[0] == o {
			c.popLocked(p)
		}
		p.progress.UpdatedAt = time.Now()
	case c.ctx.Err() != nil, errors.Is(err, errFillYielded):
	default:
		c.controlFailedLocked(p, o, err)
	}
	c.kickLocked(p)
	c.maybeDoneLocked(p)
}

func (c *Copier) controlFailedLocked(p *partition, o *op, err error) {
	err = fmt.Errorf("%s/%d: %s at offset %d: %w", p.tp.topic, p.tp.partition, o.kind, o.base, err)
	switch {
	case errors.Is(err, ErrOffsetMismatch), errors.Is(err, ErrDiverged):
		c.failLocked(p, datapath.Permanent, err)
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch),
		errors.Is(err, kerr.InvalidProducerIDMapping), errors.Is(err, kerr.InvalidTxnState),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		// The transaction is not where this owner believed: a restart reads
		// the destination's transactions again.
		c.failLocked(p, datapath.Transient, err)
	default:
		c.retryLocked(p, err)
	}
}

// identityLocked copies a transaction's identity for use outside the lock.
func identityLocked(x *destTxn) destTxn { return *x }

func (c *Copier) beginTxn(p *partition, x *destTxn) error {
	c.mu.Lock()
	id := identityLocked(x)
	c.mu.Unlock()
	if !id.known {
		open, adopted, err := c.txn.identify(c.ctx, &id, p.tp.topic, p.tp.partition)
		if err != nil {
			return err
		}
		if adopted {
			// Rare (a hand-over, a restart) and what a zombie's writes would
			// start from: said at info so that a failure can be traced to it.
			c.log.Info("adopted a destination transactional id as its coordinator has it", "topic", p.tp.topic, "partition", p.tp.partition,
				"transactional_id", id.id, "producer_id", id.pid, "producer_epoch", id.epoch, "open_with_partition", open)
		}
		c.mu.Lock()
		p.know(x, id.pid, id.epoch)
		x.open = open
		c.mu.Unlock()
		if open {
			return nil
		}
	}
	if err := c.txn.add(c.ctx, &id, p.tp.topic, p.tp.partition); err != nil {
		return err
	}
	c.mu.Lock()
	x.open = true
	c.mu.Unlock()
	return nil
}

func (c *Copier) endTxn(p *partition, o *op) error {
	c.mu.Lock()
	x := o.txn
	id := identityLocked(x)
	ended := o.filled > 0 // the EndTxn went out before a failure: only wait
	c.mu.Unlock()
	if !ended {
		if !id.known {
			return fmt.Errorf("internal: transaction %s ends before it began", id.id)
		}
		pid, epoch, err := c.txn.end(c.ctx, &id, o.commit)
		if err != nil {
			return err
		}
		c.mu.Lock()
		o.filled = 1
		x.open = false
		p.know(x, pid, epoch)
		c.mu.Unlock()
	}
	if err := c.waitLanded(p, o.base+1); err != nil {
		return err
	}
	c.mu.Lock()
	p.progress.DestinationLogEnd = o.base + 1
	p.progress.Transactions++
	c.mu.Unlock()
	return nil
}

// startAbortLocked aborts, on failover, the destination transactions left
// open (their source markers were not copied yet).
func (c *Copier) startAbortLocked(p *partition) {
	if p.control {
		return
	}
	p.control = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := c.abortOpen(p)
		c.mu.Lock()
		defer c.mu.Unlock()
		p.control = false
		if err != nil {
			if p.err == nil {
				p.err = fmt.Errorf("%s/%d: aborting the destination transactions open at failover: %w", p.tp.topic, p.tp.partition, err)
			}
			for _, x := range p.txns {
				x.open = false // reported; Stop must not wait forever
			}
		}
		c.maybeDoneLocked(p)
	}()
}

func (c *Copier) abortOpen(p *partition) error {
	c.mu.Lock()
	var open []*destTxn
	for _, x := range p.txns {
		if x.open {
			open = append(open, x)
		}
	}
	base := p.progress.DestinationLogEnd
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, x := range open {
		c.mu.Lock()
		id := identityLocked(x)
		c.mu.Unlock()
		pid, epoch, err := c.txn.end(ctx, &id, false)
		if err != nil {
			return err
		}
		c.mu.Lock()
		x.open = false
		p.know(x, pid, epoch)
		p.progress.AbortedAtFailover++
		c.mu.Unlock()
	}
	return c.waitLandedCtx(ctx, p, base+int64(len(open)))
}

// logEnd reads the destination partition's log end (its high watermark,
// which after acks=all writes and landed markers is the log end).
func (c *Copier) logEnd(p *partition) (int64, error) {
	return listOffset(c.ctx, c.dst, p.tp.topic, p.tp.partition, -1)
}

func (c *Copier) waitLanded(p *partition, target int64) error {
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	return c.waitLandedCtx(ctx, p, target)
}

// waitLandedCtx waits until the destination log end reaches target: the
// markers the coordinator writes after EndTxn have landed. Beyond target,
// someone else wrote to the partition.
func (c *Copier) waitLandedCtx(ctx context.Context, p *partition, target int64) error {
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		end, err := listOffset(ctx, c.dst, p.tp.topic, p.tp.partition, -1)
		if err != nil {
			return fmt.Errorf("waiting for markers to land: %w", err)
		}
		if end == target {
			return nil
		}
		if end > target {
			return fmt.Errorf("%w: destination log end is %d after markers that should end it at %d; the destination partition was written by someone else, or a transaction coordinator that failed over wrote a marker twice",
				ErrOffsetMismatch, end, target)
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return fmt.Errorf("waiting for markers to reach offset %d (log end %d): %w", target, end, err)
		}
	}
}
