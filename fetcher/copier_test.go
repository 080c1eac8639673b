package fetcher

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

// TestRealKafka proves the data path on two real Apache Kafka clusters (a
// source and a destination) shared by the subtests, one topic each.
func TestRealKafka(t *testing.T) {
	p := sharedPair(t)
	sub := func(name string, f func(t *testing.T, e *env)) {
		t.Run(name, func(t *testing.T) {
			snap := goleak.IgnoreCurrent()
			// Registered first, so it runs after every other cleanup
			// (clients closed): the Copier must have left nothing behind.
			t.Cleanup(func() {
				began := time.Now()
				goleak.VerifyNone(t, snap)
				t.Logf("goleak check took %v", time.Since(began))
			})
			began := time.Now()
			f(t, newEnv(t, p))
			t.Logf("test body took %v", time.Since(began))
		})
	}
	sub("DestinationTopic", testDestinationTopic)
	sub("AllCodecs", testAllCodecs)
	sub("SourceLogStart", testSourceLogStart)
	sub("StopAndResume", testStopAndResume)
	sub("CrashAndResume", testCrashAndResume)
	sub("Zombie", testZombie)
	sub("DirectWriteToDestination", testDirectWrite)
	sub("RetentionGap", testRetentionGap)
	sub("AlignFunction", testAlign)
	sub("Diverged", testDiverged)
	sub("KafkaFacts", testKafkaFacts)
	sub("SourceTopicDeleted", testSourceTopicDeleted)
	sub("SourceTopicRecreated", testSourceTopicRecreated)
	sub("BatchTooLarge", testBatchTooLarge)
	sub("LogAppendTime", testLogAppendTime)
	sub("TransactionFacts", testTransactionFacts)
	sub("TransactionalSource", testTransactionalSource)
	sub("TransactionResume", testTransactionResume)
	sub("FailoverAbortsOpenTransaction", testFailoverAbortsOpenTransaction)
	sub("PauseAtQuietPoint", testPauseAtQuietPoint)
	sub("CompactedSource", testCompactedSource)
	sub("CompactionWhileMirroring", testCompactionWhileMirroring)
	sub("ThrottledCopy", testThrottledCopy)
}

func testDestinationTopic(t *testing.T, e *env) {
	retention := "123456789"
	e.createSource("topic-cfg", 3, map[string]*string{
		"retention.ms":        &retention,
		"min.insync.replicas": kadm.StringPtr("1"),
		"compression.type":    kadm.StringPtr("gzip"),
	})
	d := e.ensureDestination("topic-cfg")
	if d.Partitions != 3 || d.ID == ([16]byte{}) {
		t.Fatalf("destination %+v", d)
	}
	rcs, err := e.dstAdm.DescribeTopicConfigs(e.ctx, "topic-cfg")
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On("topic-cfg", nil)
	got := map[string]kadm.Config{}
	for _, c := range rc.Configs {
		got[c.Key] = c
	}
	maxLong := strconv.FormatInt(math.MaxInt64, 10)
	for k, want := range map[string]string{
		"retention.ms": retention, "compression.type": "producer", "message.timestamp.type": "CreateTime",
		"message.timestamp.before.max.ms": maxLong, "message.timestamp.after.max.ms": maxLong,
	} {
		c := got[k]
		if v := c.MaybeValue(); v != want {
			t.Errorf("destination %s = %q, want %q", k, v, want)
		}
	}
	if c := got["min.insync.replicas"]; c.Source == 1 { // DYNAMIC_TOPIC_CONFIG
		t.Errorf("min.insync.replicas was copied: %+v", c)
	}
	// Growing: the source gets partitions, the destination follows.
	if _, err := e.srcAdm.UpdatePartitions(e.ctx, 5, "topic-cfg"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "source has 5 partitions", 30*time.Second, func() bool {
		td, err := e.srcAdm.ListTopics(e.ctx, "topic-cfg")
		return err == nil && len(td["topic-cfg"].Partitions) == 5
	})
	if d2 := e.ensureDestination("topic-cfg"); d2.Partitions != 5 || d2.ID != d.ID {
		t.Fatalf("after growth: %+v (was %+v)", d2, d)
	}
	// More partitions on the destination than on the source: refused.
	e.createSource("topic-cfg-small", 1, nil)
	if resp, err := e.dstAdm.CreateTopic(e.ctx, 2, 1, nil, "topic-cfg-small"); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	if _, err := EnsureDestinationTopic(e.ctx, e.srcAdm, e.dstAdm, "topic-cfg-small", nil); err == nil {
		t.Fatal("a destination with more partitions than the source was accepted")
	}
}

// (a) 3 topics x 4 partitions, every codec, keys, headers, old timestamps.
func testAllCodecs(t *testing.T, e *env) {
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()}, {"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()},
		{"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
	}
	topics := []string{"codecs-a", "codecs-b", "codecs-c"}
	for _, topic := range topics {
		e.createSource(topic, 4, nil)
		for p := int32(0); p < 4; p++ {
			for i, c := range codecs {
				e.produce(topic, p, 60+int(p)*10, 7+i, c.codec, c.name)
			}
		}
		e.ensureDestination(topic)
	}
	c := e.newCopier(Config{FetchMaxBytes: 8 << 10})
	defer c.Close()
	var evs events
	for _, topic := range topics {
		for p := int32(0); p < 4; p++ {
			if err := c.Start(e.ctx, Task{Topic: topic, Partition: p, TransactionalID: fmt.Sprintf("mirror-m1-%s-%d", topic, p)}, evs.on); err != nil {
				t.Fatal(err)
			}
		}
	}
	total := 0
	for _, topic := range topics {
		for p := int32(0); p < 4; p++ {
			e.waitCopied(c, topic, p)
			pr, err := c.Stop(topic, p)
			if err != nil {
				t.Fatalf("%s/%d: %v", topic, p, err)
			}
			total += e.verifyPartition(topic, p)
			if pr.RecordsCopied == 0 || pr.BytesCopied == 0 || pr.LastCopiedTimestamp.After(time.Now().Add(-71*time.Hour)) {
				t.Fatalf("%s/%d progress %+v", topic, p, pr)
			}
		}
	}
	if f := evs.failures(); len(f) > 0 {
		t.Fatalf("events: %+v", f)
	}
	// Every codec reached the destination as such.
	seen := map[Compression]bool{}
	for _, b := range e.rawBatches(e.dst, "codecs-a", 0, 0) {
		seen[b.Compression()] = true
	}
	if len(seen) != 5 {
		t.Fatalf("destination codecs %v, want all 5", seen)
	}
	t.Logf("copied and verified %d records in 12 partitions, byte-identical batches in 5 codecs", total)
}

// (b) Source log start > 0, inside a batch: the destination starts there too.
func testSourceLogStart(t *testing.T, e *env) {
	e.createSource("logstart", 1, nil)
	e.produce("logstart", 0, 1000, 10, kgo.ZstdCompression(), "ls")
	var del kadm.Offsets
	del.AddOffset("logstart", 0, 505, -1) // inside the batch 500..509
	if r, err := e.srcAdm.DeleteRecords(e.ctx, del); err != nil || r.Error() != nil {
		t.Fatal(err, r.Error())
	}
	e.ensureDestination("logstart")
	c := e.newCopier(Config{})
	defer c.Close()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: "logstart", Partition: 0, TransactionalID: "mirror-ls-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	e.waitCopied(c, "logstart", 0)
	eventually(t, "destination log start 505", 30*time.Second, func() bool {
		s, _ := e.offsets(e.dstAdm, "logstart", 0)
		return s == 505
	})
	gap, ok := evs.find(EventGapFilled)
	if !ok || gap.From != 0 || gap.To != 500 {
		t.Fatalf("gap event %+v (found %v), want filler 0..500", gap, ok)
	}
	if _, err := c.Stop("logstart", 0); err != nil {
		t.Fatal(err)
	}
	n := e.verifyPartition("logstart", 0)
	if n != 495 {
		t.Fatalf("verified %d records, want 495", n)
	}
	// The next source record lands at the same offset.
	e.produce("logstart", 0, 1, 1, kgo.NoCompression(), "after")
	if err := c.Start(e.ctx, Task{Topic: "logstart", Partition: 0, TransactionalID: "mirror-ls-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	e.waitCopied(c, "logstart", 0)
	if _, err := c.Stop("logstart", 0); err != nil {
		t.Fatal(err)
	}
	e.verifyPartition("logstart", 0)
}

// (c) Stop mid-copy, resume with a new Copier: no duplicate, no gap.
func testStopAndResume(t *testing.T, e *env) {
	e.createSource("resume", 2, nil)
	for p := int32(0); p < 2; p++ {
		e.produce("resume", p, 6000, 20, kgo.Lz4Compression(), "r")
	}
	e.ensureDestination("resume")
	a := e.newCopier(Config{FetchMaxBytes: 4 << 10, MaxBufferedBytes: 64 << 10})
	for p := int32(0); p < 2; p++ {
		if err := a.Start(e.ctx, Task{Topic: "resume", Partition: p, TransactionalID: fmt.Sprintf("mirror-resume-%d", p)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "copy under way", time.Minute, func() bool {
		pr, _ := a.Progress("resume", 0)
		return pr.DestinationLogEnd > 500
	})
	for p := int32(0); p < 2; p++ {
		pr, err := a.Stop("resume", p)
		if err != nil {
			t.Fatal(err)
		}
		_, end := e.offsets(e.dstAdm, "resume", p)
		if pr.DestinationLogEnd != end {
			t.Fatalf("Stop reported log end %d, destination has %d", pr.DestinationLogEnd, end)
		}
		if p == 0 && end >= 6000 {
			t.Fatalf("copy finished before Stop; the test needs it mid-way")
		}
	}
	a.Close()
	b := e.newCopier(Config{})
	defer b.Close()
	for p := int32(0); p < 2; p++ {
		if err := b.Start(e.ctx, Task{Topic: "resume", Partition: p, TransactionalID: fmt.Sprintf("mirror-resume-%d", p)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for p := int32(0); p < 2; p++ {
		e.waitCopied(b, "resume", p)
		if _, err := b.Stop("resume", p); err != nil {
			t.Fatal(err)
		}
		e.verifyPartition("resume", p)
	}
}

// (c') Abandon a copier without Stop (a crash), resume with a new one.
func testCrashAndResume(t *testing.T, e *env) {
	e.createSource("crash", 1, nil)
	e.produce("crash", 0, 6000, 20, kgo.SnappyCompression(), "c")
	e.ensureDestination("crash")
	a := e.newCopier(Config{FetchMaxBytes: 4 << 10, MaxBufferedBytes: 64 << 10})
	if err := a.Start(e.ctx, Task{Topic: "crash", Partition: 0, TransactionalID: "mirror-crash-0"}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "copy under way", time.Minute, func() bool {
		pr, _ := a.Progress("crash", 0)
		return pr.DestinationLogEnd > 500
	})
	a.Close() // no Stop: in-flight work is abandoned
	b := e.newCopier(Config{})
	defer b.Close()
	var evs events
	if err := b.Start(e.ctx, Task{Topic: "crash", Partition: 0, TransactionalID: "mirror-crash-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	e.waitCopied(b, "crash", 0)
	if _, err := b.Stop("crash", 0); err != nil {
		t.Fatal(err)
	}
	e.verifyPartition("crash", 0)
}

// (d) A zombie: copier A holds a fetched batch; copier B takes over (epoch
// bump) and appends; A's late append is fenced; nothing is duplicated.
// (e) Someone writes to the destination partition directly: the copier's next
// append lands at the wrong offset and the partition fails, non-retriable.
func testDirectWrite(t *testing.T, e *env) {
	e.createSource("direct", 1, nil)
	e.produce("direct", 0, 50, 10, kgo.NoCompression(), "d1")
	e.ensureDestination("direct")
	c := e.newCopier(Config{})
	defer c.Close()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: "direct", Partition: 0, TransactionalID: "mirror-direct-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	e.waitCopied(c, "direct", 0)
	w := e.client(e.p.dst)
	if err := w.ProduceSync(e.ctx, &kgo.Record{Topic: "direct", Value: []byte("intruder")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.produce("direct", 0, 10, 10, kgo.NoCompression(), "d2")
	eventually(t, "offset mismatch reported", 30*time.Second, func() bool {
		_, ok := evs.find(EventNonRetriable)
		return ok
	})
	ev, _ := evs.find(EventNonRetriable)
	if !isErr(ev.Err, ErrOffsetMismatch) {
		t.Fatalf("event %v, want ErrOffsetMismatch", ev.Err)
	}
	t.Logf("reported: %v", ev.Err)
	_, endAfter := e.offsets(e.dstAdm, "direct", 0)
	e.produce("direct", 0, 10, 10, kgo.NoCompression(), "d3")
	if _, err := c.Stop("direct", 0); !isErr(err, ErrOffsetMismatch) {
		t.Fatalf("Stop: %v", err)
	}
	if _, end := e.offsets(e.dstAdm, "direct", 0); end != endAfter {
		t.Fatalf("destination grew from %d to %d after the mismatch", endAfter, end)
	}
}

// (f) Source retention removes records the copier has not copied yet: the
// gap is filled (event), the destination log start follows, later records
// keep identical offsets.
func testRetentionGap(t *testing.T, e *env) {
	e.createSource("gap", 1, nil)
	e.produce("gap", 0, 100, 10, kgo.GzipCompression(), "g1")
	e.ensureDestination("gap")
	c := e.newCopier(Config{})
	defer c.Close()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: "gap", Partition: 0, TransactionalID: "mirror-gap-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	e.waitCopied(c, "gap", 0)
	c.hold("gap", 0, true, false) // the copier falls behind
	e.produce("gap", 0, 100, 10, kgo.GzipCompression(), "g2")
	var del kadm.Offsets
	del.AddOffset("gap", 0, 150, -1) // retention passes offsets 100..149
	if r, err := e.srcAdm.DeleteRecords(e.ctx, del); err != nil || r.Error() != nil {
		t.Fatal(err, r.Error())
	}
	e.produce("gap", 0, 20, 10, kgo.GzipCompression(), "g3")
	c.hold("gap", 0, false, false)
	e.waitCopied(c, "gap", 0)
	// A fetch already waiting at 100 when the hold began may have brought
	// some of 100..149 before DeleteRecords: the gap starts where the copy
	// stood.
	ev, ok := evs.find(EventGapFilled)
	if !ok || ev.From < 100 || ev.From >= 150 || ev.To != 150 {
		t.Fatalf("gap event %+v (found %v), want From in 100..149, To 150", ev, ok)
	}
	eventually(t, "destination log start 150", 30*time.Second, func() bool {
		s, _ := e.offsets(e.dstAdm, "gap", 0)
		return s == 150
	})
	pr, err := c.Stop("gap", 0)
	if err != nil {
		t.Fatal(err)
	}
	if pr.FillerRecords != 150-ev.From {
		t.Fatalf("progress %+v, want %d filler records", pr, 150-ev.From)
	}
	e.verifyPartition("gap", 0)
}

// Align on its own (PREPARING): an empty destination reaches the source log
// start, through filler, then DeleteRecords.
func testAlign(t *testing.T, e *env) {
	e.createSource("align", 1, nil)
	e.produce("align", 0, 300, 100, kgo.NoCompression(), "a")
	var del kadm.Offsets
	del.AddOffset("align", 0, 200, -1)
	if r, err := e.srcAdm.DeleteRecords(e.ctx, del); err != nil || r.Error() != nil {
		t.Fatal(err, r.Error())
	}
	e.ensureDestination("align")
	a, err := Align(e.ctx, e.src, e.dst, "align", 0, ProducerIdentity{ID: -1})
	if err != nil {
		t.Fatal(err)
	}
	if a.Filled != 200 || a.DestinationLogEnd != 200 || a.DestinationLogStart != 200 || a.PendingLogStart != 0 {
		t.Fatalf("alignment %+v", a)
	}
	if s, end := e.offsets(e.dstAdm, "align", 0); s != 200 || end != 200 {
		t.Fatalf("destination log %d..%d, want 200..200", s, end)
	}
	c := e.newCopier(Config{})
	defer c.Close()
	if err := c.Start(e.ctx, Task{Topic: "align", Partition: 0, TransactionalID: "mirror-align-0"}, nil); err != nil {
		t.Fatal(err)
	}
	e.waitCopied(c, "align", 0)
	if _, err := c.Stop("align", 0); err != nil {
		t.Fatal(err)
	}
	e.verifyPartition("align", 0)
}

// A destination ahead of the source has diverged: never truncated, refused.
func testDiverged(t *testing.T, e *env) {
	e.createSource("diverged", 1, nil)
	e.produce("diverged", 0, 10, 10, kgo.NoCompression(), "s")
	e.ensureDestination("diverged")
	w := e.client(e.p.dst)
	for i := 0; i < 15; i++ {
		if err := w.ProduceSync(e.ctx, &kgo.Record{Topic: "diverged", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	c := e.newCopier(Config{})
	defer c.Close()
	err := c.Start(e.ctx, Task{Topic: "diverged", Partition: 0, TransactionalID: "mirror-diverged-0"}, nil)
	if !isErr(err, ErrDiverged) {
		t.Fatalf("Start: %v, want ErrDiverged", err)
	}
	t.Logf("refused: %v", err)
	if _, err := Align(e.ctx, e.src, e.dst, "diverged", 0, ProducerIdentity{ID: -1}); !isErr(err, ErrDiverged) {
		t.Fatalf("Align: %v, want ErrDiverged", err)
	}
}

// testKafkaFacts checks on the real broker the behaviours the copier relies
// on (KAFKA-FACTS.md), and logs what it sees.
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

// The source topic is deleted under a running copy: non-retriable.
func testSourceTopicDeleted(t *testing.T, e *env) {
	e.createSource("deleted", 1, nil)
	e.produce("deleted", 0, 10, 10, kgo.NoCompression(), "x")
	e.ensureDestination("deleted")
	c := e.newCopier(Config{})
	defer c.Close()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: "deleted", Partition: 0, TransactionalID: "mirror-deleted-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	e.waitCopied(c, "deleted", 0)
	if _, err := e.srcAdm.DeleteTopic(e.ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "source topic deletion reported", 30*time.Second, func() bool {
		_, ok := evs.find(EventNonRetriable)
		return ok
	})
	ev, _ := evs.find(EventNonRetriable)
	if !isErr(ev.Err, ErrSourceTopicChanged) {
		t.Fatalf("event %v, want ErrSourceTopicChanged", ev.Err)
	}
	t.Logf("reported: %v", ev.Err)
	if _, err := c.Stop("deleted", 0); !isErr(err, ErrSourceTopicChanged) {
		t.Fatalf("Stop: %v", err)
	}
}

// A mirror that recorded the source topic id refuses a re-created topic.
func testSourceTopicRecreated(t *testing.T, e *env) {
	e.createSource("recreated", 1, nil)
	e.ensureDestination("recreated")
	td, err := e.srcAdm.ListTopics(kadm.WithAuthorizedOps(e.ctx), "recreated")
	if err != nil {
		t.Fatal(err)
	}
	oldID := td["recreated"].ID
	if _, err := e.srcAdm.DeleteTopic(e.ctx, "recreated"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "source topic re-created", 30*time.Second, func() bool {
		resp, err := e.srcAdm.CreateTopic(e.ctx, 1, 1, nil, "recreated")
		return err == nil && resp.Err == nil
	})
	if err := waitPartitionsLed(kadm.WithAuthorizedOps(e.ctx), e.srcAdm, "recreated", 1); err != nil {
		t.Fatal(err)
	}
	c := e.newCopier(Config{})
	defer c.Close()
	var startErr error
	eventually(t, "Start refuses the re-created topic", 30*time.Second, func() bool {
		startErr = c.Start(e.ctx, Task{Topic: "recreated", Partition: 0, SourceTopicID: oldID, TransactionalID: "mirror-recreated-0"}, nil)
		return isErr(startErr, ErrSourceTopicChanged)
	})
	t.Logf("refused: %v", startErr)
}

// A source batch over the destination's max.message.bytes: a clear,
// non-retriable error (here the destination topic existed with the default
// limit while the source allows 3 MB batches).
func testBatchTooLarge(t *testing.T, e *env) {
	e.createSource("large", 1, map[string]*string{"max.message.bytes": kadm.StringPtr("3000000")})
	if resp, err := e.dstAdm.CreateTopic(e.ctx, 1, 1, nil, "large"); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	e.ensureDestination("large")
	e.produce("large", 0, 5, 5, kgo.NoCompression(), "small")
	w := e.client(e.p.src, kgo.ProducerBatchMaxBytes(2500000), kgo.MaxBufferedBytes(10<<20),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	big := make([]byte, 2_000_000)
	for i, r := 0, rand.New(rand.NewPCG(1, 2)); i < len(big); i += 8 {
		binary.LittleEndian.PutUint64(big[i:], r.Uint64())
	}
	if err := w.ProduceSync(e.ctx, &kgo.Record{Topic: "large", Value: big}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := e.newCopier(Config{})
	defer c.Close()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: "large", Partition: 0, TransactionalID: "mirror-large-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	eventually(t, "batch too large reported", 30*time.Second, func() bool {
		_, ok := evs.find(EventNonRetriable)
		return ok
	})
	ev, _ := evs.find(EventNonRetriable)
	if !isErr(ev.Err, ErrBatchTooLarge) {
		t.Fatalf("event %v, want ErrBatchTooLarge", ev.Err)
	}
	t.Logf("reported: %v", ev.Err)
	pr, _ := c.Stop("large", 0)
	if pr.DestinationLogEnd != 5 {
		t.Fatalf("destination log end %d, want 5 (the batches before the large one)", pr.DestinationLogEnd)
	}
}

// testLogAppendTime checks what a CreateTime destination does with a batch
// from a LogAppendTime source topic, kept byte for byte otherwise.
func testLogAppendTime(t *testing.T, e *env) {
	e.createSource("lat", 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")})
	e.produce("lat", 0, 5, 5, kgo.ZstdCompression(), "lat")
	src := e.rawBatches(e.src, "lat", 0, 0)
	if len(src) != 1 || !src[0].LogAppendTime() {
		t.Fatalf("source batches %+v", src)
	}
	e.createSource("lat-dst", 1, nil) // a source topic name, created on the source cluster only to have a name
	if resp, err := e.dstAdm.CreateTopic(e.ctx, 1, 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("CreateTime"),
		"message.timestamp.before.max.ms": kadm.StringPtr(strconv.FormatInt(math.MaxInt64, 10))}, "lat-dst"); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	if err := waitPartitionsLed(kadm.WithAuthorizedOps(e.ctx), e.dstAdm, "lat-dst", 1); err != nil {
		t.Fatal(err)
	}
	raw := append([]byte(nil), src[0].Raw...)
	Rewrite(raw, -1, -1, -1)
	if _, err := produceOne(e.ctx, e.dst, "lat-dst", 0, raw); err != nil {
		t.Fatal(err)
	}
	dst := e.rawBatches(e.dst, "lat-dst", 0, 0)
	t.Logf("fact: LogAppendTime source batch: attributes %#x maxTimestamp %d firstTimestamp %d; on a CreateTime destination: attributes %#x maxTimestamp %d firstTimestamp %d; records section identical: %v",
		src[0].Attributes, src[0].MaxTimestamp, src[0].FirstTimestamp, dst[0].Attributes, dst[0].MaxTimestamp, dst[0].FirstTimestamp,
		string(src[0].Raw[batchHeaderSize:]) == string(dst[0].Raw[batchHeaderSize:]))
	if dst[0].LogAppendTime() {
		t.Fatal("the destination kept LogAppendTime: revisit CheckCopyable")
	}

	// So the copier refuses such batches, loudly.
	e.ensureDestination("lat")
	c := e.newCopier(Config{})
	defer c.Close()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: "lat", Partition: 0, TransactionalID: "mirror-lat-0"}, evs.on); err != nil {
		t.Fatal(err)
	}
	eventually(t, "LogAppendTime batch refused", 30*time.Second, func() bool {
		_, ok := evs.find(EventNonRetriable)
		return ok
	})
	ev, _ := evs.find(EventNonRetriable)
	if !isErr(ev.Err, ErrLogAppendTimeBatch) {
		t.Fatalf("event %v, want ErrLogAppendTimeBatch", ev.Err)
	}
	t.Logf("reported: %v", ev.Err)
	if _, err := c.Stop("lat", 0); !isErr(err, ErrLogAppendTimeBatch) {
		t.Fatal(err)
	}
}

// TestRealLeaderChanges kills (SIGKILL) the source leader of one partition
// and then the destination leader of the other, in the middle of a copy
// between two 3-broker clusters (replication factor 3 on both), while plain
// records and transactions keep arriving: the copier finds the new leaders,
// resends what was in flight with the same sequences, and every record and
// marker still lands at its source offset, once.
//
// The destination broker is killed while no destination transaction is
// ending, and transactions resume once it is down (so they begin at the
// coordinators' new brokers). A destination transaction coordinator that
// dies between writing a transaction's markers and completing it makes its
// successor write the markers again, and Kafka 4.3 appends the second
// marker ("Idempotent transaction marker retry detected ... allowing
// duplicate marker write"): one offset the source does not have, which no
// mirror can take back. A CI run hit it with transactions flowing through
// the kill; the copier reports it as an offset mismatch (docs/DESIGN.md).
func TestRealLeaderChanges(t *testing.T) {
	kafkatest.RequireReal(t)
	p := &pair{src: kafkatest.Start(t, kafkatest.Brokers(3)), dst: kafkatest.Start(t, kafkatest.Brokers(3))}
	snap := goleak.IgnoreCurrent()
	// Restarted brokers are waited on by the harness until the clusters stop.
	t.Cleanup(func() {
		goleak.VerifyNone(t, snap, goleak.IgnoreAnyFunction("github.com/kmirror/kmirror/internal/kafkatest.(*RealCluster).launch.func1"))
	})
	e := newEnv(t, p)
	// Two broker kills and restarts take minutes on a loaded machine: a budget of its own,
	// beyond newEnv's 2 minutes (each wait below still has its own limit).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	const topic = "failover"
	resp, err := e.srcAdm.CreateTopic(e.ctx, 2, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := waitPartitionsLed(kadm.WithAuthorizedOps(e.ctx), e.srcAdm, topic, 2); err != nil {
		t.Fatal(err)
	}
	for part := int32(0); part < 2; part++ {
		e.produce(topic, part, 3000, 20, kgo.ZstdCompression(), "fo")
	}
	e.ensureDestination(topic)
	c := e.newCopier(Config{FetchMaxBytes: 4 << 10, MaxBufferedBytes: 32 << 10})
	defer c.Close()
	var evs events
	for part := int32(0); part < 2; part++ {
		if err := c.Start(e.ctx, Task{Topic: topic, Partition: part, TransactionalID: fmt.Sprintf("mirror-failover-%d", part)}, evs.on); err != nil {
			t.Fatal(err)
		}
	}
	// Transactions keep arriving on both partitions, from writeTxns until its
	// stop is called.
	writeTxns := func(id string) (stop func()) {
		writeCtx, cancel := context.WithCancel(e.ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx := e.txnProducer(id)
			for i := 0; writeCtx.Err() == nil; i++ {
				if tx.BeginTransaction() != nil {
					return
				}
				for part := int32(0); part < 2; part++ {
					_ = tx.ProduceSync(writeCtx, &kgo.Record{Topic: topic, Partition: part, Key: fmt.Appendf(nil, "tx-%d", i), Value: []byte("txn")})
				}
				commit := i%3 != 2 && writeCtx.Err() == nil
				_ = tx.EndTransaction(e.ctx, kgo.TransactionEndTry(commit))
			}
		}()
		return func() { cancel(); wg.Wait() }
	}
	stopWriting := writeTxns("failover-app")
	leaderIndex := func(cl *kafkatest.Cluster, kc *kgo.Client, part int32) (int, int32) {
		m, err := partitionMetadata(e.ctx, kc, topic, part)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range cl.NodeIDs() {
			if id == m.leader {
				return i, id
			}
		}
		t.Fatalf("leader %d of %s/%d is not a broker of the cluster", m.leader, topic, part)
		return -1, -1
	}
	eventually(t, "copy under way", time.Minute, func() bool {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd > 800
	})
	i, id := leaderIndex(p.src, e.src, 0)
	before, _ := c.Progress(topic, 0)
	p.src.KillBroker(t, i)
	t.Logf("killed source broker %d (leader of %s/0) at destination log end %d", id, topic, before.DestinationLogEnd)
	// More records after each kill, so the copy has to go on past it.
	e.produce(topic, 0, 500, 20, kgo.ZstdCompression(), "after-source-kill")
	_, hw := e.offsets(e.srcAdm, topic, 0)
	eventually(t, "copy of partition 0 goes on from the new source leader", time.Minute, func() bool {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd >= hw
	})
	p.src.StartBroker(t, i)
	// No destination transaction may be ending when its broker dies (see above):
	// the copy catches up with the source's last transaction and the destination
	// coordinators complete theirs before the kill.
	stopWriting()
	for part := int32(0); part < 2; part++ {
		e.waitCopied(c, topic, part)
	}
	eventually(t, "the destination's transactions completed", time.Minute, func() bool {
		for part := int32(0); part < 2; part++ {
			if pr, _ := c.Progress(topic, part); pr.OpenTransactions > 0 {
				return false
			}
		}
		ending, err := e.dstAdm.ListTransactions(e.ctx, nil, []string{"PrepareCommit", "PrepareAbort"})
		return err == nil && len(ending) == 0
	})
	j, jid := leaderIndex(p.dst, e.dst, 1)
	before, _ = c.Progress(topic, 1)
	p.dst.KillBroker(t, j)
	t.Logf("killed destination broker %d (leader of %s/1) at destination log end %d", jid, topic, before.DestinationLogEnd)
	stopWriting = writeTxns("failover-app-2")
	e.produce(topic, 1, 500, 20, kgo.ZstdCompression(), "after-destination-kill")
	_, hw = e.offsets(e.srcAdm, topic, 1)
	eventually(t, "copy of partition 1 goes on to the new destination leader", time.Minute, func() bool {
		pr, _ := c.Progress(topic, 1)
		return pr.DestinationLogEnd >= hw
	})
	p.dst.StartBroker(t, j)
	stopWriting()
	for part := int32(0); part < 2; part++ {
		last := e.sentinel(topic, part)
		e.waitCopied(c, topic, part)
		if _, err := c.Stop(topic, part); err != nil {
			t.Fatal(err)
		}
		n := e.verifyEntries(topic, part, false)
		e.sameConsumers(topic, part, last)
		t.Logf("%s/%d: %d records and markers at identical offsets after the leader changes", topic, part, n)
	}
	if f := evs.failures(); len(f) > 0 {
		t.Fatalf("events: %+v", f)
	}
}
