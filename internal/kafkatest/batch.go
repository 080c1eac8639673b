package kafkatest

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// RecordBatch encodes recs as one v2 record batch at base, compressed with codec, the way
// a broker stores it (and a non-idempotent producer sends it).
func RecordBatch(t testing.TB, base int64, codec kgo.CompressionCodec, recs []*kgo.Record) []byte {
	t.Helper()
	var data []byte
	for i, r := range recs {
		kr := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: int64(i), Key: r.Key, Value: r.Value}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1) // everything after the (one-byte, zero) length varint
		data = append(data, kr.AppendTo(nil)...)
	}
	attrs := int16(0)
	if codec != kgo.NoCompression() {
		c, err := kgo.DefaultCompressor(codec)
		if err != nil {
			t.Fatal(err)
		}
		out, used := c.Compress(new(bytes.Buffer), data)
		data = append([]byte(nil), out...)
		attrs = int16(used)
	}
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: 0, Magic: 2, Attributes: attrs,
		LastOffsetDelta: int32(len(recs) - 1), FirstTimestamp: 1_700_000_000_000, MaxTimestamp: 1_700_000_000_000 + int64(len(recs)),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(recs)), Records: data}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}
