// Package fetcher is kmirror's data path: it copies record batches from a
// source Kafka cluster into a destination cluster running unmodified Apache
// Kafka, at the same offsets (invariant 1) and without recompressing them
// (invariant 2).
//
// A stock broker assigns offsets itself and accepts only client batches, so
// the copy works by making the destination's offset counter equal to the
// source's and then appending every source batch as a client batch,
// checking in every Produce response that the broker assigned the source
// offset:
//
//   - EnsureDestinationTopic creates (or grows) the destination topic so it
//     keeps batches as sent (compression.type=producer, CreateTime, unlimited
//     timestamp skew) — topic.go.
//   - The Copier on its own, when it starts or when source retention
//     overtakes it, brings the destination log end to the source log start
//     with zstd filler batches and DeleteRecords — align.go, filler.go.
//   - The batch codec reads v2 batches from a Fetch response and rewrites the
//     fields a client produce must carry: baseOffset 0 (Kafka 4.3 refuses any
//     other value with INVALID_RECORD), partitionLeaderEpoch, and the
//     writer's producer id, epoch and sequence; then the CRC32C. The records
//     section is never touched — batch.go.
//   - The planner turns each source batch into destination operations:
//     appends, destination transactions replaying source transactions (their
//     markers land at the source markers' offsets), and invisible marker
//     filler for offsets compaction left without a record — plan.go, txn.go,
//     records.go (re-framing of compacted batches), control.go.
//   - The Copier fetches raw batches from the source leaders and writes them
//     to the destination leaders, several produces in flight per partition,
//     in order — copier.go (goroutines and locking), partition.go,
//     source.go, sink.go, start.go and resume.go (taking over from an
//     earlier owner), lifecycle.go, admin.go.
//
// LogAppendTime source batches stop the partition with a non-retriable
// ErrLogAppendTimeBatch naming the offset: nothing is skipped.
//
// The package persists nothing: the caller (the coordinator) owns partition
// states and learns about failures, fencing and filled gaps through
// datapath.Events (coordinator/datapath is the contract both sides speak).
// The resume point needs no checkpoint: the destination log end is the next
// source offset to copy.
package fetcher
