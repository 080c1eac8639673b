package apis

import (
	"context"

	"github.com/kmirror/kmirror/protocol"
)

// ReadMirrorState (key 1006).
//
// The recorded state of mirror partitions, as stored in __mirror_state. With no topics
// named it returns every topic of the mirror.

// ReadMirrorState reads the states.
func (b *Backend) ReadMirrorState(ctx context.Context, req *protocol.ReadMirrorStateRequest) *protocol.ReadMirrorStateResponse {
	resp := protocol.NewPtrReadMirrorStateResponse()
	m, err := b.Mirror(ctx, req.MirrorName)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		return resp
	}
	requested(m, req.Topics, func(topic string, parts []requestedPartition) {
		out := protocol.ReadMirrorStateResponseTopic{Name: topic}
		for _, rp := range parts {
			p := protocol.ReadMirrorStateResponsePartition{Partition: rp.Partition, State: protocol.MirrorStateUnknown,
				PreviousState: protocol.MirrorStateUnknown, LastMirroredOffset: -1}
			p.ErrorCode, p.ErrorMessage = protocol.ErrorCodeAndMessage(rp.Err)
			if s := rp.State; s != nil {
				p.State, p.PreviousState, p.RetryAttempt, p.LastMirroredOffset = s.State, s.PreviousState, s.RetryAttempt, s.LastMirroredOffset
				if s.ErrorMessage != "" {
					msg := s.ErrorMessage
					p.ErrorMessage = &msg
				}
			}
			out.Partitions = append(out.Partitions, p)
		}
		resp.Topics = append(resp.Topics, out)
	})
	return resp
}
