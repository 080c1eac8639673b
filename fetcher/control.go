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
	"sync"
	"sync/atomic"
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
		open, err := c.txn.identify(c.ctx, &id, p.tp.topic, p.tp.partition)
		if err != nil {
			return err
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

// fillMarkers fills [o.base, o.base+o.n) with markers of empty aborted
// transactions, FillerTransactions in flight at once (one per filler id).
// Which marker lands at which offset does not matter, every one is the same
// invisible abort marker; their number does. So a fill writes most of the
// range in a pipelined pass that leaves one round's worth unwritten, waits
// until every filler transaction is complete (its marker is in the log:
// EndTxn answers before the marker is written), and writes the rest in
// rounds, each counted from the log end read after the previous one
// completed. A marker Kafka writes twice meanwhile (a transaction
// coordinator that moves while markers are being written: a destination
// broker restarting during a long fill wrote three in a soak run) lands
// inside the range, where it is as invisible as the filler it replaces, and
// the rounds write that many fewer; only a duplicate past the range stops
// the copy. Two owners filling the same offsets use the same ids: on a
// transaction.version 2 destination a repeated EndTxn of an epoch is
// answered as a retry and a stale epoch is fenced, never with a second
// marker.
func (c *Copier) fillMarkers(p *partition, o *op) (err error) {
	defer func() {
		if err != nil {
			// A filler whose EndTxn was answered may still have its marker
			// on the way: the next try settles every filler again before it
			// reads the log end.
			c.forgetFillers(p)
		}
	}()
	if err := c.settleFillers(p); err != nil {
		return err
	}
	target, k := o.base+o.n, int64(len(p.fillers))
	for {
		// Exact here: no filler transaction of this fill is in flight (settled, or completed).
		end, err := c.logEnd(p)
		if err != nil {
			return err
		}
		rest := target - end
		switch {
		case end < o.base || rest < 0:
			return fmt.Errorf("%w: destination log end %d is outside the filler range %d..%d; the destination partition was written by someone else, or a transaction coordinator that failed over wrote a marker twice past the range",
				ErrOffsetMismatch, end, o.base, target)
		case rest == 0:
			c.mu.Lock()
			p.progress.DestinationLogEnd = target
			c.mu.Unlock()
			return nil
		case rest > 2*k:
			err = c.fillPass(p, p.fillers, rest-k)
		default:
			err = c.fillPass(p, p.fillers[:min(rest, k)], min(rest, k))
		}
		if err != nil {
			return err
		}
	}
}

// errFillYielded ends a fill the partition's stop interrupted: a fill may run
// for minutes (a hole of thousands of offsets), and a stop that waited for it
// held a rebalance (the coordinators' revoke callback) or a graceful restart
// as long. Leaving the rest is safe: the next fill, here or at the next
// owner, fences every filler id and counts from the log end.
var errFillYielded = errors.New("the fill yields to the partition's stop")

// stopRequested reports whether the partition is stopping.
func (c *Copier) stopRequested(p *partition) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.state != stateRunning
}

// fillPass writes n markers with fillers, each filler id writing one after
// the other (its next transaction begins once the coordinator has completed
// the previous one), and returns when every one of them is in the log.
func (c *Copier) fillPass(p *partition, fillers []*destTxn, n int64) error {
	var tickets atomic.Int64
	tickets.Store(n)
	errs := make([]error, len(fillers))
	var wg sync.WaitGroup
	for j, f := range fillers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tickets.Add(-1) >= 0 {
				if c.stopRequested(p) {
					errs[j] = errFillYielded
					return
				}
				if err := c.lease(); err != nil {
					errs[j] = err
					return
				}
				if err := c.emptyAbort(p, f); err != nil {
					errs[j] = err
					return
				}
				c.mu.Lock()
				p.progress.FillerMarkers++
				c.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	ids := make([]string, len(fillers))
	for j, f := range fillers {
		ids[j] = f.id
	}
	return c.txn.awaitComplete(c.ctx, ids)
}

// settleFillers fences every filler id whose identity is unknown before
// the log end is read: at a fresh owner's first fill (an earlier owner may
// have ended a filler transaction just before it died, or may wake up from
// a freeze and still be filling) and after a fill that failed (a filler
// whose EndTxn was answered, or timed out but was applied, may not have its
// marker in the log yet). EndTxn answers before its marker is written, so
// such a marker can land after the log end is read, and the markers counted
// from that log end would then be too many: the partition's offsets would
// drift (found by the soak and the version matrix under load; regression
// test TestFakeFillerMarkerLandsLate).
//
// Fencing is InitProducerId on the id: the coordinator first completes
// whatever the id has in flight (an abort being written is finished, an
// open filler transaction is aborted, its marker written) and then bumps
// the epoch, so any later request of an earlier owner is refused as fenced.
// For the copy's own transactional ids that would put a marker at an
// arbitrary offset (resume.go), but every filler marker is the same empty
// abort: only their number matters, and the log end read after the fence
// counts each of them.
func (c *Copier) settleFillers(p *partition) error {
	c.mu.Lock()
	var unknown []*destTxn
	for _, f := range p.fillers {
		if !f.known {
			unknown = append(unknown, f)
		}
	}
	c.mu.Unlock()
	errs := make([]error, len(unknown))
	var wg sync.WaitGroup
	for i, f := range unknown {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid, epoch, err := c.txn.initialise(c.ctx, f.id)
			if err != nil {
				errs[i] = fmt.Errorf("fencing filler transaction %s before filling: %w", f.id, err)
				return
			}
			c.mu.Lock()
			f.known, f.pid, f.epoch = true, pid, epoch
			c.mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forgetFillers marks every filler id unknown, to be fenced again before
// the next fill.
func (c *Copier) forgetFillers(p *partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range p.fillers {
		f.known = false
	}
}

// emptyAbort writes one abort marker with no transaction data before it.
func (c *Copier) emptyAbort(p *partition, f *destTxn) error {
	c.mu.Lock()
	id := identityLocked(f)
	c.mu.Unlock()
	if !id.known {
		return fmt.Errorf("internal: filler transaction %s used before it was fenced", id.id)
	}
	if err := c.txn.add(c.ctx, &id, p.tp.topic, p.tp.partition); err != nil {
		return err
	}
	pid, epoch, err := c.txn.end(c.ctx, &id, false)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		f.known = false // look it up again before its next use
		return err
	}
	f.known, f.pid, f.epoch = true, pid, epoch
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
