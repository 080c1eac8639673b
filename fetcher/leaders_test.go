package fetcher

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestRealLeaderChanges kills (SIGKILL) the source leader of one partition
// and then the destination leader of the other, in the middle of a copy
// between two 3-broker clusters (replication factor 3 on both), while plain
// records and transactions keep arriving: the copier finds the new leaders,
// resends what was in flight with the same sequences, and every record and
// marker still lands at its source offset, once.
//
// The destination broker is killed while no destination transaction is
// ending, and transactions resume once it is down (so they begin at the
// coordinators' new brokers). A destination transaction coordinator that
// dies between writing a transaction's markers and completing it makes its
// successor write the markers again, and Kafka 4.3 appends the second
// marker ("Idempotent transaction marker retry detected ... allowing
// duplicate marker write"): one offset the source does not have, which no
// mirror can take back. A CI run hit it with transactions flowing through
// the kill; the copier reports it as an offset mismatch (docs/DESIGN.md).
func TestRealLeaderChanges(t *testing.T) {
	kafkatest.RequireReal(t)
	p := &pair{src: kafkatest.Start(t, kafkatest.Brokers(3)), dst: kafkatest.Start(t, kafkatest.Brokers(3))}
	snap := goleak.IgnoreCurrent()
	// Restarted brokers are waited on by the harness until the clusters stop.
	t.Cleanup(func() {
		goleak.VerifyNone(t, snap, goleak.IgnoreAnyFunction("github.com/kmirror/kmirror/internal/kafkatest.(*RealCluster).launch.func1"))
	})
	e := newEnv(t, p)
	// Two broker kills and restarts take minutes on a loaded machine: a budget of its own,
	// beyond newEnv's 2 minutes (each wait below still has its own limit).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	const topic = "failover"
	e.createReplicated(topic, 2)
	for part := int32(0); part < 2; part++ {
		e.produce(topic, part, 3000, 20, kgo.ZstdCompression(), "fo")
	}
	e.ensureDestination(topic)
	c := e.newCopier(Config{FetchMaxBytes: 4 << 10, MaxBufferedBytes: 32 << 10})
	defer c.Close()
	var evs events
	for part := int32(0); part < 2; part++ {
		if err := c.Start(e.ctx, Task{Topic: topic, Partition: part, TransactionalID: fmt.Sprintf("mirror-failover-%d", part)}, evs.on); err != nil {
			t.Fatal(err)
		}
	}
	stopWriting := e.writeTxns(topic, 2, "failover-app")
	polltest.Eventually(t, time.Minute, "copy under way", func() (bool, string) {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd > 800, ""
	})
	i, id := e.leaderIndex(p.src, e.src, topic, 0)
	before, _ := c.Progress(topic, 0)
	p.src.KillBroker(t, i)
	t.Logf("killed source broker %d (leader of %s/0) at destination log end %d", id, topic, before.DestinationLogEnd)
	// More records after each kill, so the copy has to go on past it.
	e.produce(topic, 0, 500, 20, kgo.ZstdCompression(), "after-source-kill")
	_, hw := e.offsets(e.srcAdm, topic, 0)
	polltest.Eventually(t, time.Minute, "copy of partition 0 goes on from the new source leader", func() (bool, string) {
		pr, _ := c.Progress(topic, 0)
		return pr.DestinationLogEnd >= hw, ""
	})
	p.src.StartBroker(t, i)
	// No destination transaction may be ending when its broker dies (see above):
	// the copy catches up with the source's last transaction and the destination
	// coordinators complete theirs before the kill.
	stopWriting()
	for part := int32(0); part < 2; part++ {
		e.waitCopied(c, topic, part)
	}
	e.waitTxnsSettled(c, topic, 2)
	j, jid := e.leaderIndex(p.dst, e.dst, topic, 1)
	before, _ = c.Progress(topic, 1)
	p.dst.KillBroker(t, j)
	t.Logf("killed destination broker %d (leader of %s/1) at destination log end %d", jid, topic, before.DestinationLogEnd)
	stopWriting = e.writeTxns(topic, 2, "failover-app-2")
	e.produce(topic, 1, 500, 20, kgo.ZstdCompression(), "after-destination-kill")
	_, hw = e.offsets(e.srcAdm, topic, 1)
	polltest.Eventually(t, time.Minute, "copy of partition 1 goes on to the new destination leader", func() (bool, string) {
		pr, _ := c.Progress(topic, 1)
		return pr.DestinationLogEnd >= hw, ""
	})
	p.dst.StartBroker(t, j)
	stopWriting()
	for part := int32(0); part < 2; part++ {
		last := e.sentinel(topic, part)
		e.waitCopied(c, topic, part)
		if _, err := c.Stop(topic, part); err != nil {
			t.Fatal(err)
		}
		n := e.verifyEntries(topic, part, false)
		e.sameConsumers(topic, part, last)
		t.Logf("%s/%d: %d records and markers at identical offsets after the leader changes", topic, part, n)
	}
	if f := evs.failures(); len(f) > 0 {
		t.Fatalf("events: %+v", f)
	}
}

// TestRealTxnCoordinatorCrash kills (SIGKILL) the broker that coordinates a
// destination transactional id: describing the id, beginning its next
// transaction and ending it must reach the coordinator on its new broker.
// kgo's own routing kept the dead broker for AddPartitionsToTxn and
// DescribeTransactions for as long as the client lived (txncoord.go).
func TestRealTxnCoordinatorCrash(t *testing.T) {
	kafkatest.RequireReal(t)
	c := kafkatest.Start(t, kafkatest.Brokers(3))
	e := newEnv(t, &pair{src: c, dst: c})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	const topic = "coordinator-crash"
	resp, err := e.dstAdm.CreateTopic(e.ctx, 1, 3, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := waitPartitionsLed(e.ctx, e.dstAdm, topic, 1); err != nil {
		t.Fatal(err)
	}
	tc := newTxnClient(e.dst, e.dstAdm)
	x := &destTxn{id: "coordinator-crash-p1"}
	begin := func(x *destTxn) error {
		if !x.known {
			if _, _, err := tc.identify(e.ctx, x, topic, 0); err != nil {
				return err
			}
		}
		return tc.add(e.ctx, x, topic, 0)
	}
	if err := begin(x); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tc.end(e.ctx, x, false); err != nil {
		t.Fatal(err)
	}
	found := e.dstAdm.FindTxnCoordinators(e.ctx, x.id)[x.id]
	if found.Err != nil {
		t.Fatal(found.Err)
	}
	i := slices.Index(c.NodeIDs(), found.NodeID)
	if i < 0 {
		t.Fatalf("coordinator %d is not a broker of the cluster %v", found.NodeID, c.NodeIDs())
	}
	c.KillBroker(t, i)
	t.Logf("killed broker %d, the coordinator of %s", found.NodeID, x.id)
	// A new owner's first steps (describe, then begin), each retried as the
	// copier retries a failed control operation.
	y := &destTxn{id: x.id}
	var last error
	polltest.Eventually(t, 3*time.Minute, "a transaction begins at the new coordinator", func() (bool, string) {
		last = begin(y)
		if last != nil {
			t.Logf("not yet: %v", last)
		}
		return last == nil, ""
	})
	if _, _, err := tc.end(e.ctx, y, false); err != nil {
		t.Fatal(err)
	}
	now := e.dstAdm.FindTxnCoordinators(e.ctx, x.id)[x.id]
	t.Logf("%s began and ended at coordinator %d after broker %d died", x.id, now.NodeID, found.NodeID)
}

// createReplicated creates a source topic of n partitions, replicated on 3
// brokers with min.insync.replicas 2, and waits until each has a leader.
func (e *env) createReplicated(topic string, n int32) {
	e.t.Helper()
	resp, err := e.srcAdm.CreateTopic(e.ctx, n, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if err := waitPartitionsLed(kadm.WithAuthorizedOps(e.ctx), e.srcAdm, topic, n); err != nil {
		e.t.Fatal(err)
	}
}

// writeTxns keeps transactions arriving on the topic's first n partitions,
// from producer id, until stop is called.
func (e *env) writeTxns(topic string, n int32, id string) (stop func()) {
	writeCtx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tx := e.txnProducer(id)
		for i := 0; writeCtx.Err() == nil; i++ {
			if tx.BeginTransaction() != nil {
				return
			}
			for part := int32(0); part < n; part++ {
				_ = tx.ProduceSync(writeCtx, &kgo.Record{Topic: topic, Partition: part, Key: fmt.Appendf(nil, "tx-%d", i), Value: []byte("txn")})
			}
			commit := i%3 != 2 && writeCtx.Err() == nil
			_ = tx.EndTransaction(e.ctx, kgo.TransactionEndTry(commit))
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// leaderIndex is the index in cl (and the node id) of the partition's leader.
func (e *env) leaderIndex(cl *kafkatest.Cluster, kc *kgo.Client, topic string, part int32) (int, int32) {
	e.t.Helper()
	m, err := partitionMetadata(e.ctx, kc, topic, part)
	if err != nil {
		e.t.Fatal(err)
	}
	for i, id := range cl.NodeIDs() {
		if id == m.leader {
			return i, id
		}
	}
	e.t.Fatalf("leader %d of %s/%d is not a broker of the cluster", m.leader, topic, part)
	return -1, -1
}

// waitTxnsSettled waits until no destination transaction of the copy is
// open on the first n partitions and none is ending on the destination.
func (e *env) waitTxnsSettled(c *Copier, topic string, n int32) {
	e.t.Helper()
	polltest.Eventually(e.t, time.Minute, "the destination's transactions completed", func() (bool, string) {
		for part := int32(0); part < n; part++ {
			if pr, _ := c.Progress(topic, part); pr.OpenTransactions > 0 {
				return false, fmt.Sprintf("%d destination transactions open on partition %d", pr.OpenTransactions, part)
			}
		}
		ending, err := e.dstAdm.ListTransactions(e.ctx, nil, []string{"PrepareCommit", "PrepareAbort"})
		return err == nil && len(ending) == 0, fmt.Sprintf("ending transactions %v, err %v", ending, err)
	})
}
