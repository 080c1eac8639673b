package apis

import (
	"context"
	"maps"
	"slices"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// ListMirrors (key 1004) lists the mirrors of this instance's view of
// __mirror_state.
func (b *Backend) ListMirrors(ctx context.Context, req *protocol.ListMirrorsRequest) *protocol.ListMirrorsResponse {
	resp := protocol.NewPtrListMirrorsResponse()
	if err := b.catchUp(ctx); err != nil {
		resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		return resp
	}
	b.Coord.Store().Read(func(v *statetopic.View) {
		for _, name := range v.MirrorNames() {
			m := v.Mirror(name)
			out := protocol.ListMirrorsResponseMirror{Name: name, SourceBootstrap: m.Config.Configs["bootstrap.servers"],
				SourceClusterID: m.Config.SourceClusterID, TopicCount: int32(len(m.Topics))}
			if req.IncludeTopicNames {
				out.TopicNames = m.TopicNames()
			}
			resp.Mirrors = append(resp.Mirrors, out)
		}
	})
	// Mirrors whose state was lost are listed with the error that says so
	// (INVALID_MIRROR_STATE, "MIRROR STATE LOST: ..."): never silently
	// left out.
	if l := b.Coord.Loss(); l.Lost() {
		resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(l.Error(""))
		for _, name := range slices.Sorted(maps.Keys(l.Mirrors)) {
			topics := slices.Sorted(maps.Keys(l.Mirrors[name]))
			out := protocol.ListMirrorsResponseMirror{Name: name, TopicCount: int32(len(topics))}
			if req.IncludeTopicNames {
				out.TopicNames = topics
			}
			resp.Mirrors = append(resp.Mirrors, out)
		}
	}
	return resp
}
