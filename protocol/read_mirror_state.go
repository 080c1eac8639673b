package protocol

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ReadMirrorState (v0, flexible; its API key is in apikeys.go) returns the persisted state of
// mirror partitions as the coordinating instance holds it in
// __mirror_state: current and previous state, retry count, last mirrored
// offset and the failure message. Any instance can answer, since every
// instance tails the state topic. Errors per partition:
// UNKNOWN_TOPIC_OR_PARTITION, TOPIC_NOT_IN_MIRROR; top level: UNKNOWN_MIRROR.

// ReadMirrorStateRequest reads partition states.
type ReadMirrorStateRequest struct {
	Version     int16
	MirrorName  string
	Topics      []TopicPartitions
	UnknownTags kmsg.Tags
}

// ReadMirrorStateResponse carries partition states.
type ReadMirrorStateResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Topics         []ReadMirrorStateResponseTopic
	UnknownTags    kmsg.Tags
}

// ReadMirrorStateResponseTopic is one topic of the response.
type ReadMirrorStateResponseTopic struct {
	Name        string
	Partitions  []ReadMirrorStateResponsePartition
	UnknownTags kmsg.Tags
}

// ReadMirrorStateResponsePartition is one partition's persisted state.
type ReadMirrorStateResponsePartition struct {
	Partition          int32
	State              MirrorState // int8 on the wire
	PreviousState      MirrorState // int8 on the wire
	RetryAttempt       int16
	LastMirroredOffset int64 // -1: none recorded
	ErrorCode          int16
	ErrorMessage       *string
	UnknownTags        kmsg.Tags
}

// Default sets both states to UNKNOWN and LastMirroredOffset to -1.
func (v *ReadMirrorStateResponsePartition) Default() {
	*v = ReadMirrorStateResponsePartition{
		State:              MirrorStateUnknown,
		PreviousState:      MirrorStateUnknown,
		LastMirroredOffset: -1,
	}
}

// NewReadMirrorStateResponsePartition returns a partition with defaults set.
func NewReadMirrorStateResponsePartition() ReadMirrorStateResponsePartition {
	var v ReadMirrorStateResponsePartition
	v.Default()
	return v
}

func NewPtrReadMirrorStateRequest() *ReadMirrorStateRequest   { return new(ReadMirrorStateRequest) }
func NewPtrReadMirrorStateResponse() *ReadMirrorStateResponse { return new(ReadMirrorStateResponse) }

func (*ReadMirrorStateRequest) Key() int16                 { return KeyReadMirrorState }
func (*ReadMirrorStateRequest) MaxVersion() int16          { return maxVersion(KeyReadMirrorState) }
func (v *ReadMirrorStateRequest) SetVersion(version int16) { v.Version = version }
func (v *ReadMirrorStateRequest) GetVersion() int16        { return v.Version }
func (*ReadMirrorStateRequest) IsFlexible() bool           { return true }
func (v *ReadMirrorStateRequest) ResponseKind() kmsg.Response {
	return &ReadMirrorStateResponse{Version: v.Version}
}
func (v *ReadMirrorStateRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *ReadMirrorStateRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, v.MirrorName)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags)
}

func (v *ReadMirrorStateRequest) readFrom(d *decoder) {
	v.MirrorName = d.string()
	v.Topics = readArray[TopicPartitions](d)
	d.tags(&v.UnknownTags, nil)
}

func (*ReadMirrorStateResponse) Key() int16                 { return KeyReadMirrorState }
func (*ReadMirrorStateResponse) MaxVersion() int16          { return maxVersion(KeyReadMirrorState) }
func (v *ReadMirrorStateResponse) SetVersion(version int16) { v.Version = version }
func (v *ReadMirrorStateResponse) GetVersion() int16        { return v.Version }
func (*ReadMirrorStateResponse) IsFlexible() bool           { return true }
func (v *ReadMirrorStateResponse) RequestKind() kmsg.Request {
	return &ReadMirrorStateRequest{Version: v.Version}
}
func (v *ReadMirrorStateResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *ReadMirrorStateResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *ReadMirrorStateResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *ReadMirrorStateResponse) AppendTo(dst []byte) []byte {
	dst = appendResponseHead(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags)
}

func (v *ReadMirrorStateResponse) readFrom(d *decoder) {
	d.responseHead(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage)
	v.Topics = readArray[ReadMirrorStateResponseTopic](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *ReadMirrorStateResponseTopic) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendArray(dst, v.Partitions)
	return appendTags(dst, &v.UnknownTags)
}

func (v *ReadMirrorStateResponseTopic) readFrom(d *decoder) {
	v.Name = d.string()
	v.Partitions = readArray[ReadMirrorStateResponsePartition](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *ReadMirrorStateResponsePartition) appendTo(dst []byte) []byte {
	dst = kbin.AppendInt32(dst, v.Partition)
	dst = kbin.AppendInt8(dst, int8(v.State))
	dst = kbin.AppendInt8(dst, int8(v.PreviousState))
	dst = kbin.AppendInt16(dst, v.RetryAttempt)
	dst = kbin.AppendInt64(dst, v.LastMirroredOffset)
	dst = kbin.AppendInt16(dst, v.ErrorCode)
	dst = appendNullableString(dst, v.ErrorMessage)
	return appendTags(dst, &v.UnknownTags)
}

func (v *ReadMirrorStateResponsePartition) readFrom(d *decoder) {
	v.Partition = d.int32()
	v.State = MirrorState(d.int8())
	v.PreviousState = MirrorState(d.int8())
	v.RetryAttempt = d.int16()
	v.LastMirroredOffset = d.int64()
	v.ErrorCode = d.int16()
	v.ErrorMessage = d.nullableString()
	d.tags(&v.UnknownTags, nil)
}
