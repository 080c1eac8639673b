package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/polltest"
)

func startKfake(t testing.TB, brokers int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// produceConsume produces n records to a new topic through bootstrap and reads exactly
// those n back with a consumer group, failing on any loss, duplicate or extra record.
func produceConsume(t *testing.T, bootstrap string, d *dialRecorder, n int, extra ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	topic := fmt.Sprintf("t-%d", time.Now().UnixNano())
	base := append([]kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.Dialer(d.dial)}, extra...)

	adm, err := kgo.NewClient(base...)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatalf("create topic through proxy: %v", err)
	}

	prod, err := kgo.NewClient(append(base, kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	want := map[string]bool{}
	recs := make([]*kgo.Record, n)
	for i := range n {
		v := strconv.Itoa(i)
		want[v] = true
		recs[i] = &kgo.Record{Key: []byte(v), Value: []byte(v)}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce through proxy: %v", err)
	}

	cons, err := kgo.NewClient(append(base,
		kgo.ConsumeTopics(topic),
		kgo.ConsumerGroup(topic+"-g"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := 0
	for got < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", got, n, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Errorf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if !want[string(r.Value)] {
				t.Errorf("unexpected or duplicate record %q", r.Value)
			}
			delete(want, string(r.Value))
			got++
		})
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit through proxy: %v", err)
	}
	if len(want) != 0 {
		t.Fatalf("%d records never consumed", len(want))
	}
}

func TestKfakeProduceConsume(t *testing.T) {
	c := startKfake(t, 3)
	p := startProxy(t, c.ListenAddrs()[:1])
	var d dialRecorder
	produceConsume(t, p.AdvertisedAddr(), &d, 1000)
	assertOnlyProxyDialed(t, p, &d)
	if got := len(p.BrokerListenerPorts()); got != 3 {
		t.Errorf("proxy has %d broker listeners, want 3", got)
	}
}

// TestKfakeNoRealAddressLeaks checks every address-bearing response, at old and new
// versions, against the real broker addresses.
func TestKfakeNoRealAddressLeaks(t *testing.T) {
	c := startKfake(t, 3)
	p := startProxy(t, c.ListenAddrs())
	checkAddressRewrites(t, p, c.ListenAddrs())
}

// checkAddressRewrites asks the proxy every address-bearing request at old and new versions
// and checks each address against the real brokers and the proxy's own listeners.
func checkAddressRewrites(t *testing.T, p *Proxy, realAddrs []string) {
	real := map[string]bool{}
	for _, a := range realAddrs {
		real[a] = true
	}
	allowed := proxyAddrs(p)
	check := func(what, host string, port int32) {
		t.Helper()
		a := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if real[a] {
			t.Errorf("%s: real broker address %s reached the client", what, a)
		}
		if !allowed[a] {
			t.Errorf("%s: %s is not a proxy listener (%v)", what, a, allowed)
		}
	}
	addr := p.AdvertisedAddr()
	for _, v := range []int16{0, 1, 4, 9, 12, kmsgMaxVersion(3)} {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = v
		resp := rawConn(t, addr, req).(*kmsg.MetadataResponse)
		if len(resp.Brokers) != len(realAddrs) {
			t.Errorf("Metadata v%d: %d brokers, want %d", v, len(resp.Brokers), len(realAddrs))
		}
		for _, b := range resp.Brokers {
			check(fmt.Sprintf("Metadata v%d", v), b.Host, b.Port)
		}
		allowed = proxyAddrs(p)
	}
	for _, v := range []int16{0, 1, 2, 3} {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version = v
		req.CoordinatorKey = "g1"
		var resp *kmsg.FindCoordinatorResponse
		// A fresh cluster answers COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists.
		polltest.Until(t, 60*time.Second, "group coordinator", func() bool {
			resp = rawConn(t, addr, req).(*kmsg.FindCoordinatorResponse)
			return resp.ErrorCode == 0
		})
		check(fmt.Sprintf("FindCoordinator v%d", v), resp.Host, resp.Port)
	}
	{
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version = kmsgMaxVersion(10)
		req.CoordinatorKeys = []string{"g1", "g2", "g3"}
		resp := rawConn(t, addr, req).(*kmsg.FindCoordinatorResponse)
		for _, co := range resp.Coordinators {
			if co.ErrorCode != 0 {
				t.Fatalf("FindCoordinator v4 %s: error %d", co.Key, co.ErrorCode)
			}
			check("FindCoordinator v4", co.Host, co.Port)
		}
	}
	{
		req := kmsg.NewPtrDescribeClusterRequest()
		resp := rawConn(t, addr, req).(*kmsg.DescribeClusterResponse)
		if len(resp.Brokers) != len(realAddrs) {
			t.Errorf("DescribeCluster: %d brokers, want %d", len(resp.Brokers), len(realAddrs))
		}
		for _, b := range resp.Brokers {
			check("DescribeCluster", b.Host, b.Port)
		}
	}
}

// TestKfakeLargeFetchStreamed produces and consumes requests and responses far larger than
// the relay pieces, so both cross the proxy cut-through, and checks every byte of every record.
// On gnet a connection is handed off to splice; on netpoll every connection splices from
// the start.
func TestKfakeLargeFetchStreamed(t *testing.T) {
	for _, engine := range []string{EngineGnet, EngineNetpoll} {
		// The reader splices a Produce itself when nothing is queued for the writer
		// goroutine, else the writer does (bulk.go, spliceProduce): both keep every byte.
		for _, viaWriter := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/via-writer=%t", engine, viaWriter), func(t *testing.T) {
				c := startKfake(t, 1)
				p := startProxy(t, c.ListenAddrs(), func(c *Config) { c.PlaintextEngine = engine })
				p.testWriterSplices.Store(viaWriter)
				largeRoundTrip(t, p)
				if p.streamed.Load() == 0 {
					t.Fatal("no Produce request was forwarded cut-through")
				}
				if engine == EngineGnet && p.handedOff.Load() == 0 {
					t.Fatal("no connection was handed off to splice its Produce requests")
				}
				spliced, inline := p.spliced.Load(), p.splicedInline.Load()
				if spliced == 0 {
					t.Fatal("no Produce body was spliced")
				}
				if viaWriter && inline != 0 || !viaWriter && inline == 0 {
					t.Fatalf("%d of %d Produce bodies spliced by the client's reader itself, with every splice via the writer %t", inline, spliced, viaWriter)
				}
			})
		}
	}
}

// largeRoundTrip produces and consumes ~12 MiB of incompressible-by-codec records in large
// batches through p and checks every byte; responses must have been relayed.
func largeRoundTrip(t *testing.T, p *Proxy, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := fmt.Sprintf("large-%d", time.Now().UnixNano())
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.AdvertisedAddr()), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(900 << 10), kgo.MaxBufferedRecords(1000), kgo.ProducerBatchCompression(kgo.NoCompression())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Three partitions on one broker: a Produce request carries up to three ~900 KiB batches.
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	const n, size = 300, 40 << 10
	value := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, size/2) }
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: value(i)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.AdvertisedAddr()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(32 << 20), kgo.FetchMaxPartitionBytes(16 << 20)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	consumeN(t, ctx, cons, n, func(r *kgo.Record) {
		i, _ := strconv.Atoi(string(r.Key))
		if !bytes.Equal(r.Value, value(i)) {
			t.Fatalf("record %d corrupted through the proxy", i)
		}
	})
	if p.relayed.Load() == 0 {
		t.Fatal("no response was large enough to be relayed as it arrived")
	}
}

// TestKfakeBrokerJoinsAndLeaderMoves adds a broker to a running cluster and moves a
// partition's leadership to it while a producer runs through the proxy: the new broker gets
// a listener, the producer follows the move (Produce answers NOT_LEADER with the new leader's
// endpoint, KIP-951, rewritten), and no frame to any client carries a real address.
func TestKfakeBrokerJoinsAndLeaderMoves(t *testing.T) {
	c := startKfake(t, 2)
	det := newLeakDetector(c.ListenAddrs())
	p := startProxyWith(t, c.ListenAddrs()[:1], []Option{det.option()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := "moving"
	var d dialRecorder
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.AdvertisedAddr()), kgo.Dialer(d.dial), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	node, port, err := c.AddNode(-1, 0)
	if err != nil {
		t.Fatalf("add node: %v", err)
	}
	det.add(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err := c.MoveTopicPartition(topic, 0, node); err != nil {
		t.Fatalf("move partition to node %d: %v", node, err)
	}
	for i := range 50 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("produce after the move: %v", err)
		}
	}
	if _, ok := p.BrokerListenerPorts()[node]; !ok {
		t.Fatalf("no listener for the broker %d that joined", node)
	}
	md := rawConn(t, p.Addr(), &kmsg.MetadataRequest{Version: 12}).(*kmsg.MetadataResponse)
	if len(md.Brokers) != 3 {
		t.Fatalf("metadata lists %d brokers after one joined, want 3", len(md.Brokers))
	}
	assertOnlyProxyDialed(t, p, &d)
	det.check(t)
}
