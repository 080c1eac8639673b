package fetcher

// Lookups the Copier makes at Start, in the admin goroutine and in Align:
// metadata (shared and briefly cached), offsets, records deletion, topic
// limits and writer identities, each at the partition's leader.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"
	"strings"
	"time"
	"weak"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/flight"
)

type partitionMeta struct {
	topicID     [16]byte
	leader      int32
	leaderEpoch int32
}

// metadataFlight shares one uncached Metadata request for a topic among the
// callers that ask at the same moment: the partitions of a topic start
// together (64 partitions would otherwise send 64 identical requests, several
// times each, to brokers that share the machine with the copy). A caller that
// joins gets an answer at most one round trip older than its question, which
// leader routing tolerates (a stale leader is refused and asked again).
var metadataFlight flight.Group

func topicMetadata(ctx context.Context, cl *kgo.Client, topic string) (*kmsg.MetadataResponse, error) {
	key := fmt.Sprintf("%p/%s", cl, topic)
	return flight.Do(ctx, &metadataFlight, key, 30*time.Second, func(ctx context.Context) (*kmsg.MetadataResponse, error) {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			recentMetadata.Add(key, recentAnswer{weak.Make(cl), resp, time.Now()})
		}
		return resp, err
	})
}

// recentMetadata keeps each topic's latest Metadata answer for a moment, for
// the first try of atLeader only. A partition's start sends five requests to
// its leaders one after another; asking Metadata before each doubled the round
// trips, and on a busy broker each one waits behind the connection's other
// requests. A leader that moved within the moment answers NOT_LEADER, and the
// retry asks afresh.
var recentMetadata = mustLRU[string, recentAnswer](4096)

// metadataReuse is how old an answer in recentMetadata may be. (Not the
// expirable LRU: it sweeps from a goroutine that never stops, every 10 ms.)
const metadataReuse = time.Second

// recentAnswer is a Metadata answer and the client that got it. The key names
// the client by address, which a client created after this one was collected
// may reuse; the weak pointer tells them apart (it reads nil once the first
// client is gone).
type recentAnswer struct {
	cl   weak.Pointer[kgo.Client]
	resp *kmsg.MetadataResponse
	at   time.Time
}

func mustLRU[K comparable, V any](size int) *lru.Cache[K, V] {
	c, err := lru.New[K, V](size)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}

// recentPartitionMetadata is partitionMetadata from an answer at most a
// second old, when there is one.
func recentPartitionMetadata(ctx context.Context, cl *kgo.Client, topic string, partition int32) (partitionMeta, error) {
	if r, ok := recentMetadata.Get(fmt.Sprintf("%p/%s", cl, topic)); ok && r.cl.Value() == cl && time.Since(r.at) < metadataReuse {
		if m, err := partitionMetaFrom(r.resp, topic, partition); err == nil {
			return m, nil
		}
	}
	return partitionMetadata(ctx, cl, topic, partition)
}

// partitionMetadata asks the cluster (not a cache) for a partition's leader
// and its topic's id. kgo learns the brokers from the response, so
// Broker(leader) works afterwards.
func partitionMetadata(ctx context.Context, cl *kgo.Client, topic string, partition int32) (partitionMeta, error) {
	resp, err := topicMetadata(ctx, cl, topic)
	if err != nil {
		return partitionMeta{}, err
	}
	return partitionMetaFrom(resp, topic, partition)
}

func partitionMetaFrom(resp *kmsg.MetadataResponse, topic string, partition int32) (partitionMeta, error) {
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return partitionMeta{}, err
		}
		for _, pm := range t.Partitions {
			if pm.Partition != partition {
				continue
			}
			if err := kerr.ErrorForCode(pm.ErrorCode); err != nil && !errors.Is(err, kerr.ReplicaNotAvailable) {
				return partitionMeta{}, err
			}
			if pm.Leader < 0 {
				return partitionMeta{}, kerr.LeaderNotAvailable
			}
			return partitionMeta{topicID: t.TopicID, leader: pm.Leader, leaderEpoch: pm.LeaderEpoch}, nil
		}
		return partitionMeta{}, fmt.Errorf("partition %d of %s: %w", partition, topic, kerr.UnknownTopicOrPartition)
	}
	return partitionMeta{}, fmt.Errorf("topic %s: %w", topic, kerr.UnknownTopicOrPartition)
}

type offsets struct {
	srcStart, srcHW  int64
	dstStart, dstEnd int64
}

// listOffsets reads source log start and high watermark and, if dst is not
// nil, the destination log start and end (ListOffsets LATEST answers the high
// watermark, which after acks=all appends is the log end).
func listOffsets(ctx context.Context, src, dst *kgo.Client, topic string, partition int32) (offsets, error) {
	// Four independent reads: at once, not one round trip after another.
	var o offsets
	g, ctx := errgroup.WithContext(ctx)
	read := func(cl *kgo.Client, ts int64, into *int64, what string) {
		g.Go(func() (err error) {
			if *into, err = listOffset(ctx, cl, topic, partition, ts); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		})
	}
	read(src, -2, &o.srcStart, "source log start")
	read(src, -1, &o.srcHW, "source high watermark")
	if dst != nil {
		read(dst, -2, &o.dstStart, "destination log start")
		read(dst, -1, &o.dstEnd, "destination log end")
	}
	return o, g.Wait()
}

// leaderErr reports errors that a metadata refresh and a retry may cure
// (leadership moving, a topic just created).
func leaderErr(err error) bool {
	return errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.UnknownTopicOrPartition) ||
		errors.Is(err, kerr.LeaderNotAvailable) || errors.Is(err, kerr.FencedLeaderEpoch) ||
		errors.Is(err, kerr.UnknownLeaderEpoch) || errors.Is(err, kerr.OffsetNotAvailable)
}

// atLeader sends a request built for a partition to its current leader,
// found with Metadata of at most a second ago on the first try and an uncached
// one on each retry (kadm's cached metadata can lag a topic creation or a
// leader change by seconds), retrying leadership errors for a few seconds.
func atLeader(ctx context.Context, cl *kgo.Client, topic string, partition int32, do func(m partitionMeta, b *kgo.Broker) error) error {
	var err error
	for attempt := 0; attempt < 30; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(min(time.Duration(attempt)*50*time.Millisecond, 500*time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		var m partitionMeta
		lookup := partitionMetadata
		if attempt == 0 {
			lookup = recentPartitionMetadata
		}
		if m, err = lookup(ctx, cl, topic, partition); err == nil {
			err = do(m, cl.Broker(int(m.leader)))
		}
		if err == nil || ctx.Err() != nil || !leaderErr(err) {
			return err
		}
	}
	return err
}

// listOffset answers ListOffsets for one partition: ts -2 is the log start,
// -1 the high watermark.
func listOffset(ctx context.Context, cl *kgo.Client, topic string, partition int32, ts int64) (int64, error) {
	var offset int64
	err := atLeader(ctx, cl, topic, partition, func(m partitionMeta, b *kgo.Broker) error {
		var err error
		offset, err = listOffsetsBatcher.Do(ctx, fmt.Sprintf("%p/%d/%d", cl, m.leader, ts),
			leaderPartition{topic, partition, m.leaderEpoch}, 30*time.Second,
			func(ctx context.Context, ps []leaderPartition) []flight.Result[int64] {
				return listOffsetsAt(ctx, b, ts, ps)
			})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ListOffsets(%s/%d, %d): %w", topic, partition, ts, err)
	}
	return offset, nil
}

// leaderPartition is a partition asked of its leader, with the leader epoch it
// is believed to have.
type leaderPartition struct {
	topic       string
	partition   int32
	leaderEpoch int32
}

// listOffsetsBatcher merges the ListOffsets of partitions that start together
// (per client, leader and timestamp): 64 partitions make one request, not 64
// queued behind each other on the leader's connection.
var listOffsetsBatcher flight.Batcher[leaderPartition, int64]

// leaderLogEnd asks listOffset for the leader's log end offset: every record
// the leader appended, also those its followers have not acknowledged yet
// (above the high watermark, which LATEST answers). A broker answers
// ListOffsets LATEST with the log end when the request comes from a replica;
// replica id -2 is Kafka's "debugging replica", which gets that answer
// without being a broker (KafkaApis: isolation level none unless the replica
// id is -1). fetcher's facts test proves it on real Kafka.
const leaderLogEnd int64 = math.MinInt64

// listOffsetsAt sends one ListOffsets for ps (each partition once) to b and
// answers them in order.
func listOffsetsAt(ctx context.Context, b *kgo.Broker, ts int64, ps []leaderPartition) []flight.Result[int64] {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if ts == leaderLogEnd {
		req.ReplicaID, ts = -2, -1
	}
	for topic, parts := range byTopic(ps) {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = p.partition, p.leaderEpoch, ts
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return allFailed[int64](len(ps), err)
	}
	got := map[topicPartition]flight.Result[int64]{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			got[topicPartition{t.Topic, p.Partition}] = flight.Result[int64]{Val: p.Offset, Err: kerr.ErrorForCode(p.ErrorCode)}
		}
	}
	return answersFor(ps, got)
}

// byTopic yields ps by topic, each topic-partition once: two callers may ask
// for the same one in one batch, and a request may name it only once.
func byTopic(ps []leaderPartition) iter.Seq2[string, []leaderPartition] {
	return func(yield func(string, []leaderPartition) bool) {
		seen := map[topicPartition]bool{}
		var topics []string
		parts := map[string][]leaderPartition{}
		for _, p := range ps {
			if tp := (topicPartition{p.topic, p.partition}); !seen[tp] {
				seen[tp] = true
				if _, ok := parts[p.topic]; !ok {
					topics = append(topics, p.topic)
				}
				parts[p.topic] = append(parts[p.topic], p)
			}
		}
		for _, t := range topics {
			if !yield(t, parts[t]) {
				return
			}
		}
	}
}

// answersFor answers each of ps from got; a partition the broker left out of
// its response is unknown to it.
func answersFor[T any](ps []leaderPartition, got map[topicPartition]flight.Result[T]) []flight.Result[T] {
	out := make([]flight.Result[T], len(ps))
	for i, p := range ps {
		r, ok := got[topicPartition{p.topic, p.partition}]
		if !ok {
			r.Err = kerr.UnknownTopicOrPartition
		}
		out[i] = r
	}
	return out
}

func allFailed[T any](n int, err error) []flight.Result[T] {
	out := make([]flight.Result[T], n)
	for i := range out {
		out[i].Err = err
	}
	return out
}

// deleteRecords moves a destination partition's log start to offset.
func deleteRecords(ctx context.Context, cl *kgo.Client, topic string, partition int32, offset int64) error {
	err := atLeader(ctx, cl, topic, partition, func(_ partitionMeta, b *kgo.Broker) error {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.TimeoutMillis = 30_000
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = partition, offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, b)
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.Partition == partition {
					return kerr.ErrorForCode(p.ErrorCode)
				}
			}
		}
		return kerr.UnknownTopicOrPartition
	})
	if err != nil {
		return fmt.Errorf("DeleteRecords(%s/%d, %d) on the destination: %w", topic, partition, offset, err)
	}
	return nil
}

type topicLimits struct {
	maxMessageBytes int
	compacted       bool // cleanup.policy has compact: records need keys
}

// destinationTopicLimits reads the destination topic's batch size limit and
// whether it is compacted.
// limitsFlight shares the DescribeConfigs of a topic among its partitions starting together.
var limitsFlight flight.Group

func destinationTopicLimits(ctx context.Context, adm *kadm.Client, topic string) (topicLimits, error) {
	return flight.Do(ctx, &limitsFlight, fmt.Sprintf("%p/%s", adm, topic), 30*time.Second, func(ctx context.Context) (topicLimits, error) {
		return describeTopicLimits(ctx, adm, topic)
	})
}

func describeTopicLimits(ctx context.Context, adm *kadm.Client, topic string) (topicLimits, error) {
	l := topicLimits{maxMessageBytes: 1048588}
	rc, err := describeTopicConfigs(ctx, adm, topic)
	if err != nil {
		return l, fmt.Errorf("describe destination topic %s configs: %w", topic, err)
	}
	for _, c := range rc.Configs {
		switch {
		case c.Value == nil:
		case c.Key == "max.message.bytes":
			if l.maxMessageBytes, err = strconv.Atoi(*c.Value); err != nil {
				return l, fmt.Errorf("destination topic %s max.message.bytes %q: %w", topic, *c.Value, err)
			}
		case c.Key == "cleanup.policy":
			l.compacted = strings.Contains(*c.Value, "compact")
		}
	}
	return l, nil
}

// fillerRecordsFor sizes filler batches for a destination batch size limit:
// empty records compress to under one byte each with zstd, so a limit of N
// bytes fits N-256 of them comfortably, capped at maxFillerRecords.
func fillerRecordsFor(maxMessageBytes int) int32 {
	return int32(max(1, min(maxFillerRecords, maxMessageBytes-256)))
}

// InitProducer takes the writer identity of a transactional id for a new
// owner: its epoch fences every earlier owner of the same id (lazily, per
// partition: the old epoch is refused once the new one has appended). It goes
// the way of the copy's own InitProducerId (txnClient.initialise): to a
// coordinator found for the id and forgotten when it fails, with the copy's
// transaction timeout or, where the destination caps it lower, the fallback.
func InitProducer(ctx context.Context, dst *kgo.Client, transactionalID string) (datapath.Producer, error) {
	pid, epoch, err := newTxnClient(dst, kadm.NewClient(dst)).initialise(ctx, transactionalID)
	if err != nil {
		return datapath.Producer{}, fmt.Errorf("take writer identity %q: %w", transactionalID, err)
	}
	return datapath.Producer{ID: pid, Epoch: epoch}, nil
}
