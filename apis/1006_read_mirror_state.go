package apis

import (
	"context"

	"github.com/kmirror/kmirror/protocol"
)

// ReadMirrorState (key 1006) returns the recorded state of mirror
// partitions, as stored in __mirror_state; with no topics named, of every
// topic of the mirror.
func (b *Backend) ReadMirrorState(ctx context.Context, req *protocol.ReadMirrorStateRequest) *protocol.ReadMirrorStateResponse {
	resp := protocol.NewPtrReadMirrorStateResponse()
	err := answerRequested(ctx, b, req.MirrorName, req.Topics, statePartition, func(name string, parts []protocol.ReadMirrorStateResponsePartition) {
		resp.Topics = append(resp.Topics, protocol.ReadMirrorStateResponseTopic{Name: name, Partitions: parts})
	})
	resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
	return resp
}

// statePartition is a partition's recorded state (UNKNOWN where none is
// recorded yet).
func statePartition(rp requestedPartition) protocol.ReadMirrorStateResponsePartition {
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
	return p
}
