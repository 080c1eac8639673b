package mirrorcli

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LogRecord is one record read from a log segment (or a fetch). Err is set,
// with the batch's base offset, when a batch or record could not be read.
type LogRecord struct {
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte // nil: tombstone
	Control   bool   // a transaction marker, not a state record
	Err       error
}

// batchHeaderLen is a v2 record batch's header from the base offset to the
// record count, inclusive.
const batchHeaderLen = 61

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ReadSegment walks the record batches of a Kafka log segment file (the
// NNNNNNNNNNNNNNNNNNNN.log in a partition directory: v2 record batches back
// to back, the same bytes a Fetch returns) and calls fn for every record.
// Compressed batches (gzip, snappy, lz4, zstd) are decompressed. A batch that
// fails its CRC or does not parse is reported through fn with Err and
// skipped; reading stops only when the framing itself is broken.
func ReadSegment(data []byte, fn func(LogRecord)) {
	dec := kgo.DefaultDecompressor()
	for pos := 0; pos < len(data); {
		rest := data[pos:]
		if len(rest) < 12 {
			fn(LogRecord{Offset: -1, Err: fmt.Errorf("%d trailing bytes at file position %d are not a batch", len(rest), pos)})
			return
		}
		base := int64(binary.BigEndian.Uint64(rest))
		length := int32(binary.BigEndian.Uint32(rest[8:]))
		if length == 0 && base == 0 && allZero(rest) {
			return // preallocated tail of the active segment
		}
		if length < batchHeaderLen-12 || int(length) > len(rest)-12 {
			fn(LogRecord{Offset: base, Err: fmt.Errorf("batch at file position %d claims %d bytes but %d remain; the rest of the file cannot be framed", pos, length, len(rest)-12)})
			return
		}
		batch := rest[:12+int(length)]
		pos += len(batch)
		readBatch(batch, dec, fn)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func readBatch(raw []byte, dec kgo.Decompressor, fn func(LogRecord)) {
	base := int64(binary.BigEndian.Uint64(raw))
	fail := func(format string, args ...any) {
		fn(LogRecord{Offset: base, Err: fmt.Errorf("batch at offset %d: "+format, append([]any{base}, args...)...)})
	}
	if magic := int8(raw[16]); magic != 2 {
		fail("message format magic %d is not supported (only v2 record batches, Kafka 0.11+)", magic)
		return
	}
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		fail("%v", err)
		return
	}
	if got := crc32.Checksum(raw[21:], castagnoli); got != uint32(b.CRC) {
		fail("CRC mismatch (stored %08x, computed %08x): the batch is corrupt", uint32(b.CRC), got)
		return
	}
	records := b.Records
	if codec := b.Attributes & 0x07; codec != 0 {
		out, err := dec.Decompress(records, kgo.CompressionCodecType(codec))
		if err != nil {
			fail("decompressing (codec %d): %v", codec, err)
			return
		}
		records = out
	}
	control := b.Attributes&0x20 != 0
	for i := int32(0); i < b.NumRecords; i++ {
		n, hdr := binary.Varint(records)
		if hdr <= 0 || n < 0 || int64(len(records)-hdr) < n {
			fail("record %d of %d is truncated", i+1, b.NumRecords)
			return
		}
		var r kmsg.Record
		if err := r.ReadFrom(records[:hdr+int(n)]); err != nil {
			fail("record %d of %d: %v", i+1, b.NumRecords, err)
			return
		}
		records = records[hdr+int(n):]
		fn(LogRecord{
			Offset:    base + int64(r.OffsetDelta),
			Timestamp: time.UnixMilli(b.FirstTimestamp + r.TimestampDelta64),
			Key:       r.Key,
			Value:     r.Value,
			Control:   control,
		})
	}
	if len(records) != 0 {
		fail("%d bytes after the last of %d records", len(records), b.NumRecords)
	}
}
