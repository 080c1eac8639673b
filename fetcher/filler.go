package fetcher

// Filler batches move an empty or lagging destination log forward to the
// source log start: a stock broker only reaches offset X by appending X
// offsets, so the mirror appends large zstd batches of empty records (no key,
// empty value, no headers), which compress to ~1 byte per record, and then
// DeleteRecords them away. They carry the mirror's producer id, epoch and
// sequence like any copied batch, so a fenced owner cannot append filler.

import (
	"encoding/binary"
	"hash/crc32"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// maxFillerRecords bounds one filler batch; a zstd batch of 1,000,000 empty
// records is well under the default max.message.bytes (~1 MiB).
const maxFillerRecords = 1_000_000

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
)

func zstdEncoder() *zstd.Encoder {
	zstdOnce.Do(func() {
		zstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	})
	return zstdEnc
}

// fillerBatch builds a zstd-compressed v2 batch of n empty records (relative
// offsets 0..n-1) stamped with timestampMillis, ready to produce. keyed
// gives each an empty (not null) key: a compacted topic refuses null keys.
func fillerBatch(n int32, timestampMillis int64, producerID int64, producerEpoch int16, baseSequence int32, keyed bool) []byte {
	key := int64(-1)
	if keyed {
		key = 0
	}
	var plain []byte
	var rec [3 * binary.MaxVarintLen64]byte
	for i := int32(0); i < n; i++ {
		body := rec[:0]
		body = append(body, 0)                     // attributes
		body = binary.AppendVarint(body, 0)        // timestamp delta
		body = binary.AppendVarint(body, int64(i)) // offset delta
		body = binary.AppendVarint(body, key)      // key: null, or empty
		body = binary.AppendVarint(body, 0)        // value: empty
		body = binary.AppendVarint(body, 0)        // no headers
		plain = binary.AppendVarint(plain, int64(len(body)))
		plain = append(plain, body...)
	}
	compressed := zstdEncoder().EncodeAll(plain, nil)

	b := make([]byte, batchHeaderSize, batchHeaderSize+len(compressed))
	be := binary.BigEndian
	be.PutUint32(b[8:], uint32(batchHeaderSize-batchLogOverhead+len(compressed)))
	be.PutUint32(b[12:], 0xFFFFFFFF)
	b[16] = 2
	be.PutUint16(b[21:], uint16(CompressionZstd))
	be.PutUint32(b[23:], uint32(n-1))
	be.PutUint64(b[27:], uint64(timestampMillis))
	be.PutUint64(b[35:], uint64(timestampMillis))
	be.PutUint64(b[43:], uint64(producerID))
	be.PutUint16(b[51:], uint16(producerEpoch))
	be.PutUint32(b[53:], uint32(baseSequence))
	be.PutUint32(b[57:], uint32(n))
	b = append(b, compressed...)
	be.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}
