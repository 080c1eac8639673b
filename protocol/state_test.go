package protocol

import (
	"encoding/json"
	"testing"
)

func TestMirrorState(t *testing.T) {
	for s, name := range map[MirrorState]string{
		-1: "UNKNOWN", 0: "PREPARING", 1: "MIRRORING", 2: "PAUSED", 3: "STOPPING", 4: "STOPPED", 5: "FAILED",
	} {
		if s.String() != name || !s.Valid() {
			t.Errorf("%d: %q", int8(s), s.String())
		}
		for _, in := range []string{name, "  " + name, string(name[0]) + "x"} {
			got, err := ParseMirrorState(in)
			if in == name && (err != nil || got != s) {
				t.Errorf("Parse(%q) = %v, %v", in, got, err)
			}
			if in != name && err == nil {
				t.Errorf("Parse(%q) accepted", in)
			}
		}
	}
	if got, err := ParseMirrorState("mirroring"); err != nil || got != MirrorStateMirroring {
		t.Errorf("case-insensitive parse: %v %v", got, err)
	}
	if s := MirrorState(6); s.Valid() || s.String() != "MirrorState(6)" {
		t.Errorf("6: %v", s)
	}
	b, err := json.Marshal(map[string]MirrorState{"s": MirrorStateStopped})
	if err != nil || string(b) != `{"s":"STOPPED"}` {
		t.Fatalf("%s %v", b, err)
	}
	var back map[string]MirrorState
	if err := json.Unmarshal(b, &back); err != nil || back["s"] != MirrorStateStopped {
		t.Fatalf("%v %v", back, err)
	}
}
