package fetcher

// The marker filler: source offsets that hold no record (compaction removed
// them) become, on the destination, the markers of empty aborted transactions
// of filler ids, written in rounds until the destination log end reaches the
// next source batch. A control operation (control.go).

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

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
	// No lease check here: every AddPartitionsToTxn and EndTxn asks it right
	// before it is sent (txnClient.atNode).
	err := eachAtOnce(len(fillers), func(j int) error {
		for tickets.Add(-1) >= 0 {
			if c.stopRequested(p) {
				return errFillYielded
			}
			if err := c.emptyAbort(p, fillers[j]); err != nil {
				return err
			}
			c.mu.Lock()
			p.progress.FillerMarkers++
			c.mu.Unlock()
		}
		return nil
	})
	if err != nil {
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
	return eachAtOnce(len(unknown), func(i int) error {
		f := unknown[i]
		pid, epoch, err := c.txn.initialise(c.ctx, f.id)
		if err != nil {
			return fmt.Errorf("fencing filler transaction %s before filling: %w", f.id, err)
		}
		c.mu.Lock()
		f.known, f.pid, f.epoch = true, pid, epoch
		c.mu.Unlock()
		return nil
	})
}

// eachAtOnce runs do(0) … do(n-1) on goroutines of their own and returns all
// their errors joined (errors.Is sees each: a fill that yielded in one filler
// and failed in another reports both).
func eachAtOnce(n int, do func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = do(i)
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
