package groupsync

import (
	"sort"
	"time"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// Records turns a completed run into the group records to write: groups
// whose outcome changed, and tombstones for recorded groups the run no
// longer tracks (deleted on the source, excluded, or without offsets on the
// mirror's topics). m is the mirror as recorded before the run, now the
// run's time. A group still SYNCED is not rewritten: the run's job record
// dates it (statetopic.Mirror.GroupLastSynced).
func Records(m *statetopic.Mirror, res Result, now time.Time) []coordinator.Record {
	names := make([]string, 0, len(res.Groups))
	for g := range res.Groups {
		names = append(names, g)
	}
	sort.Strings(names)
	var recs []coordinator.Record
	for _, g := range names {
		out := res.Groups[g]
		prev := m.Groups[g]
		if prev != nil && prev.State == out.State && prev.Partitions == out.Partitions && prev.Message == out.Message && prev.SourceMembers == out.SourceMembers {
			continue
		}
		synced := m.GroupLastSynced(g)
		if out.State == statetopic.GroupSynced {
			synced = now
		}
		recs = append(recs, coordinator.Record{Key: statetopic.GroupSyncKey(m.Name, g), Value: &statetopic.GroupSync{
			State: out.State, SyncedAt: synced, Partitions: out.Partitions, Message: out.Message, SourceMembers: out.SourceMembers}})
	}
	var gone []string
	for g := range m.Groups {
		if _, ok := res.Groups[g]; !ok {
			gone = append(gone, g)
		}
	}
	sort.Strings(gone)
	for _, g := range gone {
		recs = append(recs, coordinator.Record{Key: statetopic.GroupSyncKey(m.Name, g)})
	}
	return recs
}
