package apis

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// batch encodes a v2 batch at base whose records sit at the given offset
// deltas, each stamped t0 + its delta in seconds. attrs carries the codec
// (compressing the records with it) and the timestamp type.
func batch(t *testing.T, base int64, attrs int16, deltas ...int32) []byte {
	t.Helper()
	var records []byte
	for _, d := range deltas {
		r := kmsg.Record{OffsetDelta: d, TimestampDelta64: int64(d) * 1000, Value: []byte("v")}
		// kmsg writes Length as given: it is the size of what follows it,
		// which a first encoding (with a one-byte zero length) measures.
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		records = r.AppendTo(records)
	}
	if codec := attrs & 0x07; codec != 0 {
		c, err := kgo.DefaultCompressor(map[int16]kgo.CompressionCodec{1: kgo.GzipCompression(), 4: kgo.ZstdCompression()}[codec])
		if err != nil {
			t.Fatal(err)
		}
		out, _ := c.Compress(new(bytes.Buffer), records)
		records = append([]byte(nil), out...)
	}
	last := deltas[len(deltas)-1]
	b := kmsg.RecordBatch{FirstOffset: base, Magic: 2, Attributes: attrs, LastOffsetDelta: last,
		FirstTimestamp: t0.UnixMilli(), MaxTimestamp: t0.Add(time.Duration(last) * time.Second).UnixMilli(),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(deltas)), Records: records}
	raw := b.AppendTo(nil)
	// As for records, kmsg writes the batch length as given.
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	return raw
}

func TestTimestampAt(t *testing.T) {
	at := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Second) }
	two := append(batch(t, 10, 0, 0, 1, 2, 3), batch(t, 14, 4, 0, 1, 2)...) // plain 10..13, zstd 14..16
	for _, tc := range []struct {
		name    string
		batches []byte
		offset  int64
		want    time.Time
		ok      bool
	}{
		{"first record of the first batch", two, 10, at(0), true},
		{"inside a plain batch (a fetch starts at the batch)", two, 12, at(2), true},
		{"inside a compressed batch, after a whole batch", two, 15, at(1), true},
		{"compacted: the offset's record is gone, the next one answers", batch(t, 20, 1, 0, 3, 5), 21, at(3), true},
		{"compacted: the batch's tail is gone, the next batch answers", append(batch(t, 20, 0, 0, 1), batch(t, 30, 0, 0)...), 21, at(1), true},
		{"log append time: every record has the batch's max timestamp", batch(t, 0, 0x08, 0, 1, 2), 1, at(2), true},
		{"cut short by the size limit: the batch's first timestamp", batch(t, 40, 0, 0, 1, 2)[:80], 41, at(0), true},
		{"only a batch before the offset", batch(t, 0, 0, 0, 1), 5, time.Time{}, false},
		{"header cut short", batch(t, 0, 0, 0)[:40], 0, time.Time{}, false},
		{"nothing fetched", nil, 0, time.Time{}, false},
	} {
		got, ok := timestampAt(tc.batches, tc.offset)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("%s: got %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAtRisk(t *testing.T) {
	now := t0.Add(time.Minute)
	st := func(s protocol.MirrorState) *statetopic.PartitionState { return &statetopic.PartitionState{State: s} }
	for _, tc := range []struct {
		name          string
		state         *statetopic.PartitionState
		srcHW, dstEnd int64
		oldest        time.Time
		records, age  int64
	}{
		{"caught up", st(protocol.MirrorStateMirroring), 100, 100, time.Time{}, 0, 0},
		{"behind", st(protocol.MirrorStateMirroring), 100, 90, t0, 10, 60_000},
		{"paused, behind", st(protocol.MirrorStatePaused), 100, 90, t0, 10, 60_000},
		{"no state yet, behind", nil, 5, 0, t0, 5, 60_000},
		{"behind, timestamp not read", st(protocol.MirrorStateFailed), 100, 90, time.Time{}, 10, -1},
		{"behind, producer clock ahead", st(protocol.MirrorStateMirroring), 100, 90, now.Add(time.Hour), 10, 0},
		{"destination ahead (source truncated)", st(protocol.MirrorStateFailed), 50, 90, time.Time{}, 0, 0},
		{"source unknown", st(protocol.MirrorStateMirroring), -1, 90, time.Time{}, -1, -1},
		{"destination unknown", st(protocol.MirrorStatePreparing), 100, -1, time.Time{}, -1, -1},
		{"stopping", st(protocol.MirrorStateStopping), 100, 90, t0, -1, -1},
		{"stopped", st(protocol.MirrorStateStopped), 100, 90, t0, -1, -1},
	} {
		records, age := atRisk(tc.state, tc.srcHW, tc.dstEnd, tc.oldest, now)
		if records != tc.records || age != tc.age {
			t.Errorf("%s: records %d age %d ms, want %d %d", tc.name, records, age, tc.records, tc.age)
		}
	}
}

// A fetch response names its topics by name before v13 and by id only
// from v13 on; either way each partition's timestamp lands under its topic
// name, and a partition with an error or one not asked for adds nothing.
func TestOldestRecordsAddByNameOrID(t *testing.T) {
	ordersID, paymentsID := [16]byte{1}, [16]byte{2}
	chunk := []riskPartition{{"orders", ordersID, 0, 11}, {"payments", paymentsID, 3, 20}, {"payments", paymentsID, 4, 0}}
	resp := kmsg.NewPtrFetchResponse()
	byName := kmsg.NewFetchResponseTopic()
	byName.Topic = "orders"
	p := kmsg.NewFetchResponseTopicPartition()
	p.Partition, p.RecordBatches = 0, batch(t, 10, 0, 0, 1)
	byName.Partitions = append(byName.Partitions, p)
	byID := kmsg.NewFetchResponseTopic()
	byID.TopicID = paymentsID
	p = kmsg.NewFetchResponseTopicPartition()
	p.Partition, p.RecordBatches = 3, batch(t, 20, 0, 5)
	byID.Partitions = append(byID.Partitions, p)
	p = kmsg.NewFetchResponseTopicPartition()
	p.Partition, p.ErrorCode, p.RecordBatches = 4, 1, batch(t, 0, 0, 0) // OFFSET_OUT_OF_RANGE
	byID.Partitions = append(byID.Partitions, p)
	p = kmsg.NewFetchResponseTopicPartition()
	p.Partition, p.RecordBatches = 9, batch(t, 0, 0, 0) // not asked for
	byID.Partitions = append(byID.Partitions, p)
	resp.Topics = append(resp.Topics, byName, byID)

	o := &oldestRecords{at: map[string]map[int32]time.Time{}}
	o.add(resp, chunk)
	want := map[string]map[int32]time.Time{"orders": {0: t0.Add(time.Second)}, "payments": {3: t0.Add(5 * time.Second)}}
	if len(o.at) != len(want) {
		t.Fatalf("timestamps %v, want %v", o.at, want)
	}
	for topic, parts := range want {
		if len(o.at[topic]) != len(parts) {
			t.Fatalf("timestamps %v, want %v", o.at, want)
		}
		for p, ts := range parts {
			if !o.at[topic][p].Equal(ts) {
				t.Fatalf("timestamps %v, want %v", o.at, want)
			}
		}
	}
	resp.ErrorCode = 1
	o = &oldestRecords{at: map[string]map[int32]time.Time{}}
	if o.add(resp, chunk); len(o.at) != 0 {
		t.Fatalf("a failed fetch added %v", o.at)
	}
}
