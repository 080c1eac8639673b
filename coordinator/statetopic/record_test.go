package statetopic

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/kmirror/kmirror/protocol"
)

var testTopicID = UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func testKeys() []Key {
	return []Key{
		MirrorConfigKey("dr"),
		MirrorTopicKey("dr", "orders"),
		PartitionStateKey("dr", testTopicID, 7),
		MirrorConfigKey(""),
		GroupSyncKey("dr", "billing"),
		MirrorSyncKey("dr"),
		RouteSwitchKey("payments"),
		RouteAckKey("payments", "instance-2", RouteFreezing),
		RouteRequestKey("payments"),
		RouteAckKey("payments", "instance-2", RouteStep(42)), // a step of a newer kmirror
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, k := range testKeys() {
		got, err := DecodeKey(k.Bytes())
		if err != nil {
			t.Fatalf("%+v: %v", k, err)
		}
		if got != k {
			t.Fatalf("round trip %+v -> %+v", k, got)
		}
	}
}

// The key layout is the on-disk format: pin it byte for byte.
func TestKeyGoldenBytes(t *testing.T) {
	got := PartitionStateKey("m", testTopicID, 258).Bytes()
	want := append([]byte{0, 0, 3, 0, 1, 'm'}, testTopicID[:]...)
	want = append(want, 0, 0, 1, 2)
	if !bytes.Equal(got, want) {
		t.Fatalf("key bytes\n got %x\nwant %x", got, want)
	}
}

func TestDecodeKeyRejects(t *testing.T) {
	good := MirrorTopicKey("dr", "orders").Bytes()
	for name, b := range map[string][]byte{
		"empty":        nil,
		"version":      {0, 9, 1, 0, 0},
		"unknown type": {0, 0, 9, 0, 0},
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte{}, good...), 0),
		"long name":    {0, 0, 1, 0xff, 0xff},
	} {
		if _, err := DecodeKey(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

func TestValueRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for typ, v := range map[RecordType]any{
		TypeMirrorConfig: &MirrorConfig{Configs: map[string]string{"bootstrap.servers": "a:9092"}, CreatedAt: now,
			SourceClusterID: "abc", IncludePatterns: []string{"orders.*"}},
		TypeMirrorTopic: &MirrorTopic{SourceTopicID: testTopicID, Desired: DesirePause, Partitions: 8, UpdatedAt: now},
		TypePartitionState: &PartitionState{Topic: "orders", State: protocol.MirrorStateFailed, PreviousState: protocol.MirrorStateMirroring,
			RetryAttempt: 3, ErrorMessage: "boom", LastMirroredOffset: 42, WriterEpoch: 5, UpdatedAt: now, Notes: []string{"n"}},
		TypeGroupSync: &GroupSync{State: GroupActive, SyncedAt: now, Partitions: 3, Message: "has members"},
		TypeMirrorSync: &MirrorSync{Jobs: map[string]*SyncJob{JobGroups: {LastSuccessAt: now, AttemptedAt: now, Message: "2 groups"},
			JobACLs: {AttemptedAt: now, Error: "no authorizer"}}},
		TypeRouteSwitch: testRouteSwitch(),
		TypeRouteAck:    &RouteAck{Attempt: 3, AtMs: 1_800_000_000_123},
		TypeRouteRequest: &RouteRequest{ID: "r-1", Forced: true, AtMs: 1_800_000_000_000, AnsweredMs: 1_800_000_000_100,
			Refused: "a switch of the route is in progress"},
	} {
		b, err := EncodeValue(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeValue(typ, b)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("%s round trip\n got %+v\nwant %+v", typ, got, v)
		}
	}
	if v, err := DecodeValue(TypeMirrorTopic, nil); v != nil || err != nil {
		t.Fatalf("tombstone decoded as %v, %v", v, err)
	}
	if _, err := DecodeValue(TypeMirrorTopic, []byte{0, 1, '{', '}'}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("future value version: %v", err)
	}
	if _, err := EncodeValue("nope"); err == nil {
		t.Fatal("encoding a string as a state value succeeded")
	}
}

func TestStatePartitionSpreadsPartitionsAndKeepsMirrorTogether(t *testing.T) {
	const n = 50
	for _, k := range []Key{MirrorTopicKey("dr", "x"), GroupSyncKey("dr", "g"), MirrorSyncKey("dr")} {
		if a, b := MirrorConfigKey("dr").StatePartition(n), k.StatePartition(n); a != b {
			t.Fatalf("mirror config on %d, %s on %d: mirror-level records must share a partition (the owner writes them in order)", a, k.Type, b)
		}
	}
	seen := map[int32]bool{}
	for p := int32(0); p < 200; p++ {
		sp := PartitionStateKey("dr", testTopicID, p).StatePartition(n)
		if sp < 0 || sp >= n {
			t.Fatalf("partition %d out of range", sp)
		}
		seen[sp] = true
	}
	if len(seen) < n/2 {
		t.Fatalf("200 mirror partitions hashed onto only %d of %d state partitions", len(seen), n)
	}
}

func TestUUIDText(t *testing.T) {
	s := testTopicID.String()
	u, err := ParseUUID(s)
	if err != nil || u != testTopicID {
		t.Fatalf("ParseUUID(%q) = %v, %v", s, u, err)
	}
	if _, err := ParseUUID("not-an-id"); err == nil {
		t.Fatal("garbage parsed as a topic id")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, k := range testKeys() {
		f.Add(k.Bytes(), []byte{0, 0, '{', '}'})
	}
	for k, v := range map[Key]any{
		RouteSwitchKey("payments"):                     testRouteSwitch(),
		RouteAckKey("payments", "i1", RouteGroupsCopy): &RouteAck{Attempt: 2, AtMs: 1},
	} {
		b, err := EncodeValue(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(k.Bytes(), b)
	}
	f.Add(RouteSwitchKey("p").Bytes(), []byte("\x00\x00"+`{"step":"RouteStep(77)","upstream":"elsewhere"}`))
	f.Add([]byte{0, 0, 3}, []byte(nil))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		k, err := DecodeKey(key)
		if err != nil {
			return
		}
		if again, err := DecodeKey(k.Bytes()); err != nil || again != k {
			t.Fatalf("re-decode of %+v: %+v, %v", k, again, err)
		}
		v, err := DecodeValue(k.Type, value)
		if err != nil || v == nil {
			return
		}
		b, err := EncodeValue(v)
		if err != nil {
			t.Fatalf("re-encode %T: %v", v, err)
		}
		if _, err := DecodeValue(k.Type, b); err != nil {
			t.Fatalf("decode of re-encoded %T: %v", v, err)
		}
		NewView().Apply(key, value) //nolint:errcheck // must not panic
	})
}
