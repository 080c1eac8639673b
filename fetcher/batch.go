package fetcher

// The batch codec reads Kafka v2 record batches out of a fetched record set
// and rewrites the few header fields a stock broker forces the mirror to
// change, without ever touching the (compressed) records section.
//
// v2 batch layout (big endian), offsets from the start of the batch:
//
//	 0 baseOffset int64          (outside the CRC)
//	 8 batchLength int32          bytes after this field
//	12 partitionLeaderEpoch int32 (outside the CRC)
//	16 magic int8                 = 2
//	17 crc uint32                 CRC32C of bytes 21..end
//	21 attributes int16
//	23 lastOffsetDelta int32
//	27 baseTimestamp int64
//	35 maxTimestamp int64
//	43 producerId int64
//	51 producerEpoch int16
//	53 baseSequence int32
//	57 recordCount int32
//	61 records...

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/enumname"
)

const (
	batchHeaderSize  = 61 // bytes before the first record
	batchLogOverhead = 12 // baseOffset + batchLength

	attrCompressionMask = 0x07
	attrTimestampType   = 0x08
	attrTransactional   = 0x10
	attrControl         = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Compression is the codec in a batch's attributes (bits 0-2).
type Compression int8

const (
	CompressionNone   Compression = 0
	CompressionGzip   Compression = 1
	CompressionSnappy Compression = 2
	CompressionLZ4    Compression = 3
	CompressionZstd   Compression = 4
)

var compressionNames = []string{
	CompressionNone:   "none",
	CompressionGzip:   "gzip",
	CompressionSnappy: "snappy",
	CompressionLZ4:    "lz4",
	CompressionZstd:   "zstd",
}

func (c Compression) String() string { return enumname.Of(c, "Compression", compressionNames) }

// Batch is one v2 record batch. Raw aliases the fetched bytes (the whole
// batch, baseOffset through the last record); the other fields are decoded
// copies of its header.
type Batch struct {
	BaseOffset           int64
	PartitionLeaderEpoch int32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
	Raw                  []byte
}

// LastOffset is the offset of the batch's last record (also for compacted
// batches, whose lastOffsetDelta survives compaction).
func (b *Batch) LastOffset() int64 { return b.BaseOffset + int64(b.LastOffsetDelta) }

// NextOffset is the offset right after the batch.
func (b *Batch) NextOffset() int64 { return b.LastOffset() + 1 }

func (b *Batch) Compression() Compression {
	return Compression(b.Attributes & attrCompressionMask)
}
func (b *Batch) IsTransactional() bool { return b.Attributes&attrTransactional != 0 }
func (b *Batch) IsControl() bool       { return b.Attributes&attrControl != 0 }

// LogAppendTime reports whether the batch's timestamps are broker-assigned.
func (b *Batch) LogAppendTime() bool { return b.Attributes&attrTimestampType != 0 }

// MaxTime is MaxTimestamp as a time.
func (b *Batch) MaxTime() time.Time { return time.UnixMilli(b.MaxTimestamp) }

// ErrCorruptBatch marks a record set that does not parse as v2 batches.
var ErrCorruptBatch = datapath.NewPermanent("corrupt record batch")

// ErrUnsupportedBatch marks a source batch a stock broker would refuse or
// renumber when it is produced as a client batch: control batches,
// transactional batches and batches with offset holes (compaction). Copying
// them needs the re-framing described in docs/ARCHITECTURE.md, which is not built
// yet; the partition must fail loudly rather than skip them.
var ErrUnsupportedBatch = datapath.NewPermanent("transactional/compacted source batches are not supported yet")

// ErrLogAppendTimeBatch marks a source batch stamped with LogAppendTime,
// whose timestamps a stock destination cannot keep (see CheckCopyable).
var ErrLogAppendTimeBatch = datapath.NewPermanent("LogAppendTime source batches are not supported: a stock destination would not keep their timestamps")

// BatchIterator walks the v2 batches of a fetched record set. A fetch
// response may end with a partial batch (the broker cuts at the byte limit);
// the iterator stops before it.
type BatchIterator struct {
	rest []byte
	err  error
}

// NewBatchIterator iterates over records, which is not copied.
func NewBatchIterator(records []byte) *BatchIterator {
	return &BatchIterator{rest: records}
}

// Next decodes the next complete batch. It returns false at the end of the
// set, at a trailing partial batch, or on a corrupt batch (see Err).
func (it *BatchIterator) Next(b *Batch) bool {
	if it.err != nil || len(it.rest) < batchLogOverhead {
		return false
	}
	length := int32(binary.BigEndian.Uint32(it.rest[8:]))
	if length < batchHeaderSize-batchLogOverhead {
		it.err = fmt.Errorf("%w: batch length %d at offset %d is below the v2 header size",
			ErrCorruptBatch, length, int64(binary.BigEndian.Uint64(it.rest)))
		return false
	}
	total := batchLogOverhead + int(length)
	if total > len(it.rest) {
		return false // trailing partial batch, cut by the fetch size limit
	}
	if magic := it.rest[16]; magic != 2 {
		it.err = fmt.Errorf("%w: magic %d at offset %d (only v2 batches are mirrored)",
			ErrCorruptBatch, magic, int64(binary.BigEndian.Uint64(it.rest)))
		return false
	}
	raw := it.rest[:total:total]
	it.rest = it.rest[total:]
	decodeHeader(raw, b)
	return true
}

// Err is the first decoding error, nil at a clean or partial end.
func (it *BatchIterator) Err() error { return it.err }

// Remaining is the number of undecoded bytes (a trailing partial batch).
func (it *BatchIterator) Remaining() int { return len(it.rest) }

func decodeHeader(raw []byte, b *Batch) {
	be := binary.BigEndian
	b.BaseOffset = int64(be.Uint64(raw[0:]))
	b.PartitionLeaderEpoch = int32(be.Uint32(raw[12:]))
	b.Attributes = int16(be.Uint16(raw[21:]))
	b.LastOffsetDelta = int32(be.Uint32(raw[23:]))
	b.FirstTimestamp = int64(be.Uint64(raw[27:]))
	b.MaxTimestamp = int64(be.Uint64(raw[35:]))
	b.ProducerID = int64(be.Uint64(raw[43:]))
	b.ProducerEpoch = int16(be.Uint16(raw[51:]))
	b.BaseSequence = int32(be.Uint32(raw[53:]))
	b.NumRecords = int32(be.Uint32(raw[57:]))
	b.Raw = raw
}

// CRCValid reports whether the stored CRC32C matches the batch.
func (b *Batch) CRCValid() bool { return crcMatches(b.Raw) }

// crcMatches reports whether a whole v2 batch's stored CRC32C matches its bytes.
func crcMatches(raw []byte) bool {
	return len(raw) >= batchHeaderSize && binary.BigEndian.Uint32(raw[17:]) == crc32.Checksum(raw[21:], castagnoli)
}

// CheckCopyable returns an ErrUnsupportedBatch (or ErrLogAppendTimeBatch) error when a stock broker would
// refuse the batch as a client produce (control bit, record count other than
// lastOffsetDelta+1, no records) or when producing it would change its meaning
// (transactional data without its markers, LogAppendTime timestamps).
//
// Holes are found without decompressing: Kafka keeps a compacted batch's
// baseOffset and lastOffsetDelta and drops records, so a batch with holes has
// recordCount < lastOffsetDelta+1. A v2 batch's inner offset deltas are
// strictly increasing and within 0..lastOffsetDelta, so recordCount ==
// lastOffsetDelta+1 means they are exactly 0..n-1 (the destination's
// LogValidator then keeps a compressed batch as sent).
//
// An uncompressed batch's deltas are not walked. The destination's
// LogValidator (assignOffsetsNonCompressed) does not read them either: it
// counts the records, sets lastOffset to its offset counter, and keeps every
// record's bytes, so each record is served at base+delta on the destination
// exactly as on the source, whatever the deltas say. It also refuses a batch
// whose records do not parse, as the source broker did when it took it.
// Walking them here was 6-18 % of a copier's CPU on uncompressed topics (a
// read of every record, out of cache when the answer was read ahead) and
// could only refuse a batch its source serves.
func (b *Batch) CheckCopyable() error {
	switch {
	case b.IsControl():
		return fmt.Errorf("%w (offset %d: control batch)", ErrUnsupportedBatch, b.BaseOffset)
	case b.IsTransactional():
		return fmt.Errorf("%w (offset %d: transactional batch of producer %d)", ErrUnsupportedBatch, b.BaseOffset, b.ProducerID)
	case b.LogAppendTime():
		// Verified on Kafka 4.3: a CreateTime destination keeps the batch's
		// max timestamp but clears the LogAppendTime bit, so consumers would
		// see each record's producer timestamp instead of the source's append
		// time; a LogAppendTime destination would stamp its own time. Neither
		// keeps the timestamps (invariant 2) without re-encoding records.
		return fmt.Errorf("%w (offset %d)", ErrLogAppendTimeBatch, b.BaseOffset)
	case b.NumRecords <= 0 || b.LastOffsetDelta < 0 || int64(b.NumRecords) != int64(b.LastOffsetDelta)+1:
		return fmt.Errorf("%w (offset %d: %d records for offsets %d..%d, compacted)", ErrUnsupportedBatch,
			b.BaseOffset, b.NumRecords, b.BaseOffset, b.LastOffset())
	}
	return nil
}

// Rewrite sets the fields our client produce must carry and patches the CRC
// for them (patchCRC): a batch whose CRC did not match its bytes still does
// not, and the destination refuses it. It changes raw in place and leaves
// every byte of the records section (the possibly compressed payload)
// untouched.
//
// baseOffset is set to 0: a client produce carries relative offsets and the
// broker assigns the real ones (LogValidator overwrites the base offset from
// its own counter), exactly as the Java producer sends it. The mirror then
// checks the assigned base offset in the Produce response. partitionLeaderEpoch
// is set to -1 (the broker stamps its own). The producer id, epoch and
// sequence are ours, so the destination deduplicates our resends and fences a
// replaced owner.
func Rewrite(raw []byte, producerID int64, producerEpoch int16, baseSequence int32) {
	be := binary.BigEndian
	be.PutUint64(raw[0:], 0)
	be.PutUint32(raw[12:], 0xFFFFFFFF)
	// The producer id, epoch and base sequence (bytes 43..56) are the only
	// fields it changes inside the CRC's range.
	var f [14]byte
	be.PutUint64(f[0:], uint64(producerID))
	be.PutUint16(f[8:], uint16(producerEpoch))
	be.PutUint32(f[10:], uint32(baseSequence))
	setCovered(raw, 43, f[:])
}

// setCovered writes now over raw[at:] inside the CRC's range (from byte 21 on) and
// patches the CRC for it (patchCRC): a batch that matched its CRC still does, and one
// that did not still does not.
func setCovered(raw []byte, at int, now []byte) {
	end := at + len(now)
	crc := patchCRC(binary.BigEndian.Uint32(raw[17:]), raw[at:end], now, len(raw)-end)
	copy(raw[at:], now)
	binary.BigEndian.PutUint32(raw[17:], crc)
}

// errCRCMismatch is the error for a source batch whose bytes do not match its CRC.
func errCRCMismatch(topic string, partition int32, offset int64, size int) error {
	return fmt.Errorf("%w: %s/%d: the source batch at offset %d (%d bytes) does not match its CRC: the source's log is damaged there, or the bytes were damaged on their way here",
		ErrCorruptBatch, topic, partition, offset, size)
}

// nextSequence is the base sequence after a batch of lastOffsetDelta+1
// records starting at seq, wrapping at MaxInt32 as the broker does.
func nextSequence(seq int32, lastOffsetDelta int32) int32 {
	n := int64(seq) + int64(lastOffsetDelta) + 1
	if n > 1<<31-1 {
		n -= 1 << 31
	}
	return int32(n)
}
