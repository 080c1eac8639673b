package apis

// The recovery point: what a failover right now would lose. Records are the
// source high watermark minus the destination log end (the copy reads
// READ_COMMITTED, so it stops at the source's last stable offset and an open
// source transaction stays at risk until it ends). Their age is that of the
// source record at the destination log end, read from the source with one
// small READ_UNCOMMITTED fetch per leader for the lagging partitions only
// (records of open transactions are above the last stable offset).

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

const (
	// riskFetchPartitionBytes bounds what one partition returns. A batch
	// cut short by it still has its header, whose first timestamp stands in
	// for the record's (exact when the offset is the batch's first).
	riskFetchPartitionBytes = 64 << 10
	// riskFetchPartitions bounds one fetch, so every partition of it gets
	// its full share of the response (Kafka hands the response budget out
	// partition by partition) and a response stays under 8 MiB.
	riskFetchPartitions = 128
	// batchHeaderLen is a v2 record batch's header up to its record count.
	batchHeaderLen = 61
)

var decompressor = kgo.DefaultDecompressor()

// failingOver reports whether a partition's failover has begun: a failover
// now would not lose anything more, it is already under way.
func failingOver(s *statetopic.PartitionState) bool {
	return s != nil && (s.State == protocol.MirrorStateStopping || s.State == protocol.MirrorStateStopped)
}

// atRisk returns a partition's recovery point fields: records at risk and
// the age of the oldest of them (ms on now's clock), -1 where unknown.
// oldest is the timestamp of the source record at the destination log end,
// zero if it could not be read.
func atRisk(s *statetopic.PartitionState, srcHW, dstEnd int64, oldest time.Time, now time.Time) (records, ageMs int64) {
	if failingOver(s) || srcHW < 0 || dstEnd < 0 {
		return -1, -1
	}
	records = max(0, srcHW-dstEnd)
	switch {
	case records == 0:
		return 0, 0
	case oldest.IsZero():
		return records, -1
	}
	// A producer's clock ahead of ours makes a record look younger than
	// nothing: it is at risk all the same, just not old.
	return records, max(0, now.Sub(oldest).Milliseconds())
}

// riskPartition is one lagging partition whose oldest record at risk is
// read: the first source record at or after offset.
type riskPartition struct {
	topic     string
	topicID   [16]byte
	partition int32
	offset    int64
}

// oldestAtRisk reads, for each partition of from (topic → partition →
// offset), the timestamp of the first source record at or after the
// offset, with one fetch goroutine per source leader. Partitions it cannot
// read are left out (their age is unknown).
func oldestAtRisk(ctx context.Context, src *kgo.Client, from map[string]map[int32]int64) map[string]map[int32]time.Time {
	out := &oldestRecords{at: map[string]map[int32]time.Time{}}
	if len(from) == 0 {
		return out.at
	}
	var wg sync.WaitGroup
	for leader, wants := range riskLeaders(ctx, src, from) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			br := src.Broker(int(leader))
			for len(wants) > 0 {
				chunk := wants[:min(len(wants), riskFetchPartitions)]
				wants = wants[len(chunk):]
				raw, err := br.Request(ctx, riskFetchRequest(chunk))
				if err != nil {
					return
				}
				out.add(raw.(*kmsg.FetchResponse), chunk)
			}
		}()
	}
	wg.Wait()
	return out.at
}

// riskLeaders groups the partitions of from by their source leader.
func riskLeaders(ctx context.Context, src *kgo.Client, from map[string]map[int32]int64) map[int32][]riskPartition {
	meta := kmsg.NewPtrMetadataRequest()
	for t := range from {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		meta.Topics = append(meta.Topics, mt)
	}
	// Uncached: kgo's metadata can lag a leader change by seconds.
	resp, err := meta.RequestWith(ctx, src)
	if err != nil {
		return nil
	}
	byLeader := map[int32][]riskPartition{}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		for _, p := range t.Partitions {
			off, ok := from[*t.Topic][p.Partition]
			if !ok || p.Leader < 0 {
				continue
			}
			byLeader[p.Leader] = append(byLeader[p.Leader], riskPartition{*t.Topic, t.TopicID, p.Partition, off})
		}
	}
	return byLeader
}

// riskFetchRequest is one small READ_UNCOMMITTED fetch of the partitions
// (open transactions are at risk too), sessionless and without waiting.
func riskFetchRequest(chunk []riskPartition) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = int32(len(chunk) * riskFetchPartitionBytes)
	req.IsolationLevel = 0
	req.SessionID, req.SessionEpoch = 0, -1
	byTopic := map[string]int{}
	for _, w := range chunk {
		i, ok := byTopic[w.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[w.topic] = i
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = w.topic, w.topicID
			req.Topics = append(req.Topics, ft)
		}
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = w.partition, w.offset, riskFetchPartitionBytes
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, fp)
	}
	return req
}

// oldestRecords collects the timestamps the leaders' fetches read.
type oldestRecords struct {
	mu sync.Mutex
	at map[string]map[int32]time.Time
}

// add notes the timestamp of each fetched partition's first record at or
// after the offset asked for.
func (o *oldestRecords) add(fr *kmsg.FetchResponse, chunk []riskPartition) {
	if fr.ErrorCode != 0 {
		return
	}
	for _, rt := range fr.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				continue // e.g. OFFSET_OUT_OF_RANGE: retention took the records; age unknown
			}
			// v13+ answers by topic id only.
			i := slices.IndexFunc(chunk, func(w riskPartition) bool {
				return (w.topic == rt.Topic || rt.Topic == "" && w.topicID == rt.TopicID) && w.partition == rp.Partition
			})
			if i < 0 {
				continue
			}
			if ts, ok := timestampAt(rp.RecordBatches, chunk[i].offset); ok {
				o.mu.Lock()
				if o.at[chunk[i].topic] == nil {
					o.at[chunk[i].topic] = map[int32]time.Time{}
				}
				o.at[chunk[i].topic][rp.Partition] = ts
				o.mu.Unlock()
			}
		}
	}
}

// timestampAt returns the timestamp of the first record at or after offset
// in fetched record batches. A LogAppendTime batch stamps every record with
// its max timestamp. A batch cut short by the fetch's size limit answers
// with its first timestamp: the record's own when offset is the batch's
// first (the copy appends whole batches, so the destination log end is
// almost always one), else the batch's oldest, which errs towards more
// age at risk, never less, for a producer whose timestamps only grow.
func timestampAt(batches []byte, offset int64) (time.Time, bool) {
	for b := batches; len(b) >= batchHeaderLen; {
		base := int64(binary.BigEndian.Uint64(b))
		length := int64(int32(binary.BigEndian.Uint32(b[8:])))
		if length < batchHeaderLen-12 || int8(b[16]) != 2 {
			return time.Time{}, false // not a v2 batch: nothing to read a timestamp from
		}
		total := 12 + length
		attrs := int16(binary.BigEndian.Uint16(b[21:]))
		lastDelta := int64(int32(binary.BigEndian.Uint32(b[23:])))
		firstTs := int64(binary.BigEndian.Uint64(b[27:]))
		maxTs := int64(binary.BigEndian.Uint64(b[35:]))
		if base+lastDelta < offset {
			if total > int64(len(b)) {
				return time.Time{}, false
			}
			b = b[total:]
			continue
		}
		if attrs&0x08 != 0 {
			return time.UnixMilli(maxTs), true
		}
		if total > int64(len(b)) {
			return time.UnixMilli(firstTs), true
		}
		if ts, ok := recordTimestampAt(b[:total], firstTs, offset); ok {
			return ts, true
		}
		// Every record of the batch at or after offset was compacted away:
		// the next batch holds the oldest at risk.
		b = b[total:]
	}
	return time.Time{}, false
}

// recordTimestampAt decodes one whole batch and returns the timestamp of
// its first record at or after offset.
func recordTimestampAt(raw []byte, firstTs, offset int64) (time.Time, bool) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(raw); err != nil {
		return time.Time{}, false
	}
	records := rb.Records
	if codec := rb.Attributes & 0x07; codec != 0 {
		plain, err := decompressor.Decompress(records, kgo.CompressionCodecType(codec))
		if err != nil {
			return time.Time{}, false
		}
		records = plain
	}
	for i := int32(0); i < rb.NumRecords; i++ {
		n, hdr := binary.Varint(records)
		if hdr <= 0 || n < 0 || int64(len(records)-hdr) < n {
			return time.Time{}, false
		}
		var r kmsg.Record
		if err := r.ReadFrom(records[:hdr+int(n)]); err != nil {
			return time.Time{}, false
		}
		records = records[hdr+int(n):]
		if rb.FirstOffset+int64(r.OffsetDelta) >= offset {
			return time.UnixMilli(firstTs + r.TimestampDelta64), true
		}
	}
	return time.Time{}, false
}
