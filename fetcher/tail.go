package fetcher

// Checking the resume point. Offset identity makes the destination log end
// the next source offset to copy, which holds only if every destination
// entry below it is the source's entry at its offset. An owner checks that
// of each batch it appends (the broker's base offset must be the source's),
// but one write is not the owner's: a destination transaction coordinator
// that fails over may write a transaction's marker again
// (docs/KAFKA-FACTS.md, "duplicate marker"), after the owner's last append.
// Then no append of that owner shows the shift, the log end counts the
// duplicates, and a new owner resuming there would skip the source entries
// they displaced, silently (the soak's seed 2 found exactly this:
// docs/RELIABILITY.md). Duplicates that an append of the owner followed are
// caught by that append; so any that remain are the last entries of the
// log, and the last one is checked here before the log end is trusted.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// verifyTail checks the destination's last entry, at the resume point minus one, when it is
// a marker: a duplicate is always a marker, so a record there needs no second look (and
// plain topics pay one fetch, not two, which counts when thousands of partitions start). The
// marker must be the source's entry at that offset: a marker of the same outcome, written by
// the transactional id of the source marker's producer, or by an application's (the
// destination wrote it as the writable side, and the source holds its copy). It errs only on a proven
// difference; what cannot be compared passes: an offset below either log start, or one a
// cleaner emptied on either side (compaction takes records and markers away; a duplicate
// marker over such an offset hides nothing).
func (c *Copier) verifyTail(ctx context.Context, task Task, sp startPoint) error {
	last := sp.rp.logEnd - 1
	if last < 0 || last < sp.offs.srcStart {
		return nil
	}
	dst, ok, err := entryAt(ctx, c.cfg.Destination, task.Topic, task.Partition, last)
	if err != nil || !ok || !dst.Control {
		return wrapTail(task, "destination", err)
	}
	src, ok, err := entryAt(ctx, c.cfg.Source, task.Topic, task.Partition, last)
	if err != nil || !ok {
		return wrapTail(task, "source", err)
	}
	if !src.Control || src.Commit != dst.Commit {
		return tailMismatch(task, dst, src, "")
	}
	owner, err := c.markerOwner(ctx, task, src.Producer, dst.Producer)
	if err != nil {
		return fmt.Errorf("fetcher: %s/%d: checking the destination's last marker: %w", task.Topic, task.Partition, err)
	}
	if owner != "" {
		return tailMismatch(task, dst, src, owner)
	}
	return nil
}

// markerOwner finds the transactional id that wrote a destination marker,
// when it is one of the partition's own ids but not the one of the source
// marker's producer; "" when it is that one, when it is not one of ours (an
// application's, from when this destination was the writable side: the
// source's marker is then the copy), or when nobody knows (the id expired,
// or its producer id rolled over after 32,767 epochs: the marker's producer
// id is then nobody's).
func (c *Copier) markerOwner(ctx context.Context, task Task, srcPID, dstPID int64) (string, error) {
	want := txnIDFor(task.TransactionalID, srcPID)
	described, err := c.txn.describeTxns(ctx, want)
	if err != nil {
		return "", err
	}
	if d, ok := described[want]; ok && d.Err == nil && d.ProducerID == dstPID {
		return "", nil
	}
	listed, err := c.txn.adm.ListTransactions(ctx, []int64{dstPID}, nil)
	if err != nil && len(listed) == 0 {
		if unsupported(err) {
			return "", nil // Kafka before 3.0 cannot tell; nothing proven
		}
		return "", fmt.Errorf("listing the transactions of destination producer %d: %w", dstPID, err)
	}
	for id, l := range listed {
		if l.ProducerID != dstPID || id == want {
			continue
		}
		if _, _, ours := parseTxnID(task.TransactionalID, id); ours {
			return id, nil
		}
		// Not one of this partition's ids: an application wrote the marker while this
		// destination was writable (a promoted or failed-back cluster now mirrors the
		// cluster that copied it, so the source's marker is the copy and this is its
		// original, the drill's promote back found exactly this). A duplicate is written
		// only for the transactional id of the transaction it ends, one of ours.
		return "", nil
	}
	if c.log != nil {
		c.log.Warn("cannot tell which transactional id wrote the destination's last marker (its producer id expired or rolled over); trusting the log end",
			"topic", task.Topic, "partition", task.Partition, "producer_id", dstPID, "expected_transactional_id", want)
	}
	return "", nil
}

// tailMismatch is the error of a resume point the destination's last entry, a marker,
// disproves; owner names the transactional id that wrote it when that is known and is not the
// source marker's producer's.
func tailMismatch(task Task, dst, src LogEntry, owner string) error {
	held := withArticle(dst.String()) // a marker's description names its producer and epoch
	if owner != "" {
		held += fmt.Sprintf(" (transactional id %s)", owner)
	}
	return fmt.Errorf("%w: %s/%d: the destination's last entry, at offset %d, is %s where the source has %s: "+
		"the destination got a transaction marker twice (a destination transaction coordinator that fails over between writing a transaction's markers and completing it makes its successor write them again) "+
		"after the last owner's last write, so nothing that owner wrote showed the shift; resuming at the destination log end %d would skip the source entries the extra ones displaced, "+
		"so nothing more is appended, and the destination topic must be re-created to mirror it again",
		ErrOffsetMismatch, task.Topic, task.Partition, dst.Offset, held, withArticle(src.String()), dst.Offset+1)
}

// withArticle puts "a" or "an" before a LogEntry's description ("an ABORT marker").
func withArticle(s string) string {
	if s != "" && strings.ContainsRune("AEIOUaeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}

func wrapTail(task Task, side string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("fetcher: %s/%d: reading the %s's entry before the resume point: %w", task.Topic, task.Partition, side, err)
}

// entryAt reads a partition's entry at offset; ok is false when there is
// none (a compacted-away offset, or one below the log start).
func entryAt(ctx context.Context, cl *kgo.Client, topic string, partition int32, offset int64) (LogEntry, bool, error) {
	var batches []Batch
	err := atLeader(ctx, cl, topic, partition, func(m partitionMeta, _ *kgo.Broker) error {
		r, err := fetchOnce(ctx, cl, m, topic, partition, offset, 1<<20, 10*time.Millisecond)
		if err != nil {
			return err
		}
		batches = batches[:0]
		it := NewBatchIterator(r.RecordBatches)
		var b Batch
		for it.Next(&b) && b.BaseOffset <= offset {
			batches = append(batches, b)
		}
		return it.Err()
	})
	if errors.Is(err, kerr.OffsetOutOfRange) {
		return LogEntry{}, false, nil // the log starts above it now
	}
	if err != nil {
		return LogEntry{}, false, err
	}
	entries, err := entriesOf(batches, topic, partition, offset)
	if err != nil {
		return LogEntry{}, false, err
	}
	for _, e := range entries {
		if e.Offset == offset {
			return e, true, nil
		}
	}
	return LogEntry{}, false, nil
}
