package protocol

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeMirrors (v0, flexible; its API key is in apikeys.go) reports every partition of the
// named mirrors (all mirrors if MirrorNames is empty): its state, both high
// watermarks, the lag between them and the last mirrored offset. This is
// what `kmirror mirrors --describe` prints. A name that does not exist gets
// UNKNOWN_MIRROR on its own entry; the others are still described.
//
// Each mirror also carries, as tagged fields so that clients decoding the
// original v0 still decode it, what its sync jobs achieved: Groups (tag 0),
// the consumer groups whose offsets it copies, and Syncs (tag 1), the jobs
// (topics, groups, topic-configs, acls). Ages are milliseconds before the
// answering instance's clock, -1 for never, so the client's clock does not
// matter.
//
// Each partition carries, as tagged fields too, what a failover right now
// would lose (its recovery point): RecordsAtRisk (tag 0), the source high
// watermark minus the destination log end, and AtRiskAgeMs (tag 1), the age
// of the oldest of those records by its own timestamp. Both are -1 where
// unknown or where the partition already fails over (STOPPING, STOPPED), and
// -1 is also what a client reads from a server that predates them: absent
// must never read as "nothing at risk". AtRisk sums them per topic and
// mirror, so every client totals them the same way.

// DescribeMirrorsRequest describes mirrors.
type DescribeMirrorsRequest struct {
	Version     int16
	MirrorNames []string // empty: all mirrors
	UnknownTags kmsg.Tags
}

// DescribeMirrorsResponse describes mirrors.
type DescribeMirrorsResponse struct {
	Version        int16
	ThrottleMillis int32
	ErrorCode      int16
	ErrorMessage   *string
	Mirrors        []DescribeMirrorsResponseMirror
	UnknownTags    kmsg.Tags
}

// DescribeMirrorsResponseMirror is one mirror.
type DescribeMirrorsResponseMirror struct {
	Name         string
	ErrorCode    int16
	ErrorMessage *string
	Topics       []DescribeMirrorsResponseTopic
	Groups       []DescribeMirrorsResponseGroup // tag 0
	Syncs        []DescribeMirrorsResponseSync  // tag 1
	// Clusters (tag 2) is what kmirror found of the source and destination clusters: their
	// Apache Kafka releases and the mode they are mirrored in (docs/versions.md).
	Clusters    *string
	UnknownTags kmsg.Tags
}

// DescribeMirrorsResponseGroup is one consumer group whose offsets the
// mirror copies.
type DescribeMirrorsResponseGroup struct {
	Name          string
	State         string // SYNCED, ACTIVE, IDLE or FAILED
	LastSyncAgeMs int64  // since the group was last known in sync; -1 never
	Partitions    int32  // partitions kept in sync
	Message       *string
	UnknownTags   kmsg.Tags
}

// DescribeMirrorsResponseSync is one sync job of the mirror.
type DescribeMirrorsResponseSync struct {
	Job              string  // topics, groups, topic-configs, acls
	LastSuccessAgeMs int64   // since the job last completed without error; -1 never
	LastRunAgeMs     int64   // since it last ran; -1 never
	ErrorMessage     *string // why the last run failed
	Message          *string // what the last run did
	UnknownTags      kmsg.Tags
}

// DescribeMirrorsResponseTopic is one topic of a mirror.
type DescribeMirrorsResponseTopic struct {
	Name        string
	Partitions  []DescribeMirrorsResponsePartition
	UnknownTags kmsg.Tags
}

// DescribeMirrorsResponsePartition is one partition of a mirror topic.
// Offsets are -1 where unknown (e.g. the source is unreachable).
type DescribeMirrorsResponsePartition struct {
	Partition                int32
	State                    string // MirrorState.String()
	SourceHighWatermark      int64
	DestinationHighWatermark int64
	Lag                      int64
	LastMirroredOffset       int64
	RetryAttempt             int16
	ErrorMessage             *string // why the partition FAILED, if it did
	// RecordsAtRisk (tag 0) is how many source offsets a failover right now
	// would lose: source high watermark minus destination log end, 0 when
	// caught up; -1 unknown or failing over already.
	RecordsAtRisk int64
	// AtRiskAgeMs (tag 1) is the age, on the answering instance's clock, of
	// the oldest record at risk (the source record at the destination log
	// end), by the record's own timestamp; 0 when nothing is at risk, -1
	// unknown or failing over already.
	AtRiskAgeMs int64
	UnknownTags kmsg.Tags
}

// Default sets the state to UNKNOWN and every offset and figure to -1
// (unknown).
func (v *DescribeMirrorsResponsePartition) Default() {
	*v = DescribeMirrorsResponsePartition{
		State:                    MirrorStateUnknown.String(),
		SourceHighWatermark:      -1,
		DestinationHighWatermark: -1,
		Lag:                      -1,
		LastMirroredOffset:       -1,
		RecordsAtRisk:            -1,
		AtRiskAgeMs:              -1,
	}
}

// smallest leaves the recovery point fields at their default (-1), which is
// not written: the zero value would write both tags.
func (v *DescribeMirrorsResponsePartition) smallest() { v.RecordsAtRisk, v.AtRiskAgeMs = -1, -1 }

// FailingOver reports whether the partition's failover has begun (STOPPING
// or STOPPED): nothing more is at risk from a failover, it is under way.
func (v *DescribeMirrorsResponsePartition) FailingOver() bool {
	return v.State == MirrorStateStopping.String() || v.State == MirrorStateStopped.String()
}

// AtRisk totals what a failover right now would lose over partitions: the
// records summed, the oldest age the largest. Partitions already failing
// over are not counted; those whose figures are unknown are counted in
// Unknown, which makes the totals a lower bound.
type AtRisk struct {
	Records    int64 // sum of the known RecordsAtRisk
	AgeMs      int64 // largest known AtRiskAgeMs; 0 when nothing is at risk
	Partitions int   // partitions counted (not failing over)
	Behind     int   // partitions with records at risk
	Unknown    int   // partitions counted whose figures are unknown
	FailedOver int   // partitions not counted: STOPPING or STOPPED
}

// Add counts one partition.
func (r *AtRisk) Add(p *DescribeMirrorsResponsePartition) {
	if p.FailingOver() {
		r.FailedOver++
		return
	}
	r.Partitions++
	if p.RecordsAtRisk < 0 || (p.RecordsAtRisk > 0 && p.AtRiskAgeMs < 0) {
		r.Unknown++
	}
	if p.RecordsAtRisk > 0 {
		r.Behind++
		r.Records += p.RecordsAtRisk
	}
	r.AgeMs = max(r.AgeMs, p.AtRiskAgeMs)
}

// Merge adds another total.
func (r *AtRisk) Merge(o AtRisk) {
	r.Records += o.Records
	r.AgeMs = max(r.AgeMs, o.AgeMs)
	r.Partitions += o.Partitions
	r.Behind += o.Behind
	r.Unknown += o.Unknown
	r.FailedOver += o.FailedOver
}

// AtRisk totals the topic's partitions.
func (v *DescribeMirrorsResponseTopic) AtRisk() AtRisk {
	var r AtRisk
	for i := range v.Partitions {
		r.Add(&v.Partitions[i])
	}
	return r
}

// AtRisk totals the mirror's topics.
func (v *DescribeMirrorsResponseMirror) AtRisk() AtRisk {
	var r AtRisk
	for i := range v.Topics {
		r.Merge(v.Topics[i].AtRisk())
	}
	return r
}

// NewDescribeMirrorsResponsePartition returns a partition with defaults set.
func NewDescribeMirrorsResponsePartition() DescribeMirrorsResponsePartition {
	var v DescribeMirrorsResponsePartition
	v.Default()
	return v
}

func NewPtrDescribeMirrorsRequest() *DescribeMirrorsRequest   { return new(DescribeMirrorsRequest) }
func NewPtrDescribeMirrorsResponse() *DescribeMirrorsResponse { return new(DescribeMirrorsResponse) }

func (*DescribeMirrorsRequest) Key() int16                 { return KeyDescribeMirrors }
func (*DescribeMirrorsRequest) MaxVersion() int16          { return maxVersion(KeyDescribeMirrors) }
func (v *DescribeMirrorsRequest) SetVersion(version int16) { v.Version = version }
func (v *DescribeMirrorsRequest) GetVersion() int16        { return v.Version }
func (*DescribeMirrorsRequest) IsFlexible() bool           { return true }
func (v *DescribeMirrorsRequest) ResponseKind() kmsg.Response {
	return &DescribeMirrorsResponse{Version: v.Version}
}
func (v *DescribeMirrorsRequest) ReadFrom(src []byte) error { return readMessage(v, src) }

func (v *DescribeMirrorsRequest) AppendTo(dst []byte) []byte {
	dst = appendStrings(dst, v.MirrorNames)
	return appendTags(dst, &v.UnknownTags)
}

func (v *DescribeMirrorsRequest) readFrom(d *decoder) {
	v.MirrorNames = d.strings()
	d.tags(&v.UnknownTags, nil)
}

func (*DescribeMirrorsResponse) Key() int16                 { return KeyDescribeMirrors }
func (*DescribeMirrorsResponse) MaxVersion() int16          { return maxVersion(KeyDescribeMirrors) }
func (v *DescribeMirrorsResponse) SetVersion(version int16) { v.Version = version }
func (v *DescribeMirrorsResponse) GetVersion() int16        { return v.Version }
func (*DescribeMirrorsResponse) IsFlexible() bool           { return true }
func (v *DescribeMirrorsResponse) RequestKind() kmsg.Request {
	return &DescribeMirrorsRequest{Version: v.Version}
}
func (v *DescribeMirrorsResponse) ReadFrom(src []byte) error { return readMessage(v, src) }
func (v *DescribeMirrorsResponse) Throttle() (int32, bool)   { return v.ThrottleMillis, true }
func (v *DescribeMirrorsResponse) SetThrottle(millis int32)  { v.ThrottleMillis = millis }

func (v *DescribeMirrorsResponse) AppendTo(dst []byte) []byte {
	dst = appendResponseHead(dst, v.ThrottleMillis, v.ErrorCode, v.ErrorMessage)
	dst = appendArray(dst, v.Mirrors)
	return appendTags(dst, &v.UnknownTags)
}

func (v *DescribeMirrorsResponse) readFrom(d *decoder) {
	d.responseHead(&v.ThrottleMillis, &v.ErrorCode, &v.ErrorMessage)
	v.Mirrors = readArray[DescribeMirrorsResponseMirror](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *DescribeMirrorsResponseMirror) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = kbin.AppendInt16(dst, v.ErrorCode)
	dst = appendNullableString(dst, v.ErrorMessage)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags,
		taggedField{0, len(v.Groups) > 0, func(dst []byte) []byte { return appendArray(dst, v.Groups) }},
		taggedField{1, len(v.Syncs) > 0, func(dst []byte) []byte { return appendArray(dst, v.Syncs) }},
		taggedField{2, v.Clusters != nil, func(dst []byte) []byte { return appendNullableString(dst, v.Clusters) }},
	)
}

func (v *DescribeMirrorsResponseMirror) readFrom(d *decoder) {
	v.Name = d.string()
	v.ErrorCode = d.int16()
	v.ErrorMessage = d.nullableString()
	v.Topics = readArray[DescribeMirrorsResponseTopic](d)
	d.tags(&v.UnknownTags, func(tag uint32, fd *decoder) bool {
		switch tag {
		case 0:
			v.Groups = readArray[DescribeMirrorsResponseGroup](fd)
		case 1:
			v.Syncs = readArray[DescribeMirrorsResponseSync](fd)
		case 2:
			v.Clusters = fd.nullableString()
		default:
			return false
		}
		return true
	})
}

func (v *DescribeMirrorsResponseGroup) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendString(dst, v.State)
	dst = kbin.AppendInt64(dst, v.LastSyncAgeMs)
	dst = kbin.AppendInt32(dst, v.Partitions)
	dst = appendNullableString(dst, v.Message)
	return appendTags(dst, &v.UnknownTags)
}

func (v *DescribeMirrorsResponseGroup) readFrom(d *decoder) {
	v.Name = d.string()
	v.State = d.string()
	v.LastSyncAgeMs = d.int64()
	v.Partitions = d.int32()
	v.Message = d.nullableString()
	d.tags(&v.UnknownTags, nil)
}

func (v *DescribeMirrorsResponseSync) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Job)
	dst = kbin.AppendInt64(dst, v.LastSuccessAgeMs)
	dst = kbin.AppendInt64(dst, v.LastRunAgeMs)
	dst = appendNullableString(dst, v.ErrorMessage)
	dst = appendNullableString(dst, v.Message)
	return appendTags(dst, &v.UnknownTags)
}

func (v *DescribeMirrorsResponseSync) readFrom(d *decoder) {
	v.Job = d.string()
	v.LastSuccessAgeMs = d.int64()
	v.LastRunAgeMs = d.int64()
	v.ErrorMessage = d.nullableString()
	v.Message = d.nullableString()
	d.tags(&v.UnknownTags, nil)
}

func (v *DescribeMirrorsResponseTopic) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendArray(dst, v.Partitions)
	return appendTags(dst, &v.UnknownTags)
}

func (v *DescribeMirrorsResponseTopic) readFrom(d *decoder) {
	v.Name = d.string()
	v.Partitions = readArray[DescribeMirrorsResponsePartition](d)
	d.tags(&v.UnknownTags, nil)
}

func (v *DescribeMirrorsResponsePartition) appendTo(dst []byte) []byte {
	dst = kbin.AppendInt32(dst, v.Partition)
	dst = appendString(dst, v.State)
	dst = kbin.AppendInt64(dst, v.SourceHighWatermark)
	dst = kbin.AppendInt64(dst, v.DestinationHighWatermark)
	dst = kbin.AppendInt64(dst, v.Lag)
	dst = kbin.AppendInt64(dst, v.LastMirroredOffset)
	dst = kbin.AppendInt16(dst, v.RetryAttempt)
	dst = appendNullableString(dst, v.ErrorMessage)
	// -1 is the default, left out as Kafka leaves out defaults; 0 is
	// written, so "nothing at risk" is always said explicitly.
	return appendTags(dst, &v.UnknownTags,
		taggedField{0, v.RecordsAtRisk != -1, func(dst []byte) []byte { return kbin.AppendInt64(dst, v.RecordsAtRisk) }},
		taggedField{1, v.AtRiskAgeMs != -1, func(dst []byte) []byte { return kbin.AppendInt64(dst, v.AtRiskAgeMs) }},
	)
}

func (v *DescribeMirrorsResponsePartition) readFrom(d *decoder) {
	v.Partition = d.int32()
	v.State = d.string()
	v.SourceHighWatermark = d.int64()
	v.DestinationHighWatermark = d.int64()
	v.Lag = d.int64()
	v.LastMirroredOffset = d.int64()
	v.RetryAttempt = d.int16()
	v.ErrorMessage = d.nullableString()
	v.RecordsAtRisk, v.AtRiskAgeMs = -1, -1
	d.tags(&v.UnknownTags, func(tag uint32, fd *decoder) bool {
		switch tag {
		case 0:
			v.RecordsAtRisk = fd.int64()
		case 1:
			v.AtRiskAgeMs = fd.int64()
		default:
			return false
		}
		return true
	})
}
