package fetcher_test

// Several Fetches in flight per source broker (source.go) on real Kafka,
// through a Toxiproxy hop in front of each source broker (internal/faultnet):
// one broker's answers delayed and jittered by its hop, then every
// partition's leader moved to its other replica mid-copy. Every record must
// still land at its source offset, once (internal/mirrortest), and the copy
// must really have had several Fetches in flight to one broker (a test of
// the ordering that never overlapped fetches would prove nothing).

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/fetcher"
	"github.com/kmirror/kmirror/internal/faultnet"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
)

const inflightParts = 8

func TestRealFetchesInFlightStayOrdered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const topic = "inflight"
	h := startHopEnv(ctx, t, topic, inflightParts)
	front, src, srcCl, dstCl, srcAdm, fetches := h.front, h.src, h.srcCl, h.dstCl, h.srcAdm, &h.fetches
	w := newWriter(t, src)
	w.write(ctx, t, topic, inflightParts, 600, "before")
	// Small fetches and a small buffer: many Fetches per partition, and a
	// broker's share of the partitions split over several of them.
	c := h.copier(ctx, t, topic)
	failed := startAll(ctx, t, c, topic, inflightParts)
	// One broker's answers come late and unevenly: its partitions' fetches
	// overtake each other's timing and the other broker's.
	if err := front.Add(0, faultnet.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 120, "jitter": 100}}); err != nil {
		t.Fatal(err)
	}
	w.write(ctx, t, topic, inflightParts, 600, "delayed")
	waitCopied(ctx, t, c, srcAdm, topic, inflightParts, failed)
	if max := fetches.max(); max < 2 {
		t.Fatalf("at most %d Fetch in flight to one source broker: the copy never overlapped fetches", max)
	}
	mirrortest.VerifyIdentical(t, srcCl, dstCl, topic)
	front.Reset()

	// Leaders move while records arrive: every partition's replicas swapped
	// and the new preferred replica elected (a 2-broker KRaft quorum would
	// not survive a broker kill). Fetches in flight to the old leaders get
	// NOT_LEADER / FENCED_LEADER_EPOCH and resume at the new ones.
	w.write(ctx, t, topic, inflightParts, 300, "moving")
	moveLeaders(ctx, t, srcAdm, topic)
	w.write(ctx, t, topic, inflightParts, 300, "after-move")
	waitCopied(ctx, t, c, srcAdm, topic, inflightParts, failed)
	mirrortest.VerifyIdentical(t, srcCl, dstCl, topic)
	t.Logf("at most %d Fetches in flight to one source broker", fetches.max())
}

// hopEnv is a 2-broker source that a copier reaches through a Toxiproxy hop
// per broker only, a destination, and a topic of RF 2 on the source.
type hopEnv struct {
	front          *faultnet.Front
	src            *kafkatest.Cluster
	srcCl, dstCl   *kgo.Client
	srcAdm, dstAdm *kadm.Client
	hopCl          *kgo.Client // the copier's source client: through the hops
	fetches        fetchCounter
}

func startHopEnv(ctx context.Context, t *testing.T, topic string, parts int32) *hopEnv {
	t.Helper()
	kafkatest.RequireReal(t)
	h := &hopEnv{front: faultnet.New(t, "HOP", 2)}
	h.src = kafkatest.Start(t, kafkatest.Real(), kafkatest.Brokers(2), h.front.Listener())
	dst := kafkatest.Start(t, kafkatest.Real())
	h.front.Connect(t, h.src)
	snap := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		goleak.VerifyNone(t, snap, goleak.IgnoreAnyFunction("github.com/kmirror/kmirror/internal/kafkatest.(*RealCluster).launch.func1"))
	})
	t.Cleanup(h.front.Close) // before the check (cleanups run last first): the proxies' links end with it
	h.srcCl, h.dstCl = h.src.Client(t), dst.Client(t)
	h.srcAdm, h.dstAdm = kadm.NewClient(h.srcCl), kadm.NewClient(h.dstCl)
	if resp, err := h.srcAdm.CreateTopic(ctx, parts, 2, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, resp.Err)
	}
	h.hopCl = kafkatest.NewClient(t, h.front.Addrs(), kgo.WithHooks(&h.fetches), kgo.MetadataMinAge(250*time.Millisecond))
	return h
}

// copier creates the destination topic and a copier with 16 KiB Fetches, a
// 512 KiB budget and 4 Fetches in flight per broker (closed with the test).
func (h *hopEnv) copier(ctx context.Context, t *testing.T, topic string) *fetcher.Copier {
	t.Helper()
	polltest.Eventually(t, 2*time.Minute, "destination topic", func() (bool, string) {
		_, err := fetcher.EnsureDestinationTopic(ctx, h.srcAdm, h.dstAdm, topic, nil)
		return err == nil, fmt.Sprint(err)
	})
	c, err := fetcher.NewCopier(fetcher.Config{Source: h.hopCl, Destination: h.dstCl, FetchMaxBytes: 4 << 10,
		FetchResponseMaxBytes: 16 << 10, MaxBufferedBytes: 512 << 10, FetchesInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// moveLeaders gives every partition of topic its other replica as leader.
func moveLeaders(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	req, want, elect := kadm.AlterPartitionAssignmentsReq{}, map[int32]int32{}, kadm.TopicsSet{}
	for _, p := range md.Topics[topic].Partitions {
		elect.Add(topic, p.Partition)
		reps := []int32{p.Replicas[1], p.Replicas[0]}
		if p.Leader == reps[0] {
			reps[0], reps[1] = reps[1], reps[0]
		}
		req.Assign(topic, p.Partition, reps)
		want[p.Partition] = reps[0]
	}
	if _, err := adm.AlterPartitionAssignments(ctx, req); err != nil {
		t.Fatal(err)
	}
	// A preferred election waits for the new leader to be in sync, which on a loaded machine
	// took over two minutes once (CI).
	polltest.Eventually(t, 5*time.Minute, "every leader of "+topic+" moved", func() (bool, string) {
		// Each partition named: a topic with no partitions elects none (the
		// broker's own rebalance, every 300 s, then did it instead).
		_, _ = adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, elect)
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range md.Topics[topic].Partitions {
			if p.Leader != want[p.Partition] {
				return false, fmt.Sprintf("%s/%d led by %d, want %d", topic, p.Partition, p.Leader, want[p.Partition])
			}
		}
		return true, ""
	})
}

// writer produces numbered records to every partition, acks=all.
type writer struct{ cl *kgo.Client }

func newWriter(t *testing.T, c *kafkatest.Cluster) writer {
	return writer{c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(8<<10), kgo.RecordRetries(100))}
}

func (w writer) write(ctx context.Context, t *testing.T, topic string, parts int32, n int, tag string) {
	t.Helper()
	var recs []*kgo.Record
	for p := range parts {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "%s-%d", tag, i),
				Value: fmt.Appendf(nil, "%s-%d-%d-%0100d", tag, p, i, i)})
		}
	}
	if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %s: %v", tag, err)
	}
}

// startAll starts copying partitions 0..n-1 of topic; the map it returns
// collects the error of each partition whose copy stopped (it never resumes
// by itself).
func startAll(ctx context.Context, t *testing.T, c *fetcher.Copier, topic string, n int32) *sync.Map {
	t.Helper()
	var failed sync.Map
	for p := range n {
		task := fetcher.Task{Topic: topic, Partition: p, TransactionalID: fmt.Sprintf("%s-%d", topic, p)}
		if err := c.Start(ctx, task, func(ev datapath.Event) {
			if ev.Kind == datapath.EventFailed || ev.Kind == datapath.EventFenced {
				failed.Store(p, ev.Err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	return &failed
}

// waitCopied waits until the destination log end of partitions 0..parts-1
// reached the source high watermark.
func waitCopied(ctx context.Context, t *testing.T, c *fetcher.Copier, adm *kadm.Client, topic string, parts int32, failed *sync.Map) {
	t.Helper()
	polltest.Eventually(t, 3*time.Minute, topic+" copied", func() (bool, string) {
		var why string
		failed.Range(func(p, err any) bool { why = fmt.Sprintf("partition %v failed: %v", p, err); return false })
		if why != "" {
			t.Fatal(why)
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		for p := range parts {
			end, ok := ends.Lookup(topic, p)
			pr, started := c.Progress(topic, p)
			if !ok || end.Err != nil || !started || pr.DestinationLogEnd < end.Offset {
				return false, fmt.Sprintf("partition %d: destination %d, source %d (%v)", p, pr.DestinationLogEnd, end.Offset, end.Err)
			}
		}
		return true, ""
	})
}

// fetchCounter follows the Fetch requests in flight to each broker (kgo
// hooks: written, then read) and keeps the most at once.
type fetchCounter struct {
	mu       sync.Mutex
	inFlight map[int32]int
	most     int
}

func (f *fetchCounter) OnBrokerWrite(m kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != 1 || err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inFlight == nil {
		f.inFlight = map[int32]int{}
	}
	f.inFlight[m.NodeID]++
	f.most = max(f.most, f.inFlight[m.NodeID])
}

func (f *fetchCounter) OnBrokerRead(m kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key != 1 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inFlight[m.NodeID] > 0 {
		f.inFlight[m.NodeID]--
	}
}

func (f *fetchCounter) max() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most
}
