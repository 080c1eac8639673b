package statetopic

import (
	"errors"
	"testing"
	"time"
)

func TestMarkRoundTrip(t *testing.T) {
	want := &Mark{SourceTopicID: testTopicID, SourceClusterID: "src", StateTopicID: UUID{9}, MarkedAt: time.Unix(1700000000, 0).UTC()}
	v, err := EncodeMark(want)
	if err != nil {
		t.Fatal(err)
	}
	mirror, topic, got, err := DecodeMark(MirrorTopicKey("m1", "orders").Bytes(), v)
	if err != nil || mirror != "m1" || topic != "orders" || *got != *want {
		t.Fatalf("DecodeMark = %q %q %+v %v, want m1 orders %+v", mirror, topic, got, err, want)
	}
	if _, _, got, err := DecodeMark(MirrorTopicKey("m1", "orders").Bytes(), nil); err != nil || got != nil {
		t.Fatalf("tombstone decoded as %+v, %v", got, err)
	}
}

func TestDecodeMarkRefusesJunk(t *testing.T) {
	good, _ := EncodeMark(&Mark{StateTopicID: UUID{1}})
	for name, c := range map[string]struct{ key, value []byte }{
		"not a key":         {[]byte("junk"), good},
		"config key":        {MirrorConfigKey("m1").Bytes(), good},
		"short value":       {MirrorTopicKey("m1", "t").Bytes(), []byte{0}},
		"value version":     {MirrorTopicKey("m1", "t").Bytes(), []byte{0, 7, '{', '}'}},
		"not json":          {MirrorTopicKey("m1", "t").Bytes(), []byte{0, 0, '{'}},
		"no state topic id": {MirrorTopicKey("m1", "t").Bytes(), []byte{0, 0, '{', '}'}},
	} {
		if _, _, _, err := DecodeMark(c.key, c.value); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecodeMark(f *testing.F) {
	good, _ := EncodeMark(&Mark{SourceTopicID: testTopicID, StateTopicID: UUID{1}})
	f.Add(MirrorTopicKey("m1", "t").Bytes(), good)
	f.Add(MirrorTopicKey("m1", "t").Bytes(), []byte(nil))
	f.Add(MirrorConfigKey("m1").Bytes(), good)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		mirror, topic, m, err := DecodeMark(key, value)
		if err != nil || m == nil {
			return
		}
		b, err := EncodeMark(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		m2, t2, again, err := DecodeMark(MirrorTopicKey(mirror, topic).Bytes(), b)
		if err != nil || m2 != mirror || t2 != topic || !again.MarkedAt.Equal(m.MarkedAt) || again.StateTopicID != m.StateTopicID {
			t.Fatalf("re-decode of %+v: %+v, %v", m, again, err)
		}
	})
}
