package statetopic

import (
	"encoding/base64"
	"fmt"
)

// UUID is a Kafka topic id. It reads and writes as Kafka prints ids (URL-safe
// base64 without padding), so ids in dump-state match kafka-topics output.
type UUID [16]byte

// IsZero reports whether the id is unset.
func (u UUID) IsZero() bool { return u == UUID{} }

func (u UUID) String() string { return base64.RawURLEncoding.EncodeToString(u[:]) }

// ParseUUID parses Kafka's base64 form.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return u, fmt.Errorf("statetopic: %q is not a Kafka topic id", s)
	}
	copy(u[:], b)
	return u, nil
}

func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

func (u *UUID) UnmarshalText(b []byte) error {
	p, err := ParseUUID(string(b))
	if err != nil {
		return err
	}
	*u = p
	return nil
}
