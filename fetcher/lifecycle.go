package fetcher

// How a partition stops: asked to (Stop, StopWith), after an error (fail,
// fenced, blocked, too many retries), and when it is done (maybeDone). Every
// terminal outcome is reported once, as a datapath.Event, by the event
// goroutine, in order and outside the lock.

import (
	"fmt"
	"time"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

// quietTimeout bounds a pause's wait for a point with no transaction open.
const quietTimeout = 30 * time.Second

// Stop stops copying a partition, waits until none of its writes is in
// flight and returns its final progress, with the error that stopped it
// earlier, if any. After Stop the partition may be started again.
func (c *Copier) Stop(topic string, partition int32) (datapath.Progress, error) {
	return c.StopWith(topic, partition, datapath.StopHandover)
}

// StopWith is Stop as how says (datapath.StopHow).
func (c *Copier) StopWith(topic string, partition int32, how datapath.StopHow) (datapath.Progress, error) {
	tp := topicPartition{topic, partition}
	c.mu.Lock()
	p, ok := c.parts[tp]
	if !ok {
		c.mu.Unlock()
		return datapath.Progress{}, fmt.Errorf("fetcher: %s/%d is not started", topic, partition)
	}
	p.failover = p.failover || how == datapath.StopFailover
	if p.state == stateRunning {
		if how == datapath.StopPause && p.openTxns() > 0 {
			p.quiet, p.quietBy = true, time.Now().Add(quietTimeout)
			c.log.Info("pausing at the next point with no destination transaction open", "topic", topic, "partition", partition,
				"open_transactions", p.openTxns())
			c.wakeDstLocked(p)
			c.wakeSrcLocked(p.srcLeader)
		} else {
			p.state = stateStopping
		}
		c.maybeDoneLocked(p)
	}
	c.mu.Unlock()
	<-p.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parts[tp] == p {
		delete(c.parts, tp)
	}
	c.releaseLocked(p)
	return p.snapshot(), p.err
}

// releaseLocked returns a stopped partition's buffered bytes to the budget.
func (c *Copier) releaseLocked(p *partition) {
	c.dropAheadLocked(p)
	c.reserved -= p.buffered
	p.buffered = 0
	p.queue = nil
	c.wakeAllSrcLocked()
}

// maybeDoneLocked finishes a stopping partition once nothing of it is in
// flight (and, for a failover, once its open transactions are aborted).
func (c *Copier) maybeDoneLocked(p *partition) {
	if p.state == stateRunning && p.quiet && (p.openTxns() == 0 || time.Now().After(p.quietBy)) {
		if p.openTxns() > 0 {
			c.log.Warn("pausing with destination transactions open: no point without one came in time; they stay open until the copy resumes",
				"topic", p.tp.topic, "partition", p.tp.partition, "open_transactions", p.openTxns())
		}
		p.state = stateStopping
	}
	if p.state != stateStopping || p.busy() {
		return
	}
	if p.failover && p.openTxns() > 0 {
		c.startAbortLocked(p)
		return
	}
	p.state = stateDone
	close(p.done)
	c.releaseLocked(p)
}

// failLocked stops a partition after err, which mark (datapath.Permanent
// or datapath.Transient) says retrying can fix or not: the coordinator reads
// that from the EventFailed's error.
func (c *Copier) failLocked(p *partition, mark func(error) error, err error) {
	c.stopWithEventLocked(p, datapath.EventFailed, mark(err))
}

// fencedLocked stops a partition another owner took over.
func (c *Copier) fencedLocked(p *partition, err error) {
	c.stopWithEventLocked(p, datapath.EventFenced, err)
}

func (c *Copier) stopWithEventLocked(p *partition, kind datapath.EventKind, err error) {
	if p.state == stateDone || p.err != nil {
		return
	}
	p.err = err
	if p.state == stateRunning {
		p.state = stateStopping
	}
	c.log.Warn("copy stopped", "topic", p.tp.topic, "partition", p.tp.partition, "event", kind.String(),
		"retriable", datapath.Retriable(err), "err", err)
	c.emitLocked(p, datapath.Event{Kind: kind, Err: err})
	c.maybeDoneLocked(p)
}

// blockLocked stops fetching at an uncopyable source batch; the partition
// fails (non-retriable) once the batches before it are on the destination, so
// the destination ends exactly at the batch the error names.
func (c *Copier) blockLocked(p *partition, err error) {
	p.blocked = err
	c.dropAheadLocked(p)
	c.maybeFailBlockedLocked(p)
}

func (c *Copier) maybeFailBlockedLocked(p *partition) {
	if p.blocked != nil && len(p.queue) == 0 && !p.busy() {
		c.failLocked(p, datapath.Permanent, p.blocked)
	}
}

func (c *Copier) emitLocked(p *partition, ev datapath.Event) {
	ev.Topic, ev.Partition, ev.Progress = p.tp.topic, p.tp.partition, p.progress
	on := p.onEvent
	c.events = append(c.events, func() { on(ev) })
	signal(c.eventWake)
}

// retryLocked counts a retriable error; after maxErrStreak in a row the
// partition stops with a retriable EventFailed.
func (c *Copier) retryLocked(p *partition, err error) {
	now := time.Now()
	c.dropAheadLocked(p)
	p.atEnd = false
	giveUp := p.countError(now)
	c.log.Debug("retrying", "topic", p.tp.topic, "partition", p.tp.partition, "err", err, "attempt", p.errStreak)
	if giveUp {
		c.failLocked(p, datapath.Transient, fmt.Errorf("%s/%d: giving up after %d attempts in %v: %w", p.tp.topic, p.tp.partition,
			p.errStreak, now.Sub(p.errSince).Round(time.Second), err))
	}
}

func (c *Copier) eventLoop() {
	defer c.wg.Done()
	for {
		c.deliverEvents()
		select {
		case <-c.ctx.Done():
			c.deliverEvents() // what the closing reported
			return
		case <-c.eventWake:
		}
	}
}

// deliverEvents calls the Start callers' event functions for what is
// pending, outside the lock.
func (c *Copier) deliverEvents() {
	c.mu.Lock()
	evs := c.events
	c.events = nil
	c.mu.Unlock()
	for _, f := range evs {
		f()
	}
}
