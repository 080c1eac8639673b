package fetcher

// Alignment makes the destination log start where the source log starts
// (docs/ARCHITECTURE.md, "Writing exact offsets into a stock broker"): a stock
// broker only reaches offset X by appending X offsets, so the destination
// gets filler offsets up to the source log start, then DeleteRecords to it.
// A destination ahead of the source high watermark has diverged and is never
// truncated (stock Kafka cannot): that is an error.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

// Alignment reports what Align found and did.
type Alignment struct {
	SourceLogStart      int64
	SourceHighWatermark int64
	DestinationLogStart int64 // after alignment
	DestinationLogEnd   int64 // after alignment: the next source offset to copy
	// Filled offsets [FilledFrom, FilledFrom+Filled) are filler; record it
	// visibly (invariant 5).
	FilledFrom int64
	Filled     int64
	// PendingLogStart is set when the source log start lies inside a batch:
	// the destination was filled up to that batch's base offset, and must
	// get DeleteRecords(PendingLogStart) once the batch is copied (the
	// Copier does this by itself).
	PendingLogStart int64
	NextSequence    int32
}

// Align compares the destination log end with the source log start and high
// watermark of one partition, and fills the destination up to the source log
// start (in zstd batches of up to 1,000,000 empty records within the
// destination's max.message.bytes), then moves its log start there. The
// filler is appended with producer, from sequence 0: use the partition's
// id/epoch (from InitProducerId on its transactional id) so a fenced owner
// cannot fill; ID -1 appends without idempotence (not fenced).
func Align(ctx context.Context, src, dst *kgo.Client, topic string, partition int32, producer datapath.Producer) (Alignment, error) {
	dstAdm := kadm.NewClient(dst)
	offs, err := listOffsets(ctx, src, dst, topic, partition)
	if err != nil {
		return Alignment{}, err
	}
	a := Alignment{
		SourceLogStart:      offs.srcStart,
		SourceHighWatermark: offs.srcHW,
		DestinationLogStart: offs.dstStart,
		DestinationLogEnd:   offs.dstEnd,
		FilledFrom:          offs.dstEnd,
	}
	if offs.dstEnd > offs.srcHW {
		return a, fmt.Errorf("%w: destination log of %s/%d has %d records more than the source (destination log end %d, source high watermark %d); it diverged",
			ErrDiverged, topic, partition, offs.dstEnd-offs.srcHW, offs.dstEnd, offs.srcHW)
	}
	if offs.dstEnd >= offs.srcStart {
		if offs.dstStart < offs.srcStart {
			if err := deleteRecords(ctx, dst, topic, partition, offs.srcStart); err != nil {
				return a, err
			}
			a.DestinationLogStart = offs.srcStart
		}
		return a, nil
	}
	fillTo := offs.srcStart
	if offs.srcHW > offs.srcStart {
		if fillTo, err = firstBatchBase(ctx, src, topic, partition, offs.srcStart); err != nil {
			return a, err
		}
	}
	if fillTo < offs.dstEnd {
		return a, fmt.Errorf("%w: %s/%d: the destination log ends at %d, inside the source batch starting at %d (batches are copied whole)",
			ErrDiverged, topic, partition, offs.dstEnd, fillTo)
	}
	limits, err := destinationTopicLimits(ctx, dstAdm, topic)
	if err != nil {
		return a, err
	}
	chunk := int64(fillerRecordsFor(limits.maxMessageBytes))
	for a.DestinationLogEnd < fillTo {
		n := int32(min(fillTo-a.DestinationLogEnd, chunk))
		seq := int32(-1)
		if producer.ID >= 0 {
			seq = a.NextSequence
		}
		raw := fillerBatch(n, time.Now().UnixMilli(), producer.ID, producer.Epoch, seq, limits.compacted)
		base, err := produceOne(ctx, dst, topic, partition, raw)
		if err != nil {
			return a, fmt.Errorf("fill %s/%d at %d: %w", topic, partition, a.DestinationLogEnd, err)
		}
		if base != a.DestinationLogEnd {
			return a, fmt.Errorf("%w: %s/%d: filler for offset %d was appended at %d; the destination partition is being written by someone else",
				ErrOffsetMismatch, topic, partition, a.DestinationLogEnd, base)
		}
		if producer.ID >= 0 {
			a.NextSequence = nextSequence(a.NextSequence, n-1)
		}
		a.DestinationLogEnd += int64(n)
		a.Filled += int64(n)
	}
	trim := fillTo
	if trim > offs.dstStart {
		if err := deleteRecords(ctx, dst, topic, partition, trim); err != nil {
			return a, err
		}
		a.DestinationLogStart = trim
	}
	if fillTo < offs.srcStart {
		a.PendingLogStart = offs.srcStart
	}
	return a, nil
}

// firstBatchBase fetches at offset from the source leader and returns the
// base offset of the batch holding it (at or below offset: the source log
// start can lie inside a batch after DeleteRecords).
func firstBatchBase(ctx context.Context, src *kgo.Client, topic string, partition int32, offset int64) (int64, error) {
	m, err := partitionMetadata(ctx, src, topic, partition)
	if err != nil {
		return 0, err
	}
	r, err := fetchOnce(ctx, src, m, topic, partition, offset, 1<<20, 500*time.Millisecond)
	if err != nil {
		return 0, err
	}
	var b Batch
	if NewBatchIterator(r.RecordBatches).Next(&b) {
		return min(b.BaseOffset, offset), nil
	}
	return offset, nil // no batch yet (empty from the log start on)
}

// produceOne appends one batch to a partition leader with acks=all,
// resending the same bytes (same sequence) on retriable errors, and returns
// the base offset the broker assigned.
func produceOne(ctx context.Context, dst *kgo.Client, topic string, partition int32, raw []byte) (int64, error) {
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second))
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, ctx.Err()
			case <-t.C:
			}
		}
		m, err := partitionMetadata(ctx, dst, topic, partition)
		if err != nil {
			lastErr = err
			continue
		}
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = 30_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = topic, m.topicID
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = partition, raw
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := dst.Broker(int(m.leader)).Request(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			lastErr = err
			continue
		}
		for _, t := range kresp.(*kmsg.ProduceResponse).Topics {
			for _, p := range t.Partitions {
				err := kerr.ErrorForCode(p.ErrorCode)
				if err == nil {
					return p.BaseOffset, nil
				}
				if p.ErrorMessage != nil {
					err = fmt.Errorf("%w: %s", err, *p.ErrorMessage)
				}
				if errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.ProducerFenced) {
					return 0, fmt.Errorf("%w: %w", ErrFenced, err)
				}
				if !kerr.IsRetriable(err) {
					return 0, err
				}
				lastErr = err
			}
		}
	}
	return 0, lastErr
}
