package apis

// Failback. A topic whose destination log already holds records can be
// mirrored only if those records are a prefix of the source log: the mirror
// appends at the source's offsets. Two facts tell how long the common prefix
// is, per partition:
//
//   - this mirror's own last mirrored offset, when the topic was mirrored
//     here before and failed over (STOPPED): the destination's log up to it
//     came from the source;
//   - the source's last mirrored offset of the topic *from this cluster*,
//     when the source mirrored this cluster's topic and failed over (the
//     usual failback: B took over from A, A comes back and mirrors from B):
//     the source's log up to it came from here. The source must be a kmirror
//     (it answers LastMirroredOffsets by this cluster's id).
//
// A destination log that ends within the prefix continues from its end, with
// no re-copy. One that goes past it holds records the source never had
// (written here after the failover): the destination topic is deleted and
// mirrored again from scratch at identical offsets, and the mirror records
// how many records were discarded and why. A source that still mirrors the
// topic from this cluster (not failed over) would make a loop: refused.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// sourceMirrorOf is what the source knows of the topic as a mirror of this
// cluster's topic.
type sourceMirrorOf struct {
	known  bool            // the source is a kmirror that mirrored the topic from here
	active bool            // ... and still mirrors it (a loop if mirrored back)
	lmo    map[int32]int64 // last mirrored offsets (known && !active)
}

// askSource asks the source's kmirror for its last mirrored offsets of topic
// from this cluster. A source that is not a kmirror (or an older one) knows
// nothing.
func (a *adder) askSource(ctx context.Context, topic string, partitions int32) (sourceMirrorOf, error) {
	var out sourceMirrorOf
	localID, err := a.localClusterID(ctx)
	if err != nil {
		return out, err
	}
	cl, err := a.b.sourceKmirrorClient(a.m)
	if err != nil {
		return out, err
	}
	defer cl.Close()
	req := protocol.NewPtrLastMirroredOffsetsRequest()
	req.ClusterID = localID
	tp := protocol.TopicPartitions{Name: topic}
	for p := range partitions {
		tp.Partitions = append(tp.Partitions, p)
	}
	req.Topics = []protocol.TopicPartitions{tp}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	kresp, err := cl.Request(rctx, req)
	if err != nil {
		a.b.Log.Debug("the source does not answer LastMirroredOffsets (not a kmirror?)", "mirror", a.m.Name, "topic", topic, "err", err)
		return out, nil
	}
	resp := kresp.(*protocol.LastMirroredOffsetsResponse)
	if resp.ErrorCode != 0 {
		return out, nil
	}
	for _, t := range resp.Topics {
		if t.Name != topic {
			continue
		}
		lmo := map[int32]int64{}
		for _, p := range t.Partitions {
			switch {
			case p.ErrorCode == protocol.ErrMirrorTopicNotStopped.Code:
				return sourceMirrorOf{known: true, active: true}, nil
			case p.ErrorCode != 0 || p.LastMirroredOffset < 0:
				return out, nil // not (all) a mirror of ours: nothing known
			}
			lmo[p.Partition] = p.LastMirroredOffset
		}
		if int32(len(lmo)) == partitions {
			return sourceMirrorOf{known: true, lmo: lmo}, nil
		}
	}
	return out, nil
}

func (a *adder) localClusterID(ctx context.Context) (string, error) {
	if a.clusterID != "" {
		return a.clusterID, nil
	}
	id, err := a.b.destinationClusterID(ctx)
	if err != nil {
		return "", err
	}
	a.clusterID = id
	return id, nil
}

// destinationClusterID is the destination cluster's id.
func (b *Backend) destinationClusterID(ctx context.Context) (string, error) {
	m, err := b.Destination.BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("destination cluster id: %w", err)
	}
	return m.Cluster, nil
}

// sourceKmirrorClient is a new client of the mirror's source, with its connection configs and
// credentials, that may send kmirror's mirror RPCs: a source that is a kmirror answers them
// (failback, a route's switch back). The caller closes it.
func (b *Backend) sourceKmirrorClient(m *statetopic.Mirror) (*kgo.Client, error) {
	opts, err := b.Sources.Options(m.Name, m.Config.Configs)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.MaxVersions(protocol.KgoMaxVersions(nil)), kgo.RequestRetries(2))...)
	if err != nil {
		return nil, fmt.Errorf("source client: %w", err)
	}
	return cl, nil
}

// failbackPlan is the decision for a topic the destination holds records of.
type failbackPlan struct {
	recreate bool
	note     string
}

// planFailback compares the destination's log ends with the common prefix.
// own is this mirror's last mirrored offset per partition (nil: none).
func planFailback(topic string, ends map[int32]int64, own map[int32]int64, src sourceMirrorOf) (failbackPlan, error) {
	if src.active {
		return failbackPlan{}, protocol.ErrInvalidRequest.WithMessage("mirror loop: topic %q on the source is itself a mirror of this cluster's %q and still mirroring; "+
			"fail it over on the source first (kmirror mirrors --remove there), then add it here", topic, topic)
	}
	if own == nil && !src.known {
		return failbackPlan{}, nil // not a failback: the caller decides
	}
	var diverged []string
	var discarded int64
	parts := make([]int32, 0, len(ends))
	for p := range ends {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	for _, p := range parts {
		prefix := int64(-1)
		if o, ok := own[p]; ok {
			prefix = o
		}
		if o, ok := src.lmo[p]; ok && o > prefix {
			prefix = o
		}
		if end := ends[p]; end > max(prefix, 0) {
			diverged = append(diverged, fmt.Sprintf("partition %d: %d records after offset %d", p, end-max(prefix, 0), max(prefix, 0)))
			discarded += end - max(prefix, 0)
		}
	}
	if len(diverged) == 0 {
		return failbackPlan{note: fmt.Sprintf("failback: the destination log of %q is a prefix of the source's; mirroring continues from its end with no re-copy", topic)}, nil
	}
	return failbackPlan{recreate: true, note: fmt.Sprintf("failback: the destination topic %q held %d records the source never received (%s), written here after the last failover; "+
		"they were discarded: the topic was deleted and is mirrored again from scratch at the source's offsets", topic, discarded, strings.Join(diverged, ", "))}, nil
}

// destinationEnds reads a destination topic's log ends (nil: no such topic).
func (a *adder) destinationEnds(ctx context.Context, topic string) (map[int32]int64, error) {
	ends, err := a.b.Destination.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("checking destination topic %q: %v; retry", topic, err)
	}
	var out map[int32]int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			if out == nil {
				out = map[int32]int64{}
			}
			out[o.Partition] = o.Offset
		}
	})
	return out, nil
}

// recreate deletes the destination topic and waits until it is gone, so the
// partitions' preparation creates it afresh.
func (a *adder) recreate(ctx context.Context, topic string) error {
	resps, err := a.b.Destination.DeleteTopics(ctx, topic)
	if err == nil {
		err = resps[topic].Err
	}
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("deleting destination topic %q to mirror it again: %v; retry", topic, err)
	}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		// Uncached metadata: kadm's cache would show the topic for seconds.
		md, err := a.b.Destination.Metadata(kadm.WithAuthorizedOps(ctx), topic)
		if err == nil && errors.Is(md.Topics[topic].Err, kerr.UnknownTopicOrPartition) {
			a.b.Log.Warn("failback: deleted the destination topic to mirror it again from scratch", "mirror", a.m.Name, "topic", topic)
			return nil
		}
		select {
		case <-ctx.Done():
			return protocol.ErrCoordinatorNotAvailable.WithMessage("destination topic %q is still being deleted: %v; retry", topic, ctx.Err())
		case <-time.After(wait):
		}
	}
}
