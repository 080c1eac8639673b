package fetcher

// Destination transactions. A source transaction's batches land on the
// destination inside a transaction of their own, so that its COMMIT or ABORT
// marker is written by the destination's transaction coordinator at the
// source marker's offset (a client cannot produce control batches). Each
// (mirror partition, source producer id) has its own destination
// transactional id, "<partition id>-p<source producer id>"; a transaction
// holds one partition, because each partition's marker must land at that
// partition's own offset. Offsets the source log has no record at (holes
// left by compaction) are filled with markers of empty aborted transactions
// of the filler ids "<partition id>-f<k>": consumers skip control batches,
// so such filler is invisible to every client, read_committed or not.
//
// Why this is safe across owners without fencing the copy's ids by
// InitProducerId: every write is a deterministic function of the source log
// and the destination position, and an existing transactional id of a
// source producer is never re-initialised (that would abort an open
// transaction and put a marker at an arbitrary offset; filler ids are
// fenced that way, see settleFillers: their markers are interchangeable).
// A new owner adopts the ids' current producer id and epoch
// (DescribeTransactions) and continues. On a transaction.version 2
// destination every EndTxn bumps the epoch, so an old owner that wakes up
// and repeats an EndTxn is answered as a retry (no second marker) and its
// later writes carry a stale epoch and are refused.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/flight"
)

// destTxn is a destination transactional id of a mirror partition.
type destTxn struct {
	id        string
	sourcePID int64 // -1 for filler ids

	// Identity, once known (described, adopted or initialised). pid/epoch
	// change after EndTxn on a transaction.version 2 destination.
	known bool
	pid   int64
	epoch int16

	// Sequence of the next transactional batch under seqEpoch.
	seqEpoch int16
	nextSeq  int32
	seqSet   bool

	// open: the partition is in a transaction of this id that has not ended
	// (execution state, changed by the control goroutine under Copier.mu).
	open bool
	// planOpen: an opBegin is queued without its opEnd (planning state).
	planOpen bool
}

func txnIDFor(prefix string, sourcePID int64) string {
	return prefix + "-p" + strconv.FormatInt(sourcePID, 10)
}

func fillerIDFor(prefix string, k int) string { return prefix + "-f" + strconv.Itoa(k) }

// parseTxnID tells which of a partition's ids id is: a source producer's
// (sourcePID >= 0), a filler (filler >= 0), or neither.
func parseTxnID(prefix, id string) (sourcePID int64, filler int, ok bool) {
	rest, found := strings.CutPrefix(id, prefix+"-")
	if !found || len(rest) < 2 {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(rest[1:], 10, 64)
	if err != nil || n < 0 {
		return 0, 0, false
	}
	switch rest[0] {
	case 'p':
		return n, -1, true
	case 'f':
		return -1, int(n), true
	}
	return 0, 0, false
}

// txnTimeout is asked for every destination transaction: the broker default
// transaction.max.timeout.ms. A transaction stays open only while the copy
// runs from a source transaction's first batch to its marker, both already
// below the source's last stable offset when fetched.
const (
	txnTimeout         = 15 * time.Minute
	fallbackTxnTimeout = time.Minute
)

// txnClient sends the transaction coordinator requests of the copy, to
// coordinators it finds itself (txncoord.go). Make one with newTxnClient.
type txnClient struct {
	cl           *kgo.Client
	adm          *kadm.Client
	coordinators *lru.Cache[string, int32] // transactional id -> coordinator node
	// lease, when set, is asked right before every request that changes a
	// transaction (atNode): the copy's own requests. A control operation
	// checks the lease once when it starts, but its requests follow one
	// another over round trips (DescribeTransactions, FindCoordinator,
	// InitProducerId), and a process frozen in between (SIGSTOP, a paused VM)
	// wakes up with requests still to send after another owner took the
	// partition over: an InitProducerId of an id it read as new fences the
	// new owner's open transaction on it. TestFrozenInstanceWakesUpAsZombie
	// saw the new owner's transaction aborted 26 ms after the other instance
	// woke up with its lease lapsed (docs/DESIGN.md, "Owners and zombies").
	lease func() error
}

// retryTxn runs a transaction coordinator request until it succeeds, fails
// for good, or 30 s pass. Retried: CONCURRENT_TRANSACTIONS (an earlier
// commit or abort is still being written), retriable Kafka errors, and
// transport errors (the coordinator's broker died: the next try asks the
// cluster where the coordinator is now, see atCoordinator).
func retryTxn(ctx context.Context, what string, do func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for attempt := 0; ; attempt++ {
		if err = do(); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		if errors.Is(err, errLeaseLapsed) {
			return fmt.Errorf("%s: %w", what, err) // the control operation retries once the lease is back
		}
		var kafkaErr *kerr.Error
		if errors.As(err, &kafkaErr) && !kafkaErr.Retriable && !errors.Is(err, kerr.ConcurrentTransactions) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still failing after 30s: %w", what, err)
		}
		// CONCURRENT_TRANSACTIONS clears within milliseconds (the previous
		// marker being written): retry soon, then back off.
		t := time.NewTimer(min(time.Duration(1<<min(attempt, 8))*time.Millisecond, 500*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// describe returns a transactional id's coordinator state; found is false
// for an id the coordinator does not know.
func (t txnClient) describe(ctx context.Context, id string) (d kadm.DescribedTransaction, found bool, err error) {
	err = retryTxn(ctx, "DescribeTransactions("+id+")", func() error {
		ds, err := t.describeTxns(ctx, id)
		if err != nil && len(ds) == 0 {
			return err
		}
		d = ds[id]
		switch {
		case errors.Is(d.Err, kerr.TransactionalIDNotFound):
			found = false
			return nil
		case d.Err != nil:
			return d.Err
		}
		found = true
		return nil
	})
	return d, found, err
}

// initialise takes a producer id and epoch for a transactional id the
// coordinator does not know yet.
func (t txnClient) initialise(ctx context.Context, id string) (int64, int16, error) {
	timeout := txnTimeout
	var pid int64
	var epoch int16
	err := retryTxn(ctx, "InitProducerId("+id+")", func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr(id)
		req.TransactionTimeoutMillis = int32(timeout / time.Millisecond)
		req.ProducerID, req.ProducerEpoch = -1, -1
		kresp, err := t.atCoordinator(ctx, id, req)
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.InitProducerIDResponse)
		if err := t.coordinatorErr(id, kerr.ErrorForCode(resp.ErrorCode)); err != nil {
			if errors.Is(err, kerr.InvalidTransactionTimeout) && timeout != fallbackTxnTimeout {
				timeout = fallbackTxnTimeout // the destination caps transaction.max.timeout.ms lower
				return kerr.ConcurrentTransactions
			}
			return err
		}
		pid, epoch = resp.ProducerID, resp.ProducerEpoch
		return nil
	})
	return pid, epoch, err
}

// add puts the partition into the id's transaction (starting one).
func (t txnClient) add(ctx context.Context, x *destTxn, topic string, partition int32) error {
	return retryTxn(ctx, "AddPartitionsToTxn("+x.id+")", func() error {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch = x.id, x.pid, x.epoch
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic = topic
		rt.Partitions = []int32{partition}
		req.Topics = append(req.Topics, rt)
		kresp, err := t.atCoordinator(ctx, x.id, addPartitionsV3{req})
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.AddPartitionsToTxnResponse)
		if err := t.coordinatorErr(x.id, kerr.ErrorForCode(resp.ErrorCode)); err != nil {
			return err
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if err := t.coordinatorErr(x.id, kerr.ErrorForCode(rp.ErrorCode)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// end ends the id's transaction; on a transaction.version 2 destination
// the response carries the id's next producer id and epoch.
func (t txnClient) end(ctx context.Context, x *destTxn, commit bool) (pid int64, epoch int16, err error) {
	pid, epoch = x.pid, x.epoch
	err = retryTxn(ctx, "EndTxn("+x.id+")", func() error {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = x.id, x.pid, x.epoch, commit
		kresp, err := t.atCoordinator(ctx, x.id, req)
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.EndTxnResponse)
		if err := t.coordinatorErr(x.id, kerr.ErrorForCode(resp.ErrorCode)); err != nil {
			return err
		}
		if resp.Version >= 5 && resp.ProducerID >= 0 {
			pid, epoch = resp.ProducerID, resp.ProducerEpoch
		}
		return nil
	})
	return pid, epoch, err
}

// identify makes x's producer id and epoch known: an unknown id is
// initialised; a known one is adopted as the coordinator has it (waiting out
// a commit or abort in progress), and adopted says so. It reports whether x's
// transaction is open with the partition in it.
func (t txnClient) identify(ctx context.Context, x *destTxn, topic string, partition int32) (open, adopted bool, err error) {
	// Markers take milliseconds; a coordinator that keeps one id preparing for minutes is
	// answered with a retriable error (the operation is tried again later) rather than a
	// partition that waits here forever.
	deadline := time.Now().Add(2 * time.Minute)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		d, found, err := t.describe(ctx, x.id)
		if err != nil {
			return false, false, err
		}
		if !found {
			pid, epoch, err := t.initialise(ctx, x.id)
			if err != nil {
				return false, false, err
			}
			x.pid, x.epoch, x.known = pid, epoch, true
			return false, false, nil
		}
		switch d.State {
		case "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
			// Markers are being written: the epoch settles when they are.
			if time.Now().After(deadline) {
				return false, false, fmt.Errorf("destination transaction %s is still in %s after 2m: %w", x.id, d.State, kerr.ConcurrentTransactions)
			}
			if err := sleepCtx(ctx, wait); err != nil {
				return false, false, err
			}
			continue
		}
		x.pid, x.epoch, x.known = d.ProducerID, d.ProducerEpoch, true
		if d.State == "Ongoing" {
			_, in := d.Topics[topic][partition]
			return in, true, nil
		}
		return false, true, nil
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// destinationProducers answers DescribeProducers for one destination
// partition at its leader: every producer the partition knows, with its
// epoch, last sequence and open transaction.
func destinationProducers(ctx context.Context, cl *kgo.Client, topic string, partition int32) ([]kmsg.DescribeProducersResponseTopicPartitionActiveProducer, error) {
	var out []kmsg.DescribeProducersResponseTopicPartitionActiveProducer
	err := atLeader(ctx, cl, topic, partition, func(m partitionMeta, b *kgo.Broker) error {
		var err error
		out, err = describeProducersBatcher.Do(ctx, fmt.Sprintf("%p/%d", cl, m.leader), leaderPartition{topic, partition, m.leaderEpoch}, 30*time.Second,
			func(ctx context.Context, ps []leaderPartition) []flight.Result[[]kmsg.DescribeProducersResponseTopicPartitionActiveProducer] {
				return describeProducersAt(ctx, b, ps)
			})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("DescribeProducers(%s/%d) on the destination: %w", topic, partition, err)
	}
	return out, nil
}

// describeProducersBatcher merges the DescribeProducers of partitions that
// start together (per client and leader) into one request.
var describeProducersBatcher flight.Batcher[leaderPartition, []kmsg.DescribeProducersResponseTopicPartitionActiveProducer]

// describeProducersAt sends one DescribeProducers for ps to b and answers them in order.
func describeProducersAt(ctx context.Context, b *kgo.Broker, ps []leaderPartition) []flight.Result[[]kmsg.DescribeProducersResponseTopicPartitionActiveProducer] {
	req := kmsg.NewPtrDescribeProducersRequest()
	for topic, parts := range byTopic(ps) {
		rt := kmsg.NewDescribeProducersRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			rt.Partitions = append(rt.Partitions, p.partition)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return allFailed[[]kmsg.DescribeProducersResponseTopicPartitionActiveProducer](len(ps), err)
	}
	got := map[topicPartition]flight.Result[[]kmsg.DescribeProducersResponseTopicPartitionActiveProducer]{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			got[topicPartition{t.Topic, p.Partition}] = flight.Result[[]kmsg.DescribeProducersResponseTopicPartitionActiveProducer]{
				Val: p.ActiveProducers, Err: kerr.ErrorForCode(p.ErrorCode)}
		}
	}
	return answersFor(ps, got)
}
