package fetcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
)

// plainBatch builds an uncompressed v2 batch whose records carry the given
// offset deltas (dense 0..n-1 unless the test says otherwise).
func plainBatch(baseOffset int64, lastOffsetDelta int32, deltas []int64, attrs int16) []byte {
	var recs []byte
	for _, d := range deltas {
		var body []byte
		body = append(body, 0)
		body = binary.AppendVarint(body, 0)
		body = binary.AppendVarint(body, d)
		body = binary.AppendVarint(body, 1)
		body = append(body, 'k')
		body = binary.AppendVarint(body, 3)
		body = append(body, "val"...)
		body = binary.AppendVarint(body, 0)
		recs = binary.AppendVarint(recs, int64(len(body)))
		recs = append(recs, body...)
	}
	b := make([]byte, batchHeaderSize, batchHeaderSize+len(recs))
	be := binary.BigEndian
	be.PutUint64(b[0:], uint64(baseOffset))
	be.PutUint32(b[8:], uint32(batchHeaderSize-batchLogOverhead+len(recs)))
	be.PutUint32(b[12:], 7)
	b[16] = 2
	be.PutUint16(b[21:], uint16(attrs))
	be.PutUint32(b[23:], uint32(lastOffsetDelta))
	be.PutUint64(b[27:], 1000)
	be.PutUint64(b[35:], 2000)
	be.PutUint64(b[43:], 55)
	be.PutUint16(b[51:], 3)
	be.PutUint32(b[53:], 9)
	be.PutUint32(b[57:], uint32(len(deltas)))
	b = append(b, recs...)
	be.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

func dense(n int) []int64 {
	d := make([]int64, n)
	for i := range d {
		d[i] = int64(i)
	}
	return d
}

func TestBatchIterator(t *testing.T) {
	a := plainBatch(100, 2, dense(3), 0)
	b := fillerBatch(1000, 5, -1, -1, -1, false)
	binary.BigEndian.PutUint64(b, 103)
	set := append(append(append([]byte{}, a...), b...), a[:20]...) // trailing partial batch
	it := NewBatchIterator(set)
	var got []Batch
	var x Batch
	for it.Next(&x) {
		got = append(got, x)
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	if len(got) != 2 || it.Remaining() != 20 {
		t.Fatalf("got %d batches, %d remaining", len(got), it.Remaining())
	}
	if got[0].BaseOffset != 100 || got[0].NumRecords != 3 || got[0].LastOffset() != 102 || got[0].ProducerID != 55 ||
		got[0].ProducerEpoch != 3 || got[0].BaseSequence != 9 || got[0].FirstTimestamp != 1000 || got[0].MaxTimestamp != 2000 ||
		got[0].PartitionLeaderEpoch != 7 || !got[0].CRCValid() {
		t.Fatalf("bad decode: %+v", got[0])
	}
	if got[1].BaseOffset != 103 || got[1].NumRecords != 1000 || got[1].Compression() != CompressionZstd || !got[1].CRCValid() {
		t.Fatalf("bad filler decode: %+v", got[1])
	}
	for _, g := range got {
		if err := g.CheckCopyable(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBatchIteratorCorrupt(t *testing.T) {
	a := plainBatch(0, 0, dense(1), 0)
	a[16] = 1
	it := NewBatchIterator(a)
	var b Batch
	if it.Next(&b) || !errors.Is(it.Err(), ErrCorruptBatch) {
		t.Fatalf("magic 1 accepted: %v", it.Err())
	}
}

func TestCheckCopyable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch []byte
		ok    bool
	}{
		{"dense", plainBatch(10, 4, dense(5), 0), true},
		{"control", plainBatch(10, 0, dense(1), attrControl|attrTransactional), false},
		{"transactional", plainBatch(10, 0, dense(1), attrTransactional), false},
		{"log append time", plainBatch(10, 0, dense(1), attrTimestampType), false},
		{"compacted count", plainBatch(10, 4, []int64{0, 2, 4}, 0), false},
		{"compacted empty", plainBatch(10, 4, nil, 0), false},
		// Not walked: the destination serves these records at the same offsets as the source.
		{"odd deltas with the right count", plainBatch(10, 2, []int64{0, 2, 3}, 0), true},
		{"compressed compacted", func() []byte {
			b := fillerBatch(10, 0, -1, -1, -1, false)
			binary.BigEndian.PutUint32(b[23:], 20) // lastOffsetDelta beyond count
			return b
		}(), false},
	} {
		var b Batch
		if !NewBatchIterator(tc.batch).Next(&b) {
			t.Fatalf("%s: no batch", tc.name)
		}
		err := b.CheckCopyable()
		if tc.ok != (err == nil) {
			t.Fatalf("%s: CheckCopyable = %v", tc.name, err)
		}
		if err != nil && !errors.Is(err, ErrUnsupportedBatch) && !errors.Is(err, ErrLogAppendTimeBatch) {
			t.Fatalf("%s: %v is not ErrUnsupportedBatch", tc.name, err)
		}
	}
}

func TestRewriteKeepsPayload(t *testing.T) {
	raw := plainBatch(12345, 4, dense(5), int16(CompressionNone))
	orig := append([]byte(nil), raw...)
	Rewrite(raw, 77, 4, 1000)
	var b Batch
	if !NewBatchIterator(raw).Next(&b) {
		t.Fatal("no batch")
	}
	if b.BaseOffset != 0 || b.ProducerID != 77 || b.ProducerEpoch != 4 || b.BaseSequence != 1000 || b.PartitionLeaderEpoch != -1 || !b.CRCValid() {
		t.Fatalf("bad rewrite: %+v", b)
	}
	if !bytes.Equal(raw[batchHeaderSize:], orig[batchHeaderSize:]) || !bytes.Equal(raw[21:43], orig[21:43]) || !bytes.Equal(raw[57:61], orig[57:61]) {
		t.Fatal("rewrite touched bytes it must keep")
	}
}

// A batch whose bytes no longer match its CRC (damaged on the source's disk or
// on its way) still does not after Rewrite, so the destination refuses it
// instead of storing the damage under a fresh CRC.
func TestRewriteKeepsADamagedBatchDamaged(t *testing.T) {
	raw := plainBatch(12345, 4, dense(5), int16(CompressionNone))
	raw[len(raw)-3] ^= 0x10 // one bit of the last record
	Rewrite(raw, 77, 4, 1000)
	if crcMatches(raw) {
		t.Fatal("Rewrite gave a damaged batch a matching CRC")
	}
	raw[len(raw)-3] ^= 0x10 // the bit put back: the patched CRC is the true one
	if !crcMatches(raw) {
		t.Fatal("the patched CRC is not the batch's CRC")
	}
}

// crcMismatch is the stored CRC xor the CRC of the bytes: 0 for a sound batch.
func crcMismatch(raw []byte) uint32 {
	return binary.BigEndian.Uint32(raw[17:]) ^ crc32.Checksum(raw[21:], castagnoli)
}

func TestNextSequenceWraps(t *testing.T) {
	for _, tc := range []struct{ seq, delta, want int32 }{
		{0, 0, 1}, {5, 9, 15}, {1<<31 - 1, 0, 0}, {1<<31 - 2, 2, 1},
	} {
		if got := nextSequence(tc.seq, tc.delta); got != tc.want {
			t.Fatalf("nextSequence(%d,%d)=%d want %d", tc.seq, tc.delta, got, tc.want)
		}
	}
}

func fuzzSeeds(f *testing.F) {
	f.Add(plainBatch(0, 2, dense(3), 0))
	f.Add(append(plainBatch(5, 0, dense(1), attrTransactional), plainBatch(6, 3, []int64{0, 3}, 0)...))
	f.Add(fillerBatch(50, 1, 2, 3, 4, true))
	f.Add([]byte{})
	f.Add(make([]byte, 70))
}

// FuzzBatchIterator: any byte string iterates without panicking, every batch
// lies inside the input and decodes to its own header fields, and the
// batches plus the remainder account for the input.
func FuzzBatchIterator(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		it := NewBatchIterator(data)
		var b Batch
		used := 0
		for it.Next(&b) {
			if len(b.Raw) < batchHeaderSize || !bytes.Equal(b.Raw, data[used:used+len(b.Raw)]) {
				t.Fatalf("batch does not alias the input at %d", used)
			}
			used += len(b.Raw)
			_ = b.CheckCopyable()
		}
		if it.Err() == nil && used+it.Remaining() != len(data) {
			t.Fatalf("used %d + remaining %d != %d", used, it.Remaining(), len(data))
		}
	})
}

// FuzzRewrite: rewriting any decodable batch keeps the records section and
// the CRC-covered header fields we do not own, and keeps its CRC exactly as
// right or wrong as it was: the stored CRC differs from the bytes' own by the
// same bits before and after.
func FuzzRewrite(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		data = append([]byte(nil), data...) // Rewrite changes it, and the engine's input is not ours
		it := NewBatchIterator(data)
		var b Batch
		for it.Next(&b) {
			orig := append([]byte(nil), b.Raw...)
			if err := b.CheckCopyable(); err == nil && (b.IsControl() || b.IsTransactional() || int64(b.NumRecords) != int64(b.LastOffsetDelta)+1) {
				t.Fatalf("CheckCopyable accepted %+v", b)
			}
			Rewrite(b.Raw, 1, 2, 3)
			var r Batch
			if !NewBatchIterator(b.Raw).Next(&r) || r.ProducerID != 1 || r.ProducerEpoch != 2 || r.BaseSequence != 3 || r.BaseOffset != 0 {
				t.Fatalf("rewritten batch does not decode: %+v", r)
			}
			if before, after := crcMismatch(orig), crcMismatch(b.Raw); before != after {
				t.Fatalf("CRC mismatch %#x before the rewrite, %#x after", before, after)
			}
			if !bytes.Equal(b.Raw[21:43], orig[21:43]) || !bytes.Equal(b.Raw[57:], orig[57:]) {
				t.Fatal("rewrite changed bytes outside its fields")
			}
		}
	})
}

// BenchmarkBatchRewrite measures the per-batch cost of the copier's CPU work:
// decode the header, CheckCopyable (header fields only) and Rewrite (header
// fields, the CRC patched for them).
func BenchmarkBatchRewrite(b *testing.B) {
	for _, bc := range []struct {
		name string
		raw  []byte
	}{
		{"uncompressed-10rec", plainBatch(0, 9, dense(10), 0)},
		{"uncompressed-5000rec", plainBatch(0, 4999, dense(5000), 0)},
		{"zstd-8000rec", fillerBatch(8000, 0, -1, -1, -1, false)},
		{"zstd-1000000rec", fillerBatch(maxFillerRecords, 0, -1, -1, -1, false)},
	} {
		b.Run(fmt.Sprintf("%s-%dB", bc.name, len(bc.raw)), func(b *testing.B) {
			raw := append([]byte(nil), bc.raw...)
			b.SetBytes(int64(len(raw)))
			var x Batch
			for b.Loop() {
				it := NewBatchIterator(raw)
				it.Next(&x)
				if err := x.CheckCopyable(); err != nil {
					b.Fatal(err)
				}
				Rewrite(x.Raw, 1, 1, 0)
			}
		})
	}
}
