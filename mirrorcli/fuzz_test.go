package mirrorcli

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Hostile input must never panic: a segment file or a state record may be
// corrupt, and a properties file is whatever the operator wrote.

func FuzzReadSegment(f *testing.F) {
	f.Add(buildBatch(f, 0, kgo.NoCompression(), []*kgo.Record{{Key: []byte("k"), Value: []byte("v")}}))
	f.Add(buildBatch(f, 5, kgo.SnappyCompression(), []*kgo.Record{{Key: []byte("k")}, {Value: []byte("v")}}))
	f.Add(buildBatch(f, 9, kgo.ZstdCompression(), []*kgo.Record{{Key: []byte("k"), Value: []byte("v")}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		ReadSegment(data, func(r LogRecord) {
			n++
			DecodeStateRecord(0, r).FormatText()
		})
		if n > len(data) {
			t.Fatalf("%d records from %d bytes", n, len(data))
		}
	})
}

func FuzzDecodeStateRecord(f *testing.F) {
	for _, r := range stateRecords(f) {
		f.Add(r.Key, r.Value)
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		DecodeStateRecord(0, LogRecord{Key: key, Value: value}).FormatText()
	})
}

func FuzzParseProperties(f *testing.F) {
	f.Add("a=b\nc : d\\\n  e\n# x\nk\\u0041=\\t")
	f.Add("sasl.jaas.config=x required username=\"a\" password=\"b\";")
	f.Fuzz(func(t *testing.T, text string) {
		props, err := ParseProperties(text)
		if err != nil {
			return
		}
		// parseSecurity is left out: it reads the files the input names.
		for _, p := range props {
			_, _ = parseJAAS(p.Value)
		}
	})
}
