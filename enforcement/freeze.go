package enforcement

import (
	"context"
	"fmt"

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
type Freeze struct {
	Topics  map[string]bool
	Commits bool
}

// Frozen reports whether f refuses anything.
func (f *Freeze) Frozen() bool { return f != nil && len(f.Topics) > 0 }

// freezeCodes are the retriable errors a frozen write gets.
var (
	frozenProduce = kerr.NotLeaderForPartition.Code
	frozenCommit  = kerr.CoordinatorLoadInProgress.Code
)

// Produce splits a Produce request (v12 or older: routes address topics by name) by the
// freeze: frozen topics' partitions are answered, the rest is forwarded.
func (f *Freeze) Produce(version int16, body []byte) (ProduceDecision, error) {
	if !f.Frozen() {
		return ProduceDecision{Forward: body}, nil
	}
	return splitProduce(context.Background(), version, body, namedOnly, func(topic string, _ int32) (int16, string) {
		if f.Topics[topic] {
			return frozenProduce, "the route is switching clusters: writes to this topic wait until the switch is done (retry)"
		}
		return 0, ""
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
	if !f.Frozen() || !f.Commits || (key != 8 && key != 28) {
		return nil, nil
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("enforcement: decode %s v%d: %w", kmsg.NameForKey(key), version, err)
	}
	switch r := req.(type) {
	case *kmsg.OffsetCommitRequest:
		if !f.names(len(r.Topics), func(i int) string { return r.Topics[i].Topic }) {
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
		if !f.names(len(r.Topics), func(i int) string { return r.Topics[i].Topic }) {
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

// names reports whether any of n topic names is frozen.
func (f *Freeze) names(n int, name func(int) string) bool {
	for i := range n {
		if f.Topics[name(i)] {
			return true
		}
	}
	return false
}
