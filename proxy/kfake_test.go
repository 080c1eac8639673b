package proxy

import (
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
		eventually(t, 60*time.Second, "group coordinator", func() bool {
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
