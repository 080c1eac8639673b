package apis

import (
	"context"
	"strings"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// DeleteMirror (key 1010) deletes a mirror whose topics are all STOPPED
// (failed over) by tombstoning every one of its keys in __mirror_state,
// config first so that no instance acts on it while the rest is removed;
// or says why not.
func (b *Backend) DeleteMirror(ctx context.Context, req *protocol.DeleteMirrorRequest) *protocol.DeleteMirrorResponse {
	resp := protocol.NewPtrDeleteMirrorResponse()
	resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(b.deleteMirror(ctx, req.MirrorName))
	return resp
}

func (b *Backend) deleteMirror(ctx context.Context, name string) error {
	m, err := b.Mirror(ctx, name)
	if err != nil {
		return err
	}
	var busy []string
	for _, t := range m.TopicNames() {
		if !m.AllStopped(t) {
			busy = append(busy, t)
		}
	}
	if len(busy) > 0 {
		return protocol.ErrMirrorNotEmpty.WithMessage("mirror %q still mirrors %s; remove them (`kmirror mirrors --remove --mirror %s --topics %s`) and wait for STOPPED first",
			name, strings.Join(busy, ", "), name, strings.Join(busy, ","))
	}
	recs := tombstones(m.Keys())
	if err := b.Coord.Write(ctx, recs...); err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("deleting mirror %q: %v; retry (a retried delete finishes the job)", name, err)
	}
	b.Sources.Drop(name)
	b.Log.Info("mirror deleted", "mirror", name)
	return nil
}

// tombstones are the records that delete keys.
func tombstones(keys []statetopic.Key) []coordinator.Record {
	recs := make([]coordinator.Record, len(keys))
	for i, k := range keys {
		recs[i].Key = k
	}
	return recs
}
