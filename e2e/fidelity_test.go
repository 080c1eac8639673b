package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// txnRounds runs rounds of a transactional producer writing to every
// partition of topic, committing or aborting each (every third aborted),
// interleaved with a plain producer. It returns the counts, or the first error
// (it also runs on a goroutine of its own, where t.Fatal must not be called).
func txnRounds(t *testing.T, ctx context.Context, c *kafkatest.Cluster, id, topic string, partitions int32, rounds int, tag string) (commits, aborts int, err error) {
	t.Helper()
	tx := c.Client(t, kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(time.Minute))
	plain := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for r := range rounds {
		if err := tx.BeginTransaction(); err != nil {
			return commits, aborts, fmt.Errorf("%s round %d: begin: %w", tag, r, err)
		}
		for p := range partitions {
			recs := make([]*kgo.Record, 1+(r+int(p))%3)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "%s-%d-%d", tag, r, i), Value: fmt.Appendf(nil, "txn %s round %d", tag, r)}
			}
			if err := tx.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				return commits, aborts, fmt.Errorf("%s round %d: produce to %s/%d: %w", tag, r, topic, p, err)
			}
			if r%2 == 0 {
				if err := plain.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "plain-%s-%d", tag, r), Value: []byte("plain")}).FirstErr(); err != nil {
					return commits, aborts, fmt.Errorf("%s round %d: plain produce to %s/%d: %w", tag, r, topic, p, err)
				}
			}
		}
		commit := r%3 != 2
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			return commits, aborts, fmt.Errorf("%s round %d: end: %w", tag, r, err)
		}
		if commit {
			commits++
		} else {
			aborts++
		}
	}
	return commits, aborts, nil
}

// sentinels writes one plain record per partition and returns their offsets.
func sentinels(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string, partitions int32) map[int32]int64 {
	t.Helper()
	cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	out := map[int32]int64{}
	for p := range partitions {
		r := &kgo.Record{Topic: topic, Partition: p, Key: []byte("sentinel"), Value: []byte("end")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		out[p] = r.Offset
	}
	return out
}

// readUpTo reads a partition through seeds (a broker or kmirror) at an
// isolation level until the record at offset last.
func readUpTo(t *testing.T, seeds []string, topic string, p int32, committed bool, last int64) []string {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl := kafkatest.NewClient(t, seeds, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(iso))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []string
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s/%d via %v: %d records before the timeout, waiting for offset %d", topic, p, seeds, len(out), last)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("reading %s/%d via %v: %v", topic, p, seeds, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, r.Value))
			done = done || r.Offset >= last
		})
	}
	return out
}

func compactedTopic(t *testing.T, c *kafkatest.Cluster, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(c.Client(t)).CreateTopic(ctx, partitions, 1, map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.ms":                kadm.StringPtr("100"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
		"min.compaction.lag.ms":     kadm.StringPtr("0"),
		"delete.retention.ms":       kadm.StringPtr("86400000"),
	}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// compactedHoles counts offsets without a record below the high watermark.
func compactedHoles(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, partitions int32) int64 {
	t.Helper()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var holes int64
	for p := range partitions {
		es := mirrortest.Log(t, cl, topic, p)
		end, _ := ends.Lookup(topic, p)
		holes += end.Offset - int64(len(es))
	}
	return holes
}

// Acceptance of issue 5 on real Kafka, through kmirror: a transactional
// producer commits and aborts across 4 partitions before and while the
// topic is mirrored, and a compacted topic is compacted on the source before
// and during mirroring. Afterwards every record and marker is at its source
// offset on the destination, consumers reading the destination through
// kmirror see what source consumers see (read_committed and
// read_uncommitted), and the latest value of every key is the same.
func TestTransactionalAndCompactedMirror(t *testing.T) {
	src := kafkatest.Start(t, kafkatest.ServerProperty("log.cleaner.backoff.ms", "100"))
	dst := kafkatest.Start(t)
	km := kmirror(t, dst)
	cl := admin(t, km.Proxy.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const parts = 4
	src.CreateKeptTopic(t, "orders", parts)
	compactedTopic(t, src, "balances", 2)
	c1, a1, err := txnRounds(t, ctx, src, "orders-app", "orders", parts, 9, "before")
	if err != nil {
		t.Fatal(err)
	}
	w := &balanceWriter{t: t, ctx: ctx, cl: src.Client(t, kgo.ProducerBatchCompression(kgo.ZstdCompression()))}
	polltest.Eventually(t, 2*time.Minute, "the source compacted balances before mirroring", func() (bool, string) {
		w.next()
		h := compactedHoles(t, ctx, src.Client(t), "balances", 2)
		return h >= 20, fmt.Sprintf("%d offsets compacted away", h)
	})

	createMirror(t, cl, "dr", "bootstrap.servers", src.BootstrapString())
	addTopics(t, cl, "dr", "orders", "balances")
	c2, a2 := writeWhileMirroring(t, ctx, src, w, parts)
	// The last transaction's markers, before the sentinels and the end offsets below.
	stableEnds(t, src.Client(t), "orders")
	ordersEnd := sentinels(t, ctx, src, "orders", parts)
	balancesEnd := sentinels(t, ctx, src, "balances", 2)
	srcEnds, err := kadm.NewClient(src.Client(t)).ListEndOffsets(ctx, "orders", "balances")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	srcEnds.Each(func(o kadm.ListedOffset) { want[o.Topic] += o.Offset })
	waitMirrored(t, cl, "dr", want)
	t.Logf("source: %d transactions committed, %d aborted across %d partitions; %d rounds of compacted writes", c1+c2, a1+a2, parts, w.round)

	n := mirrortest.VerifyLog(t, src.Client(t), dst.Client(t), false, "orders")
	m := mirrortest.VerifyLog(t, src.Client(t), dst.Client(t), true, "balances")
	t.Logf("identical offsets: orders %d records and markers, balances %d records", n, m)

	sameOrdersThroughKmirror(t, src, km.Proxy.Addr(), parts, ordersEnd)
	sameBalancesThroughKmirror(t, src, km.Proxy.Addr(), balancesEnd)
	sameLastStableOffsets(t, ctx, src, dst)
}

// balanceWriter writes rounds of balances to the compacted topic, so that the source's
// cleaner has keys to compact away.
type balanceWriter struct {
	t     *testing.T
	ctx   context.Context
	cl    *kgo.Client
	round int // the rounds written so far
}

// next writes the next round: a new balance for a third of the accounts, and in some
// rounds a tombstone.
func (w *balanceWriter) next() {
	w.t.Helper()
	w.round++
	round := w.round
	var recs []*kgo.Record
	for k := range 12 {
		if (k+round)%3 == 0 {
			recs = append(recs, &kgo.Record{Topic: "balances", Key: fmt.Appendf(nil, "acct-%d", k), Value: fmt.Appendf(nil, "balance %d@%d", k*round, round)})
		}
	}
	if round%7 == 3 {
		recs = append(recs, &kgo.Record{Topic: "balances", Key: []byte("closed")}) // a tombstone
	}
	if err := w.cl.ProduceSync(w.ctx, recs...).FirstErr(); err != nil {
		w.t.Fatal(err)
	}
}

// writeWhileMirroring runs more transactions on orders and 60 more rounds of balances at
// the same time, while the topics are mirrored, and returns the transactions' counts.
func writeWhileMirroring(t *testing.T, ctx context.Context, src *kafkatest.Cluster, w *balanceWriter, parts int32) (commits, aborts int) {
	t.Helper()
	// While mirroring: more transactions, more compaction.
	var wg sync.WaitGroup
	var errDuring error
	wg.Add(1)
	go func() {
		defer wg.Done()
		commits, aborts, errDuring = txnRounds(t, ctx, src, "orders-app", "orders", parts, 12, "during")
	}()
	for range 60 {
		w.next()
	}
	wg.Wait()
	if errDuring != nil {
		t.Fatal(errDuring)
	}
	return commits, aborts
}

// sameOrdersThroughKmirror checks that a consumer of the destination through kmirror at
// addr reads what a source consumer reads of every partition of orders, up to ends, at
// both isolation levels.
func sameOrdersThroughKmirror(t *testing.T, src *kafkatest.Cluster, addr string, parts int32, ends map[int32]int64) {
	t.Helper()
	for p := range parts {
		for _, committed := range []bool{false, true} {
			s := readUpTo(t, src.Bootstrap(), "orders", p, committed, ends[p])
			d := readUpTo(t, []string{addr}, "orders", p, committed, ends[p])
			if strings.Join(s, "\n") != strings.Join(d, "\n") {
				t.Fatalf("orders/%d read_committed=%v: source consumer saw %d records, destination (through kmirror) %d", p, committed, len(s), len(d))
			}
			if p == 0 {
				t.Logf("orders/0 read_committed=%v: %d records alike", committed, len(s))
			}
		}
	}
}

// sameBalancesThroughKmirror checks that the latest value of every key of balances, read
// up to ends, is the same on the source and on the destination through kmirror at addr.
func sameBalancesThroughKmirror(t *testing.T, src *kafkatest.Cluster, addr string, ends map[int32]int64) {
	t.Helper()
	latest := func(seeds []string, p int32) map[string]string {
		out := map[string]string{}
		for _, r := range readUpTo(t, seeds, "balances", p, false, ends[p]) {
			_, kv, _ := strings.Cut(r, ":")
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
		return out
	}
	for p := range int32(2) {
		if s, d := latest(src.Bootstrap(), p), latest([]string{addr}, p); fmt.Sprint(s) != fmt.Sprint(d) {
			t.Fatalf("balances/%d latest values differ:\nsource      %v\ndestination %v", p, s, d)
		}
	}
}

// sameLastStableOffsets checks that the destination's last stable offsets of orders equal
// the source's: no transaction is left open on the destination.
func sameLastStableOffsets(t *testing.T, ctx context.Context, src, dst *kafkatest.Cluster) {
	t.Helper()
	sl, err := kadm.NewClient(src.Client(t)).ListCommittedOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	dl, err := kadm.NewClient(dst.Client(t)).ListCommittedOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	sl.Each(func(o kadm.ListedOffset) {
		if d, _ := dl.Lookup(o.Topic, o.Partition); d.Offset != o.Offset {
			t.Fatalf("orders/%d last stable offset: destination %d, source %d", o.Partition, d.Offset, o.Offset)
		}
	})
}
