package fetcher

// Resuming a partition. The destination log end is the next source offset
// to copy (invariant 1), but an earlier owner may have left transactions in
// flight that would still move it: an EndTxn whose marker is not written
// yet, or an empty filler transaction that was begun and not ended. Start
// settles them first (waits for the markers; ends the filler, whose marker
// lands exactly where it was meant to), then reads the log end together with
// what the partition knows of the mirror's producers, and adopts the
// destination transactions still open: their source markers come later in
// the source log, and ending them then puts the markers at the right
// offsets. A re-initialised transactional id would instead abort such a
// transaction at once, so the copy's existing ids are never re-initialised
// (filler ids are, before a fill: control.go's settleFillers).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/flight"
)

type resumePoint struct {
	logEnd        int64
	writerNextSeq int32
	txns          map[int64]*destTxn // by source producer id
	seqHints      map[int64]seqHint  // by destination producer id
}

// inFlightStates are the coordinator states of a transaction that may still
// write to its partitions.
var inFlightStates = []string{"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}

func (c *Copier) resume(ctx context.Context, task Task) (resumePoint, error) {
	txns, err := c.txn.settle(ctx, c.log, task.TransactionalID, task.Topic, task.Partition)
	if err != nil {
		return resumePoint{}, err
	}
	end, producers, err := settledEnd(ctx, c.dst, task.Topic, task.Partition)
	if err != nil {
		return resumePoint{}, err
	}
	rp := resumePoint{logEnd: end, txns: txns, seqHints: map[int64]seqHint{}}
	byPID := map[int64]*destTxn{}
	for _, x := range txns {
		byPID[x.pid] = x
	}
	for _, pr := range producers {
		rp.seqHints[pr.ProducerID] = seqHint{epoch: int16(pr.ProducerEpoch), lastSeq: pr.LastSequence}
		if pr.ProducerID == task.Writer.ID && int16(pr.ProducerEpoch) == task.Writer.Epoch && pr.LastSequence >= 0 {
			rp.writerNextSeq = nextSequence(pr.LastSequence, 0)
		}
		if x := byPID[pr.ProducerID]; x != nil && pr.CurrentTxnStartOffset < 0 && int16(pr.ProducerEpoch) > x.epoch {
			// Asked again: an earlier owner's EndTxn that completed after settle
			// read the coordinator shows the same until the coordinator is read
			// after the marker (it records the end before it writes a marker).
			d, found, err := c.txn.describe(ctx, x.id)
			if err != nil {
				return resumePoint{}, err
			}
			if found && d.State == "Ongoing" && d.ProducerID == x.pid && d.ProducerEpoch == x.epoch {
				return resumePoint{}, coordinatorBehind(task, x, pr)
			}
			return resumePoint{}, fmt.Errorf("destination transaction %s moved while the copy resumed (now %s at epoch %d); resuming again", x.id, d.State, d.ProducerEpoch)
		}
		if pr.CurrentTxnStartOffset < 0 {
			continue
		}
		x := byPID[pr.ProducerID]
		if x == nil {
			return resumePoint{}, fmt.Errorf("%w: producer %d epoch %d has a transaction open since offset %d; the mirror cannot put the source's offsets around it (abort it, e.g. with kafka-transactions.sh abort, or re-create the topic)",
				ErrForeignTransaction, pr.ProducerID, pr.ProducerEpoch, pr.CurrentTxnStartOffset)
		}
		x.open = true
	}
	for _, x := range txns {
		x.planOpen = x.open
		x.seqEpoch, x.seqSet, x.nextSeq = x.epoch, true, 0
		if h, ok := rp.seqHints[x.pid]; ok && h.epoch == x.epoch && h.lastSeq >= 0 {
			x.nextSeq = nextSequence(h.lastSeq, 0)
		}
	}
	return rp, nil
}

// coordinatorBehind is the error of a partition whose last marker of x's
// producer id closed a transaction, at an epoch above the one the
// transaction coordinator still has x's transaction open at, with this
// partition in it. A consistent Kafka cannot show this: a marker is written
// only after its coordinator recorded the end (and, on transaction.version
// 2, the bumped epoch). Seen in a soak run: a destination broker restarted
// after SIGKILL acted as the transaction coordinator on its own log tail,
// which had never reached the other replicas, before its metadata caught
// up, and wrote the COMMIT marker of an end the new coordinator never heard
// of. Every write of x at the coordinator's epoch is refused as old, so the
// copy would be fenced and restarted forever; and ending the transaction the
// coordinator holds open would write a second marker past the source's
// offsets (so would its timeout, in transaction.max.timeout.ms). Nothing more
// is appended.
func coordinatorBehind(task Task, x *destTxn, pr kmsg.DescribeProducersResponseTopicPartitionActiveProducer) error {
	return fmt.Errorf("%w: %s/%d: the transaction coordinator has transactional id %s (producer %d) open at epoch %d with this partition in it, "+
		"but the partition's last marker of producer %d is at epoch %d and closed that transaction: the coordinator lost the end it wrote "+
		"(a destination broker that restarted may act as coordinator on records its replicas never got); ending the transaction now would put a marker "+
		"past the source's offsets, so nothing more is appended, and the destination topic must be re-created to mirror it again",
		ErrCoordinatorBehind, task.Topic, task.Partition, x.id, x.pid, x.epoch, pr.ProducerID, pr.ProducerEpoch)
}

// settleTimeout bounds how long a resume waits for the destination's high
// watermark to reach its leader's log end: past the followers' lag bound
// (replica.lag.time.max.ms, 30 s by default) a follower that does not
// acknowledge leaves the ISR and the high watermark moves on.
const settleTimeout = 2 * time.Minute

// settledEnd reads the destination's log end together with what it knows of
// the mirror's producers, once nothing moves it: the high watermark is the
// same before and after the producers were read, and it is the leader's log
// end. The producers' state counts every batch the leader appended; a high
// watermark below the leader's log end leaves out an earlier owner's write
// that the followers have not acknowledged yet, and resuming there would
// write those records again after it (the soak's soak.none/0: a new owner
// read 14444 while the last owner's two records above it waited for a frozen
// follower; its next write was appended at 14446).
func settledEnd(ctx context.Context, dst *kgo.Client, topic string, partition int32) (int64, []kmsg.DescribeProducersResponseTopicPartitionActiveProducer, error) {
	deadline := time.Now().Add(settleTimeout)
	for attempt := 0; ; attempt++ {
		before, err := listOffset(ctx, dst, topic, partition, -1)
		if err != nil {
			return 0, nil, fmt.Errorf("destination log end: %w", err)
		}
		producers, err := destinationProducers(ctx, dst, topic, partition)
		if err != nil {
			return 0, nil, err
		}
		end, err := listOffset(ctx, dst, topic, partition, -1)
		if err != nil {
			return 0, nil, fmt.Errorf("destination log end: %w", err)
		}
		leo, err := listOffset(ctx, dst, topic, partition, leaderLogEnd)
		if err != nil {
			return 0, nil, fmt.Errorf("destination leader's log end: %w", err)
		}
		switch {
		case end == before && leo <= end:
			return end, producers, nil // nothing landed while the producers were read, nothing is above it
		case time.Now().After(deadline) && leo > end:
			return 0, nil, fmt.Errorf("the destination partition's leader has %d records above its high watermark %d that its followers have not acknowledged for %s "+
				"(a write of an earlier owner in flight, or a follower far behind); resuming below them would write them twice", leo-end, end, settleTimeout)
		case time.Now().After(deadline):
			return 0, nil, fmt.Errorf("the destination partition keeps growing (%d -> %d) while nothing of the mirror writes to it", before, end)
		}
		t := time.NewTimer(min(time.Duration(attempt+1)*20*time.Millisecond, 500*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, nil, ctx.Err()
		case <-t.C:
		}
	}
}

// listTxnsFlight shares one ListTransactions (it asks every broker for the
// whole cluster's transactions) among the partitions that start together.
var listTxnsFlight flight.Group

// settle waits until none of a partition's destination transactional ids
// (prefix) is committing or aborting, ends filler transactions left open,
// and returns the source producers' transactions that are open with the
// partition in them.
func (t txnClient) settle(ctx context.Context, log *slog.Logger, prefix, topic string, partition int32) (map[int64]*destTxn, error) {
	deadline := time.Now().Add(time.Minute)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		listed, err := flight.Do(ctx, &listTxnsFlight, fmt.Sprintf("%p", t.adm), 30*time.Second, func(ctx context.Context) (kadm.ListedTransactions, error) {
			l, err := t.adm.ListTransactions(ctx, nil, inFlightStates)
			if len(l) > 0 {
				err = nil // some brokers answered: what they list is used, as before
			}
			return l, err
		})
		if err != nil && len(listed) == 0 {
			if unsupported(err) {
				// Before Kafka 3.0 (KIP-664): no transactions of the mirror's
				// can be found, so none is adopted. Plain topics copy as
				// ever; a transactional source needs a newer destination.
				log.Warn("the destination cannot list transactions (Kafka before 3.0): transactions left open by an earlier owner are not adopted",
					"topic", topic, "partition", partition, "err", err)
				return map[int64]*destTxn{}, nil
			}
			return nil, fmt.Errorf("listing the destination's transactions: %w", err)
		}
		var ids []string
		for id := range listed {
			if _, _, ok := parseTxnID(prefix, id); ok {
				ids = append(ids, id)
			}
		}
		txns := map[int64]*destTxn{}
		if len(ids) == 0 {
			return txns, nil
		}
		described, err := t.describeTxns(ctx, ids...)
		if err != nil && len(described) == 0 {
			return nil, fmt.Errorf("describing the mirror's destination transactions: %w", err)
		}
		pending := false
		for _, d := range described {
			if d.Err != nil {
				if d.Err == kerr.TransactionalIDNotFound {
					continue
				}
				return nil, fmt.Errorf("describing destination transaction %s: %w", d.TxnID, d.Err)
			}
			sourcePID, filler, _ := parseTxnID(prefix, d.TxnID)
			_, inPartition := d.Topics[topic][partition]
			switch {
			case d.State != "Ongoing":
				pending = pending || d.State != "CompleteCommit" && d.State != "CompleteAbort" && d.State != "Empty"
			case filler >= 0:
				// An empty filler transaction an earlier owner began: its
				// abort marker fills the offset it was begun for.
				x := &destTxn{id: d.TxnID, pid: d.ProducerID, epoch: d.ProducerEpoch, known: true}
				if _, _, err := t.end(ctx, x, false); err != nil {
					return nil, fmt.Errorf("ending filler transaction %s left by an earlier owner: %w", d.TxnID, err)
				}
				log.Info("ended a filler transaction an earlier owner left open", "topic", topic, "partition", partition, "transactional_id", d.TxnID)
				pending = true
			case inPartition:
				txns[sourcePID] = &destTxn{id: d.TxnID, sourcePID: sourcePID, pid: d.ProducerID, epoch: d.ProducerEpoch, known: true}
			}
		}
		if !pending {
			return txns, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("destination transactions of %s/%d are still committing or aborting after a minute", topic, partition)
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// Failover aborts the destination transactions a partition's copy left
// open, when no Copier runs it (a failed partition that fails over), and
// returns the last mirrored offset: the destination log end before the
// abort markers.
func Failover(ctx context.Context, dst *kgo.Client, topic string, partition int32, transactionalID string, log *slog.Logger) (lastMirrored int64, aborted int, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := newTxnClient(dst, kadm.NewClient(dst))
	txns, err := t.settle(ctx, log, transactionalID, topic, partition)
	if err != nil {
		return 0, 0, err
	}
	end, err := listOffset(ctx, dst, topic, partition, -1)
	if errors.Is(err, kerr.UnknownTopicOrPartition) && len(txns) == 0 {
		return 0, 0, nil // never created: nothing mirrored
	}
	if err != nil {
		return 0, 0, fmt.Errorf("destination log end of %s/%d: %w", topic, partition, err)
	}
	for _, x := range txns {
		if _, _, err := t.end(ctx, x, false); err != nil {
			return end, aborted, fmt.Errorf("aborting destination transaction %s at failover: %w", x.id, err)
		}
		aborted++
		log.Info("aborted a destination transaction at failover: its source marker was not copied", "topic", topic, "partition", partition, "transactional_id", x.id)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		now, err := listOffset(ctx, dst, topic, partition, -1)
		if err != nil {
			return end, aborted, fmt.Errorf("waiting for failover abort markers: %w", err)
		}
		if now >= end+int64(aborted) {
			return end, aborted, nil
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return end, aborted, fmt.Errorf("waiting for failover abort markers: %w", err)
		}
	}
}

// unsupported reports an error of a broker that does not have the request.
func unsupported(err error) bool {
	return errors.Is(err, kerr.UnsupportedVersion) || strings.Contains(err.Error(), "broker is too old") ||
		strings.Contains(err.Error(), "request key is unknown")
}

// NewWriter takes a producer id for a partition's idempotent writer. Keep it
// with the partition's state and give it to every later owner.
func NewWriter(ctx context.Context, dst *kgo.Client) (datapath.Producer, error) {
	var id datapath.Producer
	err := retryTxn(ctx, "InitProducerId (idempotent writer)", func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, dst)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		id = datapath.Producer{ID: resp.ProducerID, Epoch: resp.ProducerEpoch}
		return nil
	})
	return id, err
}
