package protocol

import "github.com/twmb/franz-go/pkg/kmsg"

// DeleteMirror (v0, flexible; its API key is in apikeys.go) deletes a mirror whose topics are
// all STOPPED, tombstoning its records in __mirror_state. The topics
// themselves stay on the destination as ordinary writable topics. Errors:
// UNKNOWN_MIRROR, MIRROR_NOT_EMPTY, MIRROR_AUTHORIZATION_FAILED.

// DeleteMirrorRequest deletes a mirror.
type DeleteMirrorRequest struct {
	Version     int16
	MirrorName  string
	UnknownTags kmsg.Tags
}

// DeleteMirrorResponse reports whether the mirror was deleted.
type DeleteMirrorResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	UnknownTags    kmsg.Tags
}

func NewPtrDeleteMirrorRequest() *DeleteMirrorRequest   { return new(DeleteMirrorRequest) }
func NewPtrDeleteMirrorResponse() *DeleteMirrorResponse { return new(DeleteMirrorResponse) }

func (*DeleteMirrorRequest) Key() int16                 { return KeyDeleteMirror }
func (*DeleteMirrorRequest) MaxVersion() int16          { return maxVersion(KeyDeleteMirror) }
func (v *DeleteMirrorRequest) SetVersion(version int16) { v.Version = version }
func (v *DeleteMirrorRequest) GetVersion() int16        { return v.Version }
func (*DeleteMirrorRequest) IsFlexible() bool           { return true }
func (v *DeleteMirrorRequest) ResponseKind() kmsg.Response {
	return &DeleteMirrorResponse{Version: v.Version}
}
func (v *DeleteMirrorRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *DeleteMirrorRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, v.MirrorName)
	return appendTags(dst, &v.UnknownTags)
}

func (v *DeleteMirrorRequest) readFrom(d *decoder) {
	v.MirrorName = d.string()
	d.tags(&v.UnknownTags, nil)
}

func (*DeleteMirrorResponse) Key() int16                 { return KeyDeleteMirror }
func (*DeleteMirrorResponse) MaxVersion() int16          { return maxVersion(KeyDeleteMirror) }
func (v *DeleteMirrorResponse) SetVersion(version int16) { v.Version = version }
func (v *DeleteMirrorResponse) GetVersion() int16        { return v.Version }
func (*DeleteMirrorResponse) IsFlexible() bool           { return true }
func (v *DeleteMirrorResponse) RequestKind() kmsg.Request {
	return &DeleteMirrorRequest{Version: v.Version}
}
func (v *DeleteMirrorResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *DeleteMirrorResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *DeleteMirrorResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *DeleteMirrorResponse) AppendTo(dst []byte) []byte {
	dst = appendResponseHead(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage)
	return appendTags(dst, &v.UnknownTags)
}

func (v *DeleteMirrorResponse) readFrom(d *decoder) {
	d.responseHead(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage)
	d.tags(&v.UnknownTags, nil)
}
