package apis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/routeswitch"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// SwitchActions are a route switch driver's reads and writes
// (routeswitch.Actions, docs/cutover.md): the primary is the route's
// mirror's source, reached with the mirror's own client and credentials;
// the standby is the destination. A switch to the standby leaves the
// primary; a switch back (Back set) leaves the standby, and its mirror back
// to the primary lives on the kmirror in front of the primary, the route's
// mirror's source (route_back.go).
type SwitchActions struct {
	B *Backend
	// Back is, on a switch back, the mirror copying the standby to the
	// primary on the primary's kmirror ("" on a switch to the standby).
	Back string
}

var _ routeswitch.Actions = SwitchActions{}

// side is one cluster of a switch: its admin client and its name in errors.
type side struct {
	adm  *kadm.Client
	name string
}

// from is the cluster the switch leaves (its writes are frozen and drained, its groups
// read), to the one it leads to (its log ends show the copy's progress, the groups are
// written there). The primary is resolved only when asked for: it reads the mirror's state,
// and a switch to the standby polls the standby's log ends alone.
func (a SwitchActions) from(ctx context.Context, mirror string) (side, error) {
	if a.Back != "" {
		return a.standby(), nil
	}
	return a.primary(ctx, mirror)
}

func (a SwitchActions) to(ctx context.Context, mirror string) (side, error) {
	if a.Back != "" {
		return a.primary(ctx, mirror)
	}
	return a.standby(), nil
}

// primary is the route's primary, reached with its mirror's own source client (cached).
func (a SwitchActions) primary(ctx context.Context, mirror string) (side, error) {
	m, err := a.B.Mirror(ctx, mirror)
	if err != nil {
		return side{}, err
	}
	cl, err := a.B.sourceClient(m)
	if err != nil {
		return side{}, err
	}
	return side{kadm.NewClient(cl), "primary"}, nil
}

// standby is this kmirror's destination.
func (a SwitchActions) standby() side { return side{a.B.Destination, "standby"} }

// openProducers lists the producers with a transaction open on the topics'
// partitions of the cluster the switch leaves.
func (a SwitchActions) openProducers(ctx context.Context, mirror string, topics []string) (side, []kadm.DescribedProducer, error) {
	from, err := a.from(ctx, mirror)
	if err != nil {
		return from, nil, err
	}
	set := kadm.TopicsSet{}
	ends, err := from.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return from, nil, fmt.Errorf("listing the %s's partitions: %w", from.name, err)
	}
	ends.Each(func(o kadm.ListedOffset) { set.Add(o.Topic, o.Partition) })
	described, err := from.adm.DescribeProducers(ctx, set)
	if err != nil {
		return from, nil, fmt.Errorf("DescribeProducers on the %s: %w", from.name, err)
	}
	var open []kadm.DescribedProducer
	for _, t := range described {
		for _, p := range t.Partitions {
			if p.Err != nil {
				return from, nil, fmt.Errorf("DescribeProducers on the %s, %s/%d: %w", from.name, p.Topic, p.Partition, p.Err)
			}
			for _, pr := range p.ActiveProducers {
				if pr.CurrentTxnStartOffset >= 0 {
					open = append(open, pr)
				}
			}
		}
	}
	return from, open, nil
}

// OpenTransactions counts the open transactions (one per producer and partition).
func (a SwitchActions) OpenTransactions(ctx context.Context, mirror string, topics []string) (int, error) {
	_, open, err := a.openProducers(ctx, mirror, topics)
	return len(open), err
}

// AbortTransactions writes an ABORT marker for each open transaction at its
// partition's leader, as Kafka's `kafka-transactions abort` does (KIP-664).
// It needs CLUSTER_ACTION on the cluster the switch leaves for the principal
// that reaches it (the mirror's source principal on the primary, kmirror's
// own on the standby): WriteTxnMarkers is otherwise the brokers' own request;
// without it the abort fails permanently and the switch rolls back, naming it.
func (a SwitchActions) AbortTransactions(ctx context.Context, mirror string, topics []string) error {
	from, open, err := a.openProducers(ctx, mirror, topics)
	if err != nil {
		return err
	}
	for _, p := range open {
		marker := kadm.TxnMarkers{ProducerID: p.ProducerID, ProducerEpoch: p.ProducerEpoch, CoordinatorEpoch: p.CoordinatorEpoch,
			Topics: kadm.TopicsSet{p.Topic: {p.Partition: struct{}{}}}}
		resps, err := from.adm.WriteTxnMarkers(ctx, marker)
		if err != nil {
			return fmt.Errorf("aborting the transaction of producer %d on %s/%d on the %s: %w", p.ProducerID, p.Topic, p.Partition, from.name, err)
		}
		for _, r := range resps {
			for _, rt := range r.Topics {
				for _, rp := range rt.Partitions {
					if rp.Err == nil {
						continue
					}
					err := fmt.Errorf("aborting the transaction of producer %d on %s/%d on the %s: %w", p.ProducerID, p.Topic, p.Partition, from.name, rp.Err)
					if !kerr.IsRetriable(rp.Err) {
						return datapath.Permanent(err)
					}
					return err
				}
			}
		}
	}
	return nil
}

// LogEnds reads the log ends of the cluster the switch leaves.
func (a SwitchActions) LogEnds(ctx context.Context, mirror string, topics []string) ([]statetopic.DrainTarget, error) {
	from, err := a.from(ctx, mirror)
	if err != nil {
		return nil, err
	}
	ends, err := from.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("reading the %s's log ends: %w", from.name, err)
	}
	var out []statetopic.DrainTarget
	var perr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			perr = fmt.Errorf("reading the %s's log end of %s/%d: %w", from.name, o.Topic, o.Partition, o.Err)
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

// CopiedEnds reads the log ends of the cluster the switch leads to (the copy
// keeps source offsets).
func (a SwitchActions) CopiedEnds(ctx context.Context, mirror string, topics []string) (map[routeswitch.TopicPartition]int64, error) {
	to, err := a.to(ctx, mirror)
	if err != nil {
		return nil, err
	}
	ends, err := to.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("reading the %s's log ends: %w", to.name, err)
	}
	out := map[routeswitch.TopicPartition]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil { // a partition not read counts as not yet copied
			out[routeswitch.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
		}
	})
	return out, nil
}

// groupCommits reads the committed offsets of the topics of every group of
// the cluster the switch leaves (groups committing none of them are left
// out) with one batched OffsetFetch: Groups runs every poll of
// GROUPS_QUIET. It returns that cluster and its group listing for the
// caller's further reads.
func (a SwitchActions) groupCommits(ctx context.Context, mirror string, topics []string) (from side, listed kadm.ListedGroups, commits map[string]kadm.OffsetResponses, err error) {
	if from, err = a.from(ctx, mirror); err != nil {
		return from, nil, nil, err
	}
	listed, commits, err = commitsOf(ctx, from, topics)
	return from, listed, commits, err
}

// StandbyGroups lists the groups with offsets of the topics on the cluster
// the switch leads to (the group sync's copies, clamped to what was
// copied), one member each.
func (a SwitchActions) StandbyGroups(ctx context.Context, mirror string, topics []string) (map[string]int, error) {
	to, err := a.to(ctx, mirror)
	if err != nil {
		return nil, err
	}
	_, commits, err := commitsOf(ctx, to, topics)
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
// cluster, and returns the cluster's groups too.
func commitsOf(ctx context.Context, c side, topics []string) (kadm.ListedGroups, map[string]kadm.OffsetResponses, error) {
	listed, err := c.adm.ListGroups(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the %s's groups: %w", c.name, err)
	}
	fetched := c.adm.FetchManyOffsets(ctx, listed.Groups()...)
	out := map[string]kadm.OffsetResponses{}
	for g, f := range fetched {
		if f.Err != nil {
			return nil, nil, fmt.Errorf("reading group %s's offsets on the %s: %w", g, c.name, f.Err)
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
	from, listed, commits, err := a.groupCommits(ctx, mirror, topics)
	if err != nil {
		return nil, err
	}
	assigned, err := liveAssignments(ctx, from, listed, topics)
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
func liveAssignments(ctx context.Context, c side, listed kadm.ListedGroups, topics []string) (map[string][]routeswitch.TopicPartition, error) {
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
		described, err := c.adm.DescribeGroups(ctx, classic...)
		if err != nil {
			return nil, fmt.Errorf("describing the %s's groups: %w", c.name, err)
		}
		for g, d := range described {
			if d.Err == nil { // a group gone meanwhile has no members to wait for
				add(g, d.AssignedPartitions())
			}
		}
	}
	if len(consumer) > 0 {
		described, err := c.adm.DescribeConsumerGroups(ctx, consumer...)
		if err != nil {
			return nil, fmt.Errorf("describing the %s's consumer groups: %w", c.name, err)
		}
		for g, d := range described {
			if d.Err == nil {
				add(g, d.AssignedPartitions())
			}
		}
	}
	return out, nil
}

// CopyGroups commits the offsets of the topics of every group of the
// cluster the switch leaves on the one it leads to (leader epoch -1:
// docs/KAFKA-FACTS.md) and returns the groups that had members with their
// member counts. The commits are frozen by then, so these are final. A
// group that still has members where it is copied to refuses the commit
// (members left there by a switch back within their session timeout of the
// switch before): the error names it.
func (a SwitchActions) CopyGroups(ctx context.Context, mirror string, topics []string) (map[string]int, error) {
	from, _, commits, err := a.groupCommits(ctx, mirror, topics)
	if err != nil {
		return nil, err
	}
	to, err := a.to(ctx, mirror)
	if err != nil {
		return nil, err
	}
	if len(commits) == 0 {
		return nil, nil
	}
	groups := slices.Sorted(maps.Keys(commits))
	described, err := from.adm.DescribeGroups(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("describing the %s's groups: %w", from.name, err)
	}
	held := map[string]int{}
	for _, g := range groups {
		os := kadm.Offsets{}
		commits[g].Each(func(o kadm.OffsetResponse) {
			os.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.At, LeaderEpoch: -1, Metadata: o.Metadata})
		})
		resp, err := to.adm.CommitOffsets(ctx, g, os)
		if err == nil {
			err = resp.Error()
		}
		if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) {
			return nil, fmt.Errorf("committing group %s's offsets on the %s: %w: the group still has members there "+
				"(those a switch leaves behind stay until their session timeout ends): switch again once they are gone", g, to.name, err)
		}
		if err != nil {
			return nil, fmt.Errorf("committing group %s's offsets on the %s: %w", g, to.name, err)
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
	if a.Back != "" {
		return a.failOverBack(ctx, mirror, topics)
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
	if a.Back != "" {
		return a.backAtRisk(ctx, mirror)
	}
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
