package protocol

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AddTopicsToMirror (v0, flexible; its API key is in apikeys.go) starts mirroring topics, named
// explicitly or through include/exclude regexes that are added to the
// mirror's topics.include / topics.exclude (tagged fields 0 and 1, so old
// clients need not send them). A zero TopicID and NumPartitions -1 ask the
// proxy to look them up on the source. Errors per topic:
// TOPIC_ALREADY_IN_MIRROR, MIRROR_TOPIC_NOT_STOPPED,
// UNKNOWN_TOPIC_OR_PARTITION; top level: UNKNOWN_MIRROR.

// AddTopicsToMirrorRequest adds topics to a mirror.
type AddTopicsToMirrorRequest struct {
	Version         int16
	MirrorName      string
	Topics          []AddTopicsToMirrorRequestTopic
	IncludePatterns []string // tag 0
	ExcludePatterns []string // tag 1
	UnknownTags     kmsg.Tags
}

// AddTopicsToMirrorRequestTopic is one topic to mirror.
type AddTopicsToMirrorRequestTopic struct {
	Name          string
	TopicID       [16]byte // zero: look it up on the source
	NumPartitions int32    // -1: look it up on the source
	UnknownTags   kmsg.Tags
}

// Default sets NumPartitions to -1 (look it up).
func (v *AddTopicsToMirrorRequestTopic) Default() {
	*v = AddTopicsToMirrorRequestTopic{NumPartitions: -1}
}

// NewAddTopicsToMirrorRequestTopic returns a topic with defaults set.
func NewAddTopicsToMirrorRequestTopic() AddTopicsToMirrorRequestTopic {
	var v AddTopicsToMirrorRequestTopic
	v.Default()
	return v
}

// AddTopicsToMirrorResponse reports the outcome per topic.
type AddTopicsToMirrorResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Topics         []TopicResult
	UnknownTags    kmsg.Tags
}

func NewPtrAddTopicsToMirrorRequest() *AddTopicsToMirrorRequest { return new(AddTopicsToMirrorRequest) }
func NewPtrAddTopicsToMirrorResponse() *AddTopicsToMirrorResponse {
	return new(AddTopicsToMirrorResponse)
}

func (*AddTopicsToMirrorRequest) Key() int16                 { return KeyAddTopicsToMirror }
func (*AddTopicsToMirrorRequest) MaxVersion() int16          { return maxVersion(KeyAddTopicsToMirror) }
func (v *AddTopicsToMirrorRequest) SetVersion(version int16) { v.Version = version }
func (v *AddTopicsToMirrorRequest) GetVersion() int16        { return v.Version }
func (*AddTopicsToMirrorRequest) IsFlexible() bool           { return true }
func (v *AddTopicsToMirrorRequest) ResponseKind() kmsg.Response {
	return &AddTopicsToMirrorResponse{Version: v.Version}
}
func (v *AddTopicsToMirrorRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *AddTopicsToMirrorRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, v.MirrorName)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags,
		taggedField{0, len(v.IncludePatterns) > 0, func(dst []byte) []byte { return appendStrings(dst, v.IncludePatterns) }},
		taggedField{1, len(v.ExcludePatterns) > 0, func(dst []byte) []byte { return appendStrings(dst, v.ExcludePatterns) }},
	)
}

func (v *AddTopicsToMirrorRequest) readFrom(d *decoder) {
	v.MirrorName = d.string()
	v.Topics = readArray[AddTopicsToMirrorRequestTopic](d)
	d.tags(&v.UnknownTags, func(tag uint32, fd *decoder) bool {
		switch tag {
		case 0:
			v.IncludePatterns = fd.strings()
		case 1:
			v.ExcludePatterns = fd.strings()
		default:
			return false
		}
		return true
	})
}

func (v *AddTopicsToMirrorRequestTopic) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = kbin.AppendUuid(dst, v.TopicID)
	dst = kbin.AppendInt32(dst, v.NumPartitions)
	return appendTags(dst, &v.UnknownTags)
}

func (v *AddTopicsToMirrorRequestTopic) readFrom(d *decoder) {
	v.Name = d.string()
	v.TopicID = d.uuid()
	v.NumPartitions = d.int32()
	d.tags(&v.UnknownTags, nil)
}

func (*AddTopicsToMirrorResponse) Key() int16                 { return KeyAddTopicsToMirror }
func (*AddTopicsToMirrorResponse) MaxVersion() int16          { return maxVersion(KeyAddTopicsToMirror) }
func (v *AddTopicsToMirrorResponse) SetVersion(version int16) { v.Version = version }
func (v *AddTopicsToMirrorResponse) GetVersion() int16        { return v.Version }
func (*AddTopicsToMirrorResponse) IsFlexible() bool           { return true }
func (v *AddTopicsToMirrorResponse) RequestKind() kmsg.Request {
	return &AddTopicsToMirrorRequest{Version: v.Version}
}
func (v *AddTopicsToMirrorResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *AddTopicsToMirrorResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *AddTopicsToMirrorResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *AddTopicsToMirrorResponse) AppendTo(dst []byte) []byte {
	return appendTopicResults(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage, v.Topics, &v.UnknownTags)
}

func (v *AddTopicsToMirrorResponse) readFrom(d *decoder) {
	d.topicResults(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage, &v.Topics, &v.UnknownTags)
}
