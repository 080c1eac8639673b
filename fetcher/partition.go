package fetcher

import (
	"time"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

type topicPartition struct {
	topic     string
	partition int32
}

type partitionState int8

const (
	stateRunning  partitionState = iota
	stateStopping                // no new work; done once nothing is in flight
	stateDone                    // done is closed; Stop may return
)

type pendingGap struct {
	from     int64 // destination log end when the gap was seen
	logStart int64 // source log start
}

// partition is one copied partition: where its source side stands, what is
// queued for its destination and how it is stopping. Its field groups are
// embedded (below) so that each group's invariants are written where its
// fields are. Every field that changes is read and written under Copier.mu,
// by the source that leads it, the sink that leads it, its control
// goroutine, the admin goroutine and the Copier's API; none of them does
// I/O under the lock (an op in flight is its sender's until answered). Methods on partition only read and change the partition; what also
// touches the Copier (the buffer budget, waking sources and sinks, events)
// is a Copier method taking the partition.
type partition struct {
	partitionID
	partitionWriters
	fetchPosition
	pipeline
	lifecycle
	retries

	progress datapath.Progress
}

// partitionID is what a partition is and where it lives. tp, task,
// onEvent, lane and the topic ids are fixed at Start and may be read without
// the lock (requests are built outside it); the leaders change under the
// lock when the admin goroutine learns new ones (then the leader's source or
// sink is woken).
type partitionID struct {
	tp      topicPartition
	task    Task
	onEvent func(datapath.Event)
	lane    int // the destination lane its appends go over (Copier.lanes); fixed

	srcTopicID, dstTopicID [16]byte
	// srcLeader and dstLeader pick the source and the sink that serve the
	// partition; -1: unknown, the admin goroutine refreshes metadata.
	srcLeader      int32
	srcLeaderEpoch int32
	dstLeader      int32
}

// partitionWriters are the destination writers and where their sequences
// stand. Sequences are taken when an append is first sent (sink.collect)
// and never again for the same op, so a resend repeats them exactly and the
// broker's idempotence deduplicates it.
type partitionWriters struct {
	// The idempotent writer: its sequence advances as appends are sent.
	writer  datapath.Producer
	nextSeq int32
	// Destination transactional ids by source producer id, and the fillers.
	txns    map[int64]*destTxn
	fillers []*destTxn
	// What the partition knew of producers at Start (their sequences).
	seqHints map[int64]seqHint

	fillerMax   int32
	keyedFiller bool // the destination is compacted: filler records need a key
}

// fetchPosition is the source side's cursor. Invariant: every source offset
// below fetchOffset is written to the destination or queued (pipeline), so
// the destination log end plus the queued offsets equals fetchOffset.
type fetchPosition struct {
	fetchOffset int64
	// blocked: the source holds a batch the copier cannot copy at
	// fetchOffset; fetching stops and the partition fails once everything
	// queued before it is written, so the destination ends exactly there.
	blocked error
	// gap: the source log start passed the destination log end; the next
	// fetched batch (or an empty source) decides how far filler goes.
	gap *pendingGap
	// needOffsets: a fetch was out of range; fetching waits for the admin
	// goroutine's ListOffsets.
	needOffsets bool
	// trimTo: once the destination log end reaches it, DeleteRecords moves
	// the destination log start there (the source log start after a gap).
	trimTo   int64
	bigFirst bool // the last fetch returned only part of one batch: fetch it first
	// fetching: the cursor's own Fetch is in flight (source.collect to its
	// answer); no other at the cursor is sent meanwhile. Fetches further on
	// are read-ahead (ahead.go), applied in offset order.
	fetching bool
	// atEnd: the cursor's last answer reached the source's end (its last
	// stable offset) with nothing cut off: the partition is caught up.
	atEnd bool
	readAhead
}

// idle: caught up with the source as far as the copier knows, with nothing
// read ahead. The last stable offset is checked again because a kept
// read-ahead answer applied later may carry an older one.
func (p *partition) idle() bool {
	return p.atEnd && len(p.ahead) == 0 && p.fetchOffset >= p.progress.SourceLastStable
}

// pipeline is the partition's strictly ordered queue of destination
// operations. Invariants: queue[:inFlight] are appends sent under gen and
// not yet answered (the broker keeps them in order); stale counts answers
// still due for sends of an older gen, given up by rewind and sent again
// only once stale is 0; a control operation runs (control) only at the head
// with inFlight == stale == 0. buffered is the bytes of the queued ops,
// also counted in Copier.reserved.
type pipeline struct {
	queue    []*op
	buffered int64
	inFlight int
	stale    int
	gen      int
	control  bool
}

// lifecycle is how the partition stops. running → stopping → done, never
// back; done is closed exactly when state becomes stateDone, after nothing
// of the partition is in flight (and, on failover, its open transactions
// are aborted). err is the first error that stopped it.
type lifecycle struct {
	state partitionState
	// quiet: a pause waits for the first point with no destination
	// transaction open (or quietBy) before it stops.
	quiet    bool
	quietBy  time.Time
	failover bool // abort open destination transactions when stopping
	err      error
	done     chan struct{}
}

// retries counts consecutive retriable errors; any success resets
// errStreak. Nothing is fetched or sent for the partition before retryAt.
type retries struct {
	retryAt   time.Time
	errStreak int
	errSince  time.Time // first error of the streak
}

// openTxns counts destination transactions open on the partition.
func (p *partition) openTxns() int {
	n := 0
	for _, x := range p.txns {
		if x.open {
			n++
		}
	}
	return n
}

// busy: something of the partition is in flight.
func (p *partition) busy() bool { return p.inFlight > 0 || p.stale > 0 || p.control }

// fetchable: the source led by leader may fetch the partition now.
func (p *partition) fetchable(leader int32, now time.Time) bool {
	return p.state == stateRunning && p.srcLeader == leader && !p.needOffsets && p.blocked == nil && !now.Before(p.retryAt)
}

// sendable: the partition has an op its sink may send now.
func (p *partition) sendable() bool {
	return p.state == stateRunning && p.stale == 0 && p.inFlight < min(len(p.queue), maxInFlightPerPartition)
}

// controlDue: the op at the head is a control operation that may start.
func (p *partition) controlDue(now time.Time) bool {
	return !p.control && p.state == stateRunning && len(p.queue) > 0 && p.queue[0].control() &&
		p.inFlight == 0 && p.stale == 0 && !now.Before(p.retryAt)
}

// push queues an operation at the tail.
func (p *partition) push(o *op) {
	p.queue = append(p.queue, o)
	p.buffered += int64(o.bytes)
}

// pop removes the answered head and returns it.
func (p *partition) pop() *op {
	o := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	p.buffered -= int64(o.bytes)
	return o
}

// rewind gives up the in-flight sends: they are sent again, in order, with
// the same sequences, once their answers are all in.
func (p *partition) rewind() {
	p.stale += p.inFlight
	p.inFlight = 0
	p.gen++
}

// answered accounts for one answer to a send of gen; it reports whether the
// send is still current (not given up by a rewind).
func (p *partition) answered(gen int) bool {
	if gen != p.gen {
		p.stale--
		return false
	}
	p.inFlight--
	return true
}

// countError counts a retriable error and backs off; it reports whether the
// streak is long enough (maxErrStreak, maxErrTime) to give up.
func (p *partition) countError(now time.Time) (giveUp bool) {
	if p.errStreak == 0 {
		p.errSince = now
	}
	p.errStreak++
	backoff := min(time.Duration(p.errStreak)*100*time.Millisecond, 2*time.Second)
	p.retryAt = now.Add(backoff)
	return p.errStreak >= maxErrStreak && now.Sub(p.errSince) >= maxErrTime
}

// txnFor is the destination transaction of a source producer.
func (p *partition) txnFor(sourcePID int64) *destTxn {
	x := p.txns[sourcePID]
	if x == nil {
		x = &destTxn{id: txnIDFor(p.task.TransactionalID, sourcePID), sourcePID: sourcePID}
		p.txns[sourcePID] = x
	}
	return x
}

// know records the producer id and epoch a destination transaction runs
// under. A new epoch restarts the transactional sequence (a
// transaction.version 2 coordinator bumps the epoch at every EndTxn), and an
// epoch the partition already knew continues after its last sequence.
func (p *partition) know(x *destTxn, pid int64, epoch int16) {
	x.known = true
	if x.seqSet && x.pid == pid && x.seqEpoch == epoch {
		return
	}
	x.pid, x.epoch = pid, epoch
	x.seqEpoch, x.seqSet, x.nextSeq = epoch, true, 0
	if h, ok := p.seqHints[pid]; ok && h.epoch == epoch && h.lastSeq >= 0 {
		x.nextSeq = nextSequence(h.lastSeq, 0)
	}
}

// sequence takes the sequences of an op sent for the first time (a resend
// keeps them) and returns the destination log end after it and what its
// bytes need, if anything.
func (p *partition) sequence(o *op) (next int64, prep *batchPrep) {
	if o.kind == opRetentionFill {
		if o.raw != nil {
			return o.base + int64(o.chunkN), nil
		}
		// next filler chunk: sequence taken now
		o.chunkN = int32(min(o.fillTo-o.base, int64(o.fillerMax)))
		o.seq, p.nextSeq = p.nextSeq, nextSequence(p.nextSeq, o.chunkN-1)
		o.seqSet = true
		return o.base + int64(o.chunkN), &batchPrep{o: o, pid: p.writer.ID, epoch: p.writer.Epoch, seq: o.seq, chunkN: o.chunkN, keyed: p.keyedFiller}
	}
	if o.seqSet {
		return o.base + o.n, nil
	}
	pid, epoch := p.writer.ID, p.writer.Epoch
	if x := o.txn; x != nil {
		pid, epoch = x.pid, x.epoch
		o.seq, x.nextSeq = x.nextSeq, nextSequence(x.nextSeq, int32(o.n-1))
	} else {
		o.seq, p.nextSeq = p.nextSeq, nextSequence(p.nextSeq, int32(o.n-1))
	}
	o.seqSet, o.seqEpoch = true, epoch
	return o.base + o.n, &batchPrep{o: o, raw: o.raw, pid: pid, epoch: epoch, seq: o.seq}
}

// snapshot is the partition's progress with its open transactions.
func (p *partition) snapshot() datapath.Progress {
	pr := p.progress
	pr.OpenTransactions = p.openTxns()
	return pr
}
