package fetcher

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestFakeDuplicateMarkerThenNewOwner replays the silent loss seed 2's
// short soak found (docs/RELIABILITY.md) on kfake; TestRealKafka runs the
// same steps on Apache Kafka.
func TestFakeDuplicateMarkerThenNewOwner(t *testing.T) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	testDuplicateMarkerThenNewOwner(t, newEnv(t, p))
}

// A destination transaction coordinator that fails over may write a
// transaction's marker again (docs/KAFKA-FACTS.md). When the owner that
// copied the transaction stops before its next append, nothing it writes
// shows the shift, and the next owner reads a log end that counts the
// duplicates: resuming there skips the source entries they displaced. A
// resume must find that out and stop the partition, naming the marker:
//   - one duplicate: it sits where the source has a record;
//   - two duplicates (the soak's case): the last sits where the source has
//     a COMMIT marker too, but of another source producer.
//
// The duplicates are written the way a coordinator writes them, with
// WriteTxnMarkers carrying the producer and epoch of the marker already
// there.
func testDuplicateMarkerThenNewOwner(t *testing.T, e *env) {
	for _, dups := range []int{1, 2} {
		t.Run(fmt.Sprintf("duplicates=%d", dups), func(t *testing.T) {
			e := newEnv(t, e.p)
			topic := fmt.Sprintf("dup-marker-%d", dups)
			e.createSource(topic, 1, nil)
			for i, id := range []string{"a", "b"} { // offsets 0-1 and 2-3: a record and its COMMIT marker each
				cl := e.txnProducer(topic + "-" + id)
				e.begin(cl)
				e.produceIn(cl, topic, 0, 1, id)
				e.end(cl, true)
				e.awaitEnd(topic, 0, int64(2*i+2))
			}
			e.ensureDestination(topic)
			task := Task{Topic: topic, Partition: 0, TransactionalID: "mirror-" + topic + "-0"}

			first := e.newCopier(Config{})
			first.holdOpsFrom(topic, 0, 2) // producer a's transaction only
			if err := first.Start(e.ctx, task, nil); err != nil {
				t.Fatal(err)
			}
			polltest.Eventually(t, time.Minute, "the first transaction copied", func() (bool, string) {
				pr, _ := first.Progress(topic, 0)
				return pr.DestinationLogEnd == 2, fmt.Sprintf("destination log end %d", pr.DestinationLogEnd)
			})
			if _, err := first.Stop(topic, 0); err != nil {
				t.Fatal(err)
			}
			first.Close()

			entries, err := LogEntries(e.ctx, e.dst, topic, 0, 1)
			if err != nil || len(entries) != 1 || !entries[0].Control || !entries[0].Commit {
				t.Fatalf("destination entries from offset 1: %+v, %v; want producer a's COMMIT marker", entries, err)
			}
			marker := entries[0]
			for range dups {
				e.duplicateMarker(topic, 0, marker)
			}
			if _, end := e.offsets(e.dstAdm, topic, 0); end != int64(2+dups) {
				t.Fatalf("destination log end %d after %d duplicate markers, want %d", end, dups, 2+dups)
			}

			second := e.newCopier(Config{})
			defer second.Close()
			err = second.Start(e.ctx, task, nil)
			if err == nil {
				pr, _ := second.Progress(topic, 0)
				t.Fatalf("the new owner resumed at destination log end %d: source offsets %d..%d, which the duplicate markers displaced, are never copied",
					pr.DestinationLogEnd, 2, 1+dups)
			}
			if !errors.Is(err, ErrOffsetMismatch) || !strings.Contains(err.Error(), "got a transaction marker twice") ||
				!strings.Contains(err.Error(), fmt.Sprintf("producer %d epoch %d", marker.Producer, marker.Epoch)) {
				t.Fatalf("the new owner's start failed with %v; want ErrOffsetMismatch naming the duplicate marker (producer %d epoch %d)", err, marker.Producer, marker.Epoch)
			}
			t.Logf("refused as it should be: %v", err)
		})
	}
}

// TestFakeDestinationHoldsTheOriginals: see testDestinationHoldsTheOriginals;
// TestRealKafka runs it on Apache Kafka.
func TestFakeDestinationHoldsTheOriginals(t *testing.T) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	testDestinationHoldsTheOriginals(t, newEnv(t, p))
}

// After a promote back, the destination is the cluster that was writable:
// its entries are an application's originals, and the source holds kmirror's
// copies of them at the same offsets (the disaster-recovery drill's last
// step, where the check for duplicate markers first refused a correct
// resume). A last marker written by an application's transactional id is
// no duplicate: Kafka writes a duplicate only for the id of the transaction
// it ends, which on a mirror's destination is one of kmirror's.
func testDestinationHoldsTheOriginals(t *testing.T, e *env) {
	const topic = "originals"
	back := newEnv(t, &pair{src: e.p.dst, dst: e.p.src}) // the mirror that copied the destination's writes to the source
	back.createSource(topic, 1, nil)
	app := back.txnProducer("shop")
	for _, commit := range []bool{true, false} { // offsets 0-3, the last an ABORT marker, as in the drill
		back.begin(app)
		back.produceIn(app, topic, 0, 1, "shop")
		back.end(app, commit)
	}
	back.ensureDestination(topic)
	copier := back.newCopier(Config{})
	if err := copier.Start(back.ctx, Task{Topic: topic, Partition: 0, TransactionalID: "back-" + topic + "-0"}, nil); err != nil {
		t.Fatal(err)
	}
	back.waitCopied(copier, topic, 0)
	if _, err := copier.Stop(topic, 0); err != nil {
		t.Fatal(err)
	}
	copier.Close()

	forward := e.newCopier(Config{})
	defer forward.Close()
	if err := forward.Start(e.ctx, Task{Topic: topic, Partition: 0, TransactionalID: "dr-" + topic + "-0"}, nil); err != nil {
		t.Fatalf("mirroring back onto the cluster that wrote the originals: %v", err)
	}
	more := e.txnProducer("shop-on-the-source")
	e.begin(more)
	e.produceIn(more, topic, 0, 2, "later")
	e.end(more, true)
	e.waitCopied(forward, topic, 0)
	t.Logf("resumed on the originals and copied on: %d entries at identical offsets", e.verifyEntries(topic, 0, false))
}

// awaitEnd waits for a source partition's log end to reach end: Kafka answers
// EndTxn before it writes the markers, so the next producer's record may
// otherwise land before the last transaction's marker (it did, once in
// six runs of TestRealKafka/DuplicateMarkerThenNewOwner).
func (e *env) awaitEnd(topic string, partition int32, end int64) {
	e.t.Helper()
	polltest.Eventually(e.t, time.Minute, fmt.Sprintf("%s/%d's log end at %d", topic, partition, end), func() (bool, string) {
		_, got := e.offsets(e.srcAdm, topic, partition)
		return got == end, fmt.Sprintf("log end %d", got)
	})
}

// duplicateMarker appends marker again, as a transaction coordinator that
// took over a completed transaction writes it: WriteTxnMarkers to the
// partition's leader with the marker's producer and epoch.
func (e *env) duplicateMarker(topic string, partition int32, marker LogEntry) {
	e.t.Helper()
	m, err := partitionMetadata(e.ctx, e.dst, topic, partition)
	if err != nil {
		e.t.Fatal(err)
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	wm := kmsg.NewWriteTxnMarkersRequestMarker()
	wm.ProducerID, wm.ProducerEpoch, wm.Committed = marker.Producer, marker.Epoch, marker.Commit
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = topic, []int32{partition}
	wm.Topics = append(wm.Topics, mt)
	req.Markers = append(req.Markers, wm)
	resp, err := req.RequestWith(e.ctx, e.dst.Broker(int(m.leader)))
	if err != nil {
		e.t.Fatalf("WriteTxnMarkers: %v", err)
	}
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					e.t.Fatalf("WriteTxnMarkers %s/%d: %v", rt.Topic, rp.Partition, err)
				}
			}
		}
	}
}

// A transaction coordinator that lost the end of a copy's transaction: the
// partition has the transaction's COMMIT marker (at the source's offset, at
// the epoch after the transaction's), while the coordinator still has the
// transaction open at the transaction's epoch with the partition in it. A
// soak run's destination got into this state when a broker restarted after
// SIGKILL wrote, as coordinator, the marker of an end its replicas never
// recorded. Every later write of the id at the coordinator's epoch is
// refused as old: the copy was fenced and restarted forever. A new owner now
// refuses to start, loudly and for good. Here the stale coordinator's marker
// is written with WriteTxnMarkers, as a broker sends it.
func testCoordinatorLostTheEnd(t *testing.T, e *env) {
	const topic = "coordinator-behind"
	e.createSource(topic, 1, nil)
	cl := e.txnProducer(topic + "-a")
	for i := range 2 { // offsets 0-1 and 2-3: a record and its COMMIT marker each
		e.begin(cl)
		e.produceIn(cl, topic, 0, 1, fmt.Sprintf("a%d", i))
		e.end(cl, true)
		e.awaitEnd(topic, 0, int64(2*i+2))
	}
	e.ensureDestination(topic)
	task := Task{Topic: topic, Partition: 0, TransactionalID: "mirror-" + topic + "-0"}
	first := e.newCopier(Config{})
	first.holdOpsFrom(topic, 0, 3) // everything but the second transaction's end
	if err := first.Start(e.ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "the second transaction's record copied", func() (bool, string) {
		pr, _ := first.Progress(topic, 0)
		return pr.DestinationLogEnd == 3, fmt.Sprintf("destination log end %d", pr.DestinationLogEnd)
	})
	if _, err := first.Stop(topic, 0); err != nil {
		t.Fatal(err)
	}
	first.Close()
	prs, err := destinationProducers(e.ctx, e.dst, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var open *kmsg.DescribeProducersResponseTopicPartitionActiveProducer
	for i := range prs {
		if prs[i].CurrentTxnStartOffset == 2 {
			open = &prs[i]
		}
	}
	if open == nil {
		t.Fatalf("destination producers %+v: none has the transaction open at offset 2", prs)
	}
	// The stale coordinator's marker: the end at the next epoch, as transaction.version 2 writes it.
	lost := LogEntry{Producer: open.ProducerID, Epoch: int16(open.ProducerEpoch) + 1, Control: true, Commit: true}
	e.duplicateMarker(topic, 0, lost)
	if _, end := e.offsets(e.dstAdm, topic, 0); end != 4 {
		t.Fatalf("destination log end %d after the stale coordinator's marker, want 4", end)
	}

	second := e.newCopier(Config{})
	defer second.Close()
	err = second.Start(e.ctx, task, nil)
	if err == nil {
		t.Fatal("the new owner started: every write of the open transaction's id would be refused as old, and the copy fenced and restarted forever")
	}
	if !errors.Is(err, ErrCoordinatorBehind) || datapath.Retriable(err) ||
		!strings.Contains(err.Error(), fmt.Sprintf("open at epoch %d", open.ProducerEpoch)) {
		t.Fatalf("the new owner's start failed with %v; want ErrCoordinatorBehind naming epoch %d, for good", err, open.ProducerEpoch)
	}
	t.Logf("refused as it should be: %v", err)
}
