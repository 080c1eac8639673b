// Package deletemirror answers DeleteMirror (API key protocol.KeyDeleteMirror): a mirror whose
// topics are all STOPPED (failed over) is deleted by tombstoning every one of
// its keys in __mirror_state, config first so that no instance acts on it
// while the rest is removed.
package deletemirror

import (
	"context"
	"sort"
	"strings"

	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// Handle deletes the mirror or says why not.
func Handle(ctx context.Context, b *apicore.Backend, req *protocol.DeleteMirrorRequest) *protocol.DeleteMirrorResponse {
	resp := protocol.NewPtrDeleteMirrorResponse()
	resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(deleteMirror(ctx, b, req.MirrorName))
	return resp
}

func deleteMirror(ctx context.Context, b *apicore.Backend, name string) error {
	m, err := b.Mirror(ctx, name)
	if err != nil {
		return err
	}
	var busy []string
	for _, t := range m.TopicNames() {
		if !apicore.AllStopped(m, t) {
			busy = append(busy, t)
		}
	}
	if len(busy) > 0 {
		return protocol.ErrMirrorNotEmpty.WithMessage("mirror %q still mirrors %s; remove them (`kmirror mirrors --remove --mirror %s --topics %s`) and wait for STOPPED first",
			name, strings.Join(busy, ", "), name, strings.Join(busy, ","))
	}
	recs := []coordinator.Record{{Key: statetopic.MirrorConfigKey(name)}}
	for _, t := range m.TopicNames() {
		recs = append(recs, coordinator.Record{Key: statetopic.MirrorTopicKey(name, t)})
	}
	ids := make([]statetopic.PartitionID, 0, len(m.Partitions))
	for id := range m.Partitions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Partition < ids[j].Partition })
	for _, id := range ids {
		recs = append(recs, coordinator.Record{Key: statetopic.PartitionStateKey(name, id.SourceTopicID, id.Partition)})
	}
	recs = append(recs, SyncTombstones(m)...)
	if err := b.Coord.Write(ctx, recs...); err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("deleting mirror %q: %v; retry (a retried delete finishes the job)", name, err)
	}
	b.Sources.Drop(name)
	b.Log.Info("mirror deleted", "mirror", name)
	return nil
}

// SyncTombstones deletes the records of a mirror's sync jobs.
func SyncTombstones(m *statetopic.Mirror) []coordinator.Record {
	groups := make([]string, 0, len(m.Groups))
	for g := range m.Groups {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	recs := make([]coordinator.Record, 0, len(groups)+1)
	for _, g := range groups {
		recs = append(recs, coordinator.Record{Key: statetopic.GroupSyncKey(m.Name, g)})
	}
	return append(recs, coordinator.Record{Key: statetopic.MirrorSyncKey(m.Name)})
}
