package fetcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/fetcher"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestRealLongPollHoldsNoOtherFetch: with several Fetches in flight to one
// source broker, a Fetch of a caught-up partition, which the broker holds for
// FetchMaxWait, must not hold up the Fetches of a partition with a backlog. A
// broker answers one connection's requests one at a time, so when all of a
// source's Fetches shared one connection every backlog Fetch queued behind a
// held one: the old copier had copied 480 of the 1,024 records below after
// twice FetchMaxWait (this one: all in 1.6 s on an idle machine), and make
// test's quota test saw copies at a sixth of their speed.
func TestRealLongPollHoldsNoOtherFetch(t *testing.T) {
	kafkatest.RequireReal(t)
	src := kafkatest.Start(t, kafkatest.Real())
	dst := kafkatest.Start(t, kafkatest.Real())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic, maxWait = "longpoll", 10 * time.Second
	srcCl, dstCl := src.Client(t), dst.Client(t)
	srcAdm, dstAdm := kadm.NewClient(srcCl), kadm.NewClient(dstCl)
	if resp, err := srcAdm.CreateTopic(ctx, 2, 1, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, resp.Err)
	}
	// Partition 1 has a backlog of 64 fetches; partition 0 stays empty.
	pr := src.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(16<<10))
	var recs []*kgo.Record
	for i := range 1024 {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: 1, Value: fmt.Appendf(nil, "%01000d", i)})
	}
	if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 2*time.Minute, "destination topic", func() (bool, string) {
		_, err := fetcher.EnsureDestinationTopic(ctx, srcAdm, dstAdm, topic, nil)
		return err == nil, fmt.Sprint(err)
	})
	c, err := fetcher.NewCopier(fetcher.Config{Source: srcCl, Destination: dstCl, FetchMaxBytes: 16 << 10,
		FetchResponseMaxBytes: 16 << 10, FetchMaxWait: maxWait, FetchesInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	failed := startAll(ctx, t, c, topic, 2)
	polltest.Eventually(t, 2*maxWait, "partition 1 copied while partition 0's Fetches are held", func() (bool, string) {
		failed.Range(func(p, err any) bool { t.Fatalf("partition %v failed: %v", p, err); return false })
		pr, ok := c.Progress(topic, 1)
		return ok && pr.DestinationLogEnd >= int64(len(recs)), fmt.Sprintf("destination log end %d of %d", pr.DestinationLogEnd, len(recs))
	})
	t.Logf("partition 1's %d records copied in %s beside a partition held %s per Fetch", len(recs), time.Since(start).Round(time.Millisecond), maxWait)
	mirrortest.VerifyIdentical(t, srcCl, dstCl, topic)
}
