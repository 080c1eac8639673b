package protocol

import "github.com/twmb/franz-go/pkg/kmsg"

// PauseMirrorTopics (v0, flexible; its API key is in apikeys.go) stops copying for MIRRORING
// topics without failing them over: they go to PAUSED and stay read-only.
// Errors per topic: TOPIC_NOT_IN_MIRROR, MIRROR_TOPIC_BEING_STOPPED (the
// topic is stopping or stopped); top level: UNKNOWN_MIRROR.

// PauseMirrorTopicsRequest pauses topics of a mirror.
type PauseMirrorTopicsRequest struct {
	Version     int16
	MirrorName  string
	Topics      []TopicName
	UnknownTags kmsg.Tags
}

// PauseMirrorTopicsResponse reports the outcome per topic.
type PauseMirrorTopicsResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Topics         []TopicResult
	UnknownTags    kmsg.Tags
}

func NewPtrPauseMirrorTopicsRequest() *PauseMirrorTopicsRequest { return new(PauseMirrorTopicsRequest) }
func NewPtrPauseMirrorTopicsResponse() *PauseMirrorTopicsResponse {
	return new(PauseMirrorTopicsResponse)
}

func (*PauseMirrorTopicsRequest) Key() int16                 { return KeyPauseMirrorTopics }
func (*PauseMirrorTopicsRequest) MaxVersion() int16          { return maxVersion(KeyPauseMirrorTopics) }
func (v *PauseMirrorTopicsRequest) SetVersion(version int16) { v.Version = version }
func (v *PauseMirrorTopicsRequest) GetVersion() int16        { return v.Version }
func (*PauseMirrorTopicsRequest) IsFlexible() bool           { return true }
func (v *PauseMirrorTopicsRequest) ResponseKind() kmsg.Response {
	return &PauseMirrorTopicsResponse{Version: v.Version}
}
func (v *PauseMirrorTopicsRequest) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *PauseMirrorTopicsRequest) AppendTo(dst []byte) []byte {
	return appendMirrorTopics(dst, v.MirrorName, v.Topics, &v.UnknownTags)
}
func (v *PauseMirrorTopicsRequest) readFrom(d *decoder) {
	d.mirrorTopics(&v.MirrorName, &v.Topics, &v.UnknownTags)
}

func (*PauseMirrorTopicsResponse) Key() int16                 { return KeyPauseMirrorTopics }
func (*PauseMirrorTopicsResponse) MaxVersion() int16          { return maxVersion(KeyPauseMirrorTopics) }
func (v *PauseMirrorTopicsResponse) SetVersion(version int16) { v.Version = version }
func (v *PauseMirrorTopicsResponse) GetVersion() int16        { return v.Version }
func (*PauseMirrorTopicsResponse) IsFlexible() bool           { return true }
func (v *PauseMirrorTopicsResponse) RequestKind() kmsg.Request {
	return &PauseMirrorTopicsRequest{Version: v.Version}
}
func (v *PauseMirrorTopicsResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *PauseMirrorTopicsResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *PauseMirrorTopicsResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *PauseMirrorTopicsResponse) AppendTo(dst []byte) []byte {
	return appendTopicResults(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage, v.Topics, &v.UnknownTags)
}

func (v *PauseMirrorTopicsResponse) readFrom(d *decoder) {
	d.topicResults(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage, &v.Topics, &v.UnknownTags)
}
