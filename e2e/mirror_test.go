// Package e2e runs kmirror end to end on real Apache Kafka: two clusters,
// kmirror in front of the destination, clients nobody here wrote.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// kmirror runs an in-process instance in front of dst until the test ends.
func kmirror(t *testing.T, dst *kafkatest.Cluster) *instance.Instance {
	t.Helper()
	return instancetest.Start(t, dst, nil)
}

// admin is a franz-go client for the proxy that can send mirror RPCs.
func admin(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func request[R kmsg.Response](t *testing.T, cl *kgo.Client, req kmsg.Request) R {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	return resp.(R)
}

// produce writes n records per partition with the given codec, keys,
// headers and timestamps 30 days in the past.
func produce(t *testing.T, c *kafkatest.Cluster, topic string, partitions int32, n int, codec kgo.CompressionCodec) {
	t.Helper()
	cl := c.Client(t, kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(256<<10), kgo.ProducerLinger(5*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for p := int32(0); p < partitions; p++ {
		for i := 0; i < n; i++ {
			wg.Add(1)
			r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprintf("k-%d-%d", p, i)),
				Value:     []byte(strings.Repeat(fmt.Sprintf("value %d of %s/%d ", i, topic, p), 3)),
				Headers:   []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}},
				Timestamp: old.Add(time.Duration(i) * time.Millisecond)}
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("produce to %s: %v", topic, firstErr)
	}
}

// waitMirrored polls DescribeMirrors until every partition of the topics is
// MIRRORING with lag 0 and the source high watermark as given.
func waitMirrored(t *testing.T, cl *kgo.Client, mirror string, want map[string]int64) {
	t.Helper()
	polltest.Eventually(t, 3*time.Minute, "mirror "+mirror+" caught up", func() (bool, string) {
		req := protocol.NewPtrDescribeMirrorsRequest()
		req.MirrorNames = []string{mirror}
		resp := request[*protocol.DescribeMirrorsResponse](t, cl, req)
		ok := len(resp.Mirrors) == 1 && resp.Mirrors[0].ErrorCode == 0
		var b strings.Builder
		totals := map[string]int64{}
		if ok {
			for _, tp := range resp.Mirrors[0].Topics {
				for _, p := range tp.Partitions {
					totals[tp.Name] += p.DestinationHighWatermark
					if p.State != "MIRRORING" || p.Lag != 0 {
						ok = false
						fmt.Fprintf(&b, "%s/%d %s lag %d %s; ", tp.Name, p.Partition, p.State, p.Lag, deref(p.ErrorMessage))
					}
				}
			}
		}
		for topic, n := range want {
			if totals[topic] != n {
				ok = false
				fmt.Fprintf(&b, "%s has %d of %d; ", topic, totals[topic], n)
			}
		}
		return ok, b.String()
	})
}

// createMirror creates a mirror through cl; configs are name, value pairs.
func createMirror(t *testing.T, cl *kgo.Client, name string, configs ...string) {
	t.Helper()
	create := protocol.NewPtrCreateMirrorRequest()
	create.MirrorName = name
	for i := 0; i+1 < len(configs); i += 2 {
		create.Configs = append(create.Configs, protocol.CreateMirrorRequestConfig{Name: configs[i], Value: kmsg.StringPtr(configs[i+1])})
	}
	if r := request[*protocol.CreateMirrorResponse](t, cl, create); r.ErrorCode != 0 {
		t.Fatalf("create mirror %s: %s", name, deref(r.ErrorMessage))
	}
}

// addTopics adds topics to a mirror by name; every one must be accepted.
func addTopics(t *testing.T, cl *kgo.Client, mirror string, topics ...string) {
	t.Helper()
	add := protocol.NewPtrAddTopicsToMirrorRequest()
	add.MirrorName = mirror
	for _, n := range topics {
		add.Topics = append(add.Topics, protocol.AddTopicsToMirrorRequestTopic{Name: n, NumPartitions: -1})
	}
	r := request[*protocol.AddTopicsToMirrorResponse](t, cl, add)
	if r.ErrorCode != 0 {
		t.Fatalf("add %v to %s: %s", topics, mirror, deref(r.ErrorMessage))
	}
	for _, tr := range r.Topics {
		if tr.ErrorCode != 0 {
			t.Fatalf("add %s to %s: %s", tr.Name, mirror, deref(tr.ErrorMessage))
		}
	}
}

// stableEnds waits until every partition of the topics on cl's cluster has its last
// stable offset at its end offset (no transaction left open), and returns the end
// offsets. A transaction's commit or abort markers are written after EndTransaction
// returns, so end offsets read right after it may not count them yet. (The wait allows
// for a transaction whose abort was lost: the coordinator aborts it at its timeout.)
func stableEnds(t *testing.T, cl *kgo.Client, topics ...string) kadm.ListedOffsets {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := kadm.NewClient(cl)
	var ends kadm.ListedOffsets
	polltest.Eventually(t, 2*time.Minute, fmt.Sprintf("last stable offsets of %v at their ends", topics), func() (bool, string) {
		// Ends first: the last stable offsets read after them can only catch up.
		var err error
		if ends, err = adm.ListEndOffsets(ctx, topics...); err == nil {
			err = ends.Error()
		}
		if err != nil {
			return false, fmt.Sprintf("end offsets: %v", err)
		}
		stable, err := adm.ListCommittedOffsets(ctx, topics...)
		if err == nil {
			err = stable.Error()
		}
		if err != nil {
			return false, fmt.Sprintf("last stable offsets: %v", err)
		}
		var b strings.Builder
		ends.Each(func(e kadm.ListedOffset) {
			if l, _ := stable.Lookup(e.Topic, e.Partition); l.Offset != e.Offset {
				fmt.Fprintf(&b, "%s/%d end %d, last stable %d; ", e.Topic, e.Partition, e.Offset, l.Offset)
			}
		})
		return b.Len() == 0, b.String()
	})
	return ends
}

// produceWhenWritable produces recs through cl (kmirror) and produces again those it
// refused as writes to a read-only mirror topic, until none is refused; any other error
// fails the test. kmirror rebuilds its read-only set in the background after the mirror
// state changes, so a topic a mirror RPC already shows STOPPED may be refused a moment
// longer.
func produceWhenWritable(t *testing.T, ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, "writes let through kmirror", func() (bool, string) {
		var refused []*kgo.Record
		var last error
		for _, r := range cl.ProduceSync(ctx, recs...) {
			switch {
			case errors.Is(r.Err, kerr.PolicyViolation):
				refused, last = append(refused, r.Record), r.Err
			case r.Err != nil:
				t.Fatalf("produce to %s/%d: %v", r.Record.Topic, r.Record.Partition, r.Err)
			}
		}
		recs = refused
		return len(refused) == 0, fmt.Sprintf("%d records refused: %v", len(refused), last)
	})
}

// produceCounter counts the Produce requests a client writes (a kgo.HookBrokerWrite).
type produceCounter struct{ n atomic.Int32 }

func (c *produceCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		c.n.Add(1)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestMirrorEndToEnd(t *testing.T) {
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t)
	km := kmirror(t, dst)
	cl := admin(t, km.Proxy.Addr())
	want := fillEndToEndSource(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mirrorEndToEndTopics(t, cl, src)
	began := time.Now()
	waitMirrored(t, cl, "dr", want)
	t.Logf("mirrored %d records of 4 topics in %s", 200_000+2000, time.Since(began).Round(100*time.Millisecond))

	srcCl, dstCl := src.Client(t), dst.Client(t)
	got := mirrortest.VerifyIdentical(t, srcCl, dstCl, "orders", "payments", "clicks-eu", "trimmed")
	if p := got["trimmed"][0]; p.LogStart != 437 {
		t.Fatalf("trimmed/0 log start %d on both clusters, want 437", p.LogStart)
	}
	viaProxy := mirrorTopicIsReadOnly(t, ctx, km)
	mirrortest.VerifyIdentical(t, srcCl, dstCl, "orders")
	failOverOrders(t, ctx, cl, srcCl, viaProxy)
}

// End-to-end sizes: 3 topics × 8 partitions, 200k records in all.
const (
	e2eParts        = 8
	e2ePerPartition = 200_000 / 3 / e2eParts
)

// fillEndToEndSource writes the source of TestMirrorEndToEnd: 3 topics in
// three codecs, and a topic whose log start is above 0 before it is
// mirrored. It returns the records each topic's mirror must hold.
func fillEndToEndSource(t *testing.T, src *kafkatest.Cluster) map[string]int64 {
	t.Helper()
	codecs := map[string]kgo.CompressionCodec{"orders": kgo.NoCompression(), "payments": kgo.Lz4Compression(), "clicks-eu": kgo.ZstdCompression()}
	want := map[string]int64{}
	for topic, codec := range codecs {
		src.CreateKeptTopic(t, topic, e2eParts)
		produce(t, src, topic, e2eParts, e2ePerPartition, codec)
		want[topic] = e2ePerPartition * e2eParts
	}
	src.CreateKeptTopic(t, "trimmed", 2)
	produce(t, src, "trimmed", 2, 1000, kgo.ZstdCompression())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	trim := kadm.Offsets{}
	trim.Add(kadm.Offset{Topic: "trimmed", Partition: 0, At: 437})
	trim.Add(kadm.Offset{Topic: "trimmed", Partition: 1, At: 999})
	if _, err := kadm.NewClient(src.Client(t)).DeleteRecords(ctx, trim); err != nil {
		t.Fatal(err)
	}
	want["trimmed"] = 2000
	return want
}

// mirrorEndToEndTopics creates the mirror dr of src and adds its topics, by
// name and by pattern, with the mirror RPCs themselves.
func mirrorEndToEndTopics(t *testing.T, cl *kgo.Client, src *kafkatest.Cluster) {
	t.Helper()
	create := protocol.NewPtrCreateMirrorRequest()
	create.MirrorName = "dr"
	create.Configs = []protocol.CreateMirrorRequestConfig{{Name: "bootstrap.servers", Value: kmsg.StringPtr(src.BootstrapString())}}
	if r := request[*protocol.CreateMirrorResponse](t, cl, create); r.ErrorCode != 0 {
		t.Fatalf("create mirror: %s", deref(r.ErrorMessage))
	}
	add := protocol.NewPtrAddTopicsToMirrorRequest()
	add.MirrorName = "dr"
	for _, n := range []string{"orders", "payments", "trimmed"} {
		add.Topics = append(add.Topics, protocol.AddTopicsToMirrorRequestTopic{Name: n, NumPartitions: -1})
	}
	add.IncludePatterns = []string{"clicks-.*"}
	r := request[*protocol.AddTopicsToMirrorResponse](t, cl, add)
	if r.ErrorCode != 0 || len(r.Topics) != 4 {
		t.Fatalf("add topics: %s %+v", deref(r.ErrorMessage), r.Topics)
	}
	for _, tr := range r.Topics {
		if tr.ErrorCode != 0 {
			t.Fatalf("add %s: %s", tr.Name, deref(tr.ErrorMessage))
		}
	}
}

// mirrorTopicIsReadOnly: franz-go through kmirror fails fast (it reports
// the code, not the broker's message) and the Java producer shows the
// message verbatim; nothing is written. It returns the franz-go client.
func mirrorTopicIsReadOnly(t *testing.T, ctx context.Context, km *instance.Instance) *kgo.Client {
	t.Helper()
	var produces produceCounter
	viaProxy := kafkatest.NewClient(t, []string{km.Proxy.Addr()}, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.WithHooks(&produces))
	err := viaProxy.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Value: []byte("must not land")}).FirstErr()
	if !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to a mirror topic through kmirror: %v", err)
	}
	if n := produces.n.Load(); n != 1 {
		t.Fatalf("franz-go sent %d Produce requests for one record: the refusal must not be retried", n)
	}
	out, jerr := kafkatest.RunToolInput(t, ctx, "hello\n", "org.apache.kafka.tools.ConsoleProducer",
		"--bootstrap-server", km.Proxy.Addr(), "--topic", "orders", "--producer-property", "retries=0")
	if !strings.Contains(out, `read-only mirror topic of mirror "dr"`) || !strings.Contains(out, "kmirror mirrors --remove --mirror dr --topics orders") {
		t.Fatalf("Java console producer to a mirror topic: err %v, output:\n%s", jerr, out)
	}
	return viaProxy
}

// failOverOrders fails orders over: STOPPED, LMO = destination end,
// writable, and a consumer goes on with the same next record.
func failOverOrders(t *testing.T, ctx context.Context, cl, srcCl, viaProxy *kgo.Client) {
	t.Helper()
	remove := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	remove.MirrorName = "dr"
	remove.Topics = []protocol.TopicName{{Name: "orders"}}
	if rr := request[*protocol.RemoveTopicsFromMirrorResponse](t, cl, remove); rr.ErrorCode != 0 || rr.Topics[0].ErrorCode != 0 {
		t.Fatalf("remove: %+v", rr)
	}
	stoppedAt := time.Now()
	polltest.Eventually(t, time.Minute, fmt.Sprintf("orders STOPPED with LMO %d", e2ePerPartition), func() (bool, string) {
		lmo := protocol.NewPtrLastMirroredOffsetsRequest()
		lmo.MirrorName = "dr"
		lmo.Topics = []protocol.TopicPartitions{{Name: "orders"}}
		lr := request[*protocol.LastMirroredOffsetsResponse](t, cl, lmo)
		if len(lr.Topics) != 1 {
			return false, fmt.Sprintf("%+v", lr.Topics)
		}
		done := len(lr.Topics[0].Partitions) == e2eParts
		for _, p := range lr.Topics[0].Partitions {
			done = done && p.LastMirroredOffset == e2ePerPartition
		}
		return done, fmt.Sprintf("%+v", lr.Topics)
	})
	t.Logf("failover of orders took %s", time.Since(stoppedAt).Round(10*time.Millisecond))
	produceWhenWritable(t, ctx, viaProxy, &kgo.Record{Topic: "orders", Partition: 3, Value: []byte("after failover")})
	// A consumer that had read orders/3 up to offset 100 on the source goes on at 101 on the destination.
	if a, b := firstOrder3(t, ctx, srcCl, 101), firstOrder3(t, ctx, viaProxy, 101); a.Offset != b.Offset || string(a.Value) != string(b.Value) || string(a.Key) != string(b.Key) {
		t.Fatalf("next record after offset 100: source %d %q, destination %d %q", a.Offset, a.Key, b.Offset, b.Key)
	}
	if last := firstOrder3(t, ctx, viaProxy, e2ePerPartition); string(last.Value) != "after failover" || last.Offset != e2ePerPartition {
		t.Fatalf("record after failover at offset %d: %q", last.Offset, last.Value)
	}
}

// firstOrder3 reads the first record of orders/3 at or after off, through
// c's seed brokers.
func firstOrder3(t *testing.T, ctx context.Context, c *kgo.Client, off int64) *kgo.Record {
	t.Helper()
	rc := kafkatest.NewClient(t, c.OptValue(kgo.SeedBrokers).([]string),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {3: kgo.NewOffset().At(off)}}))
	for {
		fs := rc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("timeout reading orders/3")
		}
		var first *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if first == nil {
				first = r
			}
		})
		if first != nil {
			return first
		}
	}
}
