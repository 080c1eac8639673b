package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// drill is one side of the DR drill: a cluster and the kmirror in front of it.
type drillSide struct {
	name    string
	cluster *kafkatest.Cluster
	addr    string // kmirror
	admin   *kgo.Client
}

// ledger remembers every record id produced, by topic, and which were
// committed (a record of an aborted transaction is invisible by design).
type ledger struct {
	mu        sync.Mutex
	committed map[string]map[string]bool // topic -> id
}

func (l *ledger) add(topic string, ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.committed[topic] == nil {
		l.committed[topic] = map[string]bool{}
	}
	for _, id := range ids {
		l.committed[topic][id] = true
	}
}

func (l *ledger) drop(topic string, ids map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range ids {
		delete(l.committed[topic], id)
	}
}

// writeOrders commits (and sometimes aborts) transactions of orders through
// seeds; committed ids go to the ledger. Right after a failover kmirror may
// refuse the writes a moment longer (see produceWhenWritable): a transaction
// it refuses is aborted and tried again.
func writeOrders(t *testing.T, ctx context.Context, seeds []string, txnID, tag string, n int, l *ledger) map[string]bool {
	t.Helper()
	tx := kafkatest.NewClient(t, seeds, kgo.TransactionalID(txnID), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(time.Minute))
	defer tx.Close()
	written := map[string]bool{}
	for i := range n {
		var ids []string
		for p := range 2 {
			ids = append(ids, fmt.Sprintf("%s-%d-%d", tag, i, p))
		}
		commit := i%5 != 4
		polltest.Eventually(t, 30*time.Second, "orders "+tag+" let through kmirror", func() (bool, string) {
			if err := tx.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for p, id := range ids {
				err := tx.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: int32(p), Key: []byte(id), Value: []byte(id)}).FirstErr()
				if errors.Is(err, kerr.PolicyViolation) {
					if err := tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
						t.Fatalf("abort the refused transaction of order %s: %v", id, err)
					}
					return false, fmt.Sprintf("order %s: %v", id, err)
				}
				if err != nil {
					t.Fatalf("order %s: %v", id, err)
				}
			}
			if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
			return true, ""
		})
		if commit {
			l.add("orders", ids...)
			for _, id := range ids {
				written[id] = true
			}
		}
	}
	return written
}

// writeEvents produces n plain events through seeds.
func writeEvents(t *testing.T, ctx context.Context, seeds []string, tag string, n int, l *ledger) {
	t.Helper()
	cl := kafkatest.NewClient(t, seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	var recs []*kgo.Record
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%d", tag, i)
		ids = append(ids, id)
		recs = append(recs, &kgo.Record{Topic: "events", Partition: int32(i % 2), Key: []byte(id), Value: []byte(id)})
	}
	produceWhenWritable(t, ctx, cl, recs...)
	l.add("events", ids...)
}

func (s *drillSide) mirror(t *testing.T, name string, from *drillSide) {
	t.Helper()
	createMirror(t, s.admin, name, "bootstrap.servers", from.addr, "metadata.refresh.interval.ms", "1000")
}

func (s *drillSide) add(t *testing.T, mirror string, topics ...string) {
	t.Helper()
	addTopics(t, s.admin, mirror, topics...)
}

// failover removes the topics from the mirror and waits until they are
// STOPPED; it returns the last mirrored offsets.
func (s *drillSide) failover(t *testing.T, mirror string, topics ...string) map[string]map[int32]int64 {
	t.Helper()
	remove := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	remove.MirrorName = mirror
	for _, n := range topics {
		remove.Topics = append(remove.Topics, protocol.TopicName{Name: n})
	}
	if r := request[*protocol.RemoveTopicsFromMirrorResponse](t, s.admin, remove); r.ErrorCode != 0 {
		t.Fatalf("remove %v from %s on %s: %s", topics, mirror, s.name, deref(r.ErrorMessage))
	}
	lmos := map[string]map[int32]int64{}
	polltest.Eventually(t, 2*time.Minute, fmt.Sprintf("%v STOPPED on %s", topics, s.name), func() (bool, string) {
		d := s.describe(t, mirror)
		var b strings.Builder
		ok := true
		for _, tp := range d.Topics {
			lmos[tp.Name] = map[int32]int64{}
			for _, p := range tp.Partitions {
				lmos[tp.Name][p.Partition] = p.LastMirroredOffset
				if p.State != "STOPPED" {
					ok = false
					fmt.Fprintf(&b, "%s/%d %s; ", tp.Name, p.Partition, p.State)
				}
			}
		}
		return ok, b.String()
	})
	return lmos
}

func (s *drillSide) describe(t *testing.T, mirror string) protocol.DescribeMirrorsResponseMirror {
	t.Helper()
	req := protocol.NewPtrDescribeMirrorsRequest()
	req.MirrorNames = []string{mirror}
	resp := request[*protocol.DescribeMirrorsResponse](t, s.admin, req)
	if len(resp.Mirrors) != 1 || resp.Mirrors[0].ErrorCode != 0 {
		t.Fatalf("describe %s on %s: %+v", mirror, s.name, resp.Mirrors)
	}
	return resp.Mirrors[0]
}

// caughtUp waits until every partition of the mirror is MIRRORING with lag 0.
func (s *drillSide) caughtUp(t *testing.T, mirror string) {
	t.Helper()
	polltest.Eventually(t, 3*time.Minute, mirror+" caught up on "+s.name, func() (bool, string) {
		var b strings.Builder
		ok := true
		for _, tp := range s.describe(t, mirror).Topics {
			for _, p := range tp.Partitions {
				if p.State != "MIRRORING" || p.Lag != 0 {
					ok = false
					fmt.Fprintf(&b, "%s/%d %s lag %d %s; ", tp.Name, p.Partition, p.State, p.Lag, deref(p.ErrorMessage))
				}
			}
		}
		return ok, b.String()
	})
}

func topicIDs(t *testing.T, c *kafkatest.Cluster, topics ...string) map[string]kadm.TopicID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	td, err := kadm.NewClient(c.Client(t)).ListTopics(kadm.WithAuthorizedOps(ctx), topics...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]kadm.TopicID{}
	for _, n := range topics {
		out[n] = td[n].ID
	}
	return out
}

func committedOffsets(t *testing.T, c *kafkatest.Cluster, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	os, err := kadm.NewClient(c.Client(t)).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	os.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// idsOn reads every committed record value of a topic through seeds
// (read_committed) up to the sentinel offsets, counting duplicates.
func idsOn(t *testing.T, seeds []string, topic string, sentinel map[int32]int64) map[string]int {
	t.Helper()
	out := map[string]int{}
	for p, last := range sentinel {
		for _, r := range readUpTo(t, seeds, topic, p, true, last) {
			if _, kv, _ := strings.Cut(r, ":"); !strings.HasPrefix(kv, "sentinel=") {
				_, v, _ := strings.Cut(kv, "=")
				out[v]++
			}
		}
	}
	return out
}

// endsOf returns the end offsets of topic on c, its last transaction's markers counted.
func endsOf(t *testing.T, c *kafkatest.Cluster, topic string) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	stableEnds(t, c.Client(t), topic).Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// The DR drill of issue 6, end to end on real Apache Kafka: clusters A and B
// with kmirror in front of each. A is mirrored to B (a transactional and a
// plain topic) while producers and a consumer group run on A. A dies; B
// fails over; producers and the group move to B, the group resuming from its
// synced offsets (re-reading at most a sync interval's worth, skipping
// nothing). A comes back and fails back from B: its diverged topic is
// re-created and mirrored again, the other continues with no re-copy. Then
// a graceful promote moves the service back to A, and B mirrors A again
// incrementally. At the end every committed record is on the serving
// cluster exactly once, at identical offsets on both clusters.
func TestDisasterRecoveryDrill(t *testing.T) {
	d := startDrill(t)
	d.groupRunsOnA()
	d.disasterOnA()
	d.failoverToB()
	d.failbackToA()
	d.promoteBackToA()
}

// drill is the DR drill's world and what one step leaves for the next.
type drill struct {
	t     *testing.T
	ctx   context.Context
	a, b  *drillSide
	l     *ledger
	onA   map[int32]int64            // the group's offsets committed on A
	lost  map[string]bool            // orders committed on A that B never received
	idsA  map[string]kadm.TopicID    // A's topic ids before the disaster
	endsA map[string]map[int32]int64 // A's log ends before the disaster
	lmoB  map[string]map[int32]int64 // B's last mirrored offsets at failover
}

// startDrill starts A and B with kmirror in front of each, writes orders
// and events on A and mirrors them to B.
func startDrill(t *testing.T) *drill {
	d := &drill{t: t, l: &ledger{committed: map[string]map[string]bool{}},
		a: &drillSide{name: "A", cluster: kafkatest.Start(t)}, b: &drillSide{name: "B", cluster: kafkatest.Start(t)}}
	for _, s := range []*drillSide{d.a, d.b} {
		s.addr = kmirror(t, s.cluster).Proxy.Addr()
		s.admin = admin(t, s.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	t.Cleanup(cancel)
	d.ctx = ctx
	d.a.cluster.CreateKeptTopic(t, "orders", 2)
	d.a.cluster.CreateKeptTopic(t, "events", 2)
	writeOrders(t, ctx, []string{d.a.addr}, "shop", "a1", 30, d.l)
	writeEvents(t, ctx, []string{d.a.addr}, "a1", 400, d.l)

	d.b.mirror(t, "dr", d.a)
	d.b.add(t, "dr", "orders", "events")
	d.b.caughtUp(t, "dr")
	return d
}

// groupRunsOnA runs the application on A: a consumer group on events,
// committing as it goes, its offsets synced to B.
func (d *drill) groupRunsOnA() {
	t, ctx, a, b := d.t, d.ctx, d.a, d.b
	group := kafkatest.NewClient(t, []string{a.addr}, kgo.ConsumerGroup("app"), kgo.ConsumeTopics("events"),
		kgo.AutoCommitInterval(100*time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	consumed := 0
	polltest.Eventually(t, time.Minute, "the group consumed events on A", func() (bool, string) {
		fs := group.PollRecords(ctx, 50)
		consumed += fs.NumRecords()
		return consumed >= 300, fmt.Sprintf("%d consumed", consumed)
	})
	if err := group.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	onA := committedOffsets(t, a.cluster, "app", "events")
	writeEvents(t, ctx, []string{a.addr}, "a2", 100, d.l)
	b.caughtUp(t, "dr")
	polltest.Eventually(t, time.Minute, "the group's offsets synced to B", func() (bool, string) {
		onB := committedOffsets(t, b.cluster, "app", "events")
		return fmt.Sprint(onB) == fmt.Sprint(onA), fmt.Sprintf("A %v, B %v", onA, onB)
	})
	// The group goes on consuming on A a little after the last sync it can
	// rely on: what it re-reads on B later is bounded by one sync interval.
	group.PollRecords(ctx, 20)
	if err := group.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	d.onA = committedOffsets(t, a.cluster, "app", "events")
	group.Close()
}

// disasterOnA commits orders on A that never reach B (the mirror of orders
// is paused), then A dies.
func (d *drill) disasterOnA() {
	t, a, b := d.t, d.a, d.b
	pause := protocol.NewPtrPauseMirrorTopicsRequest()
	pause.MirrorName = "dr"
	pause.Topics = []protocol.TopicName{{Name: "orders"}}
	if r := request[*protocol.PauseMirrorTopicsResponse](t, b.admin, pause); r.ErrorCode != 0 || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("pause: %+v", r)
	}
	polltest.Eventually(t, time.Minute, "orders PAUSED on B", func() (bool, string) {
		for _, tp := range b.describe(t, "dr").Topics {
			if tp.Name == "orders" {
				return tp.Partitions[0].State == "PAUSED" && tp.Partitions[1].State == "PAUSED", tp.Partitions[0].State
			}
		}
		return false, "orders not described"
	})
	d.lost = writeOrders(t, d.ctx, []string{a.addr}, "shop", "a-lost", 6, d.l)
	d.idsA = topicIDs(t, a.cluster, "orders", "events")
	d.endsA = map[string]map[int32]int64{"orders": endsOf(t, a.cluster, "orders"), "events": endsOf(t, a.cluster, "events")}
	a.cluster.KillBroker(t, 0)
	t.Logf("disaster: A killed with %d committed orders B never received", len(d.lost))
}

// failoverToB fails B over; the group resumes on B from its synced offsets
// (re-reading at most what it consumed since the last sync, skipping
// nothing), and producers move to B.
func (d *drill) failoverToB() {
	t, ctx, b := d.t, d.ctx, d.b
	d.lmoB = b.failover(t, "dr", "orders", "events")
	t.Logf("B failed over; last mirrored offsets %v", d.lmoB)
	syncedB := committedOffsets(t, b.cluster, "app", "events")
	reread := 0
	for p, at := range d.onA {
		if syncedB[p] > at {
			t.Fatalf("events/%d: the group's synced offset on B is %d, past the %d it committed on A: records would be skipped", p, syncedB[p], at)
		}
		reread += int(at - syncedB[p])
	}
	if reread > 20 {
		t.Fatalf("the group re-reads %d records on B, more than it consumed since the last sync it relied on (20)", reread)
	}
	t.Logf("the group resumes on B from its synced offsets %v: %d records re-read, none skipped", syncedB, reread)

	// The service runs on B: producers and the group moved there through B's kmirror.
	group := kafkatest.NewClient(t, []string{b.addr}, kgo.ConsumerGroup("app"), kgo.ConsumeTopics("events"))
	first := map[int32]int64{}
	polltest.Eventually(t, time.Minute, "the group resumes on B", func() (bool, string) {
		group.PollRecords(ctx, 100).EachRecord(func(r *kgo.Record) {
			if _, ok := first[r.Partition]; !ok {
				first[r.Partition] = r.Offset
			}
		})
		return len(first) == 2, fmt.Sprintf("first offsets %v", first)
	})
	for p, off := range first {
		if off != syncedB[p] {
			t.Fatalf("events/%d: the group resumed on B at %d, not at its synced offset %d", p, off, syncedB[p])
		}
	}
	group.Close()
	writeOrders(t, ctx, []string{b.addr}, "shop", "b1", 20, d.l)
	writeEvents(t, ctx, []string{b.addr}, "b1", 300, d.l)
}

// failbackToA brings A back and mirrors B to it: its diverged orders are
// re-created (and the discarded records reported), events continue with no
// re-copy.
func (d *drill) failbackToA() {
	t, a, b := d.t, d.a, d.b
	a.cluster.StartBroker(t, 0)
	// A's kmirror ran on while its broker was down; its admin RPCs answer a retriable error
	// until it reads its state topic again (an operator retries them as well).
	polltest.Eventually(t, 2*time.Minute, "A's kmirror answers ListMirrors after its broker restarted", func() (bool, string) {
		r := request[*protocol.ListMirrorsResponse](t, a.admin, protocol.NewPtrListMirrorsRequest())
		return r.ErrorCode == 0, fmt.Sprintf("error %d: %s", r.ErrorCode, deref(r.ErrorMessage))
	})
	a.mirror(t, "back", b)
	a.add(t, "back", "orders", "events")
	a.caughtUp(t, "back")
	idsA2 := topicIDs(t, a.cluster, "orders", "events")
	if idsA2["events"] != d.idsA["events"] {
		t.Fatal("events was re-created on A although its log was a prefix of B's")
	}
	if idsA2["orders"] == d.idsA["orders"] {
		t.Fatal("orders was not re-created on A although it held records B never had")
	}
	var discarded int64
	for p, end := range d.endsA["orders"] {
		discarded += end - d.lmoB["orders"][p]
	}
	notes := ""
	for _, tp := range a.describe(t, "back").Topics {
		if tp.Name == "orders" {
			notes = deref(tp.Partitions[0].ErrorMessage)
		}
	}
	if !strings.Contains(notes, fmt.Sprintf("held %d records the source never received", discarded)) {
		t.Fatalf("describe of orders on A says %q; want it to report the %d discarded records", notes, discarded)
	}
	t.Logf("failback: orders re-created on A (%q); events continued with no re-copy", notes)
	d.l.drop("orders", d.lost)
	mirrortest.VerifyLog(t, b.cluster.Client(t), a.cluster.Client(t), false, "orders", "events")
}

// promoteBackToA is the graceful promote: producers on B stop, the mirror
// catches up, then A fails over: nothing is lost, nothing diverges. B then
// mirrors A again incrementally, and every committed record is on A once.
func (d *drill) promoteBackToA() {
	t, ctx, a, b := d.t, d.ctx, d.a, d.b
	a.caughtUp(t, "back")
	lmoA := a.failover(t, "back", "orders", "events")
	for topic, parts := range lmoA {
		ends := endsOf(t, b.cluster, topic)
		for p, lmo := range parts {
			if lmo != ends[p] {
				t.Fatalf("graceful promote: %s/%d last mirrored offset %d, B's log end %d", topic, p, lmo, ends[p])
			}
		}
	}
	writeOrders(t, ctx, []string{a.addr}, "shop", "a3", 10, d.l)
	writeEvents(t, ctx, []string{a.addr}, "a3", 200, d.l)

	// B mirrors A again: its logs are a prefix of A's, so no re-copy.
	idsB := topicIDs(t, b.cluster, "orders", "events")
	b.add(t, "dr", "orders", "events")
	b.caughtUp(t, "dr")
	if idsB2 := topicIDs(t, b.cluster, "orders", "events"); fmt.Sprint(idsB2) != fmt.Sprint(idsB) {
		t.Fatalf("B's topics were re-created (%v, were %v) although they were a prefix of A's", idsB2, idsB)
	}
	sentinel := map[string]map[int32]int64{}
	for _, topic := range []string{"orders", "events"} {
		sentinel[topic] = sentinels(t, ctx, a.cluster, topic, 2)
	}
	b.caughtUp(t, "dr")
	n := mirrortest.VerifyLog(t, a.cluster.Client(t), b.cluster.Client(t), false, "orders", "events")
	for _, topic := range []string{"orders", "events"} {
		d.onceOnA(topic, sentinel[topic])
	}
	t.Logf("drill done: %d records and markers at identical offsets on A and B", n)
}

// onceOnA checks that every committed record of topic, wherever it was
// produced, is on the serving cluster (A) exactly once; the orders lost with
// A are the discarded ones.
func (d *drill) onceOnA(topic string, sentinel map[int32]int64) {
	t := d.t
	got := idsOn(t, []string{d.a.addr}, topic, sentinel)
	var missing, twice []string
	for id := range d.l.committed[topic] {
		if got[id] == 0 {
			missing = append(missing, id)
		}
	}
	for id, c := range got {
		if c > 1 {
			twice = append(twice, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(twice)
	if len(missing) > 0 || len(twice) > 0 || len(got) != len(d.l.committed[topic]) {
		t.Fatalf("%s on A: %d records, %d expected; missing %v, more than once %v", topic, len(got), len(d.l.committed[topic]), missing, twice)
	}
	t.Logf("%s: all %d committed records on A exactly once", topic, len(got))
}
