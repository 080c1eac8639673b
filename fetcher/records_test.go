package fetcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
)

// compressedBatch builds a v2 batch at baseOffset whose records carry the
// given offset deltas, compressed with codec.
func compressedBatch(t testing.TB, baseOffset int64, lastOffsetDelta int32, deltas []int64, codec Compression, attrs int16) []byte {
	plain := plainBatch(baseOffset, lastOffsetDelta, deltas, attrs)
	if codec == CompressionNone {
		return plain
	}
	var b Batch
	decodeHeader(plain, &b)
	recs, err := b.records()
	if err != nil {
		t.Fatal(err)
	}
	var section []byte
	for _, r := range recs {
		section = appendRecord(section, r, r.offset-baseOffset)
	}
	cp, err := compressorFor(codec)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	out, _ := cp.Compress(&buf, section)
	raw := append(append([]byte(nil), plain[:batchHeaderSize]...), out...)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-batchLogOverhead))
	binary.BigEndian.PutUint16(raw[21:], uint16(attrs)|uint16(codec))
	Rewrite(raw, 55, 3, 9)
	// The records section and attributes changed above: the batch's own CRC
	// (Rewrite only patches the one it finds).
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], castagnoli))
	binary.BigEndian.PutUint64(raw, uint64(baseOffset))
	return raw
}

func TestRecordsAndReframe(t *testing.T) {
	for _, codec := range []Compression{CompressionNone, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			raw := compressedBatch(t, 100, 9, []int64{0, 3, 4, 9}, codec, 0)
			var b Batch
			if !NewBatchIterator(raw).Next(&b) {
				t.Fatal("batch did not decode")
			}
			recs, err := b.records()
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, r := range recs {
				got = append(got, r.offset)
			}
			if want := []int64{100, 103, 104, 109}; !equalInts(got, want) {
				t.Fatalf("offsets %v, want %v", got, want)
			}
			// A run re-framed: dense deltas, same codec and records.
			run, err := reframe(&b, recs[1:3])
			if err != nil {
				t.Fatal(err)
			}
			var rb Batch
			if !NewBatchIterator(run).Next(&rb) {
				t.Fatal("re-framed batch did not decode")
			}
			if rb.Compression() != codec || rb.NumRecords != 2 || rb.LastOffsetDelta != 1 || rb.FirstTimestamp != b.FirstTimestamp || !rb.CRCValid() {
				t.Fatalf("re-framed header %+v", withoutRaw(rb))
			}
			rr, err := rb.records()
			if err != nil {
				t.Fatal(err)
			}
			for i := range rr {
				if rr[i].offset != int64(i) || !bytes.Equal(rr[i].tail, recs[1+i].tail) || rr[i].timestampDelta != recs[1+i].timestampDelta {
					t.Fatalf("re-framed record %d: %+v, source %+v", i, rr[i], recs[1+i])
				}
			}
			if codec == CompressionNone {
				if err := checkDenseDeltas(run[batchHeaderSize:], 2); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := reframe(&b, recs[0:2]); err == nil {
				t.Fatal("re-framing offsets 100 and 103 together should fail")
			}
		})
	}
}

func TestTruncatedCopyKeepsRecords(t *testing.T) {
	raw := compressedBatch(t, 7, 9, []int64{0, 1, 2}, CompressionZstd, 0)
	var b Batch
	NewBatchIterator(raw).Next(&b)
	cp := truncatedCopy(&b, 3)
	var c Batch
	NewBatchIterator(cp).Next(&c)
	if c.LastOffsetDelta != 2 || c.NumRecords != 3 || !bytes.Equal(cp[batchHeaderSize:], raw[batchHeaderSize:]) || !c.CRCValid() {
		t.Fatalf("truncated copy %+v", withoutRaw(c))
	}
	if b.LastOffsetDelta != 9 {
		t.Fatal("truncatedCopy changed its source")
	}
}

func TestRecordsCorrupt(t *testing.T) {
	good := plainBatch(0, 2, dense(3), 0)
	cases := map[string][]byte{
		"deltas not increasing": plainBatch(0, 2, []int64{1, 0, 2}, 0),
		"delta past last":       plainBatch(0, 1, []int64{0, 5}, 0),
		"trailing bytes":        append(append([]byte(nil), good...), 1, 2, 3),
		"truncated":             good[:len(good)-3],
	}
	for name, raw := range cases {
		var b Batch
		decodeHeader(raw, &b)
		b.Raw = raw
		if _, err := b.records(); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: %v, want ErrCorruptBatch", name, err)
		}
	}
	bad := compressedBatch(t, 0, 2, dense(3), CompressionZstd, 0)
	bad[len(bad)-2] ^= 0xff
	var b Batch
	decodeHeader(bad, &b)
	if _, err := b.records(); !errors.Is(err, ErrCorruptBatch) {
		t.Errorf("corrupt zstd: %v, want ErrCorruptBatch", err)
	}
}

// controlBatch builds a marker as the coordinator writes it.
func controlBatch(typ int16) []byte {
	var key, value []byte
	key = binary.BigEndian.AppendUint16(key, 0)
	key = binary.BigEndian.AppendUint16(key, uint16(typ))
	value = binary.BigEndian.AppendUint16(value, 0)
	value = binary.BigEndian.AppendUint32(value, 7)
	var body []byte
	body = append(body, 0)
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, 0)
	body = binary.AppendVarint(body, int64(len(key)))
	body = append(body, key...)
	body = binary.AppendVarint(body, int64(len(value)))
	body = append(body, value...)
	body = binary.AppendVarint(body, 0)
	recs := binary.AppendVarint(nil, int64(len(body)))
	recs = append(recs, body...)
	raw := plainBatch(40, 0, nil, attrControl|attrTransactional)
	raw = append(raw[:batchHeaderSize], recs...)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-batchLogOverhead))
	binary.BigEndian.PutUint32(raw[57:], 1)
	return raw
}

func TestControlType(t *testing.T) {
	for _, typ := range []int16{controlAbort, controlCommit} {
		var b Batch
		decodeHeader(controlBatch(typ), &b)
		got, err := b.controlType()
		if err != nil || got != typ {
			t.Fatalf("marker type %d: got %d, %v", typ, got, err)
		}
	}
	var b Batch
	decodeHeader(controlBatch(5), &b)
	if _, err := b.controlType(); !errors.Is(err, ErrUnsupportedBatch) {
		t.Fatalf("marker type 5: %v, want ErrUnsupportedBatch", err)
	}
}

func TestParseTxnID(t *testing.T) {
	prefix := "kmirror-m-abc-1"
	for id, want := range map[string][3]int64{
		txnIDFor(prefix, 42):    {42, -1, 1},
		fillerIDFor(prefix, 3):  {-1, 3, 1},
		"kmirror-m-abc-10-p42":  {0, 0, 0}, // partition 10, not 1
		"kmirror-m-abc-1-x1":    {0, 0, 0},
		"kmirror-m-abc-1-p":     {0, 0, 0},
		"kmirror-m-abc-1-p-5":   {0, 0, 0},
		"kmirror-m-abc-1-pfive": {0, 0, 0},
	} {
		pid, filler, ok := parseTxnID(prefix, id)
		got := [3]int64{pid, int64(filler), 0}
		if ok {
			got[2] = 1
		} else {
			got = [3]int64{}
		}
		if got != want {
			t.Errorf("parseTxnID(%q) = %v, want %v", id, got, want)
		}
	}
}

// FuzzRecords decodes arbitrary batches record by record (as the planner
// does for compacted and control batches) and re-frames what decodes: no
// panic, and a re-framed run decodes to the same records.
func FuzzRecords(f *testing.F) {
	f.Add(plainBatch(0, 9, []int64{0, 3, 4, 9}, 0))
	f.Add(compressedBatch(f, 5, 9, []int64{1, 2, 8}, CompressionZstd, 0))
	f.Add(compressedBatch(f, 5, 3, dense(4), CompressionGzip, attrTransactional))
	f.Add(controlBatch(controlCommit))
	f.Fuzz(func(t *testing.T, raw []byte) {
		it := NewBatchIterator(raw)
		var b Batch
		for it.Next(&b) {
			_, _ = b.controlType()
			recs, err := b.records()
			if err != nil || len(recs) == 0 {
				continue
			}
			run := 1
			for run < len(recs) && recs[run].offset == recs[run-1].offset+1 {
				run++
			}
			out, err := reframe(&b, recs[:run])
			if err != nil {
				t.Fatalf("re-framing decoded records: %v", err)
			}
			var rb Batch
			if !NewBatchIterator(out).Next(&rb) {
				t.Fatal("re-framed batch does not decode")
			}
			again, err := rb.records()
			if err != nil || len(again) != run {
				t.Fatalf("re-framed batch: %d records, %v; want %d", len(again), err, run)
			}
		}
	})
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A compacted partition's cleaner removes a transaction marker but keeps its
// batch, empty, for the producer's state: the log reader (mirrortest, the
// soak's checker) reads it as a compacted-away offset, not a corrupt batch
// (the soak, seed 1, failed on one in a destination log).
func TestEntriesOfEmptyControlBatch(t *testing.T) {
	marker := controlBatch(controlCommit)
	empty := append([]byte(nil), marker[:batchHeaderSize]...)
	binary.BigEndian.PutUint32(empty[8:], uint32(len(empty)-batchLogOverhead))
	binary.BigEndian.PutUint32(empty[57:], 0)
	for _, raw := range [][]byte{marker, empty} {
		binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], castagnoli))
	}
	var withMarker, cleaned Batch
	decodeHeader(marker, &withMarker)
	decodeHeader(empty, &cleaned)
	got, err := entriesOf([]Batch{cleaned}, "t", 0, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("an empty control batch read as %v, %v; want no entry", got, err)
	}
	got, err = entriesOf([]Batch{withMarker}, "t", 0, 0)
	if err != nil || len(got) != 1 || !got[0].Control || !got[0].Commit {
		t.Fatalf("a COMMIT marker read as %v, %v", got, err)
	}
}

// checkDenseDeltas walks uncompressed v2 records (length varint, attributes,
// timestampDelta varint, offsetDelta varint, ...) and checks offset deltas
// are 0..n-1 and that exactly n records fill the section.
func checkDenseDeltas(records []byte, n int32) error {
	for i := int32(0); i < n; i++ {
		length, k := binary.Varint(records)
		if k <= 0 || length < 0 || int64(len(records)-k) < length {
			return fmt.Errorf("record %d is truncated", i)
		}
		rec := records[k : k+int(length)]
		records = records[k+int(length):]
		if len(rec) < 1 {
			return fmt.Errorf("record %d is empty", i)
		}
		rec = rec[1:] // attributes
		_, k = binary.Varint(rec)
		if k <= 0 {
			return fmt.Errorf("record %d has a bad timestamp delta", i)
		}
		delta, k2 := binary.Varint(rec[k:])
		if k2 <= 0 {
			return fmt.Errorf("record %d has a bad offset delta", i)
		}
		if delta != int64(i) {
			return fmt.Errorf("record %d has offset delta %d (offset hole)", i, delta)
		}
	}
	if len(records) != 0 {
		return fmt.Errorf("%d bytes after the last record", len(records))
	}
	return nil
}
