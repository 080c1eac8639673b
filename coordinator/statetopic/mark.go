package statetopic

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// MarksTopicName is the default name of the marks topic: a small compacted
// topic on the destination, next to __mirror_state, that survives the loss
// of __mirror_state (docs/DESIGN.md, "When __mirror_state is lost").
//
// A mark says "this destination topic is a read-only mirror topic of this
// mirror, copied from this source topic, as recorded in the state topic with
// this topic id". Marks written against a state topic id that is not the
// current one belong to state that was lost: their topics stay read-only and
// the mirror is reported lost until the operator recovers it.
const MarksTopicName = "__mirror_state_marks"

// Mark is the value of a marks-topic record; its key is the MirrorTopicKey
// of the mirror topic it marks.
type Mark struct {
	SourceTopicID   UUID      `json:"source_topic_id"`
	SourceClusterID string    `json:"source_cluster_id,omitempty"`
	StateTopicID    UUID      `json:"state_topic_id"`
	MarkedAt        time.Time `json:"marked_at"`
}

// EncodeMark encodes a mark value: int16 version, then JSON, like the state
// values.
func EncodeMark(m *Mark) ([]byte, error) {
	j, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("statetopic: encode mark: %w", err)
	}
	return append(binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(j)), uint16(valueVersion)), j...), nil
}

// DecodeMark decodes a marks-topic record; a nil mark is a tombstone.
func DecodeMark(key, value []byte) (mirror, topic string, m *Mark, err error) {
	k, err := DecodeKey(key)
	if err != nil {
		return "", "", nil, err
	}
	if k.Type != TypeMirrorTopic {
		return "", "", nil, fmt.Errorf("%w: a mark's key names a %s, not a MirrorTopic", ErrMalformed, k.Type)
	}
	if value == nil {
		return k.Mirror, k.Topic, nil, nil
	}
	if len(value) < 2 {
		return "", "", nil, fmt.Errorf("%w: mark value of %d bytes", ErrMalformed, len(value))
	}
	if v := int16(binary.BigEndian.Uint16(value)); v != valueVersion {
		return "", "", nil, fmt.Errorf("%w: mark value version %d (this kmirror reads version %d; upgrade kmirror)", ErrMalformed, v, valueVersion)
	}
	m = new(Mark)
	if err := json.Unmarshal(value[2:], m); err != nil {
		return "", "", nil, fmt.Errorf("%w: mark value: %w", ErrMalformed, err)
	}
	if m.StateTopicID.IsZero() {
		return "", "", nil, fmt.Errorf("%w: mark of %s/%s names no state topic id", ErrMalformed, k.Mirror, k.Topic)
	}
	return k.Mirror, k.Topic, m, nil
}
