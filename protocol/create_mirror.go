package protocol

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateMirror (v0, flexible; its API key is in apikeys.go) creates a named mirror: the link to
// one source cluster and its mirror-level configuration (bootstrap.servers,
// security, topic and group filters, fetch sizing). Errors:
// MIRROR_ALREADY_EXISTS, INVALID_CONFIG, MIRROR_AUTHORIZATION_FAILED.
//
// RecoverState (tag 0, kmirror's own) asks to rebuild a mirror whose state
// was lost (__mirror_state deleted or replaced behind kmirror's back): the
// mirror is recorded again with the given configs and the destination topics
// kmirror still knows as its mirror topics, which continue from their log
// ends (docs/DESIGN.md, "When __mirror_state is lost"). Clients that do not
// know the tag never send it; a server that does not know it ignores it.

// CreateMirrorRequest creates a mirror.
type CreateMirrorRequest struct {
	Version    int16
	MirrorName string
	Configs    []CreateMirrorRequestConfig
	// RecoverState (tag 0): rebuild the lost state of this mirror.
	RecoverState bool
	UnknownTags  kmsg.Tags
}

// CreateMirrorRequestConfig is one mirror configuration key.
type CreateMirrorRequestConfig struct {
	Name        string
	Value       *string
	UnknownTags kmsg.Tags
}

// CreateMirrorResponse reports whether the mirror was created.
type CreateMirrorResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	UnknownTags    kmsg.Tags
}

func NewPtrCreateMirrorRequest() *CreateMirrorRequest   { return new(CreateMirrorRequest) }
func NewPtrCreateMirrorResponse() *CreateMirrorResponse { return new(CreateMirrorResponse) }

func (*CreateMirrorRequest) Key() int16                 { return KeyCreateMirror }
func (*CreateMirrorRequest) MaxVersion() int16          { return maxVersion(KeyCreateMirror) }
func (v *CreateMirrorRequest) SetVersion(version int16) { v.Version = version }
func (v *CreateMirrorRequest) GetVersion() int16        { return v.Version }
func (*CreateMirrorRequest) IsFlexible() bool           { return true }
func (v *CreateMirrorRequest) ResponseKind() kmsg.Response {
	return &CreateMirrorResponse{Version: v.Version}
}
func (v *CreateMirrorRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *CreateMirrorRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, v.MirrorName)
	dst = appendArray(dst, v.Configs)
	return appendTags(dst, &v.UnknownTags,
		taggedField{0, v.RecoverState, func(dst []byte) []byte { return kbin.AppendBool(dst, true) }})
}

func (v *CreateMirrorRequest) readFrom(d *decoder) {
	v.MirrorName = d.string()
	v.Configs = readArray[CreateMirrorRequestConfig](d)
	d.tags(&v.UnknownTags, func(tag uint32, fd *decoder) bool {
		if tag != 0 {
			return false
		}
		v.RecoverState = fd.bool()
		return true
	})
}

func (v *CreateMirrorRequestConfig) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendNullableString(dst, v.Value)
	return appendTags(dst, &v.UnknownTags)
}

func (v *CreateMirrorRequestConfig) readFrom(d *decoder) {
	v.Name = d.string()
	v.Value = d.nullableString()
	d.tags(&v.UnknownTags, nil)
}

func (*CreateMirrorResponse) Key() int16                 { return KeyCreateMirror }
func (*CreateMirrorResponse) MaxVersion() int16          { return maxVersion(KeyCreateMirror) }
func (v *CreateMirrorResponse) SetVersion(version int16) { v.Version = version }
func (v *CreateMirrorResponse) GetVersion() int16        { return v.Version }
func (*CreateMirrorResponse) IsFlexible() bool           { return true }
func (v *CreateMirrorResponse) RequestKind() kmsg.Request {
	return &CreateMirrorRequest{Version: v.Version}
}
func (v *CreateMirrorResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *CreateMirrorResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *CreateMirrorResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *CreateMirrorResponse) AppendTo(dst []byte) []byte {
	dst = appendResponseHead(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage)
	return appendTags(dst, &v.UnknownTags)
}

func (v *CreateMirrorResponse) readFrom(d *decoder) {
	d.responseHead(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage)
	d.tags(&v.UnknownTags, nil)
}
