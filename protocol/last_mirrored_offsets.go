package protocol

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LastMirroredOffsets (v0, flexible; its API key is in apikeys.go) is asked by a cluster that is
// about to mirror back from its former destination (failback): for each
// partition, the last offset the mirror copied into ClusterID before it was
// stopped. A log that diverged past that offset must be re-mirrored from
// scratch. -1 means unknown. Errors per partition:
// UNKNOWN_TOPIC_OR_PARTITION, TOPIC_NOT_IN_MIRROR; top level: UNKNOWN_MIRROR.

// LastMirroredOffsetsRequest asks for last mirrored offsets.
type LastMirroredOffsetsRequest struct {
	Version     int16
	MirrorName  string
	ClusterID   string // the asking cluster
	Topics      []TopicPartitions
	UnknownTags kmsg.Tags
}

// LastMirroredOffsetsResponse carries an offset per partition.
type LastMirroredOffsetsResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Topics         []LastMirroredOffsetsResponseTopic
	UnknownTags    kmsg.Tags
}

// LastMirroredOffsetsResponseTopic is one topic of the response.
type LastMirroredOffsetsResponseTopic struct {
	Name        string
	Partitions  []LastMirroredOffsetsResponsePartition
	UnknownTags kmsg.Tags
}

// LastMirroredOffsetsResponsePartition is one partition's offset.
type LastMirroredOffsetsResponsePartition struct {
	Partition          int32
	LastMirroredOffset int64 // -1: unknown
	ErrorCode          int16
	UnknownTags        kmsg.Tags
}

// Default sets LastMirroredOffset to -1 (unknown).
func (v *LastMirroredOffsetsResponsePartition) Default() {
	*v = LastMirroredOffsetsResponsePartition{LastMirroredOffset: -1}
}

// NewLastMirroredOffsetsResponsePartition returns a partition with defaults set.
func NewLastMirroredOffsetsResponsePartition() LastMirroredOffsetsResponsePartition {
	var v LastMirroredOffsetsResponsePartition
	v.Default()
	return v
}

func NewPtrLastMirroredOffsetsRequest() *LastMirroredOffsetsRequest {
	return new(LastMirroredOffsetsRequest)
}

func NewPtrLastMirroredOffsetsResponse() *LastMirroredOffsetsResponse {
	return new(LastMirroredOffsetsResponse)
}

func (*LastMirroredOffsetsRequest) Key() int16                 { return KeyLastMirroredOffsets }
func (*LastMirroredOffsetsRequest) MaxVersion() int16          { return maxVersion(KeyLastMirroredOffsets) }
func (v *LastMirroredOffsetsRequest) SetVersion(version int16) { v.Version = version }
func (v *LastMirroredOffsetsRequest) GetVersion() int16        { return v.Version }
func (*LastMirroredOffsetsRequest) IsFlexible() bool           { return true }
func (v *LastMirroredOffsetsRequest) ResponseKind() kmsg.Response {
	return &LastMirroredOffsetsResponse{Version: v.Version}
}
func (v *LastMirroredOffsetsRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *LastMirroredOffsetsRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, v.MirrorName)
	dst = appendString(dst, v.ClusterID)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags)
}

func (v *LastMirroredOffsetsRequest) readFrom(d *decoder) {
	v.MirrorName = d.string()
	v.ClusterID = d.string()
	v.Topics = readArray[TopicPartitions](d)
	d.tags(&v.UnknownTags, nil)
}

func (*LastMirroredOffsetsResponse) Key() int16                 { return KeyLastMirroredOffsets }
func (*LastMirroredOffsetsResponse) MaxVersion() int16          { return maxVersion(KeyLastMirroredOffsets) }
func (v *LastMirroredOffsetsResponse) SetVersion(version int16) { v.Version = version }
func (v *LastMirroredOffsetsResponse) GetVersion() int16        { return v.Version }
func (*LastMirroredOffsetsResponse) IsFlexible() bool           { return true }
func (v *LastMirroredOffsetsResponse) RequestKind() kmsg.Request {
	return &LastMirroredOffsetsRequest{Version: v.Version}
}
func (v *LastMirroredOffsetsResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *LastMirroredOffsetsResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *LastMirroredOffsetsResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *LastMirroredOffsetsResponse) AppendTo(dst []byte) []byte {
	dst = appendResponseHead(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags)
}

func (v *LastMirroredOffsetsResponse) readFrom(d *decoder) {
	d.responseHead(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage)
	v.Topics = readArray[LastMirroredOffsetsResponseTopic](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *LastMirroredOffsetsResponseTopic) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendArray(dst, v.Partitions)
	return appendTags(dst, &v.UnknownTags)
}

func (v *LastMirroredOffsetsResponseTopic) readFrom(d *decoder) {
	v.Name = d.string()
	v.Partitions = readArray[LastMirroredOffsetsResponsePartition](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *LastMirroredOffsetsResponsePartition) appendTo(dst []byte) []byte {
	dst = kbin.AppendInt32(dst, v.Partition)
	dst = kbin.AppendInt64(dst, v.LastMirroredOffset)
	dst = kbin.AppendInt16(dst, v.ErrorCode)
	return appendTags(dst, &v.UnknownTags)
}

func (v *LastMirroredOffsetsResponsePartition) readFrom(d *decoder) {
	v.Partition = d.int32()
	v.LastMirroredOffset = d.int64()
	v.ErrorCode = d.int16()
	d.tags(&v.UnknownTags, nil)
}
