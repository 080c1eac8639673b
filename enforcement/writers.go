package enforcement

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MirrorWriters guards a switched route's partitions against a producer id clash
// (docs/cutover.md, "The primary's producer ids and the mirror's writers"). After a switch an
// idempotent producer keeps the id the primary gave it, while the standby holds, on each
// mirrored partition, the state of the mirror's writer under an id the standby gave: both
// clusters count ids from 0, so the two can be equal. The standby would then judge the
// application's batch against the writer's sequences, and answer a batch whose sequences
// match one of the writer's last five as a duplicate, without writing it. Such a batch is
// refused with UNKNOWN_PRODUCER_ID instead, and a non-transactional producer moves past the
// writer's state: franz-go and librdkafka ask the standby for a producer id, and the Java
// producer bumps its epoch (KIP-360), which the guard lets through once it is above the
// writer's. The Java producer bumps only when the answer carries a log start offset: with
// -1 ("not known") it resends the batch unchanged, forever (found by
// TestRealRouteSwitchEveryClient: its producer was stuck, UNKNOWN_PRODUCER_ID once a second).
//
// A switch back to the primary meets the same clash with the writer of the mirror that copied
// the standby back, on the primary: there the guard holds every producer the primary knows on
// the partition (DescribeProducers), since which of them is that mirror's writer is the
// primary's kmirror's to know; a producer of the application refused so takes a new id or
// epoch as above, where the primary would have answered it OUT_OF_ORDER_SEQUENCE_NUMBER.
//
// By topic and partition, the mirror's writer there (on a switch back, every producer).
type MirrorWriters map[string]map[int32][]Writer

// Writer is a producer id and epoch the cluster gave a mirror's writer.
type Writer struct {
	ProducerID int64
	Epoch      int16
}

// clashCode is what a clashing batch gets: Kafka's answer for a producer whose state the
// broker does not have, which every idempotent client answers by taking a producer id anew
// (Java since KIP-360, librdkafka, franz-go).
var clashCode = kerr.UnknownProducerID.Code

// Produce splits a Produce request (v12 or older, as routes allow) by the writers: a batch of
// a partition's writer's producer id, in an epoch not above the writer's, is answered
// UNKNOWN_PRODUCER_ID; the rest is forwarded. A batch in a later epoch is the client's own
// after it bumped its epoch (KIP-360), which supersedes the writer's state.
func (w MirrorWriters) Produce(ctx context.Context, version int16, body []byte) (ProduceDecision, error) {
	if len(w) == 0 {
		return ProduceDecision{Forward: body}, nil
	}
	d, err := splitProduce(ctx, version, body, namedOnly, func(topic string, p *kmsg.ProduceRequestTopicPartition) (int16, string) {
		b, ok := producerBatch(p.Records)
		if !ok {
			return 0, ""
		}
		for _, wr := range w[topic][p.Partition] {
			if b.ProducerID == wr.ProducerID && b.Epoch <= wr.Epoch {
				return clashCode, "this producer id is one the cluster gave kmirror's mirror writer on this partition; take a new one (the route was switched)"
			}
		}
		return 0, ""
	})
	if d.Refused != nil {
		for i := range d.Refused.Topics {
			for j := range d.Refused.Topics[i].Partitions {
				// Known, so that the Java producer bumps its epoch rather than resend as is
				// (above): an idempotent one bumps on any known log start offset, and the
				// partition's real one is not known here without asking the standby.
				d.Refused.Topics[i].Partitions[j].LogStartOffset = 0
			}
		}
	}
	return d, err
}
