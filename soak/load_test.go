package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// Topics of the load. Everything named soak.* is mirrored by pattern (so
// soak.late, created mid-run, is picked up by it); fo.failover is added by
// name and failed over mid-run.
const (
	topicNone     = "soak.none"
	topicZstd     = "soak.zstd"
	topicLz4      = "soak.lz4" // grown from 3 to 5 partitions mid-run
	topicKcat     = "soak.kcat"
	topicTx       = "soak.tx"
	topicCompact  = "soak.compact"
	topicLate     = "soak.late" // created mid-run, mirrored by the pattern
	topicFailover = "fo.failover"
	groupApp      = "soak-app"
	pattern       = `soak\..*`
)

// sent is one record a producer was told was written (its ground truth):
// where the source put it and, for transactions, how the transaction ended.
type sent struct {
	topic     string
	partition int32
	offset    int64
	value     string
	// txn: "" for plain records; "commit" or "abort" when the transaction
	// ended so; "unknown" when EndTransaction failed.
	txn string
}

// ledger collects what every producer was acknowledged.
type ledger struct {
	mu       sync.Mutex
	acked    []sent
	attempts atomic.Int64
	failures atomic.Int64
	// kcatBatches are the values of kcat runs that exited 0 (kcat reports no
	// offsets: its records are checked by value).
	kcatAcked  []string
	kcatFailed atomic.Int64
}

func (l *ledger) add(s ...sent) {
	l.mu.Lock()
	l.acked = append(l.acked, s...)
	l.mu.Unlock()
}

func (l *ledger) snapshot() ([]sent, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sent(nil), l.acked...), append([]string(nil), l.kcatAcked...)
}

// load runs every writer until ctx ends.
type load struct {
	w      *world
	t      *testing.T
	ledger *ledger
	seed   uint64
	wg     sync.WaitGroup
	// readOnlyAccepted counts writes to a mirror topic through the proxy that
	// were acknowledged (each is a violation); readOnlyRefused those refused.
	readOnlyAccepted, readOnlyRefused atomic.Int64
	groupViolations                   atomic.Int64
	groupSamples                      atomic.Int64
	violations                        []string
	vmu                               sync.Mutex
	lateStarted                       atomic.Bool
	// ctx is the load's (start's): what stops every writer.
	ctx context.Context
}

func (l *load) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.vmu.Lock()
	l.violations = append(l.violations, msg)
	l.vmu.Unlock()
	l.t.Logf("VIOLATION: %s", msg)
}

func createTopics(ctx context.Context, adm *kadm.Client) error {
	compact := map[string]*string{"cleanup.policy": kadmStr("compact"), "segment.ms": kadmStr("3000"),
		"min.cleanable.dirty.ratio": kadmStr("0.01"), "delete.retention.ms": kadmStr("1000")}
	for _, tc := range []struct {
		name string
		cfg  map[string]*string
	}{{topicNone, nil}, {topicZstd, nil}, {topicLz4, nil}, {topicKcat, nil}, {topicTx, nil},
		{topicCompact, compact}, {topicFailover, nil}} {
		r, err := adm.CreateTopic(ctx, 3, 3, tc.cfg, tc.name)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", tc.name, err)
		}
	}
	return nil
}

func kadmStr(s string) *string { return &s }

// value is a record's payload: who wrote it and its sequence number, so the
// checker finds duplicates and reordering by value, padded to size.
func value(producer string, seq int, size int) []byte {
	v := fmt.Appendf(nil, "%s#%d#", producer, seq)
	return append(v, bytes.Repeat([]byte{'x'}, max(0, size-len(v)))...)
}

// plain is an idempotent franz-go producer on one topic: keys, headers and
// the given codec, every acknowledgement into the ledger.
func (l *load) plain(ctx context.Context, cl *kgo.Client, name, topic string, every time.Duration) {
	l.paced(ctx, every, func(seq int) {
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", seq%97), Value: value(name, seq, 64+seq%200),
			Headers: []kgo.RecordHeader{{Key: "producer", Value: []byte(name)}, {Key: "seq", Value: fmt.Appendf(nil, "%d", seq)}}}
		l.ledger.attempts.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				l.ledger.failures.Add(1)
				return
			}
			l.ledger.add(sent{topic: r.Topic, partition: r.Partition, offset: r.Offset, value: string(r.Value)})
		})
	})
	// Whatever is buffered ends here (unacknowledged records are not ground truth).
	fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = cl.Flush(fctx)
}

// producer is plain's client (made on the test's goroutine: a client that
// cannot be made fails the test there).
func (l *load) producer(codec kgo.CompressionCodec) *kgo.Client {
	return l.w.srcClient(l.t, kgo.ProducerBatchCompression(codec), kgo.MetadataMaxAge(6*time.Second),
		kgo.RecordDeliveryTimeout(2*time.Minute))
}

// paced calls fn every period until ctx ends (a producer's rate, not a wait
// for a condition).
func (l *load) paced(ctx context.Context, every time.Duration, fn func(seq int)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn(seq)
		}
	}
}

// kcat produces batches of keyed records with a header through kcat
// (librdkafka, a client nobody here wrote), idempotent, lz4.
func (l *load) kcat(ctx context.Context) {
	batch := 0
	l.paced(ctx, 2*time.Second, func(int) {
		var in strings.Builder
		var values []string
		for i := range 20 {
			v := fmt.Sprintf("kcat#%d#", batch*20+i)
			values = append(values, v)
			fmt.Fprintf(&in, "k%d:%s\n", i, v)
		}
		batch++
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, "kcat", "-P", "-b", l.w.src.BootstrapString(), "-t", topicKcat, "-K:",
			"-z", "lz4", "-H", "producer=kcat", "-X", "enable.idempotence=true", "-X", "message.timeout.ms=50000")
		cmd.Stdin = strings.NewReader(in.String())
		if out, err := cmd.CombinedOutput(); err != nil || bytes.Contains(out, []byte("Delivery failed")) {
			l.ledger.kcatFailed.Add(1)
			return
		}
		l.ledger.mu.Lock()
		l.ledger.kcatAcked = append(l.ledger.kcatAcked, values...)
		l.ledger.mu.Unlock()
	})
}

// transactional writes transactions over every partition of soak.tx,
// committing or aborting at random; two of them interleave on the same
// partitions.
func (l *load) transactional(ctx context.Context, name string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	seq := 0
	l.paced(ctx, 300*time.Millisecond, func(int) {
		if cl == nil {
			var err error
			cl, err = kgo.NewClient(kgo.SeedBrokers(l.w.src.Bootstrap()...), kgo.TransactionalID(name),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second))
			if err != nil {
				return
			}
		}
		if ok := l.oneTransaction(ctx, cl, name, &seq, rng.IntN(4) != 0); !ok {
			cl.Close()
			cl = nil
		}
	})
}

// oneTransaction writes one record to each partition of soak.tx and ends
// the transaction; false when the client must be replaced.
func (l *load) oneTransaction(ctx context.Context, cl *kgo.Client, name string, seq *int, commit bool) bool {
	if err := cl.BeginTransaction(); err != nil {
		return false
	}
	var recs []sent
	for p := range int32(3) {
		*seq++
		l.ledger.attempts.Add(1)
		r := &kgo.Record{Topic: topicTx, Partition: p, Key: []byte(name), Value: value(name, *seq, 80)}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := cl.ProduceSync(pctx, r).FirstErr()
		cancel()
		if err != nil {
			l.ledger.failures.Add(1)
			ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cl.EndTransaction(ectx, kgo.TryAbort)
			l.ledger.add(markTxn(recs, "unknown")...)
			return false
		}
		recs = append(recs, sent{topic: r.Topic, partition: r.Partition, offset: r.Offset, value: string(r.Value)})
	}
	ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.EndTransaction(ectx, kgo.TransactionEndTry(commit)); err != nil {
		l.ledger.add(markTxn(recs, "unknown")...)
		return false
	}
	outcome := "abort"
	if commit {
		outcome = "commit"
	}
	l.ledger.add(markTxn(recs, outcome)...)
	return true
}

func markTxn(recs []sent, outcome string) []sent {
	for i := range recs {
		recs[i].txn = outcome
	}
	return recs
}

// group consumes soak.none in consumer group soak-app on the source,
// committing as it goes: the offsets kmirror syncs to the destination.
func (l *load) group(ctx context.Context, cl *kgo.Client) {
	for ctx.Err() == nil {
		cl.PollFetches(ctx)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = cl.CommitUncommittedOffsets(cctx)
}

// checkGroupOffsets samples the synced offsets of soak-app on the
// destination: never past the destination's log end (the mirrored data).
// The offsets are read before the log ends, which only grow, so an offset
// past the end is a real violation.
func (l *load) checkGroupOffsets(ctx context.Context) {
	adm := l.w.dstAdm
	l.paced(ctx, 2*time.Second, func(int) {
		offs, err := adm.FetchOffsets(ctx, groupApp)
		if err != nil || len(offs) == 0 {
			return
		}
		ends, err := adm.ListEndOffsets(ctx, topicNone)
		if err != nil {
			return
		}
		l.groupSamples.Add(1)
		offs.Each(func(o kadm.OffsetResponse) {
			e, ok := ends.Lookup(o.Topic, o.Partition)
			if ok && e.Err == nil && o.Err == nil && o.At > e.Offset {
				l.groupViolations.Add(1)
				l.violation("synced offset of %s on %s/%d is %d, past the destination log end %d", groupApp, o.Topic, o.Partition, o.At, e.Offset)
			}
		})
	})
}

// readOnlyWriter keeps trying to write to a mirror topic through the
// kmirror proxies: every acknowledgement is a violation.
func (l *load) readOnlyWriter(ctx context.Context, cl *kgo.Client) {
	l.paced(ctx, 250*time.Millisecond, func(seq int) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r := &kgo.Record{Topic: topicNone, Value: fmt.Appendf(nil, "readonly#%d", seq)}
		if err := cl.ProduceSync(pctx, r).FirstErr(); err == nil {
			l.readOnlyAccepted.Add(1)
			l.violation("a write to mirror topic %s through the proxy was accepted at %s/%d offset %d", topicNone, r.Topic, r.Partition, r.Offset)
		} else {
			l.readOnlyRefused.Add(1)
		}
	})
}

// start runs every writer; stop with the context, then wait.
func (l *load) start(ctx context.Context) {
	l.ctx = ctx
	run := func(f func()) {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); f() }()
	}
	for _, p := range []struct {
		name, topic string
		codec       kgo.CompressionCodec
		every       time.Duration
	}{{"none", topicNone, kgo.NoCompression(), 40 * time.Millisecond}, {"zstd", topicZstd, kgo.ZstdCompression(), 40 * time.Millisecond},
		{"lz4", topicLz4, kgo.Lz4Compression(), 40 * time.Millisecond}, {"compact", topicCompact, kgo.NoCompression(), 30 * time.Millisecond},
		{"failover", topicFailover, kgo.NoCompression(), 100 * time.Millisecond}} {
		cl := l.producer(p.codec)
		run(func() { l.plain(ctx, cl, p.name, p.topic, p.every) })
	}
	run(func() { l.kcat(ctx) })
	run(func() { l.transactional(ctx, "soak-tx-0", l.seed) })
	run(func() { l.transactional(ctx, "soak-tx-1", l.seed+1) })
	group := l.w.srcClient(l.t, kgo.ConsumerGroup(groupApp), kgo.ConsumeTopics(topicNone),
		kgo.AutoCommitInterval(time.Second), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	run(func() { l.group(ctx, group) })
	run(func() { l.checkGroupOffsets(ctx) })
	ro := kafkatest.NewClient(l.t, l.w.proxyAddrs(), kgo.RecordRetries(1), kgo.RecordDeliveryTimeout(5*time.Second),
		kgo.ProducerLinger(0))
	run(func() { l.readOnlyWriter(ctx, ro) })
}

// late creates soak.late (picked up by the mirror's pattern) and writes to it.
func (l *load) late(ctx context.Context, adm *kadm.Client) error {
	r, err := adm.CreateTopic(ctx, 3, 3, nil, topicLate)
	if err == nil {
		err = r.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) { // a retry after a timed-out create
		return fmt.Errorf("create %s: %w", topicLate, err)
	}
	l.lateStarted.Store(true)
	cl := l.producer(kgo.ZstdCompression())
	l.wg.Add(1)
	// It writes until the load stops, not the run.
	go func() { defer l.wg.Done(); l.plain(l.ctx, cl, "late", topicLate, 60*time.Millisecond) }()
	return nil
}

// grow adds two partitions to soak.lz4 while it is mirrored and written.
func grow(ctx context.Context, adm *kadm.Client) error {
	r, err := adm.UpdatePartitions(ctx, 5, topicLz4)
	if err == nil {
		err = r.Error()
	}
	if err != nil {
		return fmt.Errorf("grow %s to 5 partitions: %w", topicLz4, err)
	}
	return nil
}
