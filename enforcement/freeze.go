package enforcement

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Freeze is a route's write freeze during a planned switch (docs/cutover.md, steps 1 and
// 4): writes the switch must not miss are answered with errors every Kafka client retries, so
// that none lands on the primary after the drain target was read and none fails the
// application. A request already forwarded gets its broker's answer; a refused one is on
// neither cluster and is retried by its client, after the switch on the standby.
//
//   - Produce to a frozen topic: NOT_LEADER_OR_FOLLOWER per partition (the client refreshes
//     metadata and retries within delivery.timeout.ms); other topics of the same request are
//     forwarded, as the read-only guard splits a request.
//   - OffsetCommit and TxnOffsetCommit naming a frozen topic, once Commits is set:
//     COORDINATOR_LOAD_IN_PROGRESS per partition (retried by every client).
//
// An acks=0 Produce refused by a freeze is lost, as one sent to a broker that just lost its
// leadership is: acks=0 promises nothing (docs/cutover.md).
//
// A frozen Produce whose batch the primary already holds is forwarded (Written): a client
// that lost the answer to a write (its connection, or the instance that forwarded it, died)
// resends the same batch, with the same producer id, epoch and sequences. Refused until the
// switch, the resend would reach the standby, which knows none of the primary's producer
// ids (the mirror writes with its own), and be written a second time. The primary recognises
// its own duplicate and answers with the offsets it was written at, and appends nothing:
// Kafka never appends a batch whose sequences an idempotent producer already wrote in that
// epoch (it answers from its cache of the producer's last five batches, else
// OUT_OF_ORDER_SEQUENCE_NUMBER), so forwarding it does not break the freeze.
type Freeze struct {
	Topics  map[string]bool
	Commits bool
	// Written reports whether the primary holds batch b on topic's partition: its producer
	// wrote sequence b.LastSeq or later in epoch b.Epoch. Nil, or false when in doubt: the
	// batch is refused like any frozen write.
	Written func(ctx context.Context, topic string, partition int32, b ProducerBatch) bool
}

// ProducerBatch is who wrote a Produce request's batch: an idempotent producer's id and
// epoch, and the sequence numbers of its first and last records.
type ProducerBatch struct {
	ProducerID        int64
	Epoch             int16
	FirstSeq, LastSeq int32
}

// Offsets in a v2 record batch (Kafka's DefaultRecordBatch).
const (
	batchLengthAt   = 8
	batchMagicAt    = 16
	batchProducerAt = 43
	batchEpochAt    = 51
	batchSeqAt      = 53
	batchCountAt    = 57
	batchHeaderLen  = 61
)

// producerBatch reads who wrote records, a Produce partition's record set: false unless it
// is one v2 batch of an idempotent producer (Kafka takes exactly one batch per partition
// from an idempotent producer) whose sequences do not wrap.
func producerBatch(records []byte) (ProducerBatch, bool) {
	if len(records) < batchHeaderLen || records[batchMagicAt] != 2 ||
		int(binary.BigEndian.Uint32(records[batchLengthAt:]))+12 != len(records) {
		return ProducerBatch{}, false
	}
	be := binary.BigEndian
	b := ProducerBatch{ProducerID: int64(be.Uint64(records[batchProducerAt:])), Epoch: int16(be.Uint16(records[batchEpochAt:])),
		FirstSeq: int32(be.Uint32(records[batchSeqAt:]))}
	count := int64(int32(be.Uint32(records[batchCountAt:])))
	last := int64(b.FirstSeq) + count - 1
	if b.ProducerID < 0 || b.Epoch < 0 || b.FirstSeq < 0 || count < 1 || last > math.MaxInt32 {
		return ProducerBatch{}, false
	}
	b.LastSeq = int32(last)
	return b, true
}

// Frozen reports whether f refuses anything.
func (f *Freeze) Frozen() bool { return f != nil && len(f.Topics) > 0 }

// freezeCodes are the retriable errors a frozen write gets.
var (
	frozenProduce = kerr.NotLeaderForPartition.Code
	frozenCommit  = kerr.CoordinatorLoadInProgress.Code
)

// Produce splits a Produce request (v12 or older: routes address topics by name) by the
// freeze: frozen topics' partitions are answered, unless the primary already holds their
// batch (Written); the rest is forwarded. ctx bounds Written.
func (f *Freeze) Produce(ctx context.Context, version int16, body []byte) (ProduceDecision, error) {
	if !f.Frozen() {
		return ProduceDecision{Forward: body}, nil
	}
	return splitProduce(ctx, version, body, namedOnly, func(topic string, p *kmsg.ProduceRequestTopicPartition) (int16, string) {
		if !f.Topics[topic] {
			return 0, ""
		}
		if b, ok := producerBatch(p.Records); ok && f.Written != nil && f.Written(ctx, topic, p.Partition, b) {
			return 0, "" // a resend of a write the primary holds: it answers from its cache
		}
		return frozenProduce, "the route is switching clusters: writes to this topic wait until the switch is done (retry)"
	})
}

// namedOnly names a topic addressed by name; routes cap Produce where topics are named.
func namedOnly(_ context.Context, name string, id [16]byte) (string, error) {
	if name == "" && id != ([16]byte{}) {
		return "", fmt.Errorf("enforcement: a frozen route's Produce names a topic by id (%x): routes advertise Produce up to v12 only", id)
	}
	return name, nil
}

// Commit returns the response refusing an OffsetCommit (8) or TxnOffsetCommit (28) that
// names a frozen topic while commits are frozen, or nil to forward the request. The whole
// request is refused: a group's commit is one unit for the client.
func (f *Freeze) Commit(key, version int16, body []byte) (kmsg.Response, error) {
	if !f.Frozen() || !f.Commits {
		return nil, nil
	}
	return RefuseCommit(key, version, body, f.Topics, nil)
}

// RefuseCommit returns the response refusing an OffsetCommit (8) or TxnOffsetCommit (28)
// that names one of topics, from a group member held reports true of (nil: every commit),
// with COORDINATOR_LOAD_IN_PROGRESS per partition, which every client retries and none takes
// for a change of its membership; nil to forward the request.
func RefuseCommit(key, version int16, body []byte, topics map[string]bool, held func(group, member string) bool) (kmsg.Response, error) {
	if len(topics) == 0 || (key != 8 && key != 28) {
		return nil, nil
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("enforcement: decode %s v%d: %w", kmsg.NameForKey(key), version, err)
	}
	switch r := req.(type) {
	case *kmsg.OffsetCommitRequest:
		if (held != nil && !held(r.Group, r.MemberID)) || !namesAny(topics, len(r.Topics), func(i int) string { return r.Topics[i].Topic }) {
			return nil, nil
		}
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		resp.SetVersion(version)
		for _, t := range r.Topics {
			rt := kmsg.OffsetCommitResponseTopic{Topic: t.Topic, TopicID: t.TopicID}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: frozenCommit})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	case *kmsg.TxnOffsetCommitRequest:
		if (held != nil && !held(r.Group, r.MemberID)) || !namesAny(topics, len(r.Topics), func(i int) string { return r.Topics[i].Topic }) {
			return nil, nil
		}
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		resp.SetVersion(version)
		for _, t := range r.Topics {
			rt := kmsg.TxnOffsetCommitResponseTopic{Topic: t.Topic}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.TxnOffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: frozenCommit})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	return nil, nil
}

// namesAny reports whether any of n topic names is in topics.
func namesAny(topics map[string]bool, n int, name func(int) string) bool {
	for i := range n {
		if topics[name(i)] {
			return true
		}
	}
	return false
}
