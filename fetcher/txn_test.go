package fetcher

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/polltest"
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
	if _, _, err := tc.identify(e.ctx, x, topic, partition); err != nil {
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
	polltest.Eventually(t, time.Minute, "copied up to the source's last stable offset", func() (bool, string) {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd == lso, ""
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
	polltest.Eventually(t, time.Minute, "the transaction's records copied, its marker not yet", func() (bool, string) {
		pr, _ := first.Progress(topic, 0)
		return pr.DestinationLogEnd == markerAt, ""
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
	polltest.Eventually(t, time.Minute, "copied up to the marker", func() (bool, string) {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd == markerAt, ""
	})
	pr, err := c.StopWith(topic, 0, datapath.StopFailover)
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
	polltest.Eventually(t, time.Minute, "some copied", func() (bool, string) {
		pr, _ := c.Progress(topic, 0)
		return pr.BytesCopied > 40<<10, ""
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
func (e *env) runCopy(c *Copier, topic string, during func()) (datapath.Progress, int64) {
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
	polltest.Eventually(t, time.Minute, "the transaction open on the destination", func() (bool, string) {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd == markerAt && pr.OpenTransactions == 1, ""
	})
	type stopped struct {
		pr  datapath.Progress
		err error
	}
	done := make(chan stopped, 1)
	go func() {
		pr, err := c.StopWith(topic, 0, datapath.StopPause)
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
