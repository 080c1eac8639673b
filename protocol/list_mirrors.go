package protocol

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListMirrors (v0, flexible; its API key is in apikeys.go) lists every mirror with its source
// cluster and topic count; topic names only on request, since a mirror
// can hold thousands. Mirrors the caller may not describe are left out
// rather than failing the whole list.

// ListMirrorsRequest lists mirrors.
type ListMirrorsRequest struct {
	Version           int16
	IncludeTopicNames bool
	UnknownTags       kmsg.Tags
}

// ListMirrorsResponse lists mirrors.
type ListMirrorsResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Mirrors        []ListMirrorsResponseMirror
	UnknownTags    kmsg.Tags
}

// ListMirrorsResponseMirror is one mirror.
type ListMirrorsResponseMirror struct {
	Name            string
	SourceBootstrap string
	SourceClusterID string
	TopicCount      int32
	TopicNames      []string // only if IncludeTopicNames was set
	UnknownTags     kmsg.Tags
}

func NewPtrListMirrorsRequest() *ListMirrorsRequest   { return new(ListMirrorsRequest) }
func NewPtrListMirrorsResponse() *ListMirrorsResponse { return new(ListMirrorsResponse) }

func (*ListMirrorsRequest) Key() int16                 { return KeyListMirrors }
func (*ListMirrorsRequest) MaxVersion() int16          { return maxVersion(KeyListMirrors) }
func (v *ListMirrorsRequest) SetVersion(version int16) { v.Version = version }
func (v *ListMirrorsRequest) GetVersion() int16        { return v.Version }
func (*ListMirrorsRequest) IsFlexible() bool           { return true }
func (v *ListMirrorsRequest) ResponseKind() kmsg.Response {
	return &ListMirrorsResponse{Version: v.Version}
}
func (v *ListMirrorsRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *ListMirrorsRequest) AppendTo(dst []byte) []byte {
	dst = kbin.AppendBool(dst, v.IncludeTopicNames)
	return appendTags(dst, &v.UnknownTags)
}

func (v *ListMirrorsRequest) readFrom(d *decoder) {
	v.IncludeTopicNames = d.bool()
	d.tags(&v.UnknownTags, nil)
}

func (*ListMirrorsResponse) Key() int16                 { return KeyListMirrors }
func (*ListMirrorsResponse) MaxVersion() int16          { return maxVersion(KeyListMirrors) }
func (v *ListMirrorsResponse) SetVersion(version int16) { v.Version = version }
func (v *ListMirrorsResponse) GetVersion() int16        { return v.Version }
func (*ListMirrorsResponse) IsFlexible() bool           { return true }
func (v *ListMirrorsResponse) RequestKind() kmsg.Request {
	return &ListMirrorsRequest{Version: v.Version}
}
func (v *ListMirrorsResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *ListMirrorsResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *ListMirrorsResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *ListMirrorsResponse) AppendTo(dst []byte) []byte {
	dst = appendResponseHead(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage)
	dst = appendArray(dst, v.Mirrors)
	return appendTags(dst, &v.UnknownTags)
}

func (v *ListMirrorsResponse) readFrom(d *decoder) {
	d.responseHead(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage)
	v.Mirrors = readArray[ListMirrorsResponseMirror](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *ListMirrorsResponseMirror) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendString(dst, v.SourceBootstrap)
	dst = appendString(dst, v.SourceClusterID)
	dst = kbin.AppendInt32(dst, v.TopicCount)
	dst = appendStrings(dst, v.TopicNames)
	return appendTags(dst, &v.UnknownTags)
}

func (v *ListMirrorsResponseMirror) readFrom(d *decoder) {
	v.Name = d.string()
	v.SourceBootstrap = d.string()
	v.SourceClusterID = d.string()
	v.TopicCount = d.int32()
	v.TopicNames = d.strings()
	d.tags(&v.UnknownTags, nil)
}
