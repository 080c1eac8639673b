package fetcher

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/polltest"
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
	sub("DamagedSourceBatch", testDamagedSourceBatch)
	sub("LogAppendTime", testLogAppendTime)
	sub("TransactionFacts", testTransactionFacts)
	sub("TransactionalSource", testTransactionalSource)
	sub("TransactionResume", testTransactionResume)
	sub("DuplicateMarkerThenNewOwner", testDuplicateMarkerThenNewOwner)
	sub("CoordinatorLostTheEnd", testCoordinatorLostTheEnd)
	sub("DestinationHoldsTheOriginals", testDestinationHoldsTheOriginals)
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
	polltest.Eventually(t, 30*time.Second, "source has 5 partitions", func() (bool, string) {
		td, err := e.srcAdm.ListTopics(e.ctx, "topic-cfg")
		return err == nil && len(td["topic-cfg"].Partitions) == 5, ""
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
	polltest.Eventually(t, 30*time.Second, "destination log start 505", func() (bool, string) {
		s, _ := e.offsets(e.dstAdm, "logstart", 0)
		return s == 505, ""
	})
	gap, ok := evs.find(datapath.EventGapFilled)
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
	polltest.Eventually(t, time.Minute, "copy under way", func() (bool, string) {
		pr, _ := a.Progress("resume", 0)
		return pr.DestinationLogEnd > 500, ""
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
	polltest.Eventually(t, time.Minute, "copy under way", func() (bool, string) {
		pr, _ := a.Progress("crash", 0)
		return pr.DestinationLogEnd > 500, ""
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
	ev, ok := evs.find(datapath.EventGapFilled)
	if !ok || ev.From < 100 || ev.From >= 150 || ev.To != 150 {
		t.Fatalf("gap event %+v (found %v), want From in 100..149, To 150", ev, ok)
	}
	polltest.Eventually(t, 30*time.Second, "destination log start 150", func() (bool, string) {
		s, _ := e.offsets(e.dstAdm, "gap", 0)
		return s == 150, ""
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
	a, err := Align(e.ctx, e.src, e.dst, "align", 0, datapath.Producer{ID: -1})
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
