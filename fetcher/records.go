package fetcher

// Record-level access to a batch, needed only where a stock broker will not
// take the source batch whole: compacted batches (offset holes inside the
// batch), a resume point inside a batch, and control batches (whose marker
// type decides how a destination transaction ends). Everything else is
// copied as raw bytes (batch.go).
//
// Re-framing keeps every record's key, value, headers and timestamp byte for
// byte and the batch's codec, attributes and base timestamp; only the offset
// deltas (and so, for compressed batches, the compressed bytes) change,
// because the broker requires deltas 0..n-1 in a client batch.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// record is one record of a batch. body aliases the decompressed records
// section: the bytes after the record's length varint.
type record struct {
	offset         int64 // absolute: batch base offset + delta
	timestampDelta int64
	attrs          byte
	tail           []byte // key length, key, value length, value, headers
}

var (
	decompressor = kgo.DefaultDecompressor()

	compressorsMu sync.Mutex
	compressors   = map[Compression]kgo.Compressor{}
)

func compressorFor(c Compression) (kgo.Compressor, error) {
	compressorsMu.Lock()
	defer compressorsMu.Unlock()
	if cp, ok := compressors[c]; ok {
		return cp, nil
	}
	var codec kgo.CompressionCodec
	switch c {
	case CompressionGzip:
		codec = kgo.GzipCompression()
	case CompressionSnappy:
		codec = kgo.SnappyCompression()
	case CompressionLZ4:
		codec = kgo.Lz4Compression()
	case CompressionZstd:
		codec = kgo.ZstdCompression()
	default:
		return nil, fmt.Errorf("%w: unknown codec %v", ErrCorruptBatch, c)
	}
	cp, err := kgo.DefaultCompressor(codec)
	if err != nil {
		return nil, fmt.Errorf("compressor for %v: %w", c, err)
	}
	compressors[c] = cp
	return cp, nil
}

// Records decodes the records of a batch (decompressing them if needed).
func (b *Batch) records() ([]record, error) {
	section := b.Raw[batchHeaderSize:]
	if b.Compression() != CompressionNone {
		plain, err := decompressor.Decompress(section, kgo.CompressionCodecType(b.Compression()))
		if err != nil {
			return nil, fmt.Errorf("%w: batch at offset %d: decompressing %v: %v", ErrCorruptBatch, b.BaseOffset, b.Compression(), err)
		}
		section = plain
	}
	// A record takes at least minRecordBytes: a hostile count cannot make
	// the slice larger than the bytes that are there.
	const minRecordBytes = 7
	out := make([]record, 0, min(max(int(b.NumRecords), 0), len(section)/minRecordBytes+1))
	last := int64(-1)
	for i := int32(0); i < b.NumRecords; i++ {
		r, rest, err := readRecord(section)
		if err != nil {
			return nil, fmt.Errorf("%w: batch at offset %d, record %d: %v", ErrCorruptBatch, b.BaseOffset, i, err)
		}
		section = rest
		delta := r.offset
		if delta <= last || delta > int64(b.LastOffsetDelta) {
			return nil, fmt.Errorf("%w: batch at offset %d: record %d has offset delta %d (previous %d, last offset delta %d)",
				ErrCorruptBatch, b.BaseOffset, i, delta, last, b.LastOffsetDelta)
		}
		last = delta
		r.offset += b.BaseOffset
		out = append(out, r)
	}
	if len(section) != 0 {
		return nil, fmt.Errorf("%w: batch at offset %d: %d bytes after its %d records", ErrCorruptBatch, b.BaseOffset, len(section), b.NumRecords)
	}
	return out, nil
}

// readRecord decodes one record (offset is the raw delta).
func readRecord(in []byte) (record, []byte, error) {
	length, k := binary.Varint(in)
	if k <= 0 || length < 1 || int64(len(in)-k) < length {
		return record{}, nil, errors.New("truncated record")
	}
	body, rest := in[k:k+int(length)], in[k+int(length):]
	r := record{attrs: body[0]}
	body = body[1:]
	var n int
	if r.timestampDelta, n = binary.Varint(body); n <= 0 {
		return record{}, nil, errors.New("bad timestamp delta")
	}
	body = body[n:]
	if r.offset, n = binary.Varint(body); n <= 0 {
		return record{}, nil, errors.New("bad offset delta")
	}
	r.tail = body[n:]
	return r, rest, nil
}

// appendRecord encodes r with offset delta delta.
func appendRecord(dst []byte, r record, delta int64) []byte {
	var hdr [1 + 2*binary.MaxVarintLen64]byte
	h := append(hdr[:0], r.attrs)
	h = binary.AppendVarint(h, r.timestampDelta)
	h = binary.AppendVarint(h, delta)
	dst = binary.AppendVarint(dst, int64(len(h)+len(r.tail)))
	dst = append(dst, h...)
	return append(dst, r.tail...)
}

// reframe builds a client batch of recs, which must hold consecutive
// offsets, keeping src's attributes (codec, transactional bit), base
// timestamp and every record's timestamp. The producer fields are left for
// Rewrite. Its CRC is computed afresh: the caller checked src's
// (planRecordsLocked), so the records it holds are the ones the source wrote.
func reframe(src *Batch, recs []record) ([]byte, error) {
	var plain []byte
	maxTS := src.FirstTimestamp
	for i, r := range recs {
		if i > 0 && r.offset != recs[i-1].offset+1 {
			return nil, fmt.Errorf("reframe: offsets %d and %d are not consecutive", recs[i-1].offset, r.offset)
		}
		plain = appendRecord(plain, r, int64(i))
		if ts := src.FirstTimestamp + r.timestampDelta; i == 0 || ts > maxTS {
			maxTS = ts
		}
	}
	payload := plain
	if c := src.Compression(); c != CompressionNone {
		cp, err := compressorFor(c)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		out, used := cp.Compress(&buf, plain)
		if used != kgo.CompressionCodecType(c) {
			return nil, fmt.Errorf("reframe: compressing with %v gave codec %d", c, used)
		}
		payload = append([]byte(nil), out...)
	}
	b := make([]byte, batchHeaderSize, batchHeaderSize+len(payload))
	be := binary.BigEndian
	be.PutUint32(b[8:], uint32(batchHeaderSize-batchLogOverhead+len(payload)))
	be.PutUint32(b[12:], 0xFFFFFFFF)
	b[16] = 2
	be.PutUint16(b[21:], uint16(src.Attributes))
	be.PutUint32(b[23:], uint32(len(recs)-1))
	be.PutUint64(b[27:], uint64(src.FirstTimestamp))
	be.PutUint64(b[35:], uint64(maxTS))
	be.PutUint32(b[57:], uint32(len(recs)))
	b = append(b, payload...)
	be.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b, nil
}

// truncatedCopy returns a copy of src whose records are exactly its first n
// offsets (deltas 0..n-1, the rest of its offset range compacted away), with
// lastOffsetDelta n-1: the records section is kept byte for byte.
// Its CRC is patched for the new lastOffsetDelta, as Rewrite patches it.
func truncatedCopy(src *Batch, n int32) []byte {
	raw := append([]byte(nil), src.Raw...)
	var delta [4]byte
	binary.BigEndian.PutUint32(delta[:], uint32(n-1))
	setCovered(raw, 23, delta[:])
	return raw
}

// Control record types (the key of a control batch's record).
const (
	controlAbort  = 0
	controlCommit = 1
)

// controlType reads the marker type of a control batch: it holds one
// record whose key is version int16, type int16.
func (b *Batch) controlType() (int16, error) {
	recs, err := b.records()
	if err != nil {
		return 0, err
	}
	if len(recs) != 1 {
		return 0, fmt.Errorf("%w: control batch at offset %d has %d records, want 1", ErrCorruptBatch, b.BaseOffset, len(recs))
	}
	key, _, err := recordKey(recs[0].tail)
	if err != nil || len(key) < 4 {
		return 0, fmt.Errorf("%w: control batch at offset %d: marker key %x: %v", ErrCorruptBatch, b.BaseOffset, key, err)
	}
	typ := int16(binary.BigEndian.Uint16(key[2:]))
	if typ != controlAbort && typ != controlCommit {
		return 0, fmt.Errorf("%w: control batch at offset %d has marker type %d (only COMMIT and ABORT are mirrored)", ErrUnsupportedBatch, b.BaseOffset, typ)
	}
	return typ, nil
}

func recordKey(tail []byte) ([]byte, []byte, error) {
	n, k := binary.Varint(tail)
	if k <= 0 || n < -1 || int64(len(tail)-k) < n {
		return nil, nil, errors.New("bad key length")
	}
	if n < 0 {
		return nil, tail[k:], nil
	}
	return tail[k : k+int(n)], tail[k+int(n):], nil
}
