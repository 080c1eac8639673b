package fetcher

// Transaction coordinator routing. The copy's transaction requests go to a
// coordinator this file finds (FindCoordinator) and forgets itself, not
// through kgo's coordinator cache: kgo (v1.22.3) forgets a transaction
// coordinator it cannot dial at once only for the requests it does not shard
// (EndTxn, InitProducerId). For the ones it shards (AddPartitionsToTxn,
// DescribeTransactions) it waits until its metadata stops listing the broker,
// and a copy whose partitions all wait in a transaction begin sends no
// Metadata request. So once the broker holding the coordinator crashed, every
// begin of a destination transaction failed to dial it while the broker
// stayed down, although the cluster had moved the coordinator seconds later
// (TestRealLeaderChanges in CI: both partitions stuck at AddPartitionsToTxn;
// TestRealTxnCoordinatorCrash reproduces it).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func newTxnClient(cl *kgo.Client, adm *kadm.Client) txnClient {
	return txnClient{cl: cl, adm: adm, coordinators: mustLRU[string, int32](4096)}
}

// coordinatorsOf returns the coordinator node of each transactional id,
// asking the cluster for those not known.
func (t txnClient) coordinatorsOf(ctx context.Context, ids ...string) (map[string]int32, error) {
	nodes := make(map[string]int32, len(ids))
	var missing []string
	for _, id := range ids {
		if n, ok := t.coordinators.Get(id); ok {
			nodes[id] = n
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nodes, nil
	}
	found := t.adm.FindTxnCoordinators(ctx, missing...)
	for _, id := range missing {
		r, ok := found[id]
		switch {
		case !ok:
			return nil, fmt.Errorf("FindCoordinator(%s): no answer: %w", id, kerr.CoordinatorNotAvailable)
		case r.Err != nil:
			return nil, fmt.Errorf("FindCoordinator(%s): %w", id, r.Err)
		}
		t.coordinators.Add(id, r.NodeID)
		nodes[id] = r.NodeID
	}
	return nodes, nil
}

// atCoordinator sends req to the coordinator of transactional id id. A
// request that does not reach it forgets the coordinator, so that the next
// try asks the cluster again.
func (t txnClient) atCoordinator(ctx context.Context, id string, req kmsg.Request) (kmsg.Response, error) {
	nodes, err := t.coordinatorsOf(ctx, id)
	if err != nil {
		return nil, err
	}
	return t.atNode(ctx, nodes[id], req, id)
}

// atNode sends req to coordinator node for the transactional ids ids; a
// request that does not reach it forgets their coordinator.
func (t txnClient) atNode(ctx context.Context, node int32, req kmsg.Request, ids ...string) (kmsg.Response, error) {
	if _, readOnly := req.(*kmsg.DescribeTransactionsRequest); !readOnly && t.lease != nil {
		if err := t.lease(); err != nil {
			return nil, err
		}
	}
	resp, err := t.cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		for _, id := range ids {
			t.coordinators.Remove(id)
		}
		return nil, err
	}
	return resp, nil
}

// coordinatorErr forgets id's coordinator when err says it is elsewhere (or
// not ready), and returns err.
func (t txnClient) coordinatorErr(id string, err error) error {
	if errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress) {
		t.coordinators.Remove(id)
	}
	return err
}

// describeTxns describes transactional ids, one DescribeTransactions per
// coordinator. Each id's own failure is in its Err; the error is for
// requests that got no answer.
func (t txnClient) describeTxns(ctx context.Context, ids ...string) (kadm.DescribedTransactions, error) {
	nodes, err := t.coordinatorsOf(ctx, ids...)
	if err != nil {
		return nil, err
	}
	byNode := map[int32][]string{}
	for _, id := range ids {
		byNode[nodes[id]] = append(byNode[nodes[id]], id)
	}
	described := make(kadm.DescribedTransactions, len(ids))
	for node, nodeIDs := range byNode {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = nodeIDs
		kresp, err := t.atNode(ctx, node, req, nodeIDs...)
		if err != nil {
			return nil, fmt.Errorf("DescribeTransactions at coordinator %d: %w", node, err)
		}
		for _, s := range kresp.(*kmsg.DescribeTransactionsResponse).TransactionStates {
			d := kadm.DescribedTransaction{
				Coordinator:    node,
				TxnID:          s.TransactionalID,
				State:          s.State,
				TimeoutMillis:  s.TimeoutMillis,
				StartTimestamp: s.StartTimestamp,
				ProducerID:     s.ProducerID,
				ProducerEpoch:  s.ProducerEpoch,
				Topics:         kadm.TopicsSet{},
				Err:            t.coordinatorErr(s.TransactionalID, kerr.ErrorForCode(s.ErrorCode)),
			}
			for _, st := range s.Topics {
				d.Topics.Add(st.Topic, st.Partitions...)
			}
			described[s.TransactionalID] = d
		}
	}
	for _, id := range ids {
		if _, ok := described[id]; !ok {
			return nil, fmt.Errorf("DescribeTransactions: coordinator %d did not answer for %s: %w", nodes[id], id, kerr.CoordinatorNotAvailable)
		}
	}
	return described, nil
}

// addPartitionsV3 caps AddPartitionsToTxn at version 3: versions 4 and up
// are the brokers' own verification form (KIP-890) and need CLUSTER_ACTION.
// kgo's sharder pins the same for a single transaction.
type addPartitionsV3 struct {
	*kmsg.AddPartitionsToTxnRequest
}

func (addPartitionsV3) MaxVersion() int16 { return 3 }

// completeTimeout bounds awaitComplete: a coordinator writes a transaction's
// markers within its request timeout, and one that moves to another broker
// meanwhile loads the transaction and writes them again.
const completeTimeout = 30 * time.Second

// awaitComplete waits until none of ids has a transaction in flight
// (inFlightStates): every marker its EndTxn asked for is in the log. EndTxn
// answers once the outcome is prepared, before the markers are written.
func (t txnClient) awaitComplete(ctx context.Context, ids []string) error {
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	for wait := 2 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		described, err := t.describeTxns(ctx, ids...)
		open := []string{fmt.Sprint(err)}
		if err == nil {
			open = open[:0]
			for _, id := range ids {
				d, ok := described[id]
				switch {
				case !ok:
					open = append(open, id+" (not described)")
				case d.Err != nil && d.Err != kerr.TransactionalIDNotFound:
					open = append(open, fmt.Sprintf("%s (%v)", id, d.Err))
				case slices.Contains(inFlightStates, d.State):
					open = append(open, id+" "+d.State)
				}
			}
			if len(open) == 0 {
				return nil
			}
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return fmt.Errorf("waiting for filler transactions to complete (last seen: %s): %w", strings.Join(open, ", "), err)
		}
	}
}
