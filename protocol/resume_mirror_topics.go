package protocol

import "github.com/twmb/franz-go/pkg/kmsg"

// ResumeMirrorTopics (v0, flexible; its API key is in apikeys.go) restarts copying for PAUSED
// topics: they go back to MIRRORING from where they stopped (the
// destination log end offset). Errors per topic: TOPIC_NOT_IN_MIRROR,
// MIRROR_TOPIC_NOT_PAUSED; top level: UNKNOWN_MIRROR.

// ResumeMirrorTopicsRequest resumes paused topics of a mirror.
type ResumeMirrorTopicsRequest struct {
	Version     int16
	MirrorName  string
	Topics      []TopicName
	UnknownTags kmsg.Tags
}

// ResumeMirrorTopicsResponse reports the outcome per topic.
type ResumeMirrorTopicsResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Topics         []TopicResult
	UnknownTags    kmsg.Tags
}

func NewPtrResumeMirrorTopicsRequest() *ResumeMirrorTopicsRequest {
	return new(ResumeMirrorTopicsRequest)
}
func NewPtrResumeMirrorTopicsResponse() *ResumeMirrorTopicsResponse {
	return new(ResumeMirrorTopicsResponse)
}

func (*ResumeMirrorTopicsRequest) Key() int16                 { return KeyResumeMirrorTopics }
func (*ResumeMirrorTopicsRequest) MaxVersion() int16          { return maxVersion(KeyResumeMirrorTopics) }
func (v *ResumeMirrorTopicsRequest) SetVersion(version int16) { v.Version = version }
func (v *ResumeMirrorTopicsRequest) GetVersion() int16        { return v.Version }
func (*ResumeMirrorTopicsRequest) IsFlexible() bool           { return true }
func (v *ResumeMirrorTopicsRequest) ResponseKind() kmsg.Response {
	return &ResumeMirrorTopicsResponse{Version: v.Version}
}
func (v *ResumeMirrorTopicsRequest) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *ResumeMirrorTopicsRequest) AppendTo(dst []byte) []byte {
	return appendMirrorTopics(dst, v.MirrorName, v.Topics, &v.UnknownTags)
}
func (v *ResumeMirrorTopicsRequest) readFrom(d *decoder) {
	d.mirrorTopics(&v.MirrorName, &v.Topics, &v.UnknownTags)
}

func (*ResumeMirrorTopicsResponse) Key() int16                 { return KeyResumeMirrorTopics }
func (*ResumeMirrorTopicsResponse) MaxVersion() int16          { return maxVersion(KeyResumeMirrorTopics) }
func (v *ResumeMirrorTopicsResponse) SetVersion(version int16) { v.Version = version }
func (v *ResumeMirrorTopicsResponse) GetVersion() int16        { return v.Version }
func (*ResumeMirrorTopicsResponse) IsFlexible() bool           { return true }
func (v *ResumeMirrorTopicsResponse) RequestKind() kmsg.Request {
	return &ResumeMirrorTopicsRequest{Version: v.Version}
}
func (v *ResumeMirrorTopicsResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *ResumeMirrorTopicsResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *ResumeMirrorTopicsResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *ResumeMirrorTopicsResponse) AppendTo(dst []byte) []byte {
	return appendTopicResults(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage, v.Topics, &v.UnknownTags)
}

func (v *ResumeMirrorTopicsResponse) readFrom(d *decoder) {
	d.topicResults(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage, &v.Topics, &v.UnknownTags)
}
