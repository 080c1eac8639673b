package protocol

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// WriteMirrorState (v0, flexible; its API key is in apikeys.go) asks the instance that
// coordinates a mirror partition to persist a new state for it. It exists
// for instance-to-instance use only, when a non-owner must change a state
// (e.g. an admin RPC served by another instance); the owner validates the
// transition. Errors per partition: INVALID_MIRROR_STATE, NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE; top level: UNKNOWN_MIRROR.

// WriteMirrorStateRequest writes partition states.
type WriteMirrorStateRequest struct {
	Version     int16
	MirrorName  string
	Topics      []WriteMirrorStateRequestTopic
	UnknownTags kmsg.Tags
}

// WriteMirrorStateRequestTopic is one topic of the request.
type WriteMirrorStateRequestTopic struct {
	Name        string
	Partitions  []WriteMirrorStateRequestPartition
	UnknownTags kmsg.Tags
}

// WriteMirrorStateRequestPartition is the state to persist for one
// partition.
type WriteMirrorStateRequestPartition struct {
	Partition          int32
	State              MirrorState // int8 on the wire
	LastMirroredOffset int64       // -1: none recorded
	UnknownTags        kmsg.Tags
}

// Default sets State to UNKNOWN and LastMirroredOffset to -1.
func (v *WriteMirrorStateRequestPartition) Default() {
	*v = WriteMirrorStateRequestPartition{State: MirrorStateUnknown, LastMirroredOffset: -1}
}

// NewWriteMirrorStateRequestPartition returns a partition with defaults set.
func NewWriteMirrorStateRequestPartition() WriteMirrorStateRequestPartition {
	var v WriteMirrorStateRequestPartition
	v.Default()
	return v
}

// WriteMirrorStateResponse reports the outcome per partition.
type WriteMirrorStateResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Topics         []WriteMirrorStateResponseTopic
	UnknownTags    kmsg.Tags
}

// WriteMirrorStateResponseTopic is one topic of the response.
type WriteMirrorStateResponseTopic struct {
	Name        string
	Partitions  []WriteMirrorStateResponsePartition
	UnknownTags kmsg.Tags
}

// WriteMirrorStateResponsePartition is one partition's outcome.
type WriteMirrorStateResponsePartition struct {
	Partition   int32
	ErrorCode   int16
	UnknownTags kmsg.Tags
}

func NewPtrWriteMirrorStateRequest() *WriteMirrorStateRequest   { return new(WriteMirrorStateRequest) }
func NewPtrWriteMirrorStateResponse() *WriteMirrorStateResponse { return new(WriteMirrorStateResponse) }

func (*WriteMirrorStateRequest) Key() int16                 { return KeyWriteMirrorState }
func (*WriteMirrorStateRequest) MaxVersion() int16          { return maxVersion(KeyWriteMirrorState) }
func (v *WriteMirrorStateRequest) SetVersion(version int16) { v.Version = version }
func (v *WriteMirrorStateRequest) GetVersion() int16        { return v.Version }
func (*WriteMirrorStateRequest) IsFlexible() bool           { return true }
func (v *WriteMirrorStateRequest) ResponseKind() kmsg.Response {
	return &WriteMirrorStateResponse{Version: v.Version}
}
func (v *WriteMirrorStateRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *WriteMirrorStateRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, v.MirrorName)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags)
}

func (v *WriteMirrorStateRequest) readFrom(d *decoder) {
	v.MirrorName = d.string()
	v.Topics = readArray[WriteMirrorStateRequestTopic](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *WriteMirrorStateRequestTopic) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendArray(dst, v.Partitions)
	return appendTags(dst, &v.UnknownTags)
}

func (v *WriteMirrorStateRequestTopic) readFrom(d *decoder) {
	v.Name = d.string()
	v.Partitions = readArray[WriteMirrorStateRequestPartition](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *WriteMirrorStateRequestPartition) appendTo(dst []byte) []byte {
	dst = kbin.AppendInt32(dst, v.Partition)
	dst = kbin.AppendInt8(dst, int8(v.State))
	dst = kbin.AppendInt64(dst, v.LastMirroredOffset)
	return appendTags(dst, &v.UnknownTags)
}

func (v *WriteMirrorStateRequestPartition) readFrom(d *decoder) {
	v.Partition = d.int32()
	v.State = MirrorState(d.int8())
	v.LastMirroredOffset = d.int64()
	d.tags(&v.UnknownTags, nil)
}

func (*WriteMirrorStateResponse) Key() int16                 { return KeyWriteMirrorState }
func (*WriteMirrorStateResponse) MaxVersion() int16          { return maxVersion(KeyWriteMirrorState) }
func (v *WriteMirrorStateResponse) SetVersion(version int16) { v.Version = version }
func (v *WriteMirrorStateResponse) GetVersion() int16        { return v.Version }
func (*WriteMirrorStateResponse) IsFlexible() bool           { return true }
func (v *WriteMirrorStateResponse) RequestKind() kmsg.Request {
	return &WriteMirrorStateRequest{Version: v.Version}
}
func (v *WriteMirrorStateResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *WriteMirrorStateResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *WriteMirrorStateResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *WriteMirrorStateResponse) AppendTo(dst []byte) []byte {
	dst = appendResponseHead(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags)
}

func (v *WriteMirrorStateResponse) readFrom(d *decoder) {
	d.responseHead(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage)
	v.Topics = readArray[WriteMirrorStateResponseTopic](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *WriteMirrorStateResponseTopic) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendArray(dst, v.Partitions)
	return appendTags(dst, &v.UnknownTags)
}

func (v *WriteMirrorStateResponseTopic) readFrom(d *decoder) {
	v.Name = d.string()
	v.Partitions = readArray[WriteMirrorStateResponsePartition](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *WriteMirrorStateResponsePartition) appendTo(dst []byte) []byte {
	dst = kbin.AppendInt32(dst, v.Partition)
	dst = kbin.AppendInt16(dst, v.ErrorCode)
	return appendTags(dst, &v.UnknownTags)
}

func (v *WriteMirrorStateResponsePartition) readFrom(d *decoder) {
	v.Partition = d.int32()
	v.ErrorCode = d.int16()
	d.tags(&v.UnknownTags, nil)
}
