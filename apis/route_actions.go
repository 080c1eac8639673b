package apis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/routeswitch"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// SwitchActions are a route switch driver's reads and writes
// (routeswitch.Actions, docs/cutover.md): the primary is the mirror's
// source, reached with the mirror's own client and credentials; the
// standby is the destination.
type SwitchActions struct{ B *Backend }

var _ routeswitch.Actions = SwitchActions{}

// source returns the mirror's source client (the mirror's own, cached).
func (a SwitchActions) source(ctx context.Context, mirror string) (*kgo.Client, error) {
	m, err := a.B.Mirror(ctx, mirror)
	if err != nil {
		return nil, err
	}
	return a.B.sourceClient(m)
}

// sourceAdmin is source as an admin client.
func (a SwitchActions) sourceAdmin(ctx context.Context, mirror string) (*kadm.Client, error) {
	cl, err := a.source(ctx, mirror)
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

// openProducers lists the producers with a transaction open on the topics'
// partitions of the primary.
func (a SwitchActions) openProducers(ctx context.Context, mirror string, topics []string) (*kgo.Client, []kadm.DescribedProducer, error) {
	cl, err := a.source(ctx, mirror)
	if err != nil {
		return nil, nil, err
	}
	src := kadm.NewClient(cl)
	set := kadm.TopicsSet{}
	ends, err := src.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the primary's partitions: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) { set.Add(o.Topic, o.Partition) })
	described, err := src.DescribeProducers(ctx, set)
	if err != nil {
		return nil, nil, fmt.Errorf("DescribeProducers on the primary: %w", err)
	}
	var open []kadm.DescribedProducer
	for _, t := range described {
		for _, p := range t.Partitions {
			if p.Err != nil {
				return nil, nil, fmt.Errorf("DescribeProducers on the primary, %s/%d: %w", p.Topic, p.Partition, p.Err)
			}
			for _, pr := range p.ActiveProducers {
				if pr.CurrentTxnStartOffset >= 0 {
					open = append(open, pr)
				}
			}
		}
	}
	return cl, open, nil
}

// OpenTransactions counts the open transactions (one per producer and partition).
func (a SwitchActions) OpenTransactions(ctx context.Context, mirror string, topics []string) (int, error) {
	_, open, err := a.openProducers(ctx, mirror, topics)
	return len(open), err
}

// AbortTransactions writes an ABORT marker for each open transaction at its
// partition's leader, as Kafka's `kafka-transactions abort` does (KIP-664).
// It needs CLUSTER_ACTION on the primary's cluster for the mirror's source
// principal (WriteTxnMarkers is otherwise the brokers' own request); without
// it the abort fails permanently and the switch rolls back, naming it.
func (a SwitchActions) AbortTransactions(ctx context.Context, mirror string, topics []string) error {
	src, open, err := a.openProducers(ctx, mirror, topics)
	if err != nil {
		return err
	}
	for _, p := range open {
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = p.ProducerID, p.ProducerEpoch, false, p.CoordinatorEpoch
		t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		t.Topic, t.Partitions = p.Topic, []int32{p.Partition}
		m.Topics = append(m.Topics, t)
		req.Markers = append(req.Markers, m)
		resp, err := req.RequestWith(ctx, src.Broker(int(p.Leader)))
		if err != nil {
			return fmt.Errorf("aborting the transaction of producer %d on %s/%d: %w", p.ProducerID, p.Topic, p.Partition, err)
		}
		for _, rm := range resp.Markers {
			for _, rt := range rm.Topics {
				for _, rp := range rt.Partitions {
					kerrOf := kerr.ErrorForCode(rp.ErrorCode)
					if kerrOf == nil {
						continue
					}
					err := fmt.Errorf("aborting the transaction of producer %d on %s/%d: %w", p.ProducerID, p.Topic, p.Partition, kerrOf)
					if !kerr.IsRetriable(kerrOf) {
						return datapath.Permanent(err)
					}
					return err
				}
			}
		}
	}
	return nil
}

// LogEnds reads the primary's log ends.
func (a SwitchActions) LogEnds(ctx context.Context, mirror string, topics []string) ([]statetopic.DrainTarget, error) {
	src, err := a.sourceAdmin(ctx, mirror)
	if err != nil {
		return nil, err
	}
	ends, err := src.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("reading the primary's log ends: %w", err)
	}
	var out []statetopic.DrainTarget
	var perr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			perr = fmt.Errorf("reading the primary's log end of %s/%d: %w", o.Topic, o.Partition, o.Err)
		}
		out = append(out, statetopic.DrainTarget{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset})
	})
	slices.SortFunc(out, func(x, y statetopic.DrainTarget) int {
		if c := strings.Compare(x.Topic, y.Topic); c != 0 {
			return c
		}
		return int(x.Partition - y.Partition)
	})
	return out, perr
}

// CopiedEnds reads the standby's log ends (the copy keeps source offsets).
func (a SwitchActions) CopiedEnds(ctx context.Context, _ string, topics []string) (map[routeswitch.TopicPartition]int64, error) {
	ends, err := a.B.Destination.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("reading the standby's log ends: %w", err)
	}
	out := map[routeswitch.TopicPartition]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil { // a partition not read counts as not yet copied
			out[routeswitch.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
		}
	})
	return out, nil
}

// groupCommits reads every primary group's committed offsets of the topics
// (groups committing none of them are left out) with one batched
// OffsetFetch: Groups runs every poll of GROUPS_QUIET. It returns the
// primary's admin client and its group listing for the caller's further
// reads.
func (a SwitchActions) groupCommits(ctx context.Context, mirror string, topics []string) (*kadm.Client, kadm.ListedGroups, map[string]kadm.OffsetResponses, error) {
	src, err := a.sourceAdmin(ctx, mirror)
	if err != nil {
		return nil, nil, nil, err
	}
	listed, out, err := commitsOf(ctx, src, "primary", topics)
	return src, listed, out, err
}

// StandbyGroups lists the groups with offsets of the topics on the standby
// (the group sync's copies, clamped to what was copied), one member each.
func (a SwitchActions) StandbyGroups(ctx context.Context, _ string, topics []string) (map[string]int, error) {
	_, commits, err := commitsOf(ctx, a.B.Destination, "standby", topics)
	if err != nil || len(commits) == 0 {
		return nil, err
	}
	held := map[string]int{}
	for g := range commits {
		held[g] = 1
	}
	return held, nil
}

// commitsOf reads the committed offsets of the topics of every group of a
// cluster (side names it in errors), and returns the cluster's groups too.
func commitsOf(ctx context.Context, adm *kadm.Client, side string, topics []string) (kadm.ListedGroups, map[string]kadm.OffsetResponses, error) {
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the %s's groups: %w", side, err)
	}
	fetched := adm.FetchManyOffsets(ctx, listed.Groups()...)
	out := map[string]kadm.OffsetResponses{}
	for g, f := range fetched {
		if f.Err != nil {
			return nil, nil, fmt.Errorf("reading group %s's offsets on the %s: %w", g, side, f.Err)
		}
		mine := kadm.OffsetResponses{}
		f.Fetched.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At >= 0 && slices.Contains(topics, o.Topic) {
				mine.Add(o)
			}
		})
		if len(mine) > 0 {
			out[g] = mine
		}
	}
	return listed, out, nil
}

// Groups reads the groups of the topics on the primary: every group that
// committed offsets of them, and every group whose live members are assigned
// partitions of them. The second kind matters for a consumer that started
// reading shortly before the switch and has not committed yet (kcat's first
// auto-commit comes 5 s after it starts): with no commit to copy, it would
// read the partitions again from its reset position on the standby. A
// partition counts as reached when the group committed its drain target, or
// when the target is 0 (nothing to read).
func (a SwitchActions) Groups(ctx context.Context, mirror string, topics []string, targets []statetopic.DrainTarget) ([]routeswitch.GroupCommits, error) {
	src, listed, commits, err := a.groupCommits(ctx, mirror, topics)
	if err != nil {
		return nil, err
	}
	assigned, err := liveAssignments(ctx, src, listed, topics)
	if err != nil {
		return nil, err
	}
	end := map[routeswitch.TopicPartition]int64{}
	for _, t := range targets {
		end[routeswitch.TopicPartition{Topic: t.Topic, Partition: t.Partition}] = t.Offset
	}
	names := slices.Collect(maps.Keys(commits))
	for g := range assigned {
		if _, ok := commits[g]; !ok {
			names = append(names, g)
		}
	}
	slices.Sort(names)
	var out []routeswitch.GroupCommits
	for _, g := range names {
		atEnd := true
		var fp []string
		committed := map[routeswitch.TopicPartition]bool{}
		commits[g].Each(func(o kadm.OffsetResponse) {
			tp := routeswitch.TopicPartition{Topic: o.Topic, Partition: o.Partition}
			committed[tp] = true
			fp = append(fp, fmt.Sprintf("%s/%d=%d", o.Topic, o.Partition, o.At))
			if e, ok := end[tp]; !ok || o.At < e {
				atEnd = false
			}
		})
		for _, tp := range assigned[g] {
			if !committed[tp] && end[tp] > 0 {
				atEnd = false
			}
		}
		slices.Sort(fp)
		out = append(out, routeswitch.GroupCommits{Name: g, AtLogEnd: atEnd, Fingerprint: strings.Join(fp, ",")})
	}
	return out, nil
}

// liveAssignments reads, for every group on the primary with live members,
// the partitions of the topics its members are assigned: classic groups
// with DescribeGroups, KIP-848 consumer groups with ConsumerGroupDescribe.
// Groups of other protocols (Connect, share groups) assign no partitions of
// a consumer's kind and are left out.
func liveAssignments(ctx context.Context, adm *kadm.Client, listed kadm.ListedGroups, topics []string) (map[string][]routeswitch.TopicPartition, error) {
	var classic, consumer []string
	for _, g := range listed.Sorted() {
		if strings.EqualFold(g.State, "Empty") || strings.EqualFold(g.State, "Dead") {
			continue // no members
		}
		switch {
		case (g.GroupType == "" || g.GroupType == "classic") && g.ProtocolType == "consumer":
			classic = append(classic, g.Group)
		case g.GroupType == "consumer":
			consumer = append(consumer, g.Group)
		}
	}
	out := map[string][]routeswitch.TopicPartition{}
	add := func(group string, set kadm.TopicsSet) {
		for _, t := range topics {
			for p := range set[t] {
				out[group] = append(out[group], routeswitch.TopicPartition{Topic: t, Partition: p})
			}
		}
	}
	if len(classic) > 0 {
		described, err := adm.DescribeGroups(ctx, classic...)
		if err != nil {
			return nil, fmt.Errorf("describing the primary's groups: %w", err)
		}
		for g, d := range described {
			if d.Err == nil { // a group gone meanwhile has no members to wait for
				add(g, d.AssignedPartitions())
			}
		}
	}
	if len(consumer) > 0 {
		described, err := adm.DescribeConsumerGroups(ctx, consumer...)
		if err != nil {
			return nil, fmt.Errorf("describing the primary's consumer groups: %w", err)
		}
		for g, d := range described {
			if d.Err == nil {
				add(g, d.AssignedPartitions())
			}
		}
	}
	return out, nil
}

// CopyGroups commits every primary group's offsets of the topics on the
// standby (leader epoch -1: docs/KAFKA-FACTS.md) and returns the groups
// that had members on the primary with their member counts. The commits on
// the primary are frozen by then, so these are final.
func (a SwitchActions) CopyGroups(ctx context.Context, mirror string, topics []string) (map[string]int, error) {
	src, _, commits, err := a.groupCommits(ctx, mirror, topics)
	if err != nil {
		return nil, err
	}
	if len(commits) == 0 {
		return nil, nil
	}
	groups := slices.Sorted(maps.Keys(commits))
	described, err := src.DescribeGroups(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("describing the primary's groups: %w", err)
	}
	held := map[string]int{}
	for _, g := range groups {
		os := kadm.Offsets{}
		commits[g].Each(func(o kadm.OffsetResponse) {
			os.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.At, LeaderEpoch: -1, Metadata: o.Metadata})
		})
		resp, err := a.B.Destination.CommitOffsets(ctx, g, os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("committing group %s's offsets on the standby: %w", g, err)
		}
		if d, ok := described[g]; ok && len(d.Members) > 0 {
			held[g] = len(d.Members)
		}
	}
	return held, nil
}

// FailOver asks for the mirror's topics to stop, as RemoveTopicsFromMirror
// does, and reports whether every partition is STOPPED.
func (a SwitchActions) FailOver(ctx context.Context, mirror string, topics []string) (bool, error) {
	if len(topics) == 0 {
		// Failing over nothing would lead the route's clients to read-only topics.
		return false, fmt.Errorf("mirror %s: no topics to fail over in this instance's view", mirror)
	}
	m, err := a.B.Mirror(ctx, mirror)
	if err != nil {
		return false, err
	}
	var stop []string
	done := true
	for _, t := range topics {
		mt, ok := m.Topics[t]
		if !ok {
			continue // removed from the mirror meanwhile: nothing to fail over
		}
		if mt.Desired != statetopic.DesireStop {
			stop = append(stop, t)
		}
		if !m.AllStopped(t) {
			done = false
		}
	}
	if err := a.B.setDesire(ctx, m, stop, statetopic.DesireStop); err != nil {
		return false, err
	}
	for _, t := range stop {
		a.B.Log.Info("failover requested by a route switch", "mirror", m.Name, "topic", t)
	}
	return done && len(stop) == 0, nil
}

// atRiskWait bounds the read of a forced switch's records at risk: the primary is presumed
// gone, and the switch must not wait on it for long.
const atRiskWait = 3 * time.Second

// RecordsAtRisk is the mirror's describe total of records at risk: the primary's high
// watermarks minus the standby's log ends, over the partitions not failed over yet. It reads
// the end offsets only: not describe's oldest records and cluster checks, which a forced
// switch does not record and would wait for on a primary that is gone.
func (a SwitchActions) RecordsAtRisk(ctx context.Context, mirror string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, atRiskWait)
	defer cancel()
	m, err := a.B.Mirror(ctx, mirror)
	if err != nil {
		return -1, err
	}
	src, err := a.B.sourceClient(m)
	if err != nil {
		return -1, err
	}
	topics := m.TopicNames()
	srcEnds, dstEnds := endOffsets(ctx, kadm.NewClient(src), topics), endOffsets(ctx, a.B.Destination, topics)
	var total int64
	unknown, counted := 0, 0
	for _, t := range topics {
		for p, s := range m.TopicStates(t) {
			if failingOver(s) {
				continue
			}
			counted++
			n, _ := atRisk(s, lookup(srcEnds, t, int32(p)), lookup(dstEnds, t, int32(p)), time.Time{}, time.Time{})
			if n < 0 {
				unknown++
				continue
			}
			total += n
		}
	}
	if unknown > 0 {
		return -1, fmt.Errorf("mirror %s: the records at risk of %d of %d partitions are unknown (a cluster did not answer within %s)",
			mirror, unknown, counted, atRiskWait)
	}
	return total, nil
}
