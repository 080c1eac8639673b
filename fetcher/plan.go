package fetcher

// The planner turns fetched source batches into destination operations
// that put every source offset at the same destination offset:
//
//   - a dense data batch (offsets base..base+n-1 all present) is appended
//     whole, its records section untouched;
//   - a batch with holes (compaction), or one that starts below the resume
//     point, is re-framed into dense runs (records.go), and each hole gets
//     one marker of an empty aborted transaction per offset (opMarkers);
//   - an offset range with no batch at all (whole batches compacted away)
//     gets markers too;
//   - a transactional batch goes into the destination transaction of its
//     source producer, begun first if needed (opBegin);
//   - a COMMIT or ABORT marker ends that transaction the same way (opEnd),
//     and the destination coordinator writes the marker at the same offset;
//     a marker whose transaction has no batch on the destination (it started
//     before the copy did, or all its records were compacted away) is a
//     transaction of its own with no records.
//
// Planning runs under Copier.mu as batches arrive; operations run later, in
// order. The planner's notion of which transactions are open (planOpen) is
// the state at the end of the queue.

import (
	"fmt"

	"github.com/kmirror/kmirror/internal/enumname"
)

type opKind int8

const (
	opAppend        opKind = iota + 1 // a batch, by the idempotent writer or in a destination transaction
	opRetentionFill                   // filler records below the source log start (then DeleteRecords)
	opBegin                           // add the partition to a destination transaction
	opEnd                             // end a destination transaction; its marker lands at base
	opMarkers                         // n empty aborted transactions: invisible filler for offsets with no record
)

var opKindNames = []string{
	opAppend:        "append",
	opRetentionFill: "retention filler",
	opBegin:         "begin transaction",
	opEnd:           "end transaction",
	opMarkers:       "marker filler",
}

func (k opKind) String() string { return enumname.Of(k, "opKind", opKindNames) }

// op is one destination operation of a partition.
type op struct {
	kind opKind
	base int64 // destination offset of the op's first offset
	n    int64 // offsets it takes

	// opAppend (and opRetentionFill chunks)
	raw          []byte
	txn          *destTxn // nil: the idempotent writer
	records      int32    // source records in it
	bytes        int      // bytes counted in the buffer budget
	maxTimestamp int64
	seq          int32
	seqSet       bool
	seqEpoch     int16

	// opEnd
	commit bool

	// opMarkers: offsets already filled
	filled int64

	// opRetentionFill: fills [base, fillTo) in chunks of up to fillerMax,
	// then DeleteRecords(fillTrimTo).
	fillFrom   int64
	fillTo     int64
	fillTrimTo int64
	chunkN     int32
	fillerMax  int32
}

// control reports whether the op runs on the control goroutine.
func (o *op) control() bool { return o.kind == opBegin || o.kind == opEnd || o.kind == opMarkers }

// pushLocked queues o and charges it to the buffer budget.
func (c *Copier) pushLocked(p *partition, o *op) {
	p.push(o)
	c.reserved += int64(o.bytes)
}

// planMarkersLocked fills [from, to) with invisible markers.
func (c *Copier) planMarkersLocked(p *partition, from, to int64) {
	if to <= from {
		return
	}
	if n := len(p.queue); n > 0 {
		if last := p.queue[n-1]; last.kind == opMarkers && last.base+last.n == from {
			last.n += to - from
			return
		}
	}
	c.pushLocked(p, &op{kind: opMarkers, base: from, n: to - from})
}

// planBatchLocked queues the operations for source batch b, whose offsets
// from p.fetchOffset on are not planned yet. It returns an error that stops
// the partition at b (blocked), or a fatal one.
func (c *Copier) planBatchLocked(p *partition, b *Batch) (blocked, fatal error) {
	from := p.fetchOffset
	if b.LogAppendTime() && !b.IsControl() {
		// Verified on Kafka 4.3: a CreateTime destination keeps the batch's
		// max timestamp but clears the LogAppendTime bit, so consumers would
		// see each record's producer timestamp instead of the source's append
		// time; a LogAppendTime destination would stamp its own time. Neither
		// keeps the timestamps (invariant 2) without re-encoding records.
		return fmt.Errorf("%s/%d: %w (offset %d)", p.tp.topic, p.tp.partition, ErrLogAppendTimeBatch, b.BaseOffset), nil
	}
	if b.BaseOffset > from {
		c.planMarkersLocked(p, from, b.BaseOffset)
		from = b.BaseOffset
	}
	next := b.NextOffset()
	if b.IsControl() {
		return nil, c.planControlLocked(p, b, from)
	}
	var x *destTxn
	if b.IsTransactional() {
		x = p.txnFor(b.ProducerID)
	}
	begin := func() {
		if x != nil && !x.planOpen {
			x.planOpen = true
			c.pushLocked(p, &op{kind: opBegin, base: from, txn: x})
		}
	}
	if b.NumRecords == 0 {
		c.planMarkersLocked(p, from, next) // every record of the batch was compacted away
		return nil, nil
	}
	// A dense batch (a record for every offset of its range) goes whole, its
	// records untouched: the destination takes it as the source did and
	// serves each record at the same offset (CheckCopyable says why).
	dense := b.NumRecords > 0 && int64(b.NumRecords) == int64(b.LastOffsetDelta)+1
	if dense && b.BaseOffset == from {
		begin()
		c.pushLocked(p, &op{kind: opAppend, base: from, n: int64(b.NumRecords), raw: b.Raw, txn: x,
			records: b.NumRecords, bytes: len(b.Raw), maxTimestamp: b.MaxTimestamp})
		return nil, nil
	}
	return nil, c.planRecordsLocked(p, b, from, begin, x)
}

// planControlLocked ends b's transaction (a COMMIT or ABORT marker at from).
func (c *Copier) planControlLocked(p *partition, b *Batch, from int64) error {
	if b.NumRecords == 0 {
		c.planMarkersLocked(p, from, b.NextOffset())
		return nil
	}
	typ, err := b.controlType()
	if err != nil {
		return fmt.Errorf("%s/%d: %w", p.tp.topic, p.tp.partition, err)
	}
	if b.LastOffsetDelta != 0 {
		return fmt.Errorf("%w: %s/%d: control batch at offset %d spans %d offsets", ErrCorruptBatch, p.tp.topic, p.tp.partition, b.BaseOffset, b.LastOffsetDelta+1)
	}
	x := p.txnFor(b.ProducerID)
	if !x.planOpen {
		// No batch of this transaction on the destination: it began
		// before the copy did, or compaction removed all of it.
		c.pushLocked(p, &op{kind: opBegin, base: from, txn: x})
	}
	x.planOpen = false
	c.pushLocked(p, &op{kind: opEnd, base: from, n: 1, txn: x, commit: typ == controlCommit})
	return nil
}

// planRecordsLocked queues a batch that cannot go whole (holes, or records
// below from): its records from from on, re-framed into dense runs (or the
// batch cut short when only its tail is gone), and markers for the holes.
// begin opens the batch's destination transaction (x) before its first
// append.
func (c *Copier) planRecordsLocked(p *partition, b *Batch, from int64, begin func(), x *destTxn) error {
	next := b.NextOffset()
	if !b.CRCValid() {
		// A re-framed batch gets a CRC of its own, which would bless whatever
		// damage its records carry: only a batch that matches its CRC is
		// re-framed. (A whole batch keeps its CRC patched, and the destination
		// refuses a damaged one: produceRefusedLocked.)
		return errCRCMismatch(p.tp.topic, p.tp.partition, b.BaseOffset, len(b.Raw))
	}
	recs, err := b.records()
	if err != nil {
		return fmt.Errorf("%s/%d: %w", p.tp.topic, p.tp.partition, err)
	}
	i := 0
	for i < len(recs) && recs[i].offset < from {
		i++
	}
	recs = recs[i:]
	if b.BaseOffset == from && len(recs) > 0 && recs[0].offset == from && recs[len(recs)-1].offset == from+int64(len(recs))-1 {
		// Only the tail was compacted away: keep the records section.
		begin()
		raw := truncatedCopy(b, int32(len(recs)))
		c.pushLocked(p, &op{kind: opAppend, base: from, n: int64(len(recs)), raw: raw, txn: x,
			records: int32(len(recs)), bytes: len(raw), maxTimestamp: b.MaxTimestamp})
		c.planMarkersLocked(p, from+int64(len(recs)), next)
		return nil
	}
	cursor := from
	for len(recs) > 0 {
		run := 1
		for run < len(recs) && recs[run].offset == recs[run-1].offset+1 {
			run++
		}
		c.planMarkersLocked(p, cursor, recs[0].offset)
		raw, err := reframe(b, recs[:run])
		if err != nil {
			return fmt.Errorf("%s/%d: batch at offset %d: %w", p.tp.topic, p.tp.partition, b.BaseOffset, err)
		}
		begin()
		c.pushLocked(p, &op{kind: opAppend, base: recs[0].offset, n: int64(run), raw: raw, txn: x,
			records: int32(run), bytes: len(raw), maxTimestamp: b.MaxTimestamp})
		cursor = recs[run-1].offset + 1
		recs = recs[run:]
	}
	c.planMarkersLocked(p, cursor, next)
	return nil
}
