// Package pauseresume answers PauseMirrorTopics (API key protocol.KeyPauseMirrorTopics) and
// ResumeMirrorTopics (API key protocol.KeyResumeMirrorTopics). A paused topic stops copying and stays
// read-only; resuming continues from the destination log end, which by offset
// identity is the next source offset to copy.
package pauseresume

import (
	"context"

	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// Pause handles PauseMirrorTopics.
func Pause(ctx context.Context, b *apicore.Backend, req *protocol.PauseMirrorTopicsRequest) *protocol.PauseMirrorTopicsResponse {
	resp := protocol.NewPtrPauseMirrorTopicsResponse()
	results, err := change(ctx, b, req.MirrorName, req.Topics, statetopic.DesirePause)
	resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
	resp.Topics = results
	return resp
}

// Resume handles ResumeMirrorTopics.
func Resume(ctx context.Context, b *apicore.Backend, req *protocol.ResumeMirrorTopicsRequest) *protocol.ResumeMirrorTopicsResponse {
	resp := protocol.NewPtrResumeMirrorTopicsResponse()
	results, err := change(ctx, b, req.MirrorName, req.Topics, statetopic.DesireMirror)
	resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
	resp.Topics = results
	return resp
}

func change(ctx context.Context, b *apicore.Backend, mirror string, topics []protocol.TopicName, to statetopic.TopicDesire) ([]protocol.TopicResult, error) {
	m, err := b.Mirror(ctx, mirror)
	if err != nil {
		return nil, err
	}
	var results []protocol.TopicResult
	var change []string
	for _, tn := range topics {
		err := check(m, tn.Name, to)
		if err == nil && m.Topics[tn.Name].Desired != to {
			change = append(change, tn.Name)
		}
		results = append(results, apicore.TopicResult(tn.Name, err))
	}
	if err := b.SetDesire(ctx, m, change, to); err != nil {
		return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("%v; retry", err)
	}
	return results, nil
}

func check(m *statetopic.Mirror, name string, to statetopic.TopicDesire) error {
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
