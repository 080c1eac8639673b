package mirrorcli

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// buildBatch encodes records as one v2 record batch at base, compressed
// with codec, the way a broker stores it.
func buildBatch(t testing.TB, base int64, codec kgo.CompressionCodec, recs []*kgo.Record) []byte {
	return kafkatest.RecordBatch(t, base, codec, recs)
}

func readAll(data []byte) []LogRecord {
	var out []LogRecord
	ReadSegment(data, func(r LogRecord) { out = append(out, r) })
	return out
}

func TestReadSegmentCodecs(t *testing.T) {
	var seg []byte
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	for i, codec := range codecs {
		seg = append(seg, buildBatch(t, int64(i*2), codec, []*kgo.Record{
			{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 300)},
			{Key: []byte("tomb")}, // nil value: tombstone
		})...)
	}
	got := readAll(seg)
	if len(got) != 2*len(codecs) {
		t.Fatalf("%d records, want %d: %+v", len(got), 2*len(codecs), got)
	}
	for i, r := range got {
		if r.Err != nil || r.Offset != int64(i) {
			t.Fatalf("record %d: %+v", i, r)
		}
		if i%2 == 0 && (string(r.Key) != "k" || len(r.Value) != 300) {
			t.Fatalf("record %d: key %q, %d value bytes", i, r.Key, len(r.Value))
		}
		if i%2 == 1 && r.Value != nil {
			t.Fatalf("record %d: tombstone has value %q", i, r.Value)
		}
		if want := time.UnixMilli(1_700_000_000_000 + int64(i%2)); !r.Timestamp.Equal(want) {
			t.Fatalf("record %d: timestamp %v, want %v", i, r.Timestamp, want)
		}
	}
}

func TestReadSegmentSkipsCorruptBatches(t *testing.T) {
	good := func(base int64) []byte {
		return buildBatch(t, base, kgo.ZstdCompression(), []*kgo.Record{{Key: []byte("a"), Value: []byte("b")}})
	}
	corrupt := good(1)
	corrupt[len(corrupt)-1] ^= 0xff // flips a compressed byte: the CRC no longer matches
	oldMagic := good(2)
	oldMagic[16] = 1
	seg := append(append(append(good(0), corrupt...), oldMagic...), good(3)...)
	got := readAll(seg)
	if len(got) != 4 {
		t.Fatalf("got %+v", got)
	}
	if got[0].Err != nil || got[3].Err != nil || got[3].Offset != 3 {
		t.Fatalf("good batches around the bad ones not read: %+v", got)
	}
	if got[1].Err == nil || !strings.Contains(got[1].Err.Error(), "batch at offset 1: CRC mismatch") {
		t.Fatalf("corrupt batch: %v", got[1].Err)
	}
	if got[2].Err == nil || !strings.Contains(got[2].Err.Error(), "magic 1 is not supported") {
		t.Fatalf("old magic: %v", got[2].Err)
	}

	// A truncated tail stops the walk with an error, after the good batch.
	got = readAll(append(good(0), good(1)[:30]...))
	if len(got) != 2 || got[0].Err != nil || got[1].Err == nil || !strings.Contains(got[1].Err.Error(), "cannot be framed") {
		t.Fatalf("truncated tail: %+v", got)
	}
	// A preallocated zero tail is silently the end.
	if got := readAll(append(good(0), make([]byte, 100)...)); len(got) != 1 || got[0].Err != nil {
		t.Fatalf("zero tail: %+v", got)
	}
}

// TestReadSegmentHostile feeds random and mutated bytes: it must never
// panic and never loop forever.
func TestReadSegmentHostile(t *testing.T) {
	base := buildBatch(t, 0, kgo.Lz4Compression(), []*kgo.Record{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("k2")}})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		data := append([]byte(nil), base...)
		switch i % 3 {
		case 0:
			data[rng.IntN(len(data))] = byte(rng.IntN(256))
		case 1:
			data = data[:rng.IntN(len(data))]
		default:
			data = make([]byte, rng.IntN(200))
			for j := range data {
				data[j] = byte(rng.IntN(256))
			}
		}
		// Recompute the CRC half the time so the record parser is reached.
		if i%2 == 0 && len(data) > 21 {
			binary.BigEndian.PutUint32(data[17:], crc32.Checksum(data[21:], castagnoli))
		}
		ReadSegment(data, func(LogRecord) {})
	}
}
