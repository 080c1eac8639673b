package fetcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// pair is a source and a destination cluster shared by the real-Kafka tests
// of this package (starting clusters dominates their run time).
type pair struct {
	src, dst *kafkatest.Cluster
}

// env is what one test works with: clients it closes itself (so goleak can
// check the Copier left nothing behind) and admin helpers.
type env struct {
	t        *testing.T
	ctx      context.Context
	p        *pair
	src, dst *kgo.Client
	srcAdm   *kadm.Client
	dstAdm   *kadm.Client
}

func newEnv(t *testing.T, p *pair) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, p: p}
	e.src = e.client(p.src)
	e.dst = e.client(p.dst)
	e.srcAdm, e.dstAdm = kadm.NewClient(e.src), kadm.NewClient(e.dst)
	return e
}

func (e *env) client(c *kafkatest.Cluster, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

func (e *env) createSource(topic string, partitions int32, configs map[string]*string) {
	e.t.Helper()
	resp, err := e.srcAdm.CreateTopic(e.ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		e.t.Fatalf("create source topic %s: %v", topic, err)
	}
	if err := waitPartitionsLed(kadm.WithAuthorizedOps(e.ctx), e.srcAdm, topic, partitions); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) ensureDestination(topic string) DestinationTopic {
	e.t.Helper()
	d, err := EnsureDestinationTopic(e.ctx, e.srcAdm, e.dstAdm, topic, nil)
	if err != nil {
		e.t.Fatalf("EnsureDestinationTopic(%s): %v", topic, err)
	}
	return d
}

// produce writes n records to one source partition with the given codec,
// keys, two headers and timestamps days in the past, in batches of up to
// batch records (kgo flushes each ProduceSync call as batches).
func (e *env) produce(topic string, partition int32, n, batch int, codec kgo.CompressionCodec, tag string) {
	e.t.Helper()
	cl := e.client(e.p.src, kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()))
	defer cl.Close()
	base := time.Now().Add(-72 * time.Hour)
	for i := 0; i < n; i += batch {
		var recs []*kgo.Record
		for j := i; j < min(n, i+batch); j++ {
			recs = append(recs, &kgo.Record{
				Topic:     topic,
				Partition: partition,
				Key:       fmt.Appendf(nil, "%s-key-%d", tag, j),
				Value:     bytes.Repeat(fmt.Appendf(nil, "%s-value-%d;", tag, j), 1+j%7),
				Headers:   []kgo.RecordHeader{{Key: "h1", Value: []byte(tag)}, {Key: "seq", Value: fmt.Appendf(nil, "%d", j)}},
				Timestamp: base.Add(time.Duration(j) * time.Millisecond),
			})
		}
		if err := cl.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
			e.t.Fatalf("produce to %s/%d: %v", topic, partition, err)
		}
	}
}

func (e *env) offsets(adm *kadm.Client, topic string, partition int32) (start, end int64) {
	e.t.Helper()
	cl := e.src
	if adm == e.dstAdm {
		cl = e.dst
	}
	// Uncached and retried: kadm's cached metadata lags leader moves.
	var err error
	if start, err = listOffset(e.ctx, cl, topic, partition, -2); err == nil {
		end, err = listOffset(e.ctx, cl, topic, partition, -1)
	}
	if err != nil {
		e.t.Fatalf("offsets of %s/%d: %v", topic, partition, err)
	}
	return start, end
}

// waitCopied waits until the copier has copied the partition up to the
// source high watermark.
func (e *env) waitCopied(c *Copier, topic string, partition int32) {
	e.t.Helper()
	_, hw := e.offsets(e.srcAdm, topic, partition)
	polltest.Eventually(e.t, time.Minute, fmt.Sprintf("%s/%d copied up to %d", topic, partition, hw), func() (bool, string) {
		pr, ok := c.Progress(topic, partition)
		return ok && pr.DestinationLogEnd >= hw, ""
	})
}

func (e *env) newCopier(cfg Config) *Copier {
	e.t.Helper()
	cfg.Source, cfg.Destination = e.src, e.dst
	cfg.hooks = newHolds()
	if os.Getenv("KMIRROR_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := NewCopier(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// events collects a copier's events for a test.
type events struct {
	t   *testing.T
	mu  sync.Mutex
	evs []datapath.Event
}

// copyToEnd starts c on task and waits until it has copied the source
// partition to its log end as it was at the start, failing the test at the
// first permanent failure; it returns the copy's events.
func (e *env) copyToEnd(c *Copier, task Task) *events {
	e.t.Helper()
	evs := &events{t: e.t}
	if err := c.Start(e.ctx, task, evs.on); err != nil {
		e.t.Fatal(err)
	}
	_, srcEnd := e.offsets(e.srcAdm, task.Topic, task.Partition)
	polltest.Eventually(e.t, time.Minute, fmt.Sprintf("%s/%d copied to %d, or failed", task.Topic, task.Partition, srcEnd), func() (bool, string) {
		if ev, bad := evs.permanentFailure(); bad {
			e.t.Fatalf("the copy failed: %v", ev.Err)
		}
		pr, _ := c.Progress(task.Topic, task.Partition)
		return pr.DestinationLogEnd == srcEnd, fmt.Sprintf("destination log end %d of %d", pr.DestinationLogEnd, srcEnd)
	})
	return evs
}

// noFailures fails the test if the copy reported anything but filled gaps.
func (ev *events) noFailures() {
	ev.t.Helper()
	if f := ev.failures(); len(f) > 0 {
		ev.t.Fatalf("events: %+v", f)
	}
}

func (ev *events) on(e datapath.Event) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.evs = append(ev.evs, e)
}

func (ev *events) find(kind datapath.EventKind) (datapath.Event, bool) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.evs {
		if e.Kind == kind {
			return e, true
		}
	}
	return datapath.Event{}, false
}

// permanentFailure finds an EventFailed whose error retrying cannot fix.
func (ev *events) permanentFailure() (datapath.Event, bool) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.evs {
		if e.Kind == datapath.EventFailed && !datapath.Retriable(e.Err) {
			return e, true
		}
	}
	return datapath.Event{}, false
}

func (ev *events) failures() []datapath.Event {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []datapath.Event
	for _, e := range ev.evs {
		if e.Kind != datapath.EventGapFilled {
			out = append(out, e)
		}
	}
	return out
}

// rawBatches fetches every batch of a partition from from to the high
// watermark, raw as stored.
func (e *env) rawBatches(cl *kgo.Client, topic string, partition int32, from int64) []Batch {
	e.t.Helper()
	out, err := StoredBatches(e.ctx, cl, topic, partition, from)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// verifyPartition checks that the destination holds the source partition
// from the source log start on at identical offsets: the same batches (base
// offset, lastOffsetDelta, codec, timestamps, record count and byte-identical
// records section), and, through a consumer, the same keys, values, headers
// and timestamps. It returns the number of records compared.
func (e *env) verifyPartition(topic string, partition int32) int {
	e.t.Helper()
	srcStart, srcEnd := e.offsets(e.srcAdm, topic, partition)
	dstStart, dstEnd := e.offsets(e.dstAdm, topic, partition)
	if dstStart != srcStart || dstEnd != srcEnd {
		e.t.Fatalf("%s/%d: destination log %d..%d, source %d..%d", topic, partition, dstStart, dstEnd, srcStart, srcEnd)
	}
	sb := e.rawBatches(e.src, topic, partition, srcStart)
	db := e.rawBatches(e.dst, topic, partition, dstStart)
	if len(sb) != len(db) {
		e.t.Fatalf("%s/%d: %d source batches, %d destination batches", topic, partition, len(sb), len(db))
	}
	for i := range sb {
		s, d := sb[i], db[i]
		if s.BaseOffset != d.BaseOffset || s.LastOffsetDelta != d.LastOffsetDelta || s.Compression() != d.Compression() ||
			s.NumRecords != d.NumRecords || s.FirstTimestamp != d.FirstTimestamp || s.MaxTimestamp != d.MaxTimestamp ||
			!bytes.Equal(s.Raw[batchHeaderSize:], d.Raw[batchHeaderSize:]) || !d.CRCValid() {
			e.t.Fatalf("%s/%d batch %d differs:\nsource      %+v\ndestination %+v", topic, partition, i,
				withoutRaw(s), withoutRaw(d))
		}
	}
	srcRecs := e.consume(e.p.src, topic, partition, srcStart, srcEnd)
	dstRecs := e.consume(e.p.dst, topic, partition, dstStart, dstEnd)
	if len(srcRecs) != len(dstRecs) {
		e.t.Fatalf("%s/%d: %d source records, %d destination records", topic, partition, len(srcRecs), len(dstRecs))
	}
	for i := range srcRecs {
		s, d := srcRecs[i], dstRecs[i]
		if s.Offset != d.Offset || !bytes.Equal(s.Key, d.Key) || !bytes.Equal(s.Value, d.Value) ||
			!s.Timestamp.Equal(d.Timestamp) || fmt.Sprint(s.Headers) != fmt.Sprint(d.Headers) {
			e.t.Fatalf("%s/%d record %d differs: source %d %q, destination %d %q", topic, partition, i, s.Offset, s.Key, d.Offset, d.Key)
		}
	}
	return len(srcRecs)
}

func withoutRaw(b Batch) Batch { b.Raw = nil; return b }

func (e *env) consume(c *kafkatest.Cluster, topic string, partition int32, from, to int64) []*kgo.Record {
	e.t.Helper()
	if from >= to {
		return nil
	}
	cl := e.client(c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}))
	defer cl.Close()
	var out []*kgo.Record
	for {
		fs := cl.PollFetches(e.ctx)
		if e.ctx.Err() != nil {
			e.t.Fatalf("consume %s/%d: timed out at %d records", topic, partition, len(out))
		}
		fs.EachError(func(_ string, _ int32, err error) { e.t.Fatalf("consume %s/%d: %v", topic, partition, err) })
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < to {
				out = append(out, r)
			}
			done = done || r.Offset >= to-1
		})
		if done {
			return out
		}
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }

func sharedPair(t *testing.T) *pair {
	t.Helper()
	kafkatest.RequireReal(t)
	// The source's log cleaner runs often, so a compaction test is quick.
	return &pair{src: kafkatest.Start(t, kafkatest.ServerProperty("log.cleaner.backoff.ms", "100")), dst: kafkatest.Start(t)}
}

// verifyEntries checks with CompareLogs that the destination partition
// holds every source record and marker at the same offset, and nothing else
// but invisible filler; it returns the number of source entries compared.
func (e *env) verifyEntries(topic string, partition int32, compacting bool) int {
	e.t.Helper()
	srcStart, srcEnd := e.offsets(e.srcAdm, topic, partition)
	dstStart, dstEnd := e.offsets(e.dstAdm, topic, partition)
	if dstEnd != srcEnd || (dstStart != srcStart && !compacting) {
		e.t.Fatalf("%s/%d: destination log %d..%d, source %d..%d", topic, partition, dstStart, dstEnd, srcStart, srcEnd)
	}
	src, err := LogEntries(e.ctx, e.src, topic, partition, srcStart)
	if err != nil {
		e.t.Fatal(err)
	}
	dst, err := LogEntries(e.ctx, e.dst, topic, partition, dstStart)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := CompareLogs(src, dst, compacting); err != nil {
		e.t.Fatalf("%s/%d: %v", topic, partition, err)
	}
	return len(src)
}

// consumeAll reads a partition with a consumer at an isolation level until
// it has seen the record at offset last (a plain record, so both isolation
// levels reach it once every transaction before it is decided).
func (e *env) consumeAll(c *kafkatest.Cluster, topic string, partition int32, committed bool, last int64) []string {
	e.t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl := e.client(c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(iso))
	defer cl.Close()
	var out []string
	for done := false; !done; {
		fs := cl.PollFetches(e.ctx)
		if e.ctx.Err() != nil {
			e.t.Fatalf("consume %s/%d: timed out after %d records, waiting for offset %d", topic, partition, len(out), last)
		}
		fs.EachError(func(_ string, _ int32, err error) { e.t.Fatalf("consume %s/%d: %v", topic, partition, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, r.Value))
			done = done || r.Offset >= last
		})
	}
	return out
}

// sentinel appends a plain record to the source partition and returns its
// offset: consumers read up to it.
func (e *env) sentinel(topic string, partition int32) int64 {
	e.t.Helper()
	cl := e.client(e.p.src, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	r := &kgo.Record{Topic: topic, Partition: partition, Key: []byte("sentinel"), Value: []byte("end")}
	if err := cl.ProduceSync(e.ctx, r).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	return r.Offset
}

// sameConsumers checks that consumers of both clusters, read_committed and
// read_uncommitted, see the same records at the same offsets, up to the
// record at offset last.
func (e *env) sameConsumers(topic string, partition int32, last int64) {
	e.t.Helper()
	for _, committed := range []bool{false, true} {
		s := e.consumeAll(e.p.src, topic, partition, committed, last)
		d := e.consumeAll(e.p.dst, topic, partition, committed, last)
		if strings.Join(s, "\n") != strings.Join(d, "\n") {
			e.t.Fatalf("%s/%d read_committed=%v: source consumer saw %d records, destination %d:\nsource      %v\ndestination %v",
				topic, partition, committed, len(s), len(d), s, d)
		}
		e.t.Logf("%s/%d read_committed=%v: %d records seen alike on both clusters", topic, partition, committed, len(s))
	}
}
