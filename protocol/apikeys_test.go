package protocol

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMirrorAPITable(t *testing.T) {
	want := []string{"CreateMirror", "AddTopicsToMirror", "RemoveTopicsFromMirror", "LastMirroredOffsets", "ListMirrors",
		"DescribeMirrors", "ReadMirrorState", "WriteMirrorState", "PauseMirrorTopics", "ResumeMirrorTopics", "DeleteMirror", "SwitchRoute"}
	apis := MirrorAPIs()
	if len(apis) != len(want) {
		t.Fatalf("%d APIs", len(apis))
	}
	seen := make(map[int16]bool)
	for i, api := range apis {
		if api.Name != want[i] || api.Key != int16(1000+i) || MirrorKeyIndex(api.Key) != i || api.MinVersion != 0 || api.MaxVersion != 0 || api.FlexibleVersion != 0 {
			t.Errorf("%d: %+v", i, api)
		}
		if seen[api.Key] {
			t.Errorf("key %d twice", api.Key)
		}
		seen[api.Key] = true
		if !IsMirrorKey(api.Key) || APIName(api.Key) != api.Name {
			t.Errorf("%s: lookups disagree", api.Name)
		}
	}
	apis[0].Name = "changed"
	if MirrorAPIs()[0].Name != "CreateMirror" {
		t.Error("MirrorAPIs exposes the table")
	}
	if IsMirrorKey(3) || APIName(3) != "Metadata" || APIName(0x7000) != "Unknown" {
		t.Error("standard key lookups")
	}
	if MinMirrorKey != 1000 || MaxMirrorKey != 1011 || MirrorKeyRange() != "1000–1011" {
		t.Errorf("range %d..%d %q", MinMirrorKey, MaxMirrorKey, MirrorKeyRange())
	}
	for _, k := range []int16{MinMirrorKey - 1, MaxMirrorKey + 1, 94, -1} {
		if MirrorKeyIndex(k) != -1 || IsMirrorKey(k) {
			t.Errorf("key %d is not a mirror key", k)
		}
	}
	// kmirror's range is off Kafka's path: kmsg, generated from Kafka's
	// protocol definitions, has no key in it. If this fails, Kafka reached
	// the range: see docs/proxy.md, "Mirror RPC keys".
	for k := MinMirrorKey; k <= MaxMirrorKey; k++ {
		if kmsg.RequestForKey(k) != nil {
			t.Errorf("kmsg knows key %d as %s", k, kmsg.NameForKey(k))
		}
	}
}
