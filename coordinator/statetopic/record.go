// Package statetopic defines the records of the compacted __mirror_state topic
// — mirror configs, mirror topics, mirror partition states, sync records and
// route switches — their
// encoding, which state partition each lands on, and View, the state they add
// up to when replayed in order.
//
// Keys are binary so that compaction sees one canonical byte string per
// entity: int16 key version, int8 record type, then the entity's identity.
// Values are an int16 value version followed by JSON, so `kmirror dump-state`
// and a person reading a segment can follow them and new fields can be added
// without a version bump. A nil value is a tombstone.
package statetopic

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/enumname"
	"github.com/kmirror/kmirror/protocol"
)

// TopicName is the state topic's default name.
const TopicName = "__mirror_state"

// RecordType says which entity a key names.
type RecordType int8

const (
	TypeMirrorConfig   RecordType = 1
	TypeMirrorTopic    RecordType = 2
	TypePartitionState RecordType = 3
	TypeGroupSync      RecordType = 4 // see sync.go
	TypeMirrorSync     RecordType = 5 // see sync.go
	TypeRouteSwitch    RecordType = 6 // see route.go
	TypeRouteAck       RecordType = 7 // see route.go
	TypeRouteRequest   RecordType = 8 // see route.go
)

var recordTypeNames = []string{
	TypeMirrorConfig:   "MirrorConfig",
	TypeMirrorTopic:    "MirrorTopic",
	TypePartitionState: "MirrorPartitionState",
	TypeGroupSync:      "MirrorGroupSync",
	TypeMirrorSync:     "MirrorSync",
	TypeRouteSwitch:    "RouteSwitch",
	TypeRouteAck:       "RouteAck",
	TypeRouteRequest:   "RouteRequest",
}

func (t RecordType) String() string { return enumname.Of(t, "RecordType", recordTypeNames) }

// routeLevel reports whether records of the type belong to a route, not a
// mirror: their key carries the route's name where others carry the mirror's.
func (t RecordType) routeLevel() bool {
	return t == TypeRouteSwitch || t == TypeRouteAck || t == TypeRouteRequest
}

const (
	keyVersion   int16 = 0
	valueVersion int16 = 0
	// maxNameLen bounds names inside keys; Kafka topic names are at most 249
	// bytes and mirror names are validated far below this.
	maxNameLen = 1024
)

// ErrMalformed marks a key or value that cannot be decoded.
var ErrMalformed = errors.New("statetopic: malformed record")

// Key identifies one entity. Which fields are set depends on Type.
type Key struct {
	Type          RecordType
	Mirror        string
	Topic         string    // TypeMirrorTopic
	Group         string    // TypeGroupSync
	SourceTopicID UUID      // TypePartitionState
	Partition     int32     // TypePartitionState
	Route         string    // TypeRouteSwitch, TypeRouteAck, TypeRouteRequest (instead of Mirror)
	Instance      string    // TypeRouteAck
	Step          RouteStep // TypeRouteAck
}

// MirrorConfigKey names a mirror's config record.
func MirrorConfigKey(mirror string) Key { return Key{Type: TypeMirrorConfig, Mirror: mirror} }

// MirrorTopicKey names a mirror topic record.
func MirrorTopicKey(mirror, topic string) Key {
	return Key{Type: TypeMirrorTopic, Mirror: mirror, Topic: topic}
}

// PartitionStateKey names a mirror partition's state record.
func PartitionStateKey(mirror string, sourceTopicID UUID, partition int32) Key {
	return Key{Type: TypePartitionState, Mirror: mirror, SourceTopicID: sourceTopicID, Partition: partition}
}

// AppendTo encodes the key.
func (k Key) AppendTo(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(keyVersion))
	b = append(b, byte(k.Type))
	if k.Type.routeLevel() {
		b = appendString(b, k.Route)
	} else {
		b = appendString(b, k.Mirror)
	}
	switch k.Type {
	case TypeMirrorTopic:
		b = appendString(b, k.Topic)
	case TypeGroupSync:
		b = appendString(b, k.Group)
	case TypePartitionState:
		b = append(b, k.SourceTopicID[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(k.Partition))
	case TypeRouteAck:
		b = appendString(b, k.Instance)
		b = append(b, byte(k.Step))
	}
	return b
}

// Bytes encodes the key into a new slice.
func (k Key) Bytes() []byte { return k.AppendTo(nil) }

// DecodeKey decodes a key written by any version this code knows.
func DecodeKey(b []byte) (Key, error) {
	r := reader{b: b}
	var k Key
	if v := r.int16(); v != keyVersion && r.err == nil {
		return k, fmt.Errorf("%w: key version %d (this kmirror reads version %d; upgrade kmirror)", ErrMalformed, v, keyVersion)
	}
	k.Type = RecordType(r.int8())
	if k.Type.routeLevel() {
		k.Route = r.string()
	} else {
		k.Mirror = r.string()
	}
	switch k.Type {
	case TypeMirrorConfig, TypeMirrorSync, TypeRouteSwitch, TypeRouteRequest:
	case TypeRouteAck:
		k.Instance = r.string()
		k.Step = RouteStep(r.int8())
	case TypeMirrorTopic:
		k.Topic = r.string()
	case TypeGroupSync:
		k.Group = r.string()
	case TypePartitionState:
		copy(k.SourceTopicID[:], r.bytes(16))
		k.Partition = r.int32()
	default:
		if r.err == nil {
			return k, fmt.Errorf("%w: unknown record type %d", ErrMalformed, int8(k.Type))
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes after a %s key", ErrMalformed, len(r.b), k.Type)
	}
	return k, r.err
}

// StatePartition is the state-topic partition of the key: mirror-level records
// hash by mirror name, partition states by (mirror, source topic id,
// partition), spreading one mirror's partitions over all coordinators.
// Route records hash by route name alone, so a route's switch record and its
// acks share a partition (route.go).
// The hash is FNV-1a 32 over the key's identity bytes (not its version), so it
// stays stable across key versions.
func (k Key) StatePartition(numPartitions int32) int32 {
	h := fnv.New32a()
	if k.Type.routeLevel() {
		_, _ = h.Write([]byte(k.Route))
	} else {
		_, _ = h.Write([]byte(k.Mirror))
	}
	if k.Type == TypePartitionState {
		_, _ = h.Write([]byte{0})
		_, _ = h.Write(k.SourceTopicID[:])
		_, _ = h.Write(binary.BigEndian.AppendUint32(nil, uint32(k.Partition)))
	}
	return int32(h.Sum32() % uint32(numPartitions))
}

// MirrorConfig is the value of a TypeMirrorConfig record.
type MirrorConfig struct {
	Configs         map[string]string `json:"configs"`
	CreatedAt       time.Time         `json:"created_at"`
	SourceClusterID string            `json:"source_cluster_id,omitempty"`
	// IncludePatterns and ExcludePatterns, from AddTopicsToMirror, pick up
	// matching source topics, also ones created later.
	IncludePatterns []string `json:"include_patterns,omitempty"`
	ExcludePatterns []string `json:"exclude_patterns,omitempty"`
}

// TopicDesire is what the operator asked for a mirror topic; partition owners
// move each partition's state towards it.
type TopicDesire string

const (
	DesireMirror TopicDesire = "mirror" // copy (AddTopicsToMirror, ResumeMirrorTopics)
	DesirePause  TopicDesire = "pause"  // stop copying, stay read-only (PauseMirrorTopics)
	DesireStop   TopicDesire = "stop"   // fail over: writable (RemoveTopicsFromMirror)
)

// MirrorTopic is the value of a TypeMirrorTopic record.
type MirrorTopic struct {
	SourceTopicID      UUID        `json:"source_topic_id"`
	DestinationTopicID UUID        `json:"destination_topic_id"`
	Desired            TopicDesire `json:"desired_state"`
	Partitions         int32       `json:"partitions"`
	UpdatedAt          time.Time   `json:"updated_at"`
	// Notes lists what happened to the destination topic as a whole, such
	// as a failback that re-created it (invariant 5: never silent).
	Notes []string `json:"notes,omitempty"`
}

// PartitionState is the value of a TypePartitionState record.
type PartitionState struct {
	Topic         string               `json:"topic"`
	State         protocol.MirrorState `json:"state"`
	PreviousState protocol.MirrorState `json:"previous_state"`
	// RetryAttempt counts failed attempts in FAILED; -1 means the failure is
	// not retriable and needs the operator.
	RetryAttempt int16  `json:"retry_attempt"`
	ErrorMessage string `json:"error_message,omitempty"`
	// LastMirroredOffset is the destination log end offset when copying
	// stopped: every source offset below it is on the destination. -1 until
	// the partition has been stopped once.
	LastMirroredOffset int64 `json:"last_mirrored_offset"`
	// WriterProducerID and WriterEpoch identify the fenced writer that wrote
	// this record; a record from an older writer (a zombie owner) is ignored.
	WriterProducerID int64 `json:"writer_producer_id"`
	WriterEpoch      int16 `json:"writer_epoch"`
	// DataWriter is the partition's idempotent data writer: taken once, at
	// the first preparation, and used unchanged by every later owner, so an
	// old owner's late write repeats a new owner's and is deduplicated by
	// the destination (fetcher/copier.go).
	DataWriter *Producer `json:"data_writer,omitempty"`
	UpdatedAt  time.Time `json:"updated_at"`
	// Notes lists documented events that changed what the destination holds,
	// such as source retention overtaking the copy (invariant 5).
	Notes []string `json:"notes,omitempty"`
}

// Producer is a destination producer id and epoch: the data path's writer
// identity, stored as is.
type Producer = datapath.Producer

// EncodeValue encodes a *MirrorConfig, *MirrorTopic, *PartitionState,
// *GroupSync, *MirrorSync, *RouteSwitch, *RouteAck or *RouteRequest.
func EncodeValue(v any) ([]byte, error) {
	switch v.(type) {
	case *MirrorConfig, *MirrorTopic, *PartitionState, *GroupSync, *MirrorSync, *RouteSwitch, *RouteAck, *RouteRequest:
	default:
		return nil, fmt.Errorf("statetopic: cannot encode %T as a state value", v)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("statetopic: encode %T: %w", v, err)
	}
	return append(binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(j)), uint16(valueVersion)), j...), nil
}

// DecodeValue decodes a value of the given record type; nil for a tombstone.
func DecodeValue(t RecordType, b []byte) (any, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %s value of %d bytes", ErrMalformed, t, len(b))
	}
	if v := int16(binary.BigEndian.Uint16(b)); v != valueVersion {
		return nil, fmt.Errorf("%w: %s value version %d (this kmirror reads version %d; upgrade kmirror)", ErrMalformed, t, v, valueVersion)
	}
	var v any
	switch t {
	case TypeMirrorConfig:
		v = new(MirrorConfig)
	case TypeMirrorTopic:
		v = new(MirrorTopic)
	case TypePartitionState:
		v = new(PartitionState)
	case TypeGroupSync:
		v = new(GroupSync)
	case TypeMirrorSync:
		v = new(MirrorSync)
	case TypeRouteSwitch:
		v = new(RouteSwitch)
	case TypeRouteAck:
		v = new(RouteAck)
	case TypeRouteRequest:
		v = new(RouteRequest)
	default:
		return nil, fmt.Errorf("%w: unknown record type %d", ErrMalformed, int8(t))
	}
	if err := json.Unmarshal(b[2:], v); err != nil {
		return nil, fmt.Errorf("%w: %s value: %w", ErrMalformed, t, err)
	}
	return v, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// reader decodes big-endian fields, remembering the first error so callers
// check once.
type reader struct {
	b   []byte
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = fmt.Errorf("%w: need %d bytes, have %d", ErrMalformed, n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) int8() int8 {
	if b := r.bytes(1); b != nil {
		return int8(b[0])
	}
	return 0
}

func (r *reader) int16() int16 {
	if b := r.bytes(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) int32() int32 {
	if b := r.bytes(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *reader) string() string {
	n := int(uint16(r.int16()))
	if r.err == nil && n > maxNameLen {
		r.err = fmt.Errorf("%w: name of %d bytes", ErrMalformed, n)
	}
	return string(r.bytes(n))
}
