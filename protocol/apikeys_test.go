package protocol

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMirrorAPITable(t *testing.T) {
	want := []string{"CreateMirror", "AddTopicsToMirror", "RemoveTopicsFromMirror", "LastMirroredOffsets", "ListMirrors",
		"DescribeMirrors", "ReadMirrorState", "WriteMirrorState", "PauseMirrorTopics", "ResumeMirrorTopics", "DeleteMirror"}
	apis := MirrorAPIs()
	if len(apis) != len(want) {
		t.Fatalf("%d APIs", len(apis))
	}
	seen := make(map[int16]bool)
	for i, api := range apis {
		if api.Name != want[i] || api.Key != int16(94+i) || api.MinVersion != 0 || api.MaxVersion != 0 || api.FlexibleVersion != 0 {
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
	// The collision this package works around; if kmsg drops it, the
	// comment in apikeys.go can go.
	if kmsg.NameForKey(KeyCreateMirror) != "UnregisterController" {
		t.Logf("kmsg now names key %d %q", KeyCreateMirror, kmsg.NameForKey(KeyCreateMirror))
	}
}
