package statetopic

import (
	"reflect"
	"testing"
	"time"

	"github.com/kmirror/kmirror/protocol"
)

// testMirror has topic "orders" (3 partitions: STOPPED, STOPPED, no state
// yet) and topic "payments" (1 partition, STOPPED), with a group and a sync
// record.
func testMirror() *Mirror {
	v := NewView()
	other := UUID{7}
	v.ApplyDecoded(MirrorConfigKey("dr"), &MirrorConfig{Configs: map[string]string{"bootstrap.servers": "s:1"}, IncludePatterns: []string{"o.*"}})
	v.ApplyDecoded(MirrorTopicKey("dr", "orders"), &MirrorTopic{SourceTopicID: testTopicID, Partitions: 3, Notes: []string{"n"}})
	v.ApplyDecoded(MirrorTopicKey("dr", "payments"), &MirrorTopic{SourceTopicID: other, Partitions: 1})
	v.ApplyDecoded(PartitionStateKey("dr", testTopicID, 0), &PartitionState{State: protocol.MirrorStateStopped, LastMirroredOffset: 10})
	v.ApplyDecoded(PartitionStateKey("dr", testTopicID, 1), &PartitionState{State: protocol.MirrorStateStopped, LastMirroredOffset: 11, Notes: []string{"p"}})
	v.ApplyDecoded(PartitionStateKey("dr", other, 0), &PartitionState{State: protocol.MirrorStateStopped, LastMirroredOffset: 5})
	v.ApplyDecoded(GroupSyncKey("dr", "g2"), &GroupSync{State: GroupSynced})
	v.ApplyDecoded(GroupSyncKey("dr", "g1"), &GroupSync{State: GroupIdle})
	v.ApplyDecoded(MirrorSyncKey("dr"), &MirrorSync{Jobs: map[string]*SyncJob{JobTopics: {AttemptedAt: time.Unix(1, 0)}}})
	return v.Mirror("dr")
}

func TestMirrorTopicStatesAndAllStopped(t *testing.T) {
	m := testMirror()
	states := m.TopicStates("orders")
	if len(states) != 3 || states[0].LastMirroredOffset != 10 || states[1].LastMirroredOffset != 11 || states[2] != nil {
		t.Fatalf("TopicStates(orders) = %+v", states)
	}
	if m.TopicStates("nope") != nil {
		t.Fatal("TopicStates of a topic not in the mirror is not nil")
	}
	if m.AllStopped("orders") {
		t.Fatal("orders has a partition with no state, yet AllStopped")
	}
	if !m.AllStopped("payments") {
		t.Fatal("payments is STOPPED, yet not AllStopped")
	}
	m.Partitions[PartitionID{UUID{7}, 0}].State = protocol.MirrorStateStopping
	if m.AllStopped("payments") {
		t.Fatal("a STOPPING partition counts as stopped")
	}
	if got := m.LastMirroredOffsets("orders"); got != nil {
		t.Fatalf("LastMirroredOffsets with a partition never stopped = %v, want nil", got)
	}
	if got, want := m.LastMirroredOffsets("payments"), map[int32]int64{0: 5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("LastMirroredOffsets(payments) = %v, want %v", got, want)
	}
}

func TestMirrorCopyIsDeep(t *testing.T) {
	m := testMirror()
	c := m.Copy()
	if !reflect.DeepEqual(c, m) {
		t.Fatalf("copy differs:\n%+v\n%+v", c, m)
	}
	c.Config.Configs["bootstrap.servers"] = "x"
	c.Config.IncludePatterns[0] = "x"
	c.Topics["orders"].Partitions = 9
	c.Topics["orders"].Notes[0] = "x"
	c.Partitions[PartitionID{testTopicID, 1}].Notes[0] = "x"
	c.Partitions[PartitionID{testTopicID, 0}].State = protocol.MirrorStateFailed
	c.Groups["g1"].State = GroupFailed
	c.Sync.Jobs[JobTopics].Error = "x"
	if !reflect.DeepEqual(m, testMirror()) {
		t.Fatalf("changing the copy changed the mirror: %+v", m)
	}
	if (*Mirror)(nil).Copy() != nil {
		t.Fatal("copy of nil is not nil")
	}
}

func TestMirrorKeysInDeletionOrder(t *testing.T) {
	m := testMirror()
	want := []Key{MirrorConfigKey("dr"), MirrorTopicKey("dr", "orders"), MirrorTopicKey("dr", "payments")}
	got := m.Keys()
	if !reflect.DeepEqual(got[:3], want) {
		t.Fatalf("first keys %v, want %v", got[:3], want)
	}
	parts := map[Key]bool{}
	for _, k := range got[3:6] {
		parts[k] = true
	}
	for _, k := range []Key{PartitionStateKey("dr", testTopicID, 0), PartitionStateKey("dr", testTopicID, 1), PartitionStateKey("dr", UUID{7}, 0)} {
		if !parts[k] {
			t.Fatalf("partition key %v missing from %v", k, got[3:6])
		}
	}
	if !reflect.DeepEqual(got[6:], m.SyncKeys()) {
		t.Fatalf("keys end %v, want the sync keys %v", got[6:], m.SyncKeys())
	}
	if want := []Key{GroupSyncKey("dr", "g1"), GroupSyncKey("dr", "g2"), MirrorSyncKey("dr")}; !reflect.DeepEqual(m.SyncKeys(), want) {
		t.Fatalf("sync keys %v, want %v", m.SyncKeys(), want)
	}
}
