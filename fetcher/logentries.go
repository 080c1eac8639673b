package fetcher

// Reading a partition's stored log offset by offset: what the mirror's
// promise is about (every record and every transaction marker of the source
// at the same offset on the destination). Tests and verification tools use
// it on both clusters.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LogEntry is one offset of a stored log that holds a record or a marker.
type LogEntry struct {
	Offset int64
	// Control: a transaction marker; Commit tells COMMIT from ABORT.
	Control bool
	Commit  bool
	// Transactional: a record written in a transaction.
	Transactional bool
	Timestamp     int64
	// Record is the record's key, value and headers as encoded (v2 record
	// format, after the offset delta): equal bytes, equal record.
	Record []byte
	Key    []byte
	// Producer and Epoch are the writer of a marker: a cluster's own
	// producer ids, so they are not compared across clusters (a marker
	// repeated within one log is told by them: the soak's halt check).
	Producer int64
	Epoch    int16
}

// fetchOnce fetches a partition at offset from its leader, as stored
// (READ_UNCOMMITTED: aborted records and markers included).
func fetchOnce(ctx context.Context, cl *kgo.Client, m partitionMeta, topic string, partition int32, offset int64, maxBytes int32, wait time.Duration) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = int32(wait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = maxBytes
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, m.topicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = partition, offset, maxBytes, m.leaderEpoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(m.leader)).Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d at %d: %w", topic, partition, offset, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("fetch %s/%d at %d: %w", topic, partition, offset, errOr(kerr.ErrorForCode(resp.ErrorCode), kerr.UnknownServerError))
	}
	r := &resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return nil, fmt.Errorf("fetch %s/%d at %d: %w", topic, partition, offset, err)
	}
	return r, nil
}

// StoredBatches reads a partition's batches as stored, from the one that
// holds offset from up to the high watermark; the batches are copies.
func StoredBatches(ctx context.Context, cl *kgo.Client, topic string, partition int32, from int64) ([]Batch, error) {
	m, err := partitionMetadata(ctx, cl, topic, partition)
	if err != nil {
		return nil, err
	}
	var out []Batch
	offset := from
	for {
		r, err := fetchOnce(ctx, cl, m, topic, partition, offset, 8<<20, 10*time.Millisecond)
		if err != nil {
			return nil, err
		}
		it := NewBatchIterator(r.RecordBatches)
		var b Batch
		n := 0
		for it.Next(&b) {
			n++
			if b.NextOffset() <= offset {
				continue
			}
			b.Raw = append([]byte(nil), b.Raw...)
			out = append(out, b)
			offset = b.NextOffset()
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("%s/%d: %w", topic, partition, err)
		}
		if offset >= r.HighWatermark || n == 0 {
			return out, nil
		}
	}
}

// LogEntries reads a partition's log from offset from up to its high
// watermark, as stored (aborted records and markers included).
func LogEntries(ctx context.Context, cl *kgo.Client, topic string, partition int32, from int64) ([]LogEntry, error) {
	batches, err := StoredBatches(ctx, cl, topic, partition, from)
	if err != nil {
		return nil, err
	}
	return entriesOf(batches, topic, partition, from)
}

// entriesOf is the entries of stored batches from offset from on.
func entriesOf(batches []Batch, topic string, partition int32, from int64) ([]LogEntry, error) {
	var out []LogEntry
	for i := range batches {
		b := &batches[i]
		if !b.CRCValid() {
			return nil, fmt.Errorf("%w: %s/%d: batch at %d has a bad CRC", ErrCorruptBatch, topic, partition, b.BaseOffset)
		}
		if b.IsControl() && b.NumRecords == 0 {
			// A marker the cleaner removed from a compacted partition, its batch kept
			// empty for the producer's state: no entry, like any compacted-away offset
			// (the copy fills it, planControlLocked).
			continue
		}
		if b.IsControl() {
			typ, err := b.controlType()
			if err != nil {
				return nil, fmt.Errorf("%s/%d: %w", topic, partition, err)
			}
			out = append(out, LogEntry{Offset: b.BaseOffset, Control: true, Commit: typ == controlCommit, Producer: b.ProducerID, Epoch: b.ProducerEpoch})
			continue
		}
		recs, err := b.records()
		if err != nil {
			return nil, fmt.Errorf("%s/%d: %w", topic, partition, err)
		}
		for _, rec := range recs {
			if rec.offset < from {
				continue
			}
			key, _, err := recordKey(rec.tail)
			if err != nil {
				return nil, fmt.Errorf("%w: %s/%d: record at %d: %v", ErrCorruptBatch, topic, partition, rec.offset, err)
			}
			out = append(out, LogEntry{Offset: rec.offset, Transactional: b.IsTransactional(),
				Timestamp: b.FirstTimestamp + rec.timestampDelta, Record: append([]byte{rec.attrs}, rec.tail...), Key: key})
		}
	}
	return out, nil
}

// CompareLogs checks what a mirror promises of one partition: every record
// and marker of the source log is in the destination log at the same
// offset, with the same record bytes, timestamp and transaction, and
// whatever else the destination holds is invisible filler (ABORT markers).
// With compacting, the destination may also keep a record the source's
// cleaner removed after it was copied, as long as a later destination
// record has its key (the destination's cleaner removes it in turn).
func CompareLogs(src, dst []LogEntry, compacting bool) error {
	byOffset := make(map[int64]*LogEntry, len(dst))
	for i := range dst {
		byOffset[dst[i].Offset] = &dst[i]
	}
	inSource := make(map[int64]bool, len(src))
	for _, s := range src {
		inSource[s.Offset] = true
		d := byOffset[s.Offset]
		switch {
		case d == nil:
			return fmt.Errorf("source offset %d (%s) is missing on the destination", s.Offset, s)
		case s.Control != d.Control || s.Commit != d.Commit || s.Transactional != d.Transactional ||
			s.Timestamp != d.Timestamp || string(s.Record) != string(d.Record):
			return fmt.Errorf("offset %d differs: source %s, destination %s", s.Offset, s, d)
		}
	}
	lastOfKey := map[string]int64{}
	for _, d := range dst {
		if !d.Control {
			lastOfKey[string(d.Key)] = d.Offset
		}
	}
	for _, d := range dst {
		switch {
		case inSource[d.Offset], d.Control && !d.Commit:
		case !d.Control && compacting && lastOfKey[string(d.Key)] > d.Offset:
		default:
			return fmt.Errorf("destination offset %d holds %s, which the source does not have", d.Offset, d)
		}
	}
	return nil
}

func (e LogEntry) String() string {
	switch {
	case e.Control && e.Commit:
		return fmt.Sprintf("COMMIT marker of producer %d epoch %d", e.Producer, e.Epoch)
	case e.Control:
		return fmt.Sprintf("ABORT marker of producer %d epoch %d", e.Producer, e.Epoch)
	case e.Transactional:
		return fmt.Sprintf("transactional record key %q at %d", e.Key, e.Timestamp)
	}
	return fmt.Sprintf("record key %q at %d", e.Key, e.Timestamp)
}
