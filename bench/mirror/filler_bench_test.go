package mirrorbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/fetcher"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// BenchmarkCompactedFiller measures what the invisible filler of a
// compacted source costs: a topic whose records mostly share a few keys,
// compacted on the source until most offsets hold no record, is copied by
// the fetcher; each offset without a record becomes the marker of an empty
// aborted transaction on the destination (32 in flight per partition).
// Reported: offsets filled per second and the copy's wall time, next to a
// dense copy of a topic with as many offsets, in the same run.
func BenchmarkCompactedFiller(b *testing.B) {
	src := kafkatest.Start(b, kafkatest.ServerProperty("log.cleaner.backoff.ms", "100"))
	dst := kafkatest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const offsets = 6000
	sadm := kadm.NewClient(src.Client(b))
	for _, topic := range []string{"compacted", "dense"} {
		configs := map[string]*string{"retention.ms": kadm.StringPtr("-1")}
		if topic == "compacted" {
			configs = map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "segment.ms": kadm.StringPtr("100"),
				"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"), "min.compaction.lag.ms": kadm.StringPtr("0")}
		}
		if r, err := sadm.CreateTopic(ctx, 1, 1, configs, topic); err != nil || r.Err != nil {
			b.Fatalf("create %s: %v %v", topic, err, r.Err)
		}
	}
	pr := src.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	for i := 0; i < offsets; i += 100 {
		var c, d []*kgo.Record
		for j := range 100 {
			key := []byte(fmt.Sprintf("k%d", (i+j)%4)) // four keys: compaction leaves a handful of records
			c = append(c, &kgo.Record{Topic: "compacted", Key: key, Value: []byte("v")})
			d = append(d, &kgo.Record{Topic: "dense", Key: key, Value: []byte("v")})
		}
		if err := pr.ProduceSync(ctx, append(c, d...)...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	holes := func() int64 {
		bs, err := fetcher.StoredBatches(ctx, src.Client(b), "compacted", 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		var records int64
		for _, bt := range bs {
			records += int64(bt.NumRecords)
		}
		return offsets - records
	}
	polltest.Eventually(b, 3*time.Minute, "the source compacted most offsets away", func() (bool, string) {
		_ = pr.ProduceSync(ctx, &kgo.Record{Topic: "compacted", Key: []byte("k0"), Value: []byte("roll")}).FirstErr() // rolls a segment
		h := holes()
		return h > offsets*9/10, fmt.Sprintf("%d of %d offsets without a record", h, offsets)
	})
	for _, r := range []fillerRun{{"compacted", 32}, {"compacted", 128}, {"dense", 32}} {
		b.Run(fmt.Sprintf("%s/fillers=%d", r.topic, r.fillers), func(b *testing.B) {
			for range b.N {
				r.copy(ctx, b, src, dst, sadm)
			}
		})
	}
}

// fillerRun is one copy of BenchmarkCompactedFiller: a topic and the filler transactions in
// flight per partition.
type fillerRun struct {
	topic   string
	fillers int
}

// copy copies the run's topic into a fresh destination topic and reports its rate.
func (r fillerRun) copy(ctx context.Context, b *testing.B, src, dst *kafkatest.Cluster, sadm *kadm.Client) {
	b.Helper()
	topic := r.topic
	dadm := kadm.NewClient(dst.Client(b))
	// A fresh destination topic per run.
	if _, err := dadm.DeleteTopics(ctx, topic); err != nil {
		b.Fatal(err)
	}
	polltest.Eventually(b, time.Minute, "the previous destination topic deleted", func() (bool, string) {
		md, err := dadm.Metadata(kadm.WithAuthorizedOps(ctx), topic)
		return err == nil && md.Topics[topic].Err != nil, fmt.Sprint(err)
	})
	if _, err := fetcher.EnsureDestinationTopic(ctx, sadm, dadm, topic, nil); err != nil {
		b.Fatal(err)
	}
	c, err := fetcher.NewCopier(fetcher.Config{Source: src.Client(b), Destination: dst.Client(b), FillerTransactions: r.fillers})
	if err != nil {
		b.Fatal(err)
	}
	ends, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	began := time.Now()
	if err := c.Start(ctx, fetcher.Task{Topic: topic, Partition: 0, TransactionalID: fmt.Sprintf("bench-%s-%d", topic, r.fillers)}, nil); err != nil {
		b.Fatal(err)
	}
	var p datapath.Progress
	polltest.Eventually(b, 5*time.Minute, topic+" copied", func() (bool, string) {
		p, _ = c.Progress(topic, 0)
		return p.DestinationLogEnd >= end.Offset, fmt.Sprintf("%d of %d", p.DestinationLogEnd, end.Offset)
	})
	el := time.Since(began).Seconds()
	c.Close()
	b.ReportMetric(float64(end.Offset)/el, "offsets/s")
	b.ReportMetric(float64(p.FillerMarkers), "markers")
	b.ReportMetric(el, "s")
	b.Logf("%s: %d offsets (%d records, %d markers) in %.1fs: %.0f offsets/s", topic, end.Offset, p.RecordsCopied, p.FillerMarkers, el, float64(end.Offset)/el)
}
