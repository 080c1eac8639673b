package statetopic

import (
	"math/rand"
	"testing"
	"time"

	"github.com/kmirror/kmirror/protocol"
)

type rec struct{ key, value []byte }

func mustRec(t *testing.T, k Key, v any) rec {
	t.Helper()
	if v == nil {
		return rec{k.Bytes(), nil}
	}
	b, err := EncodeValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return rec{k.Bytes(), b}
}

// Records from different state partitions interleave arbitrarily; the view
// must come out the same for any interleaving that keeps each key's order.
func TestViewConvergesForAnyCrossPartitionOrder(t *testing.T) {
	perKey := [][]rec{
		{mustRec(t, MirrorConfigKey("dr"), &MirrorConfig{Configs: map[string]string{"bootstrap.servers": "s:1"}})},
		{mustRec(t, MirrorTopicKey("dr", "orders"), &MirrorTopic{SourceTopicID: testTopicID, Desired: DesireMirror, Partitions: 2}),
			mustRec(t, MirrorTopicKey("dr", "orders"), &MirrorTopic{SourceTopicID: testTopicID, Desired: DesireStop, Partitions: 2})},
		{mustRec(t, PartitionStateKey("dr", testTopicID, 0), &PartitionState{Topic: "orders", State: protocol.MirrorStateMirroring}),
			mustRec(t, PartitionStateKey("dr", testTopicID, 0), &PartitionState{Topic: "orders", State: protocol.MirrorStateStopped, LastMirroredOffset: 9})},
		{mustRec(t, PartitionStateKey("dr", testTopicID, 1), &PartitionState{Topic: "orders", State: protocol.MirrorStatePreparing}),
			mustRec(t, PartitionStateKey("dr", testTopicID, 1), nil)},
	}
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 50; trial++ {
		next := make([]int, len(perKey))
		v := NewView()
		for remaining := 7; remaining > 0; {
			i := rng.Intn(len(perKey))
			if next[i] == len(perKey[i]) {
				continue
			}
			r := perKey[i][next[i]]
			next[i]++
			remaining--
			if err := v.Apply(r.key, r.value); err != nil {
				t.Fatal(err)
			}
		}
		m := v.Mirror("dr")
		if m == nil {
			t.Fatal("mirror dr missing")
		}
		if got := m.Topics["orders"].Desired; got != DesireStop {
			t.Fatalf("trial %d: desired %s, want stop", trial, got)
		}
		if p := m.Partition("orders", 0); p == nil || p.State != protocol.MirrorStateStopped || p.LastMirroredOffset != 9 {
			t.Fatalf("trial %d: partition 0 = %+v", trial, p)
		}
		if p := m.Partition("orders", 1); p != nil {
			t.Fatalf("trial %d: tombstoned partition 1 still present: %+v", trial, p)
		}
	}
}

func TestViewDeleteMirror(t *testing.T) {
	v := NewView()
	for _, r := range []rec{
		mustRec(t, MirrorConfigKey("dr"), &MirrorConfig{}),
		mustRec(t, MirrorTopicKey("dr", "orders"), &MirrorTopic{SourceTopicID: testTopicID}),
		mustRec(t, MirrorConfigKey("dr"), nil),
	} {
		if err := v.Apply(r.key, r.value); err != nil {
			t.Fatal(err)
		}
	}
	if v.Mirror("dr") != nil || len(v.MirrorNames()) != 0 {
		t.Fatal("a mirror whose config is tombstoned is still listed")
	}
	if got := v.AllMirrorNames(); len(got) != 1 {
		t.Fatalf("records left behind by a half-finished delete must stay visible: %v", got)
	}
	if err := v.Apply(MirrorTopicKey("dr", "orders").Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	if got := v.AllMirrorNames(); len(got) != 0 {
		t.Fatalf("mirror with no records left: %v", got)
	}
}

func TestViewIgnoresZombieWriter(t *testing.T) {
	v := NewView()
	key := PartitionStateKey("dr", testTopicID, 0)
	for _, r := range []rec{
		mustRec(t, MirrorConfigKey("dr"), &MirrorConfig{}),
		mustRec(t, key, &PartitionState{State: protocol.MirrorStateMirroring, WriterProducerID: 7, WriterEpoch: 3}),
		mustRec(t, key, &PartitionState{State: protocol.MirrorStateFailed, WriterProducerID: 7, WriterEpoch: 2}),
		mustRec(t, key, &PartitionState{State: protocol.MirrorStatePaused, WriterProducerID: 6, WriterEpoch: 9}),
	} {
		if err := v.Apply(r.key, r.value); err != nil {
			t.Fatal(err)
		}
	}
	if got := v.Mirror("dr").Partitions[PartitionID{testTopicID, 0}].State; got != protocol.MirrorStateMirroring {
		t.Fatalf("state %s: a fenced writer's record overwrote the current owner's", got)
	}
	if err := v.Apply(mustRec(t, key, &PartitionState{State: protocol.MirrorStateStopping, WriterProducerID: 7, WriterEpoch: 4}).key,
		mustRec(t, key, &PartitionState{State: protocol.MirrorStateStopping, WriterProducerID: 7, WriterEpoch: 4}).value); err != nil {
		t.Fatal(err)
	}
	if got := v.Mirror("dr").Partitions[PartitionID{testTopicID, 0}].State; got != protocol.MirrorStateStopping {
		t.Fatalf("state %s: a newer writer's record was ignored", got)
	}
}

// A group still SYNCED is not rewritten by a groups run: its last sync is
// the last successful run's time. Any other state keeps its own date.
func TestGroupLastSynced(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := NewView()
	apply := func(k Key, val any) {
		t.Helper()
		r := mustRec(t, k, val)
		if err := v.Apply(r.key, r.value); err != nil {
			t.Fatal(err)
		}
	}
	apply(MirrorConfigKey("dr"), &MirrorConfig{Configs: map[string]string{"bootstrap.servers": "s:1"}})
	apply(GroupSyncKey("dr", "synced"), &GroupSync{State: GroupSynced, SyncedAt: t0, Partitions: 2})
	apply(GroupSyncKey("dr", "active"), &GroupSync{State: GroupActive, SyncedAt: t0})
	apply(GroupSyncKey("dr", "never"), &GroupSync{State: GroupFailed})
	m := v.Mirror("dr")
	if got := m.GroupLastSynced("synced"); !got.Equal(t0) {
		t.Fatalf("before any run record: %v", got)
	}
	later := t0.Add(time.Minute)
	apply(MirrorSyncKey("dr"), &MirrorSync{Jobs: map[string]*SyncJob{JobGroups: {LastSuccessAt: later, AttemptedAt: later}}})
	m = v.Mirror("dr")
	for g, want := range map[string]time.Time{"synced": later, "active": t0, "never": {}, "unknown": {}} {
		if got := m.GroupLastSynced(g); !got.Equal(want) {
			t.Errorf("%s: last synced %v, want %v", g, got, want)
		}
	}
	// Deleting the mirror tombstones everything; nothing may linger.
	for _, k := range []Key{MirrorConfigKey("dr"), GroupSyncKey("dr", "synced"), GroupSyncKey("dr", "active"), GroupSyncKey("dr", "never")} {
		apply(k, nil)
	}
	if v.RawMirror("dr") == nil {
		t.Fatal("the mirror vanished before its sync record was tombstoned")
	}
	apply(MirrorSyncKey("dr"), nil)
	if v.RawMirror("dr") != nil {
		t.Fatal("a deleted mirror's records linger in the view")
	}
}
