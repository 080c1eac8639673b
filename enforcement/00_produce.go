package enforcement

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Produce (key 0).
//
// A request may mix mirror topics with ordinary ones (a Java producer batches
// every partition led by one broker into one request), so refusing the whole
// request would fail innocent writes. FilterProduce instead splits it: the
// refused partitions are answered here and the rest is forwarded; the proxy
// merges both halves into one response with MergeProduce. Decoding a Produce
// request with kmsg slices the record batches, it does not decode them.

// ProduceDecision is what to do with one Produce request.
type ProduceDecision struct {
	// Forward is the request body to send upstream: the original body when
	// nothing was refused, a re-encoded one without the refused partitions,
	// or nil when every partition was refused.
	Forward []byte
	// Refused holds the refused partitions' answers (nil when none was).
	Refused *kmsg.ProduceResponse
}

// FilterProduce decides a Produce request body of the given version.
func (g *Guard) FilterProduce(ctx context.Context, version int16, body []byte) (ProduceDecision, error) {
	set := g.set.Load()
	if set.Empty() {
		return ProduceDecision{Forward: body}, nil
	}
	return splitProduce(ctx, version, body, g.topicName, byPartition(g.readOnlyWhy(set)))
}

// readOnlyWhy is the per-partition refusal of writes to read-only mirror
// topics, in the form splitProduce takes.
func (g *Guard) readOnlyWhy(set *ReadOnlySet) func(topic string, partition int32) (int16, string) {
	code := g.opts.ErrorCode
	if set.IsLoading() {
		code = kerr.NotLeaderForPartition.Code // retriable: the write goes through once the state is read
	}
	return func(topic string, partition int32) (int16, string) {
		if why := set.refusal(topic, partition); why != "" {
			return code, why
		}
		return 0, ""
	}
}

// topicNamer names a topic addressed by name or by id.
type topicNamer func(ctx context.Context, name string, id [16]byte) (string, error)

// partitionWhy decides one partition of a Produce request: a non-zero code refuses it.
type partitionWhy func(topic string, p *kmsg.ProduceRequestTopicPartition) (int16, string)

// byPartition is a partitionWhy that needs only the partition's number.
func byPartition(why func(topic string, partition int32) (int16, string)) partitionWhy {
	return func(topic string, p *kmsg.ProduceRequestTopicPartition) (int16, string) {
		return why(topic, p.Partition)
	}
}

// splitProduce splits a Produce request: partitions for which why returns
// a non-zero code are answered with it, the rest is forwarded.
func splitProduce(ctx context.Context, version int16, body []byte, topicName topicNamer, why partitionWhy) (ProduceDecision, error) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	// Unsafe: the records and names alias body rather than being copied (a Produce is mostly
	// records); what outlives body is Forward, which AppendTo copies, and Refused, whose
	// names are cloned.
	if err := req.UnsafeReadFrom(body); err != nil {
		return ProduceDecision{}, fmt.Errorf("enforcement: decode Produce v%d: %w", version, err)
	}
	var refused *kmsg.ProduceResponse
	kept := req.Topics[:0]
	for _, t := range req.Topics {
		name, err := topicName(ctx, t.Topic, t.TopicID)
		if err != nil {
			return ProduceDecision{}, err
		}
		var rt *kmsg.ProduceResponseTopic
		keptParts := t.Partitions[:0]
		for _, p := range t.Partitions {
			code, msg := why(name, &p)
			if code == 0 {
				keptParts = append(keptParts, p)
				continue
			}
			if refused == nil {
				refused = kmsg.NewPtrProduceResponse()
				refused.SetVersion(version)
			}
			if rt == nil {
				// Cloned: the name aliases body, and a merged refusal outlives it.
				refused.Topics = append(refused.Topics, kmsg.ProduceResponseTopic{Topic: strings.Clone(t.Topic), TopicID: t.TopicID})
				rt = &refused.Topics[len(refused.Topics)-1]
			}
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset, rp.LogStartOffset = p.Partition, code, -1, -1
			rp.ErrorMessage = &msg
			rt.Partitions = append(rt.Partitions, rp)
		}
		if len(keptParts) > 0 {
			t.Partitions = keptParts
			kept = append(kept, t)
		}
	}
	if refused == nil {
		return ProduceDecision{Forward: body}, nil
	}
	if len(kept) == 0 {
		return ProduceDecision{Refused: refused}, nil
	}
	req.Topics = kept
	return ProduceDecision{Forward: req.AppendTo(nil), Refused: refused}, nil
}

// MergeProduce adds the refused partitions to an upstream Produce response.
func MergeProduce(resp, refused *kmsg.ProduceResponse) {
	if refused == nil {
		return
	}
	for _, rt := range refused.Topics {
		merged := false
		for i := range resp.Topics {
			t := &resp.Topics[i]
			if (rt.Topic != "" && t.Topic == rt.Topic) || (rt.Topic == "" && t.TopicID == rt.TopicID) {
				t.Partitions = append(t.Partitions, rt.Partitions...)
				merged = true
				break
			}
		}
		if !merged {
			resp.Topics = append(resp.Topics, rt)
		}
	}
}
