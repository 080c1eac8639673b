package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// Member is one instance of the coordinators' group, as the group
// coordinator describes it, and the share of the mirrors that its state
// partitions give it.
type Member struct {
	ID       string // the group member id (unique per instance and join)
	ClientID string
	Host     string // the address the destination broker sees
	Self     bool   // this instance
	// StatePartitions are the __mirror_state partitions assigned to it.
	StatePartitions []int32
	// Mirrors are the mirrors whose mirror-level records it coordinates: it
	// runs their sync jobs and samples their recovery point.
	Mirrors []string
	// Partitions are the mirror partitions it drives (copies).
	Partitions []OwnedPartition
}

// OwnedPartition names a mirror partition; it carries no mirror config
// (configs may hold secret references and never leave describe unredacted).
type OwnedPartition struct {
	Mirror, Topic string
	Partition     int32
}

// Members describes the coordinators' group: every live instance and what
// it owns, computed from its assigned state partitions with the same hash
// the instances use. It costs one DescribeGroups on the destination.
func (c *Coordinator) Members(ctx context.Context) ([]Member, error) {
	groups, err := kadm.NewClient(c.group).DescribeGroups(ctx, c.cfg.GroupID)
	if err != nil {
		return nil, fmt.Errorf("describing group %s: %w", c.cfg.GroupID, err)
	}
	g, ok := groups[c.cfg.GroupID]
	if !ok {
		return nil, fmt.Errorf("describing group %s: not in the answer", c.cfg.GroupID)
	}
	if g.Err != nil {
		return nil, fmt.Errorf("describing group %s: %w", c.cfg.GroupID, g.Err)
	}
	self, _ := c.group.GroupMetadata()
	c.mu.Lock()
	n := c.numPartitions
	c.mu.Unlock()
	var out []Member
	for _, gm := range g.Members {
		m := Member{ID: gm.MemberID, ClientID: gm.ClientID, Host: gm.ClientHost, Self: gm.MemberID == self}
		if a, ok := gm.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == c.cfg.StateTopic {
					m.StatePartitions = append(m.StatePartitions, t.Partitions...)
				}
			}
		}
		slices.Sort(m.StatePartitions)
		out = append(out, m)
	}
	if n > 0 {
		c.store.Read(func(v *statetopic.View) { assignShares(v, n, out) })
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// assignShares fills in each member's mirrors and mirror partitions from
// the state partitions it was assigned.
func assignShares(v *statetopic.View, n int32, members []Member) {
	owner := map[int32]*Member{}
	for i := range members {
		for _, p := range members[i].StatePartitions {
			owner[p] = &members[i]
		}
	}
	for _, name := range v.MirrorNames() {
		if m := owner[statetopic.MirrorConfigKey(name).StatePartition(n)]; m != nil {
			m.Mirrors = append(m.Mirrors, name)
		}
		mirror := v.Mirror(name)
		for _, topic := range mirror.TopicNames() {
			t := mirror.Topics[topic]
			for p := int32(0); p < t.Partitions; p++ {
				if m := owner[statetopic.PartitionStateKey(name, t.SourceTopicID, p).StatePartition(n)]; m != nil {
					m.Partitions = append(m.Partitions, OwnedPartition{Mirror: name, Topic: topic, Partition: p})
				}
			}
		}
	}
}
