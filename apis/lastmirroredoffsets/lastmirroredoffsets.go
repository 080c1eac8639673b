// Package lastmirroredoffsets answers LastMirroredOffsets (API key 97): for a
// failed-over (STOPPED) partition, the destination log end offset at the
// moment copying stopped — every source offset below it was mirrored. A
// partition that is not STOPPED has no LMO yet (-1). Failback asks this of
// the cluster it fails back from.
package lastmirroredoffsets

import (
	"context"

	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/protocol"
)

// Handle returns the LMOs.
func Handle(ctx context.Context, b *apicore.Backend, req *protocol.LastMirroredOffsetsRequest) *protocol.LastMirroredOffsetsResponse {
	resp := protocol.NewPtrLastMirroredOffsetsResponse()
	m, err := b.Mirror(ctx, req.MirrorName)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		return resp
	}
	apicore.Requested(m, req.Topics, func(topic string, parts []apicore.RequestedPartition) {
		out := protocol.LastMirroredOffsetsResponseTopic{Name: topic}
		for _, rp := range parts {
			p := protocol.LastMirroredOffsetsResponsePartition{Partition: rp.Partition, LastMirroredOffset: -1}
			p.ErrorCode, _ = protocol.ErrorCodeAndMessage(rp.Err)
			if rp.State != nil && rp.State.State == protocol.MirrorStateStopped {
				p.LastMirroredOffset = rp.State.LastMirroredOffset
			}
			out.Partitions = append(out.Partitions, p)
		}
		resp.Topics = append(resp.Topics, out)
	})
	return resp
}
