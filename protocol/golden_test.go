package protocol

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// goldenFile holds every mirror message of roundTripCases and goldenExtras,
// encoded at every version its API supports. The bytes were captured from
// the hand-written codec before the messages were generated, so any change
// of the generator or the definitions that moves one byte on the wire fails
// TestGoldenEveryMessage. Regenerate only for a deliberate wire change:
// go test ./protocol -run TestGoldenEveryMessage -update-golden
const goldenFile = "testdata/messages.golden"

var updateGolden = flag.Bool("update-golden", false, "rewrite "+goldenFile+" from the current encoder")

// goldenExtras are messages whose elements carry their defaults (New*), so
// that the default values and the tagged fields left out at their default
// are pinned too.
func goldenExtras() []roundTripCase {
	return []roundTripCase{
		{"AddTopicsToMirrorRequest/defaults", &AddTopicsToMirrorRequest{MirrorName: "m",
			Topics: []AddTopicsToMirrorRequestTopic{NewAddTopicsToMirrorRequestTopic()}}},
		{"LastMirroredOffsetsResponse/defaults", &LastMirroredOffsetsResponse{Topics: []LastMirroredOffsetsResponseTopic{
			{Name: "t", Partitions: []LastMirroredOffsetsResponsePartition{NewLastMirroredOffsetsResponsePartition()}}}}},
		{"DescribeMirrorsResponse/defaults", &DescribeMirrorsResponse{Mirrors: []DescribeMirrorsResponseMirror{{Name: "m",
			Topics: []DescribeMirrorsResponseTopic{{Name: "t", Partitions: []DescribeMirrorsResponsePartition{
				NewDescribeMirrorsResponsePartition()}}}}}}},
		{"ReadMirrorStateResponse/defaults", &ReadMirrorStateResponse{Topics: []ReadMirrorStateResponseTopic{
			{Name: "t", Partitions: []ReadMirrorStateResponsePartition{NewReadMirrorStateResponsePartition()}}}}},
		{"WriteMirrorStateRequest/defaults", &WriteMirrorStateRequest{MirrorName: "m", Topics: []WriteMirrorStateRequestTopic{
			{Name: "t", Partitions: []WriteMirrorStateRequestPartition{NewWriteMirrorStateRequestPartition()}}}}},
	}
}

// versioned is a mirror message whose version can be set.
type versioned interface {
	wireMessage
	SetVersion(int16)
}

func TestGoldenEveryMessage(t *testing.T) {
	var got bytes.Buffer
	for _, c := range append(roundTripCases(), goldenExtras()...) {
		api, _ := mirrorAPI(c.msg.Key())
		for v := api.MinVersion; v <= api.MaxVersion; v++ {
			m := c.msg.(versioned)
			m.SetVersion(v)
			fmt.Fprintf(&got, "%s v%d %x\n", c.name, v, m.AppendTo(nil))
		}
	}
	if *updateGolden {
		if err := os.WriteFile(goldenFile, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := readGolden(t)
	gotLines := strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n")
	if len(gotLines) != len(want) {
		t.Errorf("%d encodings, the golden file has %d", len(gotLines), len(want))
	}
	for i, line := range gotLines {
		if i < len(want) && line != want[i] {
			t.Errorf("encoding differs from %s line %d\n got: %s\nwant: %s", goldenFile, i+1, line, want[i])
		}
	}
}

// TestGoldenDecodes: every golden encoding decodes and re-encodes to the
// same bytes, so the decoder agrees with the captured wire format too.
func TestGoldenDecodes(t *testing.T) {
	cases := make(map[string]wireMessage)
	for _, c := range append(roundTripCases(), goldenExtras()...) {
		cases[c.name] = c.msg
	}
	for _, line := range readGolden(t) {
		name, rest, _ := strings.Cut(line, " ")
		version, encoded, _ := strings.Cut(rest, " ")
		want, err := hex.DecodeString(encoded)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		msg, ok := cases[name]
		if !ok {
			t.Fatalf("golden case %s has no message", name)
		}
		got := newLike(msg)
		var v int16
		if _, err := fmt.Sscanf(version, "v%d", &v); err != nil {
			t.Fatalf("%s: version %q: %v", name, version, err)
		}
		got.(versioned).SetVersion(v)
		if err := got.ReadFrom(want); err != nil {
			t.Fatalf("%s %s: %v", name, version, err)
		}
		msg.(versioned).SetVersion(v)
		if !reflect.DeepEqual(got, msg) {
			t.Errorf("%s %s decodes to\n %+v\nwant %+v", name, version, got, msg)
		}
		if again := got.AppendTo(nil); !bytes.Equal(again, want) {
			t.Errorf("%s %s re-encodes to %x", name, version, again)
		}
	}
}

func readGolden(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}
