package fetcher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// txnProducer is a transactional producer on the source.
func (e *env) txnProducer(id string) *kgo.Client {
	return e.client(e.p.src, kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.TransactionTimeout(time.Minute))
}

// produceIn produces n records, one batch each, with cl (inside its open
// transaction if it has one).
func (e *env) produceIn(cl *kgo.Client, topic string, partition int32, n int, tag string) {
	e.t.Helper()
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Key: fmt.Appendf(nil, "%s-%d", tag, i), Value: fmt.Appendf(nil, "%s-value-%d", tag, i),
			Headers: []kgo.RecordHeader{{Key: "tag", Value: []byte(tag)}}}
		if err := cl.ProduceSync(e.ctx, r).FirstErr(); err != nil {
			e.t.Fatalf("produce %s to %s/%d: %v", tag, topic, partition, err)
		}
	}
}

func (e *env) begin(cl *kgo.Client) {
	e.t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) end(cl *kgo.Client, commit bool) {
	e.t.Helper()
	if err := cl.EndTransaction(e.ctx, kgo.TransactionEndTry(commit)); err != nil {
		e.t.Fatal(err)
	}
}

// markerOnly writes a transaction with no records on the source partition:
// a COMMIT or ABORT marker alone (a producer that added the partition and
// never wrote to it).
func (e *env) markerOnly(id, topic string, partition int32, commit bool) {
	e.t.Helper()
	tc := newTxnClient(e.src, e.srcAdm)
	x := &destTxn{id: id}
	if _, err := tc.identify(e.ctx, x, topic, partition); err != nil {
		e.t.Fatal(err)
	}
	if err := tc.add(e.ctx, x, topic, partition); err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := tc.end(e.ctx, x, commit); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) lastStable(cl *kgo.Client, topic string, partition int32) int64 {
	e.t.Helper()
	os, err := kadm.NewClient(cl).ListCommittedOffsets(e.ctx, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	o, _ := os.Lookup(topic, partition)
	return o.Offset
}

// Source transactions — interleaved producers, commits and aborts, a
// marker with no records, a transaction still open while copying — are
// replayed so that every record and marker lands at its source offset, and
// read_committed and read_uncommitted consumers see the same on both sides.
// The copy stops at the source's last stable offset while a transaction is
// open there.
func testTransactionalSource(t *testing.T, e *env) {
	const topic = "txn"
	e.createSource(topic, 1, nil)
	e.produce(topic, 0, 10, 5, kgo.NoCompression(), "plain")
	a, b := e.txnProducer("src-a"), e.txnProducer("src-b")
	e.begin(a)
	e.produceIn(a, topic, 0, 3, "a1")
	e.begin(b)
	e.produceIn(b, topic, 0, 2, "b1")
	e.produceIn(a, topic, 0, 2, "a2")
	e.end(a, true)
	e.produce(topic, 0, 5, 5, kgo.ZstdCompression(), "plain2")
	e.produceIn(b, topic, 0, 2, "b2")
	e.end(b, false)
	e.markerOnly("src-c", topic, 0, true)
	e.markerOnly("src-d", topic, 0, false)
	e.begin(a)
	e.produceIn(a, topic, 0, 4, "a3")
	e.end(a, true)
	// Still open while the copy starts.
	e.begin(b)
	e.produceIn(b, topic, 0, 3, "b3")
	e.produce(topic, 0, 3, 3, kgo.NoCompression(), "after-open")

	e.ensureDestination(topic)
	c := e.newCopier(Config{})
	defer c.Close()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: topic, Partition: 0, TransactionalID: "mirror-txn-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	lso := e.lastStable(e.src, topic, 0)
	eventually(t, "copied up to the source's last stable offset", time.Minute, func() bool {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd == lso
	})
	_, hw := e.offsets(e.srcAdm, topic, 0)
	pr, _ := c.Progress(topic, 0)
	if hw <= lso || pr.DestinationLogEnd != lso {
		t.Fatalf("source high watermark %d, last stable %d; destination log end %d, want the last stable offset", hw, lso, pr.DestinationLogEnd)
	}
	t.Logf("with a source transaction open at %d, the copy waits at the last stable offset %d (high watermark %d)", lso, lso, hw)
	e.end(b, true)
	last := e.sentinel(topic, 0)
	e.waitCopied(c, topic, 0)
	pr, err := c.Stop(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f := evs.failures(); len(f) > 0 {
		t.Fatalf("events: %+v", f)
	}
	n := e.verifyEntries(topic, 0, false)
	e.sameConsumers(topic, 0, last)
	if pr.Transactions != 6 || pr.OpenTransactions != 0 {
		t.Fatalf("progress %+v: want the 6 source markers replayed and none open", pr)
	}
	if dl := e.lastStable(e.dst, topic, 0); dl != last+1 {
		t.Fatalf("destination last stable offset %d, want %d", dl, last+1)
	}
	t.Logf("%d records and markers at identical offsets; %d source markers replayed", n, pr.Transactions)
}

// A copy stopped (handover) with a destination transaction open resumes
// in a new copier, which adopts the transaction instead of aborting it: the
// marker still lands at its source offset with the source's outcome.
func testTransactionResume(t *testing.T, e *env) {
	const topic = "txn-resume"
	e.createSource(topic, 1, nil)
	e.produce(topic, 0, 4, 2, kgo.NoCompression(), "plain")
	a := e.txnProducer("resume-a")
	e.begin(a)
	e.produceIn(a, topic, 0, 5, "a1")
	_, markerAt := e.offsets(e.srcAdm, topic, 0)
	e.end(a, true)
	e.produce(topic, 0, 4, 2, kgo.NoCompression(), "plain2")
	e.ensureDestination(topic)
	writer, err := NewWriter(e.ctx, e.dst)
	if err != nil {
		t.Fatal(err)
	}
	task := Task{Topic: topic, Partition: 0, TransactionalID: "mirror-txn-resume-0", Writer: &writer}

	first := e.newCopier(Config{})
	first.holdOpsFrom(topic, 0, markerAt)
	if err := first.Start(e.ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the transaction's records copied, its marker not yet", time.Minute, func() bool {
		pr, _ := first.Progress(topic, 0)
		return pr.DestinationLogEnd == markerAt
	})
	pr, err := first.Stop(topic, 0)
	if err != nil || pr.OpenTransactions != 1 {
		t.Fatalf("first copier stopped with %+v, %v; want one open transaction", pr, err)
	}
	first.Close()
	if dl := e.lastStable(e.dst, topic, 0); dl >= markerAt {
		t.Fatalf("destination last stable offset %d: the handed-over transaction should still be open", dl)
	}

	second := e.newCopier(Config{})
	defer second.Close()
	var evs events
	if err := second.Start(e.ctx, task, evs.on); err != nil {
		t.Fatal(err)
	}
	last := e.sentinel(topic, 0)
	e.waitCopied(second, topic, 0)
	if _, err := second.Stop(topic, 0); err != nil {
		t.Fatal(err)
	}
	if f := evs.failures(); len(f) > 0 {
		t.Fatalf("events: %+v", f)
	}
	e.verifyEntries(topic, 0, false)
	e.sameConsumers(topic, 0, last)
}

// Failover with a destination transaction open aborts it: the abort marker
// follows the last mirrored offset, and nothing of the transaction is
// visible to read_committed consumers of the destination.
func testFailoverAbortsOpenTransaction(t *testing.T, e *env) {
	const topic = "txn-failover"
	e.createSource(topic, 1, nil)
	e.produce(topic, 0, 3, 3, kgo.NoCompression(), "plain")
	a := e.txnProducer("failover-a")
	e.begin(a)
	e.produceIn(a, topic, 0, 3, "a1")
	_, markerAt := e.offsets(e.srcAdm, topic, 0)
	e.end(a, true)
	e.ensureDestination(topic)
	c := e.newCopier(Config{})
	defer c.Close()
	c.holdOpsFrom(topic, 0, markerAt)
	if err := c.Start(e.ctx, Task{Topic: topic, Partition: 0, TransactionalID: "mirror-txn-failover-0"}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "copied up to the marker", time.Minute, func() bool {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd == markerAt
	})
	pr, err := c.StopWith(topic, 0, StopFailover)
	if err != nil {
		t.Fatal(err)
	}
	if pr.DestinationLogEnd != markerAt || pr.AbortedAtFailover != 1 || pr.OpenTransactions != 0 {
		t.Fatalf("failover progress %+v: want last mirrored offset %d and one aborted transaction", pr, markerAt)
	}
	_, end := e.offsets(e.dstAdm, topic, 0)
	if lso := e.lastStable(e.dst, topic, 0); end != markerAt+1 || lso != end {
		t.Fatalf("destination log end %d, last stable %d; want both %d (the abort marker after the last mirrored offset)", end, lso, markerAt+1)
	}
	got := e.consumeAll(e.p.dst, topic, 0, true, 2)
	if len(got) != 3 {
		t.Fatalf("read_committed on the destination after failover: %v, want only the 3 plain records", got)
	}
}

// Compaction on the source leaves offsets with no record inside batches,
// and batches with none left. They are filled with invisible markers, so
// every surviving record keeps its offset and consumers see the same on
// both clusters.
func testCompactedSource(t *testing.T, e *env) {
	const topic = "compacted"
	e.createSource(topic, 1, compactedConfigs())
	write := e.keyWriter(topic, kgo.ZstdCompression())
	write("a", "b", "c", "d", "e", "f") // a, c and e are overwritten below
	write("g")
	write("tomb")
	eventually(t, "the source compacted batches", time.Minute, func() bool {
		write("a", "c", "e", "tomb") // new segments roll (segment.ms), older ones get cleaned
		return e.holesIn(e.src, topic) >= 6
	})
	e.stopCompaction(topic)
	e.ensureDestination(topic)
	c := e.newCopier(Config{})
	defer c.Close()
	pr, last := e.runCopy(c, topic, nil)
	n := e.verifyEntries(topic, 0, false)
	e.sameConsumers(topic, 0, last)
	e.sameLatestValues(topic, last)
	if pr.FillerMarkers == 0 {
		t.Fatalf("progress %+v: the compacted source should have needed marker filler", pr)
	}
	t.Logf("%d records at identical offsets; %d offsets without a record filled with markers", n, pr.FillerMarkers)
}

// The source keeps compacting while the copy runs (some batches are copied
// before their records are cleaned away, some after): offsets stay
// identical and the latest value of every key is the same on both clusters.
func testCompactionWhileMirroring(t *testing.T, e *env) {
	const topic = "compacting"
	e.createSource(topic, 1, compactedConfigs())
	write := e.keyWriter(topic, kgo.Lz4Compression())
	e.ensureDestination(topic)
	c := e.newCopier(Config{})
	defer c.Close()
	pr, last := e.runCopy(c, topic, func() {
		e.compactWhileCopying(c, topic, write)
	})
	n := e.verifyEntries(topic, 0, true)
	e.sameLatestValues(topic, last)
	if pr.FillerMarkers == 0 {
		t.Fatalf("progress %+v: the lagging copy should have met compacted batches", pr)
	}
	t.Logf("%d source records at identical offsets; %d offsets filled with markers", n, pr.FillerMarkers)
}

// compactWhileCopying writes keys so the source compacts: first while the
// copy lags (its fetches are held) and meets batches the cleaner has been
// through, then while it keeps up, and the cleaner goes through batches it
// has already copied.
func (e *env) compactWhileCopying(c *Copier, topic string, write func(keys ...string)) {
	t := e.t
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	c.hold(topic, 0, true, false)
	began := time.Now()
	for round := 0; ; round++ {
		write(keys[round%len(keys)], keys[(round*3+1)%len(keys)])
		if round%10 != 9 {
			continue
		}
		if h := e.holesIn(e.src, topic); round >= 40 && h >= 10 {
			t.Logf("%d rounds of writes; the source compacted %d offsets away before the copy read them", round+1, h)
			break
		}
		if time.Since(began) > time.Minute {
			t.Fatalf("the source compacted only %d offsets in a minute", e.holesIn(e.src, topic))
		}
	}
	c.hold(topic, 0, false, false)
	for round := 0; round < 60; round++ {
		write(keys[round%len(keys)], keys[(round*5+3)%len(keys)])
	}
}

// A rate limit paces the copy, and can be changed while it runs.
func testThrottledCopy(t *testing.T, e *env) {
	const topic = "throttled"
	e.createSource(topic, 1, nil)
	e.produce(topic, 0, 2000, 20, kgo.NoCompression(), "t")
	e.ensureDestination(topic)
	c := e.newCopier(Config{RateLimit: 20 << 10})
	defer c.Close()
	if err := c.Start(e.ctx, Task{Topic: topic, Partition: 0, TransactionalID: "mirror-throttled-0"}, nil); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	eventually(t, "some copied", time.Minute, func() bool {
		pr, _ := c.Progress(topic, 0)
		return pr.BytesCopied > 40<<10
	})
	el := time.Since(began)
	pr, _ := c.Progress(topic, 0)
	rate := float64(pr.BytesCopied) / el.Seconds()
	if rate > 3*(20<<10) {
		t.Fatalf("copied %d bytes in %v (%.0f B/s) under a 20 KiB/s limit", pr.BytesCopied, el, rate)
	}
	t.Logf("under a 20 KiB/s limit: %d bytes in %v (%.0f B/s)", pr.BytesCopied, el, rate)
	c.SetRateLimit(0)
	e.waitCopied(c, topic, 0)
	if _, err := c.Stop(topic, 0); err != nil {
		t.Fatal(err)
	}
	e.verifyPartition(topic, 0)
}

// runCopy starts copying partition 0 of topic, runs during (if any), then
// waits until the copy reaches a fresh sentinel record and stops it; any
// failure event fails the test. It returns the final progress and the
// sentinel's offset.
func (e *env) runCopy(c *Copier, topic string, during func()) (Progress, int64) {
	e.t.Helper()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: topic, Partition: 0, TransactionalID: "mirror-" + topic + "-0"}, evs.on); err != nil {
		e.t.Fatal(err)
	}
	if during != nil {
		during()
	}
	last := e.sentinel(topic, 0)
	e.waitCopied(c, topic, 0)
	pr, err := c.Stop(topic, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	if f := evs.failures(); len(f) > 0 {
		e.t.Fatalf("events: %+v", f)
	}
	return pr, last
}

func compactedConfigs() map[string]*string {
	return map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.ms":                kadm.StringPtr("100"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
		"min.compaction.lag.ms":     kadm.StringPtr("0"),
		"delete.retention.ms":       kadm.StringPtr("86400000"),
	}
}

// keyWriter returns a function that writes one batch of keyed records
// (key "tomb" is written as a tombstone).
func (e *env) keyWriter(topic string, codec kgo.CompressionCodec) func(keys ...string) {
	cl := e.client(e.p.src, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(0))
	n := 0
	return func(keys ...string) {
		e.t.Helper()
		var recs []*kgo.Record
		for _, k := range keys {
			n++
			r := &kgo.Record{Topic: topic, Key: []byte(k), Value: fmt.Appendf(nil, "%s-v%d", k, n)}
			if k == "tomb" {
				r.Value = nil
			}
			recs = append(recs, r)
		}
		if err := cl.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// holesIn counts source offsets below the high watermark with no record.
func (e *env) holesIn(cl *kgo.Client, topic string) int {
	holes := 0
	next := int64(-1)
	for _, b := range e.rawBatches(cl, topic, 0, 0) {
		if next >= 0 && b.BaseOffset > next {
			holes += int(b.BaseOffset - next)
		}
		holes += int(int64(b.LastOffsetDelta) + 1 - int64(b.NumRecords))
		next = b.NextOffset()
	}
	return holes
}

// stopCompaction makes every record of a compacted source topic too young to
// clean, and waits until a cleaning pass in progress is over (the holes stop
// changing), so that a copy can be compared offset for offset.
func (e *env) stopCompaction(topic string) {
	e.t.Helper()
	lag := "86400000"
	resps, err := e.srcAdm.AlterTopicConfigs(e.ctx, []kadm.AlterConfig{{Name: "min.compaction.lag.ms", Value: &lag}}, topic)
	if err == nil {
		err = resps[0].Err
	}
	if err != nil {
		e.t.Fatal(err)
	}
	prev, since := -1, time.Now()
	eventually(e.t, "source compaction settled", time.Minute, func() bool {
		h := e.holesIn(e.src, topic)
		if h != prev {
			prev, since = h, time.Now()
		}
		return time.Since(since) > time.Second
	})
}

// sameLatestValues checks the latest value of every key, read by consumers
// of both clusters up to offset last.
func (e *env) sameLatestValues(topic string, last int64) {
	e.t.Helper()
	latest := func(recs []string) map[string]string {
		m := map[string]string{}
		for _, r := range recs {
			_, kv, _ := strings.Cut(r, ":")
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	s := latest(e.consumeAll(e.p.src, topic, 0, false, last))
	d := latest(e.consumeAll(e.p.dst, topic, 0, false, last))
	if fmt.Sprint(s) != fmt.Sprint(d) {
		e.t.Fatalf("%s: latest values differ:\nsource      %v\ndestination %v", topic, s, d)
	}
	e.t.Logf("%s: latest values of %d keys alike on both clusters", topic, len(s))
}

// Two owners of one partition: the old one (A) is frozen with batches
// fetched but not written, the new one (B) takes over with the same writer
// and copies on. When A wakes up, the lease it asks first holds it back;
// and should A still write (it passed the lease check just before it froze),
// its writes are the very ones B made: the destination deduplicates them.
// No duplicate, no misaligned offset either way.
func testZombie(t *testing.T, e *env) {
	for _, leased := range []bool{true, false} {
		t.Run(fmt.Sprintf("leased=%v", leased), func(t *testing.T) {
			e := newEnv(t, e.p)
			topic := fmt.Sprintf("zombie-%v", leased)
			e.createSource(topic, 1, nil)
			e.produce(topic, 0, 100, 10, kgo.ZstdCompression(), "z1")
			e.ensureDestination(topic)
			writer, err := NewWriter(e.ctx, e.dst)
			if err != nil {
				t.Fatal(err)
			}
			task := Task{Topic: topic, Partition: 0, TransactionalID: "mirror-" + topic + "-0", Writer: &writer}
			var lost atomic.Bool
			a := e.newCopier(Config{Lease: func() error {
				if leased && lost.Load() {
					return fmt.Errorf("lease lost")
				}
				return nil
			}})
			defer a.Close()
			var aEvs events
			if err := a.Start(e.ctx, task, aEvs.on); err != nil {
				t.Fatal(err)
			}
			e.waitCopied(a, topic, 0)
			a.hold(topic, 0, false, true) // A fetches but does not append
			e.produce(topic, 0, 50, 10, kgo.ZstdCompression(), "z2")
			eventually(t, "A buffered the new batches", 30*time.Second, func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return len(a.parts[topicPartition{topic, 0}].queue) > 0
			})
			lost.Store(true)
			before, _ := a.Progress(topic, 0)

			b := e.newCopier(Config{})
			defer b.Close()
			var bEvs events
			if err := b.Start(e.ctx, task, bEvs.on); err != nil {
				t.Fatal(err)
			}
			e.waitCopied(b, topic, 0)
			a.hold(topic, 0, false, false) // the zombie wakes up
			e.produce(topic, 0, 30, 10, kgo.ZstdCompression(), "z3")
			e.waitCopied(b, topic, 0)
			if _, err := b.Stop(topic, 0); err != nil {
				t.Fatal(err)
			}
			pa, errA := a.Stop(topic, 0)
			if f := bEvs.failures(); len(f) > 0 {
				t.Fatalf("B events: %+v", f)
			}
			for _, ev := range aEvs.failures() {
				if ev.Kind == EventNonRetriable {
					t.Fatalf("A failed non-retriably: %v", ev.Err)
				}
			}
			if leased && pa.RecordsCopied != before.RecordsCopied {
				t.Fatalf("A copied %d records after losing its lease", pa.RecordsCopied-before.RecordsCopied)
			}
			t.Logf("A stopped with %v after copying %d records", errA, pa.RecordsCopied)
			e.verifyPartition(topic, 0)
		})
	}
}

// The broker behaviour the transaction replay rests on, checked on the
// real broker (KAFKA-FACTS.md): an empty transaction's marker takes exactly
// one offset and no consumer sees it; on a transaction.version 2 destination
// EndTxn bumps the epoch, a repeated EndTxn of the old epoch writes nothing,
// and the old epoch can no longer begin a transaction; re-initialising an id
// with an open transaction aborts it at once (why ids are never
// re-initialised).
func testTransactionFacts(t *testing.T, e *env) {
	const topic = "txn-facts"
	e.createSource(topic, 1, nil)
	e.ensureDestination(topic)
	tc := newTxnClient(e.dst, e.dstAdm)
	_, end := e.offsets(e.dstAdm, topic, 0)

	x := &destTxn{id: "facts-empty"}
	if _, err := tc.identify(e.ctx, x, topic, 0); err != nil {
		t.Fatal(err)
	}
	epoch := x.epoch
	if err := tc.add(e.ctx, x, topic, 0); err != nil {
		t.Fatal(err)
	}
	pid, next, err := tc.end(e.ctx, x, false)
	if err != nil {
		t.Fatal(err)
	}
	end++
	eventually(t, "the marker landed", 10*time.Second, func() bool { _, e2 := e.offsets(e.dstAdm, topic, 0); return e2 == end })
	if next != epoch+1 || pid != x.pid {
		t.Fatalf("EndTxn returned producer %d epoch %d, want %d epoch %d (transaction.version 2 bumps the epoch)", pid, next, x.pid, epoch+1)
	}
	t.Logf("fact: an empty aborted transaction puts one marker at the log end; EndTxn moved the epoch %d -> %d", epoch, next)

	// The same EndTxn again (an old owner repeating it): answered, no marker.
	if _, _, err := tc.end(e.ctx, x, false); err != nil {
		t.Fatalf("repeated EndTxn of epoch %d: %v, want it answered as a retry", epoch, err)
	}
	if err := tc.add(e.ctx, x, topic, 0); !isErr(err, kerr.ProducerFenced) {
		t.Fatalf("AddPartitionsToTxn with the old epoch %d: %v, want PRODUCER_FENCED", epoch, err)
	}
	if _, e2 := e.offsets(e.dstAdm, topic, 0); e2 != end {
		t.Fatalf("log end %d after a repeated EndTxn, want %d", e2, end)
	}
	t.Logf("fact: a repeated EndTxn of the previous epoch writes no marker; the previous epoch cannot begin again")

	// Re-initialising an id whose transaction is open aborts it.
	y := &destTxn{id: "facts-reinit"}
	if _, err := tc.identify(e.ctx, y, topic, 0); err != nil {
		t.Fatal(err)
	}
	if err := tc.add(e.ctx, y, topic, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tc.initialise(e.ctx, y.id); err != nil {
		t.Fatal(err)
	}
	end++
	eventually(t, "the abort marker of the re-initialised id landed", 10*time.Second, func() bool {
		_, e2 := e.offsets(e.dstAdm, topic, 0)
		return e2 == end
	})
	t.Logf("fact: InitProducerId on an id with an open transaction aborts it and writes its marker")
	plain := e.client(e.p.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r := &kgo.Record{Topic: topic, Key: []byte("after"), Value: []byte("markers")}
	if err := plain.ProduceSync(e.ctx, r).FirstErr(); err != nil || r.Offset != end {
		t.Fatalf("record after the markers: offset %d, %v; want %d", r.Offset, err, end)
	}
	for _, committed := range []bool{false, true} {
		if got := e.consumeAll(e.p.dst, topic, 0, committed, r.Offset); len(got) != 1 {
			t.Fatalf("read_committed=%v: a consumer saw %v; the markers before the record must be invisible", committed, got)
		}
	}
}

// Pausing with a destination transaction open copies on to the next point
// where none is open, so no transaction is left for the destination to time
// out and abort while the partition rests.
func testPauseAtQuietPoint(t *testing.T, e *env) {
	const topic = "txn-pause"
	e.createSource(topic, 1, nil)
	a := e.txnProducer("pause-a")
	e.begin(a)
	e.produceIn(a, topic, 0, 3, "a1")
	_, markerAt := e.offsets(e.srcAdm, topic, 0)
	e.end(a, true)
	e.produce(topic, 0, 4, 2, kgo.NoCompression(), "after")
	e.ensureDestination(topic)
	c := e.newCopier(Config{})
	defer c.Close()
	c.holdOpsFrom(topic, 0, markerAt)
	if err := c.Start(e.ctx, Task{Topic: topic, Partition: 0, TransactionalID: "mirror-txn-pause-0"}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the transaction open on the destination", time.Minute, func() bool {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd == markerAt && pr.OpenTransactions == 1
	})
	type stopped struct {
		pr  Progress
		err error
	}
	done := make(chan stopped, 1)
	go func() {
		pr, err := c.StopWith(topic, 0, StopQuiet)
		done <- stopped{pr, err}
	}()
	c.holdOpsFrom(topic, 0, -1)
	s := <-done
	if s.err != nil || s.pr.OpenTransactions != 0 || s.pr.DestinationLogEnd <= markerAt {
		t.Fatalf("paused with %+v, %v; want past the marker at %d with no transaction open", s.pr, s.err, markerAt)
	}
	if lso := e.lastStable(e.dst, topic, 0); lso != s.pr.DestinationLogEnd {
		t.Fatalf("destination last stable offset %d, log end %d: a transaction is still open", lso, s.pr.DestinationLogEnd)
	}
}

// TestRealTxnCoordinatorCrash kills (SIGKILL) the broker that coordinates a
// destination transactional id: describing the id, beginning its next
// transaction and ending it must reach the coordinator on its new broker.
// kgo's own routing kept the dead broker for AddPartitionsToTxn and
// DescribeTransactions for as long as the client lived (txncoord.go).
func TestRealTxnCoordinatorCrash(t *testing.T) {
	kafkatest.RequireReal(t)
	c := kafkatest.Start(t, kafkatest.Brokers(3))
	e := newEnv(t, &pair{src: c, dst: c})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	const topic = "coordinator-crash"
	resp, err := e.dstAdm.CreateTopic(e.ctx, 1, 3, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := waitPartitionsLed(e.ctx, e.dstAdm, topic, 1); err != nil {
		t.Fatal(err)
	}
	tc := newTxnClient(e.dst, e.dstAdm)
	x := &destTxn{id: "coordinator-crash-p1"}
	begin := func(x *destTxn) error {
		if !x.known {
			if _, err := tc.identify(e.ctx, x, topic, 0); err != nil {
				return err
			}
		}
		return tc.add(e.ctx, x, topic, 0)
	}
	if err := begin(x); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tc.end(e.ctx, x, false); err != nil {
		t.Fatal(err)
	}
	found := e.dstAdm.FindTxnCoordinators(e.ctx, x.id)[x.id]
	if found.Err != nil {
		t.Fatal(found.Err)
	}
	i := slices.Index(c.NodeIDs(), found.NodeID)
	if i < 0 {
		t.Fatalf("coordinator %d is not a broker of the cluster %v", found.NodeID, c.NodeIDs())
	}
	c.KillBroker(t, i)
	t.Logf("killed broker %d, the coordinator of %s", found.NodeID, x.id)
	// A new owner's first steps (describe, then begin), each retried as the
	// copier retries a failed control operation.
	y := &destTxn{id: x.id}
	var last error
	eventually(t, "a transaction begins at the new coordinator", 3*time.Minute, func() bool {
		last = begin(y)
		if last != nil {
			t.Logf("not yet: %v", last)
		}
		return last == nil
	})
	if _, _, err := tc.end(e.ctx, y, false); err != nil {
		t.Fatal(err)
	}
	now := e.dstAdm.FindTxnCoordinators(e.ctx, x.id)[x.id]
	t.Logf("%s began and ended at coordinator %d after broker %d died", x.id, now.NodeID, found.NodeID)
}
