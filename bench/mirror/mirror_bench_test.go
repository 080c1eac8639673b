// Package mirrorbench compares ways of getting a source topic's records into a
// destination cluster, side by side in one run on the same data (real Apache
// Kafka source and destination from the test harness):
//
//   - raw-produce: the destination's own produce of the same records, already
//     in memory (the practical ceiling);
//
//   - kmirror: fetcher.Copier, raw batches at identical offsets, no
//     recompression;
//
//   - consume-reproduce: a consumer and a producer (decompress, re-batch,
//     recompress), which is what MirrorMaker 2 does per record.
//
//     make bench   (or: go test -run '^$' -bench . -benchtime 1x ./bench/mirror/)
//
// Reported per codec: MB/s of source batch bytes, records/s, and CPU seconds
// per GB of this process (the broker JVMs are not counted).
package mirrorbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/fetcher"
	"github.com/kmirror/kmirror/internal/kafkatest"
)

const (
	partitions = 8
	perPart    = 25_000
	valueBytes = 500 // half random: compresses about 2:1
)

type codec struct {
	name  string
	codec kgo.CompressionCodec
}

var codecs = []codec{{"none", kgo.NoCompression()}, {"zstd", kgo.ZstdCompression()}}

func BenchmarkMirror(b *testing.B) {
	src := kafkatest.Start(b)
	dst := kafkatest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	for _, c := range codecs {
		topic := "bench-" + c.name
		records := fill(ctx, b, src, topic, c.codec)
		bytes := sourceBytes(ctx, b, src, topic)
		b.Run(c.name+"/raw-produce", func(b *testing.B) {
			measure(b, bytes, len(records), func() { produceAll(ctx, b, dst, topic+"-raw", records, c.codec) })
		})
		b.Run(c.name+"/kmirror", func(b *testing.B) {
			measure(b, bytes, len(records), func() { copyAll(ctx, b, src, dst, topic) })
		})
		b.Run(c.name+"/consume-reproduce", func(b *testing.B) {
			measure(b, bytes, len(records), func() { reproduce(ctx, b, src, dst, topic, topic+"-mm", c.codec, len(records)) })
		})
	}
}

// measure runs fn once and reports throughput and this process's CPU per GB.
func measure(b *testing.B, bytes int64, records int, fn func()) {
	for range b.N {
		cpu0 := cpuTime()
		began := time.Now()
		fn()
		el := time.Since(began).Seconds()
		cpu := (cpuTime() - cpu0).Seconds()
		b.ReportMetric(float64(bytes)/el/1e6, "MB/s")
		b.ReportMetric(float64(records)/el, "records/s")
		b.ReportMetric(cpu/(float64(bytes)/1e9), "cpu-s/GB")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fill(ctx context.Context, b *testing.B, c *kafkatest.Cluster, topic string, codec kgo.CompressionCodec) []*kgo.Record {
	createTopic(ctx, b, c, topic)
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []*kgo.Record
	for p := int32(0); p < partitions; p++ {
		for range perPart {
			v := make([]byte, valueBytes)
			for j := 0; j < valueBytes/2; j++ {
				v[j] = byte(rng.Uint32())
			}
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: v})
		}
	}
	produceAll(ctx, b, c, topic, recs, codec)
	return recs
}

func createTopic(ctx context.Context, b *testing.B, c *kafkatest.Cluster, topic string) {
	resp, err := kadm.NewClient(c.Client(b)).CreateTopic(ctx, partitions, 1, map[string]*string{"retention.ms": kadm.StringPtr("-1")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		b.Fatalf("create %s: %v", topic, err)
	}
}

func producer(b *testing.B, c *kafkatest.Cluster, codec kgo.CompressionCodec) *kgo.Client {
	return c.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(20*time.Millisecond), kgo.MaxBufferedRecords(200_000))
}

func produceAll(ctx context.Context, b *testing.B, c *kafkatest.Cluster, topic string, recs []*kgo.Record, codec kgo.CompressionCodec) {
	if topic != recs[0].Topic {
		createTopic(ctx, b, c, topic)
	}
	cl := producer(b, c, codec)
	for _, r := range recs {
		cp := *r
		cp.Topic = topic
		cl.Produce(ctx, &cp, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

func sourceBytes(ctx context.Context, b *testing.B, c *kafkatest.Cluster, topic string) int64 {
	sizes, err := kadm.NewClient(c.Client(b)).DescribeAllLogDirs(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	sizes.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == topic {
				total += p.Size
			}
		})
	})
	return total
}

// copyAll mirrors topic with the kmirror copier into a fresh destination
// topic of the same name and returns when every partition is caught up.
func copyAll(ctx context.Context, b *testing.B, src, dst *kafkatest.Cluster, topic string) {
	srcCl, dstCl := src.Client(b), dst.Client(b)
	if _, err := fetcher.EnsureDestinationTopic(ctx, kadm.NewClient(srcCl), kadm.NewClient(dstCl), topic, nil); err != nil {
		b.Fatal(err)
	}
	c, err := fetcher.NewCopier(fetcher.Config{Source: srcCl, Destination: dstCl, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for p := int32(0); p < partitions; p++ {
		if err := c.Start(ctx, fetcher.Task{Topic: topic, Partition: p, TransactionalID: fmt.Sprintf("bench-%s-%d", topic, p)}, nil); err != nil {
			b.Fatal(err)
		}
	}
	for p := int32(0); p < partitions; p++ {
		for {
			pr, ok := c.Progress(topic, p)
			if ok && pr.DestinationLogEnd >= perPart {
				break
			}
			if ctx.Err() != nil {
				b.Fatalf("copy of %s/%d did not finish", topic, p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// reproduce consumes topic from the source and produces every record to
// target on the destination, as MirrorMaker 2 does.
func reproduce(ctx context.Context, b *testing.B, src, dst *kafkatest.Cluster, topic, target string, codec kgo.CompressionCodec, n int) {
	createTopic(ctx, b, dst, target)
	cons := src.Client(b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	prod := producer(b, dst, codec)
	got := 0
	for got < n {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("re-produced %d of %d", got, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			prod.Produce(ctx, &kgo.Record{Topic: target, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}, nil)
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}
