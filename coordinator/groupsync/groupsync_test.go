package groupsync

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

func TestClamp(t *testing.T) {
	b := Bounds{Start: 10, End: 100}
	for in, want := range map[int64]int64{0: 10, 9: 10, 10: 10, 55: 55, 100: 100, 101: 100, 1 << 40: 100} {
		if got := b.Clamp(in); got != want {
			t.Errorf("Clamp(%d) into [10, 100] = %d, want %d", in, got, want)
		}
	}
	if got := (Bounds{}).Clamp(7); got != 0 {
		t.Errorf("an empty destination partition takes offset %d, want 0", got)
	}
}

func TestSelectSourceGroups(t *testing.T) {
	listed := kadm.ListedGroups{
		"billing":      {Group: "billing", GroupType: "classic", ProtocolType: "consumer", State: "Stable"},
		"assign-only":  {Group: "assign-only", GroupType: "classic", ProtocolType: "", State: "Empty"},
		"new-protocol": {Group: "new-protocol", GroupType: "consumer", State: "Stable"},
		"old-broker":   {Group: "old-broker", ProtocolType: "consumer"},
		"connect":      {Group: "connect", GroupType: "classic", ProtocolType: "connect"},
		"share":        {Group: "share", GroupType: "share"},
		"streams":      {Group: "streams", GroupType: "streams"},
		"tmp-1":        {Group: "tmp-1", GroupType: "classic", ProtocolType: "consumer"},
	}
	match := mirrorconfig.NewMatcher([]string{".*"}, []string{"tmp-.*"})
	got := SelectSourceGroups(listed, match)
	want := []string{"assign-only", "billing", "new-protocol", "old-broker"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("selected %v, want %v (consumer groups only; exclude wins)", got, want)
	}
	if got := SelectSourceGroups(listed, mirrorconfig.NewMatcher([]string{"bill.*"}, nil)); !reflect.DeepEqual(got, []string{"billing"}) {
		t.Fatalf("include bill.* selected %v", got)
	}
}

func TestDestinationBlock(t *testing.T) {
	listed := kadm.ListedGroups{
		"empty":     {GroupType: "classic", State: "Empty"},
		"dead":      {GroupType: "consumer", State: "DEAD"},
		"stable":    {GroupType: "classic", State: "Stable"},
		"rebalance": {GroupType: "classic", State: "PreparingRebalance"},
		"assigning": {GroupType: "consumer", State: "ASSIGNING"},
		"stateless": {GroupType: "classic"},
		"share":     {GroupType: "share", State: "Empty"},
	}
	for g, want := range map[string]statetopic.GroupSyncState{
		"absent": "", "empty": "", "dead": "",
		"stable": statetopic.GroupActive, "rebalance": statetopic.GroupActive, "assigning": statetopic.GroupActive,
		"stateless": statetopic.GroupActive, "share": statetopic.GroupFailed,
	} {
		out, blocked := DestinationBlock(listed, g)
		if blocked != (want != "") || out.State != want {
			t.Errorf("%s: blocked=%v state %q, want %q", g, blocked, out.State, want)
		}
	}
}

func mirror() *statetopic.Mirror {
	orders, payments, paused := statetopic.UUID{1}, statetopic.UUID{2}, statetopic.UUID{3}
	m := &statetopic.Mirror{Name: "dr",
		Topics: map[string]*statetopic.MirrorTopic{
			"orders":   {SourceTopicID: orders, Desired: statetopic.DesireMirror, Partitions: 3},
			"payments": {SourceTopicID: payments, Desired: statetopic.DesireStop, Partitions: 1},
			"paused":   {SourceTopicID: paused, Desired: statetopic.DesirePause, Partitions: 1},
		},
		Partitions: map[statetopic.PartitionID]*statetopic.PartitionState{
			{SourceTopicID: orders, Partition: 0}:   {State: protocol.MirrorStateMirroring},
			{SourceTopicID: orders, Partition: 1}:   {State: protocol.MirrorStateMirroring},
			{SourceTopicID: orders, Partition: 2}:   {State: protocol.MirrorStatePreparing},
			{SourceTopicID: payments, Partition: 0}: {State: protocol.MirrorStateStopped},
			{SourceTopicID: paused, Partition: 0}:   {State: protocol.MirrorStateMirroring}, // pause not applied yet
		},
		Groups: map[string]*statetopic.GroupSync{},
	}
	return m
}

func TestSyncablePartitions(t *testing.T) {
	got := SyncablePartitions(mirror())
	want := Syncable{"orders": {0: true, 1: true}, "payments": {}, "paused": {}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("syncable %v, want %v: only MIRRORING partitions of topics desired mirror", got, want)
	}
	if got.Topics()[0] != "orders" || len(got.Topics()) != 1 {
		t.Fatalf("topics with syncable partitions %v", got.Topics())
	}
}

func offsets(os ...kadm.Offset) kadm.OffsetResponses {
	out := kadm.OffsetResponses{}
	for _, o := range os {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]kadm.OffsetResponse{}
		}
		out[o.Topic][o.Partition] = kadm.OffsetResponse{Offset: o}
	}
	return out
}

func TestPlan(t *testing.T) {
	syncable := SyncablePartitions(mirror())
	logs := map[string]map[int32]Bounds{"orders": {0: {Start: 10, End: 100}}} // orders/1: log offsets unknown
	src := offsets(
		kadm.Offset{Topic: "orders", Partition: 0, At: 5000, LeaderEpoch: 7, Metadata: "m"}, // beyond the copy: clamped to 100
		kadm.Offset{Topic: "orders", Partition: 1, At: 40},
		kadm.Offset{Topic: "orders", Partition: 2, At: 3},    // PREPARING
		kadm.Offset{Topic: "payments", Partition: 0, At: 9},  // STOPPED: the destination's own now
		kadm.Offset{Topic: "paused", Partition: 0, At: 9},    // paused topic
		kadm.Offset{Topic: "unrelated", Partition: 0, At: 1}, // not in the mirror
	)
	p := Plan(src, nil, syncable, logs)
	want := kadm.Offsets{"orders": {0: {Topic: "orders", Partition: 0, At: 100, LeaderEpoch: -1, Metadata: "m"}}}
	if !reflect.DeepEqual(p.Commit, want) || p.InSync != 0 || p.NotSyncable != 3 || p.NoBounds != 1 || p.Behind != 1 {
		t.Fatalf("plan %+v, want commit %v with epoch -1, 3 not syncable, 1 without bounds, 1 behind", p, want)
	}
	// Below the destination log start: clamped up, in sync (those records are gone).
	p = Plan(offsets(kadm.Offset{Topic: "orders", Partition: 0, At: 3}), nil, syncable, logs)
	if got := p.Commit["orders"][0].At; got != 10 || p.Behind != 0 {
		t.Fatalf("offset 3 below log start 10 committed as %d (%+v)", got, p)
	}
	// At the high watermark exactly: not behind.
	if p = Plan(offsets(kadm.Offset{Topic: "orders", Partition: 0, At: 100}), nil, syncable, logs); p.Behind != 0 {
		t.Fatalf("offset 100 at high watermark 100 counted behind: %+v", p)
	}
	// Equal offset and metadata: nothing to commit, whatever the epoch; still
	// behind when that offset is the clamped one.
	dst := offsets(kadm.Offset{Topic: "orders", Partition: 0, At: 100, LeaderEpoch: 12, Metadata: "m"})
	p = Plan(src, dst, syncable, logs)
	if len(p.Commit) != 0 || p.InSync != 1 || p.Behind != 1 {
		t.Fatalf("unchanged offset re-committed: %+v", p)
	}
	// Metadata differs: committed.
	dst = offsets(kadm.Offset{Topic: "orders", Partition: 0, At: 100, Metadata: "other"})
	if p = Plan(src, dst, syncable, logs); len(p.Commit) != 1 {
		t.Fatalf("changed metadata not committed: %+v", p)
	}
}

func TestOutcome(t *testing.T) {
	for name, c := range map[string]struct {
		p         GroupPlan
		committed int
		err       error
		state     statetopic.GroupSyncState
		msg       string
	}{
		"synced":        {GroupPlan{InSync: 2}, 1, nil, statetopic.GroupSynced, ""},
		"partly":        {GroupPlan{InSync: 1, NotSyncable: 2}, 0, nil, statetopic.GroupSynced, "2 committed partitions are not MIRRORING"},
		"behind":        {GroupPlan{InSync: 1, Behind: 2}, 1, nil, statetopic.GroupBehind, "2 committed partitions are past what the copy has reached"},
		"idle":          {GroupPlan{NotSyncable: 2}, 0, nil, statetopic.GroupIdle, "none of its 2 committed partitions"},
		"no bounds":     {GroupPlan{NoBounds: 1}, 0, nil, statetopic.GroupFailed, "could not be read"},
		"joined":        {GroupPlan{}, 0, kerr.UnknownMemberID, statetopic.GroupActive, "got members on the destination"},
		"commit failed": {GroupPlan{InSync: 1}, 0, errors.Join(errors.New("orders/0"), kerr.GroupAuthorizationFailed), statetopic.GroupFailed, "need Read on the group"},
	} {
		out := c.p.outcome(c.committed, c.err)
		if out.State != c.state || !strings.Contains(out.Message, c.msg) {
			t.Errorf("%s: %+v, want %s saying %q", name, out, c.state, c.msg)
		}
	}
}

func TestRecordsWriteOnlyChanges(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(time.Minute)
	m := mirror()
	m.Sync = &statetopic.MirrorSync{Jobs: map[string]*statetopic.SyncJob{statetopic.JobGroups: {LastSuccessAt: t0.Add(30 * time.Second)}}}
	m.Groups = map[string]*statetopic.GroupSync{
		"steady":  {State: statetopic.GroupSynced, SyncedAt: t0, Partitions: 2},
		"joins":   {State: statetopic.GroupSynced, SyncedAt: t0, Partitions: 2},
		"deleted": {State: statetopic.GroupSynced, SyncedAt: t0, Partitions: 1},
		"starts":  {State: statetopic.GroupSynced, SyncedAt: t0, Partitions: 2},
	}
	res := Result{Groups: map[string]Outcome{
		"steady": {State: statetopic.GroupSynced, Partitions: 2},
		"starts": {State: statetopic.GroupSynced, Partitions: 2, SourceMembers: true},
		"joins":  {State: statetopic.GroupActive, Message: "has members"},
		"fresh":  {State: statetopic.GroupSynced, Partitions: 1},
	}}
	recs := Records(m, res, now)
	got := map[string]*statetopic.GroupSync{}
	for _, r := range recs {
		if r.Key.Type != statetopic.TypeGroupSync || r.Key.Mirror != "dr" {
			t.Fatalf("unexpected record key %+v", r.Key)
		}
		g, _ := r.Value.(*statetopic.GroupSync)
		got[r.Key.Group] = g
	}
	if _, ok := got["steady"]; ok {
		t.Error("a group still SYNCED was rewritten")
	}
	if g := got["joins"]; g == nil || g.State != statetopic.GroupActive || !g.SyncedAt.Equal(t0.Add(30*time.Second)) {
		t.Errorf("group that got members: %+v, want ACTIVE last synced at the last run", g)
	}
	if g := got["fresh"]; g == nil || !g.SyncedAt.Equal(now) {
		t.Errorf("newly synced group: %+v", g)
	}
	if g := got["starts"]; g == nil || !g.SourceMembers {
		t.Errorf("a group that got members on the source: %+v, want rewritten with SourceMembers", g)
	}
	if g, ok := got["deleted"]; !ok || g != nil {
		t.Errorf("a group no longer tracked is not tombstoned: %+v", g)
	}
}
