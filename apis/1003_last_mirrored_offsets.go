package apis

import (
	"context"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// LastMirroredOffsets (key 1003) returns, for a failed-over (STOPPED)
// partition, the destination log end offset at the moment copying stopped
// (every source offset below it was mirrored); a partition that is not
// STOPPED has no LMO yet (-1). Failback asks this of the cluster it fails
// back from. Without a mirror name it answers by ClusterID: for each topic,
// from the mirror that mirrors it from that cluster (a cluster failing back
// does not know the name of the mirror that took its topics over). A
// partition of such a topic that is not STOPPED answers
// MIRROR_TOPIC_NOT_STOPPED: mirroring it back would make a loop.
func (b *Backend) LastMirroredOffsets(ctx context.Context, req *protocol.LastMirroredOffsetsRequest) *protocol.LastMirroredOffsetsResponse {
	resp := protocol.NewPtrLastMirroredOffsetsResponse()
	if req.MirrorName == "" && req.ClusterID != "" {
		b.lmoByCluster(ctx, req, resp)
		return resp
	}
	err := answerRequested(ctx, b, req.MirrorName, req.Topics, lmoPartition, func(name string, parts []protocol.LastMirroredOffsetsResponsePartition) {
		resp.Topics = append(resp.Topics, protocol.LastMirroredOffsetsResponseTopic{Name: name, Partitions: parts})
	})
	resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
	return resp
}

// lmoPartition answers for a partition of a named mirror: its LMO if it is
// STOPPED, else -1.
func lmoPartition(rp requestedPartition) protocol.LastMirroredOffsetsResponsePartition {
	p := protocol.LastMirroredOffsetsResponsePartition{Partition: rp.Partition, LastMirroredOffset: -1}
	p.ErrorCode, _ = protocol.ErrorCodeAndMessage(rp.Err)
	if rp.State != nil && rp.State.State == protocol.MirrorStateStopped {
		p.LastMirroredOffset = rp.State.LastMirroredOffset
	}
	return p
}

func (b *Backend) lmoByCluster(ctx context.Context, req *protocol.LastMirroredOffsetsRequest, resp *protocol.LastMirroredOffsetsResponse) {
	if err := b.catchUp(ctx); err != nil {
		resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		return
	}
	var mirrors []*statetopic.Mirror
	b.Coord.Store().Read(func(v *statetopic.View) {
		for _, name := range v.MirrorNames() {
			if m := v.Mirror(name); m.Config != nil && m.Config.SourceClusterID == req.ClusterID {
				mirrors = append(mirrors, m.Copy())
			}
		}
	})
	for _, tp := range req.Topics {
		out := protocol.LastMirroredOffsetsResponseTopic{Name: tp.Name}
		// The mirror that holds the topic: an active one first (a loop must
		// be seen), else the one that stopped last.
		var from *statetopic.Mirror
		for _, m := range mirrors {
			t := m.Topics[tp.Name]
			if t == nil {
				continue
			}
			if !m.AllStopped(tp.Name) {
				from = m
				break
			}
			if from == nil || t.UpdatedAt.After(from.Topics[tp.Name].UpdatedAt) {
				from = m
			}
		}
		states := []*statetopic.PartitionState(nil)
		if from != nil {
			states = from.TopicStates(tp.Name)
		}
		for _, p := range tp.Partitions {
			rp := protocol.NewLastMirroredOffsetsResponsePartition()
			rp.Partition = p
			switch {
			case from == nil:
				rp.ErrorCode = protocol.ErrUnknownTopicOrPartition.Code
			case p < 0 || int(p) >= len(states):
				rp.ErrorCode = protocol.ErrUnknownTopicOrPartition.Code
			case states[p] == nil || states[p].State != protocol.MirrorStateStopped:
				rp.ErrorCode = protocol.ErrMirrorTopicNotStopped.Code
			default:
				rp.LastMirroredOffset = states[p].LastMirroredOffset
			}
			out.Partitions = append(out.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, out)
	}
}
