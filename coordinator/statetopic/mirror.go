package statetopic

import (
	"maps"
	"slices"
	"sort"

	"github.com/kmirror/kmirror/protocol"
)

// What a mirror's replayed state answers about itself. The View's Mirror is
// shared under the store's lock; Copy is what a reader takes out of it.

// Copy deep-copies the mirror so it can be read outside the store's lock
// (nil for nil).
func (m *Mirror) Copy() *Mirror {
	if m == nil {
		return nil
	}
	out := &Mirror{Name: m.Name, Topics: make(map[string]*MirrorTopic, len(m.Topics)),
		Partitions: make(map[PartitionID]*PartitionState, len(m.Partitions)), Groups: make(map[string]*GroupSync, len(m.Groups))}
	if m.Config != nil {
		c := *m.Config
		c.Configs = maps.Clone(m.Config.Configs)
		if c.Configs == nil {
			c.Configs = map[string]string{}
		}
		c.IncludePatterns = slices.Clone(m.Config.IncludePatterns)
		c.ExcludePatterns = slices.Clone(m.Config.ExcludePatterns)
		out.Config = &c
	}
	for n, t := range m.Topics {
		c := *t
		c.Notes = slices.Clone(t.Notes)
		out.Topics[n] = &c
	}
	for id, p := range m.Partitions {
		c := *p
		c.Notes = slices.Clone(p.Notes)
		out.Partitions[id] = &c
	}
	for g, s := range m.Groups {
		c := *s
		out.Groups[g] = &c
	}
	if m.Sync != nil {
		out.Sync = &MirrorSync{Jobs: make(map[string]*SyncJob, len(m.Sync.Jobs))}
		for name, j := range m.Sync.Jobs {
			c := *j
			out.Sync.Jobs[name] = &c
		}
	}
	return out
}

// TopicStates lists a mirror topic's partition states by partition, nil
// where none is recorded yet; nil for a topic not in the mirror.
func (m *Mirror) TopicStates(topic string) []*PartitionState {
	t := m.Topics[topic]
	if t == nil {
		return nil
	}
	out := make([]*PartitionState, t.Partitions)
	for p := range out {
		out[p] = m.Partitions[PartitionID{SourceTopicID: t.SourceTopicID, Partition: int32(p)}]
	}
	return out
}

// AllStopped reports whether every partition of a mirror topic is STOPPED
// (failed over). A topic not in the mirror, or one of no partitions, has no
// partition that is not STOPPED.
func (m *Mirror) AllStopped(topic string) bool {
	for _, s := range m.TopicStates(topic) {
		if s == nil || s.State != protocol.MirrorStateStopped {
			return false
		}
	}
	return true
}

// LastMirroredOffsets is each partition's last mirrored offset of a topic,
// nil unless every partition has one (it was stopped at least once).
func (m *Mirror) LastMirroredOffsets(topic string) map[int32]int64 {
	out := map[int32]int64{}
	for p, s := range m.TopicStates(topic) {
		if s == nil || s.LastMirroredOffset < 0 {
			return nil
		}
		out[int32(p)] = s.LastMirroredOffset
	}
	return out
}

// Keys lists the key of every record the mirror has, in the order deleting
// it tombstones them: the config first (so no instance acts on the mirror
// while the rest goes), then topics, partition states and sync records.
func (m *Mirror) Keys() []Key {
	keys := []Key{MirrorConfigKey(m.Name)}
	for _, t := range m.TopicNames() {
		keys = append(keys, MirrorTopicKey(m.Name, t))
	}
	ids := make([]PartitionID, 0, len(m.Partitions))
	for id := range m.Partitions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Partition < ids[j].Partition })
	for _, id := range ids {
		keys = append(keys, PartitionStateKey(m.Name, id.SourceTopicID, id.Partition))
	}
	return append(keys, m.SyncKeys()...)
}

// SyncKeys lists the keys of the mirror's sync records: each tracked
// group's, then the mirror's own.
func (m *Mirror) SyncKeys() []Key {
	keys := make([]Key, 0, len(m.Groups)+1)
	for _, g := range slices.Sorted(maps.Keys(m.Groups)) {
		keys = append(keys, GroupSyncKey(m.Name, g))
	}
	return append(keys, MirrorSyncKey(m.Name))
}
