package fetcher

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

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
			for _, id := range []string{"a", "b"} { // offsets 0-1 and 2-3: a record and its COMMIT marker each
				cl := e.txnProducer(topic + "-" + id)
				e.begin(cl)
				e.produceIn(cl, topic, 0, 1, id)
				e.end(cl, true)
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
