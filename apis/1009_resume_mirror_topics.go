package apis

import (
	"context"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// ResumeMirrorTopics (key 1009).
//
// A paused topic mirrors again from the destination log end, which by offset
// identity is the next source offset to copy. Only paused topics resume.

// ResumeMirrorTopics resumes the topics; each gets its own result.
func (b *Backend) ResumeMirrorTopics(ctx context.Context, req *protocol.ResumeMirrorTopicsRequest) *protocol.ResumeMirrorTopicsResponse {
	resp := protocol.NewPtrResumeMirrorTopicsResponse()
	resp.Topics, resp.ErrorCode, resp.ErrorMessage = topicResults(b.changeDesire(ctx, req.MirrorName, req.Topics, statetopic.DesireMirror))
	return resp
}
