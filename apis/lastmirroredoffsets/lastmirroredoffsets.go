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
	topics := req.Topics
	if len(topics) == 0 {
		for _, n := range m.TopicNames() {
			topics = append(topics, protocol.TopicPartitions{Name: n})
		}
	}
	for _, tp := range topics {
		out := protocol.LastMirroredOffsetsResponseTopic{Name: tp.Name}
		states := apicore.TopicStates(m, tp.Name)
		parts := tp.Partitions
		if len(parts) == 0 {
			for p := range states {
				parts = append(parts, int32(p))
			}
		}
		for _, p := range parts {
			rp := protocol.LastMirroredOffsetsResponsePartition{Partition: p, LastMirroredOffset: -1}
			switch {
			case states == nil:
				rp.ErrorCode = protocol.ErrTopicNotInMirror.Code
			case p < 0 || int(p) >= len(states):
				rp.ErrorCode = protocol.ErrUnknownTopicOrPartition.Code
			case states[p] != nil && states[p].State == protocol.MirrorStateStopped:
				rp.LastMirroredOffset = states[p].LastMirroredOffset
			}
			out.Partitions = append(out.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}
