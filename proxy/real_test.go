package proxy

import (
	"context"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// One real 3-broker Apache Kafka cluster is shared by every real-Kafka test of this package:
// starting one costs ~10-20s of JVM time on a 2-core machine. Tests that stop a broker must
// restart it before they end.
var shared struct {
	once sync.Once
	c    *kafkatest.RealCluster
	dir  string
	err  error
}

func sharedReal(t testing.TB) *kafkatest.RealCluster {
	t.Helper()
	kafkatest.RequireReal(t)
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "kmirror-proxy-real-")
		if shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared.c, shared.err = kafkatest.StartReal(ctx, kafkatest.RealConfig{
			Brokers: 3,
			Dir:     filepath.Join(shared.dir, "cluster"),
			Props: map[string]string{
				"offsets.topic.replication.factor":                 "3",
				"transaction.state.log.replication.factor":         "3",
				"transaction.state.log.min.isr":                    "1",
				"min.insync.replicas":                              "1",
				"group.initial.rebalance.delay.ms":                 "0",
				"offsets.topic.num.partitions":                     "3",
				"transaction.state.log.num.partitions":             "3",
				"share.coordinator.state.topic.replication.factor": "3",
			},
		})
	})
	if shared.err != nil {
		t.Fatalf("starting shared real Kafka cluster: %v", shared.err)
	}
	return shared.c
}

func stopSharedReal() {
	if shared.c != nil {
		_ = shared.c.Stop()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
}

// realProxy starts a proxy in front of the shared cluster with a leak detector armed for
// every real broker address.
func realProxy(t *testing.T, mutate ...func(*Config)) (*Proxy, *leakDetector, *kafkatest.RealCluster) {
	t.Helper()
	c := sharedReal(t)
	d := newLeakDetector(c.Bootstrap())
	p := startProxyWith(t, c.Bootstrap()[:1], []Option{d.option()}, mutate...)
	t.Cleanup(func() { d.check(t) })
	return p, d, c
}

func TestRealFranzGoProduceConsume(t *testing.T) {
	p, _, _ := realProxy(t)
	var d dialRecorder
	produceConsume(t, p.AdvertisedAddr(), &d, 2000)
	assertOnlyProxyDialed(t, p, &d)
	if got := len(p.BrokerListenerPorts()); got != 3 {
		t.Errorf("proxy has %d broker listeners, want 3", got)
	}
}

func TestRealNoRealAddressLeaks(t *testing.T) {
	p, _, c := realProxy(t)
	checkAddressRewrites(t, p, c.Bootstrap())

	// DescribeQuorum v2: the brokers list the controllers' endpoints; the proxy withholds them.
	req := kmsg.NewPtrDescribeQuorumRequest()
	req.Version = 2
	req.Topics = []kmsg.DescribeQuorumRequestTopic{{Topic: "__cluster_metadata", Partitions: []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}}}}
	direct := rawConn(t, c.Bootstrap()[0], req).(*kmsg.DescribeQuorumResponse)
	listeners := 0
	for _, n := range direct.Nodes {
		listeners += len(n.Listeners)
	}
	if listeners == 0 {
		t.Fatalf("direct DescribeQuorum lists no controller listeners (error %d): the check below proves nothing", direct.ErrorCode)
	}
	proxied := rawConn(t, p.Addr(), req).(*kmsg.DescribeQuorumResponse)
	if len(proxied.Nodes) != len(direct.Nodes) {
		t.Fatalf("DescribeQuorum through the proxy lists %d nodes, direct %d", len(proxied.Nodes), len(direct.Nodes))
	}
	for _, n := range proxied.Nodes {
		if len(n.Listeners) != 0 {
			t.Errorf("DescribeQuorum through the proxy shows node %d's listeners %+v", n.NodeID, n.Listeners)
		}
	}
}

// TestRealBrokerStopWhileProducing stops one of three brokers while a producer and a
// consumer run through the proxy; both must recover and every record must arrive once.
func TestRealBrokerStopWhileProducing(t *testing.T) {
	p, _, c := realProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bs := p.AdvertisedAddr()
	topic := uniqueTopic("stop")
	createTopic(t, bs, topic, 6)

	prod, err := kgo.NewClient(kgo.SeedBrokers(bs), kgo.DefaultProduceTopic(topic), kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 3000
	const victim = 1 // not the proxy's bootstrap broker (index 0)
	stopped := false
	defer func() {
		if stopped {
			if err := c.StartNode(context.Background(), victim); err != nil {
				t.Errorf("restarting broker %d: %v", victim, err)
			}
		}
	}()
	for i := range n {
		if i == n/3 {
			if err := c.StopNode(victim, false); err != nil {
				t.Fatalf("stopping broker %d: %v", victim, err)
			}
			stopped = true
		}
		if i == 2*n/3 {
			if err := c.StartNode(ctx, victim); err != nil {
				t.Fatalf("restarting broker %d: %v", victim, err)
			}
			stopped = false
		}
		// Batches of 100 acknowledged before the next: the stop lands between and during them.
		prod.Produce(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce %d: %v", i, err)
			}
		})
		if i%100 == 99 {
			if err := prod.Flush(ctx); err != nil {
				t.Fatalf("flush at %d: %v", i, err)
			}
		}
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(bs), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d: %v", len(seen), n, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if seen[string(r.Value)] {
				t.Errorf("record %s twice (idempotent producer must not duplicate)", r.Value)
			}
			seen[string(r.Value)] = true
		})
	}
}
