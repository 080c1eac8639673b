package statetopic

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// View is the state the records add up to. Records of different state
// partitions arrive in no global order (a partition state may be replayed
// before its topic record), so partition states are held by their own key and
// joined to topics by source topic id when read. View is not safe for
// concurrent use; the coordinator guards it.
type View struct {
	mirrors map[string]*Mirror
	routes  map[string]*Route
}

// Mirror is one mirror's replayed state.
type Mirror struct {
	Name       string
	Config     *MirrorConfig // nil until its config record is seen
	Topics     map[string]*MirrorTopic
	Partitions map[PartitionID]*PartitionState
	Groups     map[string]*GroupSync // by consumer group id
	Sync       *MirrorSync           // nil until the first refresh
}

// PartitionID names a mirror partition within a mirror.
type PartitionID struct {
	SourceTopicID UUID
	Partition     int32
}

// NewView returns an empty view.
func NewView() *View { return &View{mirrors: map[string]*Mirror{}, routes: map[string]*Route{}} }

// Apply replays one record; a nil value is a tombstone.
func (v *View) Apply(key, value []byte) error {
	k, err := DecodeKey(key)
	if err != nil {
		return err
	}
	val, err := DecodeValue(k.Type, value)
	if err != nil {
		return fmt.Errorf("key %s/%s: %w", k.Type, k.Mirror, err)
	}
	v.ApplyDecoded(k, val)
	return nil
}

// ApplyDecoded replays a record already decoded (a nil val is a tombstone).
func (v *View) ApplyDecoded(k Key, val any) {
	if k.Type.routeLevel() {
		v.applyRoute(k, val)
		return
	}
	m := v.mirrors[k.Mirror]
	if m == nil {
		if val == nil {
			return
		}
		m = &Mirror{Name: k.Mirror, Topics: map[string]*MirrorTopic{}, Partitions: map[PartitionID]*PartitionState{}, Groups: map[string]*GroupSync{}}
		v.mirrors[k.Mirror] = m
	}
	switch k.Type {
	case TypeMirrorConfig:
		m.Config, _ = val.(*MirrorConfig)
	case TypeMirrorTopic:
		putOrDelete(m.Topics, k.Topic, val)
	case TypePartitionState:
		id := PartitionID{k.SourceTopicID, k.Partition}
		if p, ok := val.(*PartitionState); ok {
			if old := m.Partitions[id]; old != nil && olderWriter(p, old) {
				return // a fenced (zombie) owner's late write
			}
			m.Partitions[id] = p
		} else {
			delete(m.Partitions, id)
		}
	case TypeGroupSync:
		putOrDelete(m.Groups, k.Group, val)
	case TypeMirrorSync:
		m.Sync, _ = val.(*MirrorSync)
	}
	if m.Config == nil && len(m.Topics) == 0 && len(m.Partitions) == 0 && len(m.Groups) == 0 && m.Sync == nil {
		delete(v.mirrors, k.Mirror)
	}
}

// sortedKeys lists a map's keys, sorted (empty, not nil, for none).
func sortedKeys[V any](m map[string]V) []string {
	names := slices.AppendSeq(make([]string, 0, len(m)), maps.Keys(m))
	slices.Sort(names)
	return names
}

// putOrDelete stores a record's value under its key, or deletes the key for
// a tombstone (or a value of another type).
func putOrDelete[K comparable, V any](m map[K]*V, k K, val any) {
	if v, ok := val.(*V); ok {
		m[k] = v
	} else {
		delete(m, k)
	}
}

// Mirror returns a mirror that has a config record, or nil. Deleting a mirror
// tombstones its config first, so a mirror without one is being deleted.
func (v *View) Mirror(name string) *Mirror {
	if m := v.mirrors[name]; m != nil && m.Config != nil {
		return m
	}
	return nil
}

// MirrorNames lists mirrors with a config record, sorted.
func (v *View) MirrorNames() []string {
	names := make([]string, 0, len(v.mirrors))
	for n, m := range v.mirrors {
		if m.Config != nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// AllMirrorNames lists every mirror that has any record left, including ones
// whose deletion is still tombstoning.
func (v *View) AllMirrorNames() []string {
	return sortedKeys(v.mirrors)
}

// RawMirror returns whatever is recorded for a mirror, config or not.
func (v *View) RawMirror(name string) *Mirror { return v.mirrors[name] }

// TopicNames lists the mirror's topics, sorted.
func (m *Mirror) TopicNames() []string {
	return sortedKeys(m.Topics)
}

// Partition returns the state of a topic's partition, or nil.
func (m *Mirror) Partition(topic string, partition int32) *PartitionState {
	t := m.Topics[topic]
	if t == nil {
		return nil
	}
	return m.Partitions[PartitionID{t.SourceTopicID, partition}]
}

// MirrorOfTopic finds the mirror that has topic, or "".
func (v *View) MirrorOfTopic(topic string) string {
	for n, m := range v.mirrors {
		if _, ok := m.Topics[topic]; ok && m.Config != nil {
			return n
		}
	}
	return ""
}

// olderWriter reports whether p was written by a writer fenced by the one that
// wrote old. Producer ids grow and a transactional id's epoch only grows under
// one producer id, so (id, epoch) order is fencing order.
func olderWriter(p, old *PartitionState) bool {
	if p.WriterProducerID != old.WriterProducerID {
		return p.WriterProducerID < old.WriterProducerID
	}
	return p.WriterEpoch < old.WriterEpoch
}
