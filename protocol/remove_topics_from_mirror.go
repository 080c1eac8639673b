package protocol

import "github.com/twmb/franz-go/pkg/kmsg"

// RemoveTopicsFromMirror (v0, flexible; its API key is in apikeys.go) is failover: each named
// topic goes STOPPING -> STOPPED and becomes writable on the destination,
// with its last mirrored offset recorded. Patterns (tag 0) are removed from
// the mirror's topics.include if present there, otherwise added to
// topics.exclude, so that pattern-matched topics stop being picked up again.
// Errors per topic: TOPIC_NOT_IN_MIRROR; top level: UNKNOWN_MIRROR.

// RemoveTopicsFromMirrorRequest fails topics over.
type RemoveTopicsFromMirrorRequest struct {
	Version     int16
	MirrorName  string
	Topics      []TopicName
	Patterns    []string // tag 0
	UnknownTags kmsg.Tags
}

// RemoveTopicsFromMirrorResponse reports the outcome per topic.
type RemoveTopicsFromMirrorResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Topics         []TopicResult
	UnknownTags    kmsg.Tags
}

func NewPtrRemoveTopicsFromMirrorRequest() *RemoveTopicsFromMirrorRequest {
	return new(RemoveTopicsFromMirrorRequest)
}

func NewPtrRemoveTopicsFromMirrorResponse() *RemoveTopicsFromMirrorResponse {
	return new(RemoveTopicsFromMirrorResponse)
}

func (*RemoveTopicsFromMirrorRequest) Key() int16 { return KeyRemoveTopicsFromMirror }
func (*RemoveTopicsFromMirrorRequest) MaxVersion() int16 {
	return maxVersion(KeyRemoveTopicsFromMirror)
}
func (v *RemoveTopicsFromMirrorRequest) SetVersion(version int16) { v.Version = version }
func (v *RemoveTopicsFromMirrorRequest) GetVersion() int16        { return v.Version }
func (*RemoveTopicsFromMirrorRequest) IsFlexible() bool           { return true }
func (v *RemoveTopicsFromMirrorRequest) ResponseKind() kmsg.Response {
	return &RemoveTopicsFromMirrorResponse{Version: v.Version}
}
func (v *RemoveTopicsFromMirrorRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *RemoveTopicsFromMirrorRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, v.MirrorName)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags,
		taggedField{0, len(v.Patterns) > 0, func(dst []byte) []byte { return appendStrings(dst, v.Patterns) }},
	)
}

func (v *RemoveTopicsFromMirrorRequest) readFrom(d *decoder) {
	v.MirrorName = d.string()
	v.Topics = readArray[TopicName](d)
	d.tags(&v.UnknownTags, func(tag uint32, fd *decoder) bool {
		if tag != 0 {
			return false
		}
		v.Patterns = fd.strings()
		return true
	})
}

func (*RemoveTopicsFromMirrorResponse) Key() int16 { return KeyRemoveTopicsFromMirror }
func (*RemoveTopicsFromMirrorResponse) MaxVersion() int16 {
	return maxVersion(KeyRemoveTopicsFromMirror)
}
func (v *RemoveTopicsFromMirrorResponse) SetVersion(version int16) { v.Version = version }
func (v *RemoveTopicsFromMirrorResponse) GetVersion() int16        { return v.Version }
func (*RemoveTopicsFromMirrorResponse) IsFlexible() bool           { return true }
func (v *RemoveTopicsFromMirrorResponse) RequestKind() kmsg.Request {
	return &RemoveTopicsFromMirrorRequest{Version: v.Version}
}
func (v *RemoveTopicsFromMirrorResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *RemoveTopicsFromMirrorResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *RemoveTopicsFromMirrorResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *RemoveTopicsFromMirrorResponse) AppendTo(dst []byte) []byte {
	return appendTopicResults(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage, v.Topics, &v.UnknownTags)
}

func (v *RemoveTopicsFromMirrorResponse) readFrom(d *decoder) {
	d.topicResults(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage, &v.Topics, &v.UnknownTags)
}
