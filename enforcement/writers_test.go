package enforcement

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A batch under the id of its partition's mirror writer, in an epoch not above the
// writer's, is refused with UNKNOWN_PRODUCER_ID; other ids, later epochs, other partitions
// and batches of no idempotent producer are forwarded, each partition on its own.
func TestMirrorWritersRefuseAClashingProducerID(t *testing.T) {
	w := MirrorWriters{"orders": {0: {{ProducerID: 7, Epoch: 1}}, 1: {{ProducerID: 3, Epoch: 0}, {ProducerID: 9, Epoch: 0}}}}
	for _, c := range []struct {
		name      string
		partition int32
		records   []byte
		refused   bool
	}{
		{"the writer's id and epoch", 0, idempotentBatch(7, 1, 100, 5), true},
		{"the writer's id, an earlier epoch", 0, idempotentBatch(7, 0, 3, 1), true},
		{"the writer's id, a later epoch", 0, idempotentBatch(7, 2, 0, 1), false},
		{"another id", 0, idempotentBatch(8, 1, 100, 5), false},
		{"another partition's writer's id", 1, idempotentBatch(7, 1, 100, 5), false},
		{"one of several producers held on a partition", 1, idempotentBatch(9, 0, 40, 5), true},
		{"the first of several", 1, idempotentBatch(3, 0, 40, 5), true},
		{"a partition with no writer", 2, idempotentBatch(7, 1, 100, 5), false},
		{"no producer id", 0, idempotentBatch(-1, -1, -1, 5), false},
	} {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(9)
		req.Acks = -1
		req.Topics = []kmsg.ProduceRequestTopic{
			{Topic: "orders", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: c.partition, Records: c.records}}},
			{Topic: "other", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: idempotentBatch(7, 1, 100, 5)}}},
		}
		d, err := w.Produce(context.Background(), 9, req.AppendTo(nil))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := d.Refused != nil; got != c.refused {
			t.Errorf("%s: refused %v, want %v", c.name, got, c.refused)
			continue
		}
		if c.refused {
			p := d.Refused.Topics[0].Partitions[0]
			if len(d.Refused.Topics) != 1 || d.Refused.Topics[0].Topic != "orders" || p.ErrorCode != kerr.UnknownProducerID.Code {
				t.Errorf("%s: refused %+v, want orders/%d with UNKNOWN_PRODUCER_ID", c.name, d.Refused, c.partition)
			}
			if p.LogStartOffset < 0 {
				// The Java producer resends a batch unchanged, forever, when the log start
				// offset is not known; with one it bumps its epoch past the writer's.
				t.Errorf("%s: refused with log start offset %d, want a known one", c.name, p.LogStartOffset)
			}
			fwd := kmsg.NewPtrProduceRequest()
			fwd.SetVersion(9)
			if err := fwd.ReadFrom(d.Forward); err != nil || len(fwd.Topics) != 1 || fwd.Topics[0].Topic != "other" {
				t.Errorf("%s: forwarded %+v (%v), want the other topic whole", c.name, fwd.Topics, err)
			}
		}
	}
	if d, err := (MirrorWriters{}).Produce(context.Background(), 9, []byte("not decoded")); err != nil || d.Refused != nil || string(d.Forward) != "not decoded" {
		t.Errorf("no writers: %+v %v, want the body forwarded undecoded", d, err)
	}
}
