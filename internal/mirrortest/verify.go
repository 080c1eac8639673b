// Package mirrortest checks what a mirror promises, by reading both clusters:
// every record of the source at the same offset on the destination, with the
// same key, value, headers and timestamp.
package mirrortest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/kmirror/kmirror/fetcher"
)

// Partition counts what was compared on one partition.
type Partition struct {
	LogStart, HighWatermark int64
	Records                 int
}

// VerifyIdentical reads every partition of topics on both clusters, from the
// source log start to its high watermark, and fails the test at the first
// difference. Destination log start and high watermark must equal the source's.
func VerifyIdentical(t testing.TB, src, dst *kgo.Client, topics ...string) map[string]map[int32]Partition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := map[string]map[int32]Partition{}
	for _, b := range logBounds(ctx, t, src, dst, topics) {
		if b.dstEnd != b.srcEnd {
			t.Fatalf("%s/%d: destination high watermark %d, source %d", b.topic, b.partition, b.dstEnd, b.srcEnd)
		}
		if b.dstStart != b.srcStart {
			t.Fatalf("%s/%d: destination log start %d, source %d", b.topic, b.partition, b.dstStart, b.srcStart)
		}
		if out[b.topic] == nil {
			out[b.topic] = map[int32]Partition{}
		}
		out[b.topic][b.partition] = Partition{LogStart: b.srcStart, HighWatermark: b.srcEnd}
	}
	for topic, parts := range out {
		for p, info := range parts {
			if info.HighWatermark == info.LogStart {
				continue
			}
			a := readAll(ctx, t, "source", src, topic, p, info.LogStart, info.HighWatermark)
			b := readAll(ctx, t, "destination", dst, topic, p, info.LogStart, info.HighWatermark)
			if len(a) != len(b) {
				t.Fatalf("%s/%d: source has %d records in [%d,%d), destination %d", topic, p, len(a), info.LogStart, info.HighWatermark, len(b))
			}
			for i := range a {
				if err := sameRecord(a[i], b[i]); err != nil {
					t.Fatalf("%s/%d: %v", topic, p, err)
				}
			}
			info.Records = len(a)
			parts[p] = info
		}
	}
	return out
}

func sameRecord(a, b *kgo.Record) error {
	switch {
	case a.Offset != b.Offset:
		return fmt.Errorf("source record at offset %d is at offset %d on the destination", a.Offset, b.Offset)
	case !bytes.Equal(a.Key, b.Key) || (a.Key == nil) != (b.Key == nil):
		return fmt.Errorf("offset %d: key %q vs %q", a.Offset, a.Key, b.Key)
	case !bytes.Equal(a.Value, b.Value) || (a.Value == nil) != (b.Value == nil):
		return fmt.Errorf("offset %d: values differ (%d vs %d bytes)", a.Offset, len(a.Value), len(b.Value))
	case !a.Timestamp.Equal(b.Timestamp):
		return fmt.Errorf("offset %d: timestamp %s vs %s", a.Offset, a.Timestamp, b.Timestamp)
	case len(a.Headers) != len(b.Headers):
		return fmt.Errorf("offset %d: %d headers vs %d", a.Offset, len(a.Headers), len(b.Headers))
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return fmt.Errorf("offset %d: header %d differs", a.Offset, i)
		}
	}
	return nil
}

// readAll reads [from, to) of one partition (read_uncommitted).
func readAll(ctx context.Context, t testing.TB, side string, seeds *kgo.Client, topic string, p int32, from, to int64) []*kgo.Record {
	t.Helper()
	// The reader reaches the cluster as the given client does: its seeds and, on a SASL
	// cluster, its credentials.
	sasls, _ := seeds.OptValue(kgo.SASL).([]sasl.Mechanism)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds.OptValue(kgo.SeedBrokers).([]string)...), kgo.SASL(sasls...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	must(t, err, "reader client")
	defer cl.Close()
	var out []*kgo.Record
	polls, lastHW, lastStart := 0, int64(-1), int64(-1)
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s %s/%d: read %d records of [%d,%d) before timeout (%d polls, last high watermark %d, log start %d)",
				side, topic, p, len(out), from, to, polls, lastHW, lastStart)
		}
		polls++
		fs.EachPartition(func(fp kgo.FetchTopicPartition) { lastHW, lastStart = fp.HighWatermark, fp.LogStartOffset })
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("read %s %s/%d: %v", side, topic, p, err) })
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

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// VerifyLog compares every partition of topics offset by offset as stored,
// transaction markers and aborted records included (fetcher.CompareLogs):
// the check for transactional and compacted topics, whose offsets a
// consumer does not all see. Destination and source log ends must be equal.
// It returns the number of source entries compared.
func VerifyLog(t testing.TB, src, dst *kgo.Client, compacting bool, topics ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := 0
	for _, b := range logBounds(ctx, t, src, dst, topics) {
		if b.dstEnd != b.srcEnd {
			t.Fatalf("%s/%d: destination log end %d, source %d", b.topic, b.partition, b.dstEnd, b.srcEnd)
		}
		a, err := fetcher.LogEntries(ctx, src, b.topic, b.partition, b.srcStart)
		must(t, err, "source log")
		d, err := fetcher.LogEntries(ctx, dst, b.topic, b.partition, b.dstStart)
		must(t, err, "destination log")
		if err := fetcher.CompareLogs(a, d, compacting); err != nil {
			t.Fatalf("%s/%d: %v", b.topic, b.partition, err)
		}
		n += len(a)
	}
	return n
}

// bounds are one partition's log start and end on both clusters.
type bounds struct {
	topic            string
	partition        int32
	srcStart, srcEnd int64
	dstStart, dstEnd int64
}

// logBounds lists the log starts and ends of every source partition of
// topics and of the same partition on the destination.
func logBounds(ctx context.Context, t testing.TB, src, dst *kgo.Client, topics []string) []bounds {
	t.Helper()
	sadm, dadm := kadm.NewClient(src), kadm.NewClient(dst)
	sStart, err := sadm.ListStartOffsets(ctx, topics...)
	must(t, err, "source start offsets")
	sEnd, err := sadm.ListEndOffsets(ctx, topics...)
	must(t, err, "source end offsets")
	dStart, err := dadm.ListStartOffsets(ctx, topics...)
	must(t, err, "destination start offsets")
	dEnd, err := dadm.ListEndOffsets(ctx, topics...)
	must(t, err, "destination end offsets")
	var out []bounds
	sEnd.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("source %s/%d end offset: %v", o.Topic, o.Partition, o.Err)
		}
		ss, _ := sStart.Lookup(o.Topic, o.Partition)
		ds, _ := dStart.Lookup(o.Topic, o.Partition)
		de, ok := dEnd.Lookup(o.Topic, o.Partition)
		if !ok || de.Err != nil {
			t.Fatalf("%s/%d missing on the destination: %v", o.Topic, o.Partition, de.Err)
		}
		out = append(out, bounds{o.Topic, o.Partition, ss.Offset, o.Offset, ds.Offset, de.Offset})
	})
	return out
}

// Log reads one partition's stored log from its log start
// (fetcher.LogEntries).
func Log(t testing.TB, cl *kgo.Client, topic string, p int32) []fetcher.LogEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	must(t, err, "log start")
	s, _ := starts.Lookup(topic, p)
	es, err := fetcher.LogEntries(ctx, cl, topic, p, s.Offset)
	must(t, err, "log of "+topic)
	return es
}
