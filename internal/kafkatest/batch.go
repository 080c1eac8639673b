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
	return recordBatch(t, base, codec, -1, -1, -1, recs)
}

// IdempotentBatch encodes recs as one uncompressed v2 batch of an idempotent producer
// (producerID, epoch, its first record at sequence seq), as the producer sends it: resent
// as it is, it is the same write.
func IdempotentBatch(t testing.TB, producerID int64, epoch int16, seq int32, recs []*kgo.Record) []byte {
	t.Helper()
	return recordBatch(t, 0, kgo.NoCompression(), producerID, epoch, seq, recs)
}

func recordBatch(t testing.TB, base int64, codec kgo.CompressionCodec, producerID int64, epoch int16, seq int32, recs []*kgo.Record) []byte {
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
		ProducerID: producerID, ProducerEpoch: epoch, FirstSequence: seq, NumRecords: int32(len(recs)), Records: data}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}
