// Package listmirrors answers ListMirrors (API key protocol.KeyListMirrors) from this instance's
// view of __mirror_state.
package listmirrors

import (
	"context"

	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// Handle lists the mirrors.
func Handle(ctx context.Context, b *apicore.Backend, req *protocol.ListMirrorsRequest) *protocol.ListMirrorsResponse {
	resp := protocol.NewPtrListMirrorsResponse()
	if err := b.CatchUp(ctx); err != nil {
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
	return resp
}
