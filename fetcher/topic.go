package fetcher

// Destination topic preparation: the destination topic must accept every
// source batch as sent and keep it byte for byte, so the configs of
// mirrorconfig.ForcedTopicConfigs are set on it whatever the source or the
// exclusion list says (mirrorconfig/topicconfigs.go says why each).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
)

// DestinationTopic is the mirror's destination topic after preparation.
type DestinationTopic struct {
	ID         [16]byte
	Partitions int32
}

// EnsureDestinationTopic makes the destination topic ready to receive the
// source topic's batches at identical offsets. If it is absent it is created
// with the source's partition count, the source's non-default configs minus
// excluded ones (excludeConfigs nil means mirrorconfig.DefaultExcludedConfig)
// plus mirrorconfig.ForcedTopicConfigs, and replication factor min(3, destination brokers). If
// it exists, forced configs that differ are set, and it is grown to the
// source's partition count; a destination with more partitions than the
// source is an error (partitions cannot be removed).
func EnsureDestinationTopic(ctx context.Context, src, dst *kadm.Client, topic string, excludeConfigs func(name string) bool) (DestinationTopic, error) {
	if excludeConfigs == nil {
		excludeConfigs = mirrorconfig.DefaultExcludedConfig
	}
	// kadm answers metadata from kgo's cache (up to 5 s old) unless asked for
	// authorized operations: a topic created a moment ago would look absent.
	ctx = kadm.WithAuthorizedOps(ctx)
	srcTopics, err := src.ListTopics(ctx, topic)
	if err != nil {
		return DestinationTopic{}, fmt.Errorf("describe source topic %q: %w", topic, err)
	}
	srcDetail, ok := srcTopics[topic]
	if !ok || srcDetail.Err != nil {
		return DestinationTopic{}, fmt.Errorf("describe source topic %q: %w", topic, errOr(srcDetail.Err, kerr.UnknownTopicOrPartition))
	}
	partitions := int32(len(srcDetail.Partitions))

	dstTopics, err := dst.ListTopics(ctx, topic)
	if err != nil {
		return DestinationTopic{}, fmt.Errorf("describe destination topic %q: %w", topic, err)
	}
	if d, ok := dstTopics[topic]; ok && d.Err == nil {
		return prepareExisting(ctx, dst, topic, d, partitions)
	} else if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return DestinationTopic{}, fmt.Errorf("describe destination topic %q: %w", topic, d.Err)
	}

	configs, err := copiedConfigs(ctx, src, topic, excludeConfigs)
	if err != nil {
		return DestinationTopic{}, err
	}
	// BrokerMetadata asks for no topic. kadm's ListBrokers asks for every topic:
	// at 4,000 destination partitions, decoding those answers, one per topic
	// created, was a quarter of a start-up's CPU (bench/README.md, "Scale").
	brokers, err := dst.BrokerMetadata(ctx)
	if err != nil {
		return DestinationTopic{}, fmt.Errorf("list destination brokers: %w", err)
	}
	rf := int16(min(3, len(brokers.Brokers)))
	resp, err := dst.CreateTopic(ctx, partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		// Another instance created it between our check and our create.
		return EnsureDestinationTopic(ctx, src, dst, topic, excludeConfigs)
	}
	if err != nil {
		return DestinationTopic{}, fmt.Errorf("create destination topic %q (%d partitions, replication factor %d): %w %s", topic, partitions, rf, err, resp.ErrMessage)
	}
	id := resp.ID
	if err := waitPartitionsLed(ctx, dst, topic, partitions); err != nil {
		return DestinationTopic{}, err
	}
	if id == (kadm.TopicID{}) { // older brokers do not return the id
		d, err := dst.ListTopics(ctx, topic)
		if err != nil {
			return DestinationTopic{}, fmt.Errorf("describe created destination topic %q: %w", topic, err)
		}
		id = d[topic].ID
	}
	return DestinationTopic{ID: id, Partitions: partitions}, nil
}

// waitPartitionsLed waits until every partition of a created or grown topic
// has a leader that serves it, so that callers can use it at once: metadata
// reaches the brokers asynchronously after CreateTopics.
func waitPartitionsLed(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	err := pollReady(ctx, topic, func() error {
		m, err := adm.Metadata(ctx, topic)
		if err != nil {
			return err
		}
		td := m.Topics[topic]
		if td.Err != nil {
			return td.Err
		}
		if int32(len(td.Partitions)) < partitions {
			return fmt.Errorf("%d of %d partitions visible", len(td.Partitions), partitions)
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("partition %d has no leader yet: %v", p.Partition, p.Err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A leader named in metadata does not serve yet: it applies the metadata
	// and creates the log a moment later, answering NOT_LEADER_OR_FOLLOWER
	// until then. One ListOffsets per leader for all the partitions waits for
	// that here; otherwise each partition's first request retried on its own
	// back-off (64 new partitions took up to 1.5 s more to start on the
	// development machine).
	return pollReady(ctx, topic, func() error {
		offs, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		if err := offs.Error(); err != nil {
			return err
		}
		if n := len(offs[topic]); int32(n) < partitions {
			return fmt.Errorf("%d of %d partitions answer ListOffsets", n, partitions)
		}
		return nil
	})
}

// pollReady calls check until it succeeds, backing off from 10 ms.
func pollReady(ctx context.Context, topic string, check func() error) error {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		err := check()
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("destination topic %q: partitions not ready: %w (last: %v)", topic, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func errOr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}

func copiedConfigs(ctx context.Context, src *kadm.Client, topic string, exclude func(string) bool) (map[string]*string, error) {
	rc, err := describeTopicConfigs(ctx, src, topic)
	if err != nil {
		return nil, fmt.Errorf("describe source topic %q configs: %w", topic, err)
	}
	configs := make(map[string]*string)
	for _, c := range rc.Configs {
		if c.Source != kmsg.ConfigSourceDynamicTopicConfig || c.Sensitive || c.Value == nil || exclude(c.Key) {
			continue
		}
		configs[c.Key] = c.Value
	}
	for k, v := range mirrorconfig.ForcedTopicConfigs {
		configs[k] = &v
	}
	return configs, nil
}

func prepareExisting(ctx context.Context, dst *kadm.Client, topic string, d kadm.TopicDetail, want int32) (DestinationTopic, error) {
	have := int32(len(d.Partitions))
	if have > want {
		return DestinationTopic{}, fmt.Errorf("destination topic %q has %d partitions, more than the source's %d; offsets cannot be mirrored into it: delete it or mirror into another cluster", topic, have, want)
	}
	rc, err := describeTopicConfigs(ctx, dst, topic)
	if err != nil {
		return DestinationTopic{}, fmt.Errorf("describe destination topic %q configs: %w", topic, err)
	}
	var alter []kadm.AlterConfig
	for k, v := range mirrorconfig.ForcedTopicConfigs {
		var cur string
		for _, c := range rc.Configs {
			if c.Key == k {
				cur = c.MaybeValue()
			}
		}
		if cur != v {
			alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
		}
	}
	if len(alter) > 0 {
		resps, err := dst.AlterTopicConfigs(ctx, alter, topic)
		if err == nil {
			for _, r := range resps {
				if r.Err != nil {
					err = fmt.Errorf("%w %s", r.Err, r.ErrMessage)
				}
			}
		}
		if err != nil {
			return DestinationTopic{}, fmt.Errorf("set mirror configs on destination topic %q: %w", topic, err)
		}
	}
	if have < want {
		resps, err := dst.UpdatePartitions(ctx, int(want), topic)
		if err == nil {
			for _, r := range resps {
				if r.Err != nil {
					err = fmt.Errorf("%w %s", r.Err, r.ErrMessage)
				}
			}
		}
		if err != nil {
			return DestinationTopic{}, fmt.Errorf("grow destination topic %q from %d to %d partitions: %w", topic, have, want, err)
		}
	}
	if err := waitPartitionsLed(ctx, dst, topic, want); err != nil {
		return DestinationTopic{}, err
	}
	return DestinationTopic{ID: d.ID, Partitions: want}, nil
}

// describeTopicConfigs describes one topic's configs: the request's error,
// the topic missing from the answer, or the broker's error for it. Callers
// say which cluster in their wrapping.
func describeTopicConfigs(ctx context.Context, adm *kadm.Client, topic string) (kadm.ResourceConfig, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return kadm.ResourceConfig{}, err
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	return rc, err
}
