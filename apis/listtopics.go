package apis

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// listTopics lists a cluster's topics with a fresh Metadata request. kadm
// answers from the client's metadata cache (up to MetadataMinAge old), which
// would tell an operator who just created a topic that it does not exist.
func listTopics(ctx context.Context, cl *kgo.Client) (kadm.TopicDetails, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	out := make(kadm.TopicDetails, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		d := kadm.TopicDetail{Topic: *t.Topic, ID: t.TopicID, IsInternal: t.IsInternal, Partitions: kadm.PartitionDetails{},
			Err: kerr.ErrorForCode(t.ErrorCode)}
		for _, p := range t.Partitions {
			d.Partitions[p.Partition] = kadm.PartitionDetail{Topic: *t.Topic, Partition: p.Partition, Leader: p.Leader,
				LeaderEpoch: p.LeaderEpoch, Replicas: p.Replicas, ISR: p.ISR, Err: kerr.ErrorForCode(p.ErrorCode)}
		}
		out[*t.Topic] = d
	}
	return out, nil
}
