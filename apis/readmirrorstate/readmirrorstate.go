// Package readmirrorstate answers ReadMirrorState (API key 100): the recorded
// state of mirror partitions, as stored in __mirror_state. With no topics
// named it returns every topic of the mirror.
package readmirrorstate

import (
	"context"

	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/protocol"
)

// Handle reads the states.
func Handle(ctx context.Context, b *apicore.Backend, req *protocol.ReadMirrorStateRequest) *protocol.ReadMirrorStateResponse {
	resp := protocol.NewPtrReadMirrorStateResponse()
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
		out := protocol.ReadMirrorStateResponseTopic{Name: tp.Name}
		states := apicore.TopicStates(m, tp.Name)
		parts := tp.Partitions
		if len(parts) == 0 {
			for p := range states {
				parts = append(parts, int32(p))
			}
		}
		for _, p := range parts {
			rp := protocol.ReadMirrorStateResponsePartition{Partition: p, State: protocol.MirrorStateUnknown,
				PreviousState: protocol.MirrorStateUnknown, LastMirroredOffset: -1}
			switch {
			case states == nil:
				rp.ErrorCode, rp.ErrorMessage = protocol.ErrorCodeAndMessage(protocol.ErrTopicNotInMirror.WithMessage("topic %q is not in mirror %q", tp.Name, m.Name))
			case p < 0 || int(p) >= len(states):
				rp.ErrorCode, rp.ErrorMessage = protocol.ErrorCodeAndMessage(protocol.ErrUnknownTopicOrPartition.WithMessage("topic %q has %d partitions", tp.Name, len(states)))
			case states[p] != nil:
				s := states[p]
				rp.State, rp.PreviousState, rp.RetryAttempt, rp.LastMirroredOffset = s.State, s.PreviousState, s.RetryAttempt, s.LastMirroredOffset
				if s.ErrorMessage != "" {
					msg := s.ErrorMessage
					rp.ErrorMessage = &msg
				}
			}
			out.Partitions = append(out.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}
