package protocol

import (
	"fmt"
	"strings"
)

// MirrorState is the state of one mirror partition: int8 on the wire
// (ReadMirrorState, WriteMirrorState) and in __mirror_state, and its String
// form in DescribeMirrors and the CLI.
type MirrorState int8

const (
	MirrorStateUnknown   MirrorState = -1 // no state loaded yet
	MirrorStatePreparing MirrorState = 0  // aligning the destination log with the source
	MirrorStateMirroring MirrorState = 1  // the pipeline copies batches
	MirrorStatePaused    MirrorState = 2  // no copying; the topic stays read-only
	MirrorStateStopping  MirrorState = 3  // failover in progress
	MirrorStateStopped   MirrorState = 4  // writable on the destination; LMO recorded
	MirrorStateFailed    MirrorState = 5  // failed; retried with backoff unless non-retriable
)

var mirrorStateNames = [...]string{"UNKNOWN", "PREPARING", "MIRRORING", "PAUSED", "STOPPING", "STOPPED", "FAILED"}

// String returns the upper-case name, or MirrorState(n) for a value that is
// not a state (a newer peer may send one).
func (s MirrorState) String() string {
	if s.Valid() {
		return mirrorStateNames[int(s)+1]
	}
	return fmt.Sprintf("MirrorState(%d)", int8(s))
}

// Valid reports whether s is one of the defined states.
func (s MirrorState) Valid() bool {
	return s >= MirrorStateUnknown && s <= MirrorStateFailed
}

// ParseMirrorState parses a state name, ignoring case.
func ParseMirrorState(name string) (MirrorState, error) {
	for i, n := range mirrorStateNames {
		if strings.EqualFold(n, name) {
			return MirrorState(i - 1), nil
		}
	}
	return MirrorStateUnknown, fmt.Errorf("protocol: unknown mirror state %q (want one of %s)", name, strings.Join(mirrorStateNames[:], ", "))
}

// MarshalText and UnmarshalText make states read as names in JSON output
// (describe --json) and configuration.
func (s MirrorState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *MirrorState) UnmarshalText(text []byte) error {
	parsed, err := ParseMirrorState(string(text))
	if err != nil {
		return err
	}
	*s = parsed
	return nil
}
