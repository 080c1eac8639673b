package apis

import (
	"context"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// PauseMirrorTopics (key 1008) and ResumeMirrorTopics (key 1009).
//
// A paused topic stops copying and stays read-only; pausing a paused topic
// is a no-op. Only a paused topic resumes: it mirrors again from the
// destination log end, which by offset identity is the next source offset
// to copy.

// PauseMirrorTopics pauses the topics; each gets its own result.
func (b *Backend) PauseMirrorTopics(ctx context.Context, req *protocol.PauseMirrorTopicsRequest) *protocol.PauseMirrorTopicsResponse {
	resp := protocol.NewPtrPauseMirrorTopicsResponse()
	resp.Topics, resp.ErrorCode, resp.ErrorMessage = topicResults(b.changeDesire(ctx, req.MirrorName, req.Topics, statetopic.DesirePause))
	return resp
}

// ResumeMirrorTopics resumes the topics; each gets its own result.
func (b *Backend) ResumeMirrorTopics(ctx context.Context, req *protocol.ResumeMirrorTopicsRequest) *protocol.ResumeMirrorTopicsResponse {
	resp := protocol.NewPtrResumeMirrorTopicsResponse()
	resp.Topics, resp.ErrorCode, resp.ErrorMessage = topicResults(b.changeDesire(ctx, req.MirrorName, req.Topics, statetopic.DesireMirror))
	return resp
}

// changeDesire sets the desire of the named topics that may take it; a
// topic that already has it is left alone.
func (b *Backend) changeDesire(ctx context.Context, mirror string, topics []protocol.TopicName, to statetopic.TopicDesire) ([]protocol.TopicResult, error) {
	m, err := b.Mirror(ctx, mirror)
	if err != nil {
		return nil, err
	}
	var results []protocol.TopicResult
	var change []string
	for _, tn := range topics {
		err := checkDesire(m, tn.Name, to)
		if err == nil && m.Topics[tn.Name].Desired != to {
			change = append(change, tn.Name)
		}
		results = append(results, topicResult(tn.Name, err))
	}
	if err := b.setDesire(ctx, m, change, to); err != nil {
		return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("%v; retry", err)
	}
	return results, nil
}

// checkDesire says why a topic cannot take the desire, if it cannot.
func checkDesire(m *statetopic.Mirror, name string, to statetopic.TopicDesire) error {
	t, in := m.Topics[name]
	if !in {
		return protocol.ErrTopicNotInMirror.WithMessage("topic %q is not in mirror %q", name, m.Name)
	}
	if t.Desired == statetopic.DesireStop {
		return protocol.ErrMirrorTopicBeingStopped.WithMessage("topic %q of mirror %q is stopping or stopped (failed over); add it to the mirror again to restart mirroring", name, m.Name)
	}
	if to == statetopic.DesireMirror && t.Desired != statetopic.DesirePause {
		return protocol.ErrMirrorTopicNotPaused.WithMessage("topic %q of mirror %q is not paused", name, m.Name)
	}
	return nil // pausing a paused topic is a no-op
}
