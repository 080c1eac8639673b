package protocol

import (
	"bytes"
	"testing"
)

func TestDescribeMirrorsSyncFieldsAreTagged(t *testing.T) {
	full := fullDescribeResponse(t)
	if len(full.Mirrors[0].Groups) == 0 || len(full.Mirrors[0].Syncs) == 0 {
		t.Fatal("the full DescribeMirrorsResponse case lost its sync fields")
	}
	old := decodeAsV0Client(t, full)
	m := old[0]
	// The old client's topics, their own unknown tags included, encode
	// back to the bytes the server sent.
	if m.Name != full.Mirrors[0].Name || !bytes.Equal(appendArray(nil, m.Topics), appendArray(nil, full.Mirrors[0].Topics)) {
		t.Fatalf("a v0 client reads %+v", m)
	}
	seen := map[uint32]bool{}
	m.UnknownTags.Each(func(tag uint32, _ []byte) { seen[tag] = true })
	if !seen[0] || !seen[1] || !seen[3] {
		t.Errorf("a v0 client sees tags %v on the mirror entry, want 0 (groups), 1 (syncs) and 3", seen)
	}
}
