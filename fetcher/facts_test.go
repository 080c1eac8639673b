package fetcher

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/polltest"
)

// testKafkaFacts checks on the real broker the behaviours the copier relies
// on (docs/KAFKA-FACTS.md), and logs what it sees.
func testKafkaFacts(t *testing.T, e *env) {
	e.createSource("facts", 1, nil)
	e.ensureDestination("facts")
	produce := func(raw []byte) (int64, error) {
		return produceOne(e.ctx, e.dst, "facts", 0, raw)
	}
	_, end := e.offsets(e.dstAdm, "facts", 0)

	// A client batch with a non-zero base offset.
	raw := plainBatch(0, 2, dense(3), 0)
	Rewrite(raw, -1, -1, -1)
	binary.BigEndian.PutUint64(raw, 12345) // outside the CRC
	if _, err := produce(raw); !isErr(err, kerr.InvalidRecord) {
		t.Fatalf("client batch with baseOffset 12345: %v, want INVALID_RECORD", err)
	}
	t.Logf("fact: a client batch with baseOffset 12345 is refused with INVALID_RECORD (0 is required)")

	// Resending the same idempotent batch returns the original offset.
	initProducerID := func() (int64, int16, error) {
		w, err := InitProducer(e.ctx, e.dst, "facts-tx")
		return w.ID, w.Epoch, err
	}
	pid, epoch, err := initProducerID()
	if err != nil {
		t.Fatal(err)
	}
	raw = plainBatch(0, 4, dense(5), 0)
	Rewrite(raw, pid, epoch, 0)
	b1, err1 := produce(raw)
	b2, err2 := produce(raw)
	if err1 != nil || err2 != nil || b1 != end || b2 != end {
		t.Fatalf("resend: %d %v, %d %v, want %d twice", b1, err1, b2, err2, end)
	}
	end += 5
	if _, e2 := e.offsets(e.dstAdm, "facts", 0); e2 != end {
		t.Fatalf("log end %d after a duplicate, want %d", e2, end)
	}
	t.Logf("fact: a resent batch (same producer id/epoch/sequence) returns its original base offset %d; log end unchanged", b1)

	// Lazy, per-partition fencing.
	pid2, epoch2, err := initProducerID()
	if err != nil || pid2 != pid || epoch2 != epoch+1 {
		t.Fatalf("re-init: %d/%d %v, want %d/%d", pid2, epoch2, err, pid, epoch+1)
	}
	raw = plainBatch(0, 0, dense(1), 0)
	Rewrite(raw, pid, epoch, 5)
	if b, err := produce(raw); err != nil || b != end {
		t.Fatalf("old epoch before any new-epoch append: %d %v, want accepted at %d", b, err, end)
	}
	end++
	raw = plainBatch(0, 0, dense(1), 0)
	Rewrite(raw, pid, epoch2, 0)
	if b, err := produce(raw); err != nil || b != end {
		t.Fatalf("new epoch: %d %v", b, err)
	}
	end++
	raw = plainBatch(0, 0, dense(1), 0)
	Rewrite(raw, pid, epoch, 6)
	if _, err := produce(raw); !isErr(err, kerr.InvalidProducerEpoch) || !isErr(err, ErrFenced) {
		t.Fatalf("old epoch after a new-epoch append: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	t.Logf("fact: after InitProducerId bumped epoch %d->%d the old epoch still appended until the new epoch appended; then INVALID_PRODUCER_EPOCH", epoch, epoch2)

	// A zstd filler batch of 1,000,000 empty records.
	filler := fillerBatch(maxFillerRecords, time.Now().UnixMilli(), -1, -1, -1, false)
	began := time.Now()
	if b, err := produce(filler); err != nil || b != end {
		t.Fatalf("filler: %d %v, want %d", b, err, end)
	}
	end += maxFillerRecords
	if _, e2 := e.offsets(e.dstAdm, "facts", 0); e2 != end {
		t.Fatalf("log end %d after filler, want %d", e2, end)
	}
	t.Logf("fact: a zstd batch of %d empty records is %d bytes and was appended in %v", maxFillerRecords, len(filler), time.Since(began))
	if len(filler) >= 1048588 {
		t.Fatalf("filler batch %d bytes exceeds the default max.message.bytes", len(filler))
	}
}

// The broker behaviour the transaction replay rests on, checked on the
// real broker (docs/KAFKA-FACTS.md): an empty transaction's marker takes exactly
// one offset and no consumer sees it; on a transaction.version 2 destination
// EndTxn bumps the epoch, a repeated EndTxn of the old epoch writes nothing,
// and the old epoch can no longer begin a transaction; re-initialising an id
// with an open transaction aborts it at once (why the copy's ids are never
// re-initialised) and answers only once that marker, or one still being
// written, is in the log (why filler ids are fenced that way).
func testTransactionFacts(t *testing.T, e *env) {
	const topic = "txn-facts"
	e.createSource(topic, 1, nil)
	e.ensureDestination(topic)
	f := &txnFactsRun{t: t, e: e, tc: newTxnClient(e.dst, e.dstAdm), topic: topic}
	_, f.end = e.offsets(e.dstAdm, topic, 0)

	x, epoch, next := f.emptyAbortedTransaction()
	f.repeatedEndTxn(x, epoch)
	f.reinitialiseOpenTransaction()
	f.initialiseAfterEndTxn(x, next)
	f.recordAfterMarkers()
}

// txnFactsRun is what the steps of testTransactionFacts share: the transaction client of
// the destination, the topic, and the end its log must have.
type txnFactsRun struct {
	t     *testing.T
	e     *env
	tc    txnClient
	topic string
	end   int64 // the log end of partition 0 of topic, as the facts so far make it
}

// emptyAbortedTransaction aborts an empty transaction of a new id: its marker takes one
// offset, and EndTxn bumps the epoch. It returns the transaction, the epoch it began with
// and the one EndTxn returned.
func (f *txnFactsRun) emptyAbortedTransaction() (x *destTxn, epoch, next int16) {
	t, e, tc, topic := f.t, f.e, f.tc, f.topic
	t.Helper()
	x = &destTxn{id: "facts-empty"}
	if _, _, err := tc.identify(e.ctx, x, topic, 0); err != nil {
		t.Fatal(err)
	}
	epoch = x.epoch
	if err := tc.add(e.ctx, x, topic, 0); err != nil {
		t.Fatal(err)
	}
	pid, next, err := tc.end(e.ctx, x, false)
	if err != nil {
		t.Fatal(err)
	}
	f.end++
	polltest.Eventually(t, 10*time.Second, "the marker landed", func() (bool, string) {
		_, e2 := e.offsets(e.dstAdm, topic, 0)
		return e2 == f.end, fmt.Sprintf("log end %d, want %d", e2, f.end)
	})
	if next != epoch+1 || pid != x.pid {
		t.Fatalf("EndTxn returned producer %d epoch %d, want %d epoch %d (transaction.version 2 bumps the epoch)", pid, next, x.pid, epoch+1)
	}
	t.Logf("fact: an empty aborted transaction puts one marker at the log end; EndTxn moved the epoch %d -> %d", epoch, next)
	return x, epoch, next
}

// repeatedEndTxn repeats x's EndTxn of epoch, as an old owner would: it is answered and
// writes no marker, and the old epoch cannot begin again.
func (f *txnFactsRun) repeatedEndTxn(x *destTxn, epoch int16) {
	t, e, tc, topic := f.t, f.e, f.tc, f.topic
	t.Helper()
	// The same EndTxn again (an old owner repeating it): answered, no marker.
	if _, _, err := tc.end(e.ctx, x, false); err != nil {
		t.Fatalf("repeated EndTxn of epoch %d: %v, want it answered as a retry", epoch, err)
	}
	if err := tc.add(e.ctx, x, topic, 0); !isErr(err, kerr.ProducerFenced) {
		t.Fatalf("AddPartitionsToTxn with the old epoch %d: %v, want PRODUCER_FENCED", epoch, err)
	}
	if _, e2 := e.offsets(e.dstAdm, topic, 0); e2 != f.end {
		t.Fatalf("log end %d after a repeated EndTxn, want %d", e2, f.end)
	}
	t.Logf("fact: a repeated EndTxn of the previous epoch writes no marker; the previous epoch cannot begin again")
}

// reinitialiseOpenTransaction initialises an id whose transaction is open: that aborts it,
// and InitProducerId answers once the marker is in the log.
func (f *txnFactsRun) reinitialiseOpenTransaction() {
	t, e, tc, topic := f.t, f.e, f.tc, f.topic
	t.Helper()
	// Re-initialising an id whose transaction is open aborts it.
	y := &destTxn{id: "facts-reinit"}
	if _, _, err := tc.identify(e.ctx, y, topic, 0); err != nil {
		t.Fatal(err)
	}
	if err := tc.add(e.ctx, y, topic, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tc.initialise(e.ctx, y.id); err != nil {
		t.Fatal(err)
	}
	f.end++
	// Read once, not polled: the filler's fence (settleFillers) relies on
	// InitProducerId answering only once the abort it caused is in the log.
	if _, e2 := e.offsets(e.dstAdm, topic, 0); e2 != f.end {
		t.Fatalf("log end %d right after InitProducerId aborted an open transaction, want %d", e2, f.end)
	}
	t.Logf("fact: InitProducerId on an id with an open transaction aborts it and answers once its marker is in the log")
}

// initialiseAfterEndTxn ends a transaction of x at epoch next and initialises x's id at
// once: the init answers once the marker is in the log, and fences the epoch before.
func (f *txnFactsRun) initialiseAfterEndTxn(x *destTxn, next int16) {
	t, e, tc, topic := f.t, f.e, f.tc, f.topic
	t.Helper()
	// An EndTxn answered, then InitProducerId at once: the init waits out
	// the marker being written (CONCURRENT_TRANSACTIONS, retried), bumps the
	// epoch, and the earlier epoch is fenced.
	x.epoch = next
	if err := tc.add(e.ctx, x, topic, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tc.end(e.ctx, x, false); err != nil {
		t.Fatal(err)
	}
	_, fenced, err := tc.initialise(e.ctx, x.id)
	if err != nil {
		t.Fatal(err)
	}
	f.end++
	if _, e2 := e.offsets(e.dstAdm, topic, 0); e2 != f.end {
		t.Fatalf("log end %d right after InitProducerId followed an answered EndTxn, want %d", e2, f.end)
	}
	stale := &destTxn{id: x.id, pid: x.pid, epoch: fenced - 1, known: true}
	if err := tc.add(e.ctx, stale, topic, 0); err == nil {
		t.Fatalf("AddPartitionsToTxn with epoch %d after InitProducerId moved it to %d was accepted", fenced-1, fenced)
	}
	t.Logf("fact: InitProducerId right after an answered EndTxn answers once that marker is in the log, and fences the epoch before")
}

// recordAfterMarkers writes a record after the markers: it lands at the log end they made,
// and a consumer sees only it, at either isolation level.
func (f *txnFactsRun) recordAfterMarkers() {
	t, e, topic := f.t, f.e, f.topic
	t.Helper()
	plain := e.client(e.p.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r := &kgo.Record{Topic: topic, Key: []byte("after"), Value: []byte("markers")}
	if err := plain.ProduceSync(e.ctx, r).FirstErr(); err != nil || r.Offset != f.end {
		t.Fatalf("record after the markers: offset %d, %v; want %d", r.Offset, err, f.end)
	}
	for _, committed := range []bool{false, true} {
		if got := e.consumeAll(e.p.dst, topic, 0, committed, r.Offset); len(got) != 1 {
			t.Fatalf("read_committed=%v: a consumer saw %v; the markers before the record must be invisible", committed, got)
		}
	}
}
