package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

func TestRouteConfigFromYAML(t *testing.T) {
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	yaml := `
upstream: [standby-1:9092]
listen: 0.0.0.0:9092
broker_port_base: 9100
routes:
  - name: payments
    listen: 0.0.0.0:19092
    broker_port_base: 19100
    broker_port_count: 10
    mirror: dr
    primary:
      bootstrap: [primary-1:9092, primary-2:9092]
      tls: {enabled: true, ca_file: ca.pem}
      sasl: {mechanism: SCRAM-SHA-512, username: kmirror, password: s3cret}
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseArgs("proxy", []string{"--config", file})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.withDefaults().Validate(); err != nil {
		t.Fatalf("valid route refused: %v", err)
	}
	if len(cfg.Routes) != 1 {
		t.Fatalf("routes: %+v", cfg.Routes)
	}
	r := cfg.Routes[0]
	if r.Name != "payments" || r.Mirror != "dr" || r.BrokerPortBase != 19100 || r.brokerPortCount() != 10 ||
		strings.Join(r.Primary.Bootstrap, ",") != "primary-1:9092,primary-2:9092" || !r.Primary.TLS.Enabled ||
		r.Primary.SASL.Username != "kmirror" {
		t.Errorf("route read as %+v", r)
	}
	if s := r.Primary.SASL.String(); strings.Contains(s, "s3cret") {
		t.Errorf("the primary's password is printable: %s", s)
	}
}

func TestRouteConfigErrors(t *testing.T) {
	base := func() Config {
		return Config{Upstream: []string{"s:9092"}, Listen: "0.0.0.0:9092", BrokerPortBase: 9100, BrokerPortCount: 100,
			Routes: []RouteConfig{{Name: "app", Listen: "0.0.0.0:19092", BrokerPortBase: 19100, Mirror: "dr",
				Primary: RouteUpstream{Bootstrap: []string{"p:9092"}}}}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"bad name", func(c *Config) { c.Routes[0].Name = "a b" }, `name "a b"`},
		{"no name", func(c *Config) { c.Routes[0].Name = "" }, `name ""`},
		{"two routes one name", func(c *Config) {
			r := c.Routes[0]
			r.Listen, r.BrokerPortBase = "0.0.0.0:29092", 29100
			c.Routes = append(c.Routes, r)
		}, `name "app" is used by two routes`},
		{"no mirror", func(c *Config) { c.Routes[0].Mirror = "" }, "mirror is not set"},
		{"no primary", func(c *Config) { c.Routes[0].Primary.Bootstrap = nil }, "primary.bootstrap is empty"},
		{"bad primary", func(c *Config) { c.Routes[0].Primary.Bootstrap = []string{"p"} }, `primary.bootstrap "p" is not HOST:PORT`},
		{"bad listen", func(c *Config) { c.Routes[0].Listen = "nohost" }, `route app listen "nohost"`},
		{"listen in the destination's broker range", func(c *Config) { c.Routes[0].Listen = "0.0.0.0:9150" }, "claim the same port"},
		{"same bootstrap port", func(c *Config) { c.Routes[0].Listen = "0.0.0.0:9092" }, "claim the same port"},
		{"overlapping broker ranges", func(c *Config) { c.Routes[0].BrokerPortBase = 9150 }, "claim the same port"},
		{"broker_ports entry in a route's range", func(c *Config) { c.BrokerPorts = map[int32]int{1001: 19105} }, "claim the same port"},
		{"range past 65535", func(c *Config) { c.Routes[0].BrokerPortBase = 65500 }, "does not fit"},
		{"half SASL", func(c *Config) { c.Routes[0].Primary.SASL = UpstreamSASL{Mechanism: "PLAIN", Username: "u"} }, "route app primary.sasl.mechanism PLAIN needs"},
		{"SASL without mechanism", func(c *Config) { c.Routes[0].Primary.SASL = UpstreamSASL{Username: "u", Password: "p"} }, "need a mechanism"},
		{"unknown mechanism", func(c *Config) {
			c.Routes[0].Primary.SASL = UpstreamSASL{Mechanism: "GSSAPI", Username: "u", Password: "p"}
		}, `mechanism "GSSAPI"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base().withDefaults()
			if err := c.Validate(); err != nil {
				t.Fatalf("the base configuration is refused: %v", err)
			}
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// routedProxy starts a proxy whose upstream is one kfake cluster (the standby) and whose
// route "app" leads to another (the primary); it returns the proxy and the route's proxy.
func routedProxy(t *testing.T, primary []string, opts []Option) (*Proxy, *Proxy) {
	t.Helper()
	return routedProxyTo(t, primary, startKfake(t, 1).ListenAddrs(), opts)
}

// routedProxyTo is routedProxy with the standby (the proxy's own upstream) given.
func routedProxyTo(t *testing.T, primary, standby []string, opts []Option) (*Proxy, *Proxy) {
	t.Helper()
	p := startProxyWith(t, standby, opts, func(c *Config) {
		c.Routes = []RouteConfig{{Name: "app", Listen: "127.0.0.1:0", Mirror: "dr", Primary: RouteUpstream{Bootstrap: primary}}}
	})
	r := p.routeNamed("app")
	if r == nil {
		t.Fatal("route app did not start")
	}
	return p, r
}

// TestKfakeRouteLeadsToPrimary: clients of a route reach the primary, never the proxy's own
// upstream, through the route's listeners only, and the proxy's own listeners still lead to
// the standby.
func TestKfakeRouteLeadsToPrimary(t *testing.T) {
	primary := startKfake(t, 3)
	d := newLeakDetector(primary.ListenAddrs())
	p, r := routedProxy(t, primary.ListenAddrs(), []Option{d.option()})
	var dials dialRecorder
	produceConsume(t, r.AdvertisedAddr(), &dials, 500)
	assertOnlyProxyDialed(t, r, &dials)
	checkAddressRewrites(t, r, primary.ListenAddrs())
	d.check(t)
	if got := len(r.BrokerListenerPorts()); got != 3 {
		t.Errorf("route has %d broker listeners, want 3 (the primary's)", got)
	}
	for _, port := range p.BrokerListenerPorts() {
		for _, rp := range r.BrokerListenerPorts() {
			if port == rp {
				t.Errorf("the route and the proxy share port %d", port)
			}
		}
	}

	// The standby does not have the topics the route's clients made.
	direct := kmsg.NewPtrMetadataRequest()
	direct.Version = 12 // cluster id, topic ids; nil topics: all of them
	viaProxy := rawConn(t, p.Addr(), direct).(*kmsg.MetadataResponse)
	viaRoute := rawConn(t, r.Addr(), direct).(*kmsg.MetadataResponse)
	if len(viaRoute.Topics) == 0 || len(viaProxy.Topics) != 0 {
		t.Errorf("topics: %d through the route, %d through the proxy; want some and none", len(viaRoute.Topics), len(viaProxy.Topics))
	}

	st := p.Routes()
	if len(st) != 1 || st[0].Name != "app" || st[0].Mirror != "dr" || st[0].Upstream != "primary" || st[0].Bootstrap != r.Addr() {
		t.Errorf("Routes() = %+v", st)
	}
	if st[0].ClusterID == "" || st[0].ClusterID != *viaRoute.ClusterID {
		t.Errorf("route's cluster id %q, the primary's is %v", st[0].ClusterID, viaRoute.ClusterID)
	}
}

// TestKfakeRouteVersionsAndMirrorKeys: a route advertises Fetch up to v12 only (topic names,
// stable across a switch) and no mirror RPC keys, and a mirror RPC sent to it gets its own
// typed error naming the route.
func TestKfakeRouteVersionsAndMirrorKeys(t *testing.T) {
	primary := startKfake(t, 1)
	p, r := routedProxy(t, primary.ListenAddrs(), nil)
	keys := func(addr string) map[int16]int16 {
		resp := rawConn(t, addr, kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
		out := map[int16]int16{}
		for _, k := range resp.ApiKeys {
			out[k.ApiKey] = k.MaxVersion
		}
		return out
	}
	viaRoute, viaProxy := keys(r.Addr()), keys(p.Addr())
	if viaRoute[1] != routeFetchVersion {
		t.Errorf("route advertises Fetch v%d, want v%d", viaRoute[1], routeFetchVersion)
	}
	if viaProxy[1] <= routeFetchVersion {
		t.Errorf("the proxy's own listener advertises Fetch v%d: the cap is meant for routes only", viaProxy[1])
	}
	// Every key a client sends that names topics by id from some version on (kmsg's
	// TopicID fields) stays below that version on a route: the standby's ids differ.
	// (Metadata's ids are mapped to the primary's instead.)
	for key, byID := range map[int16]int16{0: 13, 1: 13, 8: 10, 9: 10, 28: 6} {
		if v, ok := viaRoute[key]; ok && v >= byID {
			t.Errorf("route advertises %s v%d, which names topics by id", kmsg.NameForKey(key), v)
		}
	}
	for _, api := range protocol.MirrorAPIs() {
		if _, ok := viaRoute[api.Key]; ok {
			t.Errorf("route advertises mirror key %d (%s)", api.Key, api.Name)
		}
		if _, ok := viaProxy[api.Key]; !ok {
			t.Errorf("the proxy does not advertise mirror key %d (%s)", api.Key, api.Name)
		}
	}

	// A Fetch v13 (topic ids) on a route is refused as a broker refuses an unadvertised version.
	c := rawDial(t, r.Addr())
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 13
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, fetch, 7)
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := readFrame(c, 1<<20); err == nil {
		t.Error("Fetch v13 on a route was answered; want the connection closed")
	}

	// A mirror RPC on the route: the key's own response, INVALID_REQUEST, naming the route.
	req := protocol.RequestForKey(protocol.KeyListMirrors)
	conn := rawDial(t, r.Addr())
	raw := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, req, 9)
	if _, err := conn.Write(raw); err != nil {
		t.Fatal(err)
	}
	_, body, err := splitResponse(nextResponse(t, conn, 9, 10*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	resp := protocol.ResponseForKey(protocol.KeyListMirrors)
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("decoding ListMirrors answer: %v", err)
	}
	f := reflectFields(resp)
	code, msg := f["ErrorCode"].(int16), f["ErrorMessage"].(*string)
	if code != errInvalidRequest || msg == nil || !strings.Contains(*msg, "route app") {
		t.Errorf("ListMirrors on a route: code %d %v", code, msg)
	}
}

// TestKfakeRouteClusterIDPinned: once a route's cluster id is pinned (the primary's, learned
// at start), Metadata and DescribeCluster show it whatever the upstream says, and Metadata's
// topic ids are mapped: what keeps clients' view stable when a switch changes the upstream.
func TestKfakeRouteClusterIDPinned(t *testing.T) {
	primary := startKfake(t, 1)
	_, r := routedProxy(t, primary.ListenAddrs(), nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "pinned"); err != nil {
		t.Fatal(err)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("pinned")}}
	before := rawConn(t, r.Addr(), md).(*kmsg.MetadataResponse)
	if learned := r.appRoute.ids["pinned"]; learned != before.Topics[0].TopicID {
		t.Fatalf("the route learned id %x for the topic, the primary gave %x", learned, before.Topics[0].TopicID)
	}

	// As after a switch: the upstream's id for the name is replaced by the one the
	// clients were given.
	pinned, mapped := "route-cluster-id", [16]byte{1, 2, 3}
	r.appRoute.clusterID.Store(&pinned)
	r.appRoute.idsMu.Lock()
	r.appRoute.ids["pinned"] = mapped
	r.appRoute.idsMu.Unlock()
	r.appRoute.switched.Store(true)
	after := rawConn(t, r.Addr(), md).(*kmsg.MetadataResponse)
	if after.ClusterID == nil || *after.ClusterID != pinned {
		t.Errorf("Metadata cluster id %v, want %q", after.ClusterID, pinned)
	}
	if after.Topics[0].TopicID != mapped {
		t.Errorf("Metadata topic id %x, want %x", after.Topics[0].TopicID, mapped)
	}
	dc := rawConn(t, r.Addr(), kmsg.NewPtrDescribeClusterRequest()).(*kmsg.DescribeClusterResponse)
	if dc.ClusterID != pinned {
		t.Errorf("DescribeCluster cluster id %q, want %q", dc.ClusterID, pinned)
	}
}

// TestRealRouteClients: a route is a transparent proxy to its primary for clients nobody here
// wrote. The primary is the package's real Apache Kafka cluster, the proxy's own upstream (the
// standby) a kfake cluster; franz-go, the Java client through Kafka's tools and librdkafka
// through kcat produce, consume and administer through the route, dial nothing but the
// route's listeners, and never see a real broker address.
func TestRealRouteClients(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found: install the Debian package kcat (make test-deps does it): %v", err)
	}
	c := sharedReal(t)
	leaks := newLeakDetector(c.Bootstrap())
	t.Cleanup(func() { leaks.check(t) })
	_, r := routedProxy(t, c.Bootstrap()[:1], []Option{leaks.option()})

	var dials dialRecorder
	produceConsume(t, r.AdvertisedAddr(), &dials, 1000)
	assertOnlyProxyDialed(t, r, &dials)
	checkAddressRewrites(t, r, c.Bootstrap())
	javaToolsRoundTrip(t, r.AdvertisedAddr())
	kcatRoundTrip(t, kcat, r.AdvertisedAddr())
	if got := len(r.BrokerListenerPorts()); got != 3 {
		t.Errorf("route has %d broker listeners, want the primary's 3", got)
	}
}

// TestKfakeRouteAuthorisedByPrimary: who may use a route is decided by the cluster it leads
// to. In front of a SASL primary with ACLs, a client with a wrong password is refused, a
// principal without WRITE cannot produce, and one with it can; kmirror's own credentials for
// the primary (primary.sasl) never reach the route's clients.
func TestKfakeRouteAuthorisedByPrimary(t *testing.T) {
	acl := func(op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	primary, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(), kfake.SeedTopics(1, "orders"),
		kfake.Superuser("SCRAM-SHA-512", "kmirror", "kmirror-secret"),
		kfake.User("PLAIN", "writer", "writer-secret", acl(kmsg.ACLOperationWrite), acl(kmsg.ACLOperationDescribe)),
		kfake.User("PLAIN", "reader", "reader-secret", acl(kmsg.ACLOperationRead), acl(kmsg.ACLOperationDescribe)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(primary.Close)
	standby := startKfake(t, 1)
	auditOut := &syncBuffer{}
	p := startProxyWith(t, standby.ListenAddrs(), []Option{WithAudit(audit.New(auditOut))}, func(c *Config) {
		c.Routes = []RouteConfig{{Name: "app", Listen: "127.0.0.1:0", Mirror: "dr", Primary: RouteUpstream{
			Bootstrap: primary.ListenAddrs(),
			SASL:      UpstreamSASL{Mechanism: "SCRAM-SHA-512", Username: "kmirror", Password: "kmirror-secret"}}}}
	})
	r := p.routeNamed("app")
	// kmirror's own credentials found the primary's brokers before any client asked.
	polltest.Until(t, 10*time.Second, "route discovers the primary's broker", func() bool { return len(r.BrokerListenerPorts()) == 1 })

	// Not idempotent: kfake asks IDEMPOTENT_WRITE on the cluster for that, which is not the
	// point here.
	produce := func(user, pass string) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(r.Addr()), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()),
			kgo.RecordRetries(2), kgo.RequestRetries(2), kgo.DisableIdempotentWrite(),
			kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }), kgo.MetadataMinAge(50*time.Millisecond))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte(user)}).FirstErr()
	}
	// kfake closes the connection on a failed SASL exchange (the client sees EOF, not
	// SASL_AUTHENTICATION_FAILED, at the primary itself too).
	if err := produce("writer", "wrong"); err == nil {
		t.Error("a wrong password produced through the route")
	}
	if err := produce("reader", "reader-secret"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("a principal without WRITE produced through the route: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := produce("writer", "writer-secret"); err != nil {
		t.Errorf("writer through the route: %v", err)
	}
	if strings.Contains(auditOut.String(), "kmirror-secret") {
		t.Error("the primary's password reached the audit log")
	}
}

// endOffsets reads the primary's log ends of topic directly (not through the route).
func endOffsets(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("log ends of %s: %v", topic, err)
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum
}

// TestKfakeRouteFreezeHoldsWritesAndLosesNone: while a route is frozen for a switch, Produce
// to its frozen topic never reaches the primary while other topics of the same clients go on;
// the producer gets no error, and once the freeze is lifted every record it was acknowledged
// is on the primary exactly once, in order.
func TestKfakeRouteFreezeHoldsWritesAndLosesNone(t *testing.T) {
	primary := startKfakeTopics(t, 2, 2, "orders", "other")
	p, r := routedProxy(t, primary.ListenAddrs(), nil)
	direct, err := kgo.NewClient(kgo.SeedBrokers(primary.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	adm := kadm.NewClient(direct)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	prod, err := kgo.NewClient(kgo.SeedBrokers(r.Addr()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	load := &freezeLoad{acked: map[string]int{}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	load.start(ctx, loadCtx, prod, "orders", "other")
	polltest.Until(t, 30*time.Second, "both topics written through the route", func() bool {
		return endOffsets(t, ctx, adm, "orders") > 20 && endOffsets(t, ctx, adm, "other") > 20
	})

	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{"orders": true}}); err != nil {
		t.Fatal(err)
	}
	frozenEnd, otherAt := endOffsets(t, ctx, adm, "orders"), endOffsets(t, ctx, adm, "other")
	polltest.Until(t, 30*time.Second, "the unfrozen topic goes on during the freeze", func() bool {
		return endOffsets(t, ctx, adm, "other") > otherAt+50
	})
	if got := endOffsets(t, ctx, adm, "orders"); got != frozenEnd {
		t.Fatalf("the frozen topic's log end moved from %d to %d during the freeze", frozenEnd, got)
	}
	if err := p.FreezeRoute(ctx, "app", nil); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 30*time.Second, "the frozen topic's writes land after the freeze", func() bool {
		return endOffsets(t, ctx, adm, "orders") > frozenEnd+20
	})
	stopLoad()
	load.wg.Wait()
	if len(load.errs) > 0 {
		t.Fatalf("the producer saw %d errors (first: %v): a freeze must only delay writes", len(load.errs), load.errs[0])
	}
	checkOrdersOnceInOrder(t, ctx, primary.ListenAddrs(), adm, load.acked["orders"])
}

// freezeLoad is a producer writing to topics through a route until stopped, and what it was
// acknowledged; mu guards acked and errs while it runs.
type freezeLoad struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[string]int // topic -> records acknowledged
	errs  []error
}

// start writes records <topic>-0, <topic>-1, … to each topic with prod, one at a time, until
// loadCtx ends; l.wg waits for the writers.
func (l *freezeLoad) start(ctx, loadCtx context.Context, prod *kgo.Client, topics ...string) {
	for _, topic := range topics {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; loadCtx.Err() == nil; i++ {
				rec := &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i % 7)), Value: []byte(fmt.Sprintf("%s-%d", topic, i))}
				err := prod.ProduceSync(ctx, rec).FirstErr()
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, fmt.Errorf("%s-%d: %w", topic, i, err))
				} else {
					l.acked[topic]++
				}
				l.mu.Unlock()
			}
		}()
	}
}

// checkOrdersOnceInOrder reads topic orders on the primary directly: it holds every
// acknowledged record (acked of them) exactly once, in order per key's partition.
func checkOrdersOnceInOrder(t *testing.T, ctx context.Context, primary []string, adm *kadm.Client, acked int) {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(primary...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	want := int(endOffsets(t, ctx, adm, "orders"))
	if want != acked {
		t.Fatalf("the primary has %d records of orders, the producer was acknowledged %d", want, acked)
	}
	seen := map[string]bool{}
	last := map[int32]int{}
	consumeN(t, ctx, cons, want, func(rec *kgo.Record) {
		v := string(rec.Value)
		if seen[v] {
			t.Errorf("%s twice", v)
		}
		seen[v] = true
		n, _ := strconv.Atoi(strings.TrimPrefix(v, "orders-"))
		if prev, ok := last[rec.Partition]; ok && n <= prev {
			t.Errorf("partition %d: %s after orders-%d", rec.Partition, v, prev)
		}
		last[rec.Partition] = n
	})
}

// TestKfakeRouteFreezeWaitsForWritesInFlight: FreezeRoute returns only once every Produce
// forwarded before it was answered, so that the primary's log end read after every instance's
// acknowledgement covers all of them.
func TestKfakeRouteFreezeWaitsForWritesInFlight(t *testing.T) {
	primary := startKfakeTopics(t, 1, 1, "orders")
	p, r := routedProxy(t, primary.ListenAddrs(), nil)
	held, release := holdFirstProduce(primary)
	prod, err := kgo.NewClient(kgo.SeedBrokers(r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	produced := make(chan error, 1)
	go func() {
		produced <- prod.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("in flight")}).FirstErr()
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the Produce never reached the primary")
	}

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	err = p.FreezeRoute(short, "app", &enforcement.Freeze{Topics: map[string]bool{"orders": true}})
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "1 connections still wait") {
		t.Fatalf("FreezeRoute with a write in flight: %v, want it to wait for that write", err)
	}
	frozen := make(chan error, 1)
	go func() {
		frozen <- p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{"orders": true}})
	}()
	close(release)
	if err := <-frozen; err != nil {
		t.Fatalf("FreezeRoute once the write was answered: %v", err)
	}
	if err := <-produced; err != nil {
		t.Fatalf("the write forwarded before the freeze: %v", err)
	}
}

// TestKfakeRouteFreezeCommits: once commits are frozen, OffsetCommit naming a frozen topic
// is answered COORDINATOR_LOAD_IN_PROGRESS (retried by clients) and never reaches the
// primary; before that, and for other topics, commits pass.
func TestKfakeRouteFreezeCommits(t *testing.T) {
	primary := startKfakeTopics(t, 1, 1, "orders", "other")
	p, r := routedProxy(t, primary.ListenAddrs(), nil)
	ctx := context.Background()
	commit := func(topic string, offset int64) int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version = 8
		req.Group, req.Generation = "app-group", -1
		req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}}}
		var resp *kmsg.OffsetCommitResponse
		polltest.Until(t, 30*time.Second, "group coordinator", func() bool {
			resp = rawConn(t, r.Addr(), req).(*kmsg.OffsetCommitResponse)
			return resp.Topics[0].Partitions[0].ErrorCode != kerr.CoordinatorNotAvailable.Code
		})
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	committed := func(topic string) int64 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(primary.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		offs, err := kadm.NewClient(cl).FetchOffsets(ctx, "app-group")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(topic, 0)
		return o.At
	}
	if code := commit("orders", 5); code != 0 {
		t.Fatalf("commit before the freeze: error %d", code)
	}
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{"orders": true}}); err != nil {
		t.Fatal(err)
	}
	if code := commit("orders", 6); code != 0 {
		t.Fatalf("commit while only Produce is frozen: error %d", code)
	}
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{"orders": true}, Commits: true}); err != nil {
		t.Fatal(err)
	}
	if code := commit("orders", 7); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("commit of a frozen topic while commits are frozen: error %d, want COORDINATOR_LOAD_IN_PROGRESS", code)
	}
	if code := commit("other", 3); code != 0 {
		t.Fatalf("commit of an unfrozen topic: error %d", code)
	}
	if got := committed("orders"); got != 6 {
		t.Fatalf("the primary has offset %d for orders, want 6 (the frozen commit must not reach it)", got)
	}
}

// TestKfakeRouteFreezeWaitsBehindRefusals: a Produce the freeze refuses on a connection
// whose earlier Produce still waits at the primary is answered after it, in order, and does
// not count as that earlier answer. The first version counted it at once, and FreezeRoute
// returned while Kafka's VerifiableProducer (five requests in flight) still had writes on the
// way: the primary's log end moved after the freeze (TestRealRouteSwitchJavaClients).
func TestKfakeRouteFreezeWaitsBehindRefusals(t *testing.T) {
	primary := startKfakeTopics(t, 1, 1, "orders")
	p, r := routedProxy(t, primary.ListenAddrs(), nil)
	held, release := holdFirstProduce(primary)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := net.DialTimeout("tcp", r.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test"))
	produce := func(corrID int32) {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: "orders", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0}}}}
		if _, err := conn.Write(f.AppendRequest(nil, req, corrID)); err != nil {
			t.Fatal(err)
		}
	}
	produce(1)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the Produce never reached the primary")
	}
	frozen := make(chan error, 1)
	go func() {
		frozen <- p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{"orders": true}})
	}()
	polltest.Until(t, 10*time.Second, "the freeze installed", func() bool { return r.appRoute.freeze.Load() != nil })
	produce(2)
	polltest.Until(t, 10*time.Second, "the second Produce read by the route", func() bool {
		n := int64(0)
		r.sessions.Range(func(k, _ any) bool { n += k.(*session).produces.claimed.Load(); return true })
		return n == 2
	})
	// FreezeRoute looks every 2 ms: 300 ms without an answer is the wait, not a slow poll.
	select {
	case err := <-frozen:
		t.Fatalf("FreezeRoute returned (%v) while the first Produce was still held at the primary", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-frozen; err != nil {
		t.Fatalf("FreezeRoute once the write was answered: %v", err)
	}
	for _, want := range []int32{1, 2} {
		nextResponse(t, conn, want, 10*time.Second)
	}
}

// The route learns the primary's topic ids from Metadata answers decoded without copying
// (reencode's UnsafeReadFrom: names alias the frame, which the session reuses). A learned
// name must not alias it: when it did, the frame's next use changed the key under the map,
// the primary's id was not found after the switch, and franz-go's producer took the standby's
// id for a re-created topic and failed every buffered write with UNKNOWN_TOPIC_ID
// (TestRealDrivenRouteSwitch, one run in three).
func TestRouteTopicIDsSurviveFrameReuse(t *testing.T) {
	metadata := func(id byte) []byte {
		resp := kmsg.NewMetadataResponse()
		resp.Version = 12
		tp := kmsg.NewMetadataResponseTopic()
		tp.Topic, tp.TopicID = kmsg.StringPtr("orders"), [16]byte{id}
		resp.Topics = append(resp.Topics, tp)
		return resp.AppendTo(nil)
	}
	decode := func(frame []byte) *kmsg.MetadataResponse {
		resp := kmsg.NewPtrMetadataResponse()
		resp.Version = 12
		if err := resp.UnsafeReadFrom(frame); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ri := &routeIdentity{name: "app"}
	frame := metadata(1) // the primary's answer
	ri.rewriteMetadata(decode(frame))
	copy(frame, metadata(9)) // the session's buffer holds the next response
	for i := range frame {
		if frame[i] == 'o' {
			frame[i] = 'x' // ... which names other topics
		}
	}
	ri.switched.Store(true)
	standby := decode(metadata(2))
	ri.rewriteMetadata(standby)
	if got := standby.Topics[0].TopicID; got != ([16]byte{1}) {
		t.Fatalf("after the switch the route answers topic id %x for orders, want the primary's %x", got, [16]byte{1})
	}
}

// TestKfakeRouteClosedUntilOpened: a route started closed takes its ports at start but
// refuses connections on them (bootstrap and brokers) until OpenRoute, so no client reaches
// the primary through it and a load balancer sends its clients to another instance (held
// instead, they were shut down by the balancer before their first answer: route_gate.go).
// OpenRoute fails while another process holds one of its ports, and succeeds when called
// again once it is free; Routes() says which the route is.
func TestKfakeRouteClosedUntilOpened(t *testing.T) {
	primary := startKfake(t, 1)
	reached := countListGroups(primary)
	p, r := routedProxy(t, primary.ListenAddrs(), []Option{WithRoutesClosedAtStart()})
	if st := p.Routes(); len(st) != 1 || st[0].Open {
		t.Fatalf("Routes() = %+v, want app closed", st)
	}
	addrs := []string{r.Addr()}
	for _, port := range r.BrokerListenerPorts() {
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	if len(addrs) != 2 {
		t.Fatalf("the closed route's listeners %v: want its bootstrap and one broker", addrs)
	}
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, 5*time.Second); err == nil {
			c.Close()
			t.Fatalf("the closed route accepted a connection on %s", a)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dialing the closed route at %s: %v, want connection refused", a, err)
		}
	}

	squatter, err := net.Listen("tcp", r.Addr())
	if err != nil {
		t.Fatalf("taking the closed route's port: %v", err)
	}
	if err := p.OpenRoute("app"); err == nil || p.Routes()[0].Open {
		t.Fatalf("OpenRoute with its bootstrap port taken: %v, Routes() %+v; want an error and the route closed", err, p.Routes())
	}
	squatter.Close()
	if err := p.OpenRoute("app"); err != nil {
		t.Fatalf("OpenRoute once the port is free again: %v", err)
	}
	if st := p.Routes(); !st[0].Open {
		t.Fatalf("Routes() = %+v after OpenRoute", st)
	}
	for _, a := range addrs {
		if resp := rawConn(t, a, kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse); resp.ErrorCode != 0 {
			t.Fatalf("ListGroups through the opened route at %s: error %d", a, resp.ErrorCode)
		}
	}
	if n := reached.Load(); n != int32(len(addrs)) {
		t.Fatalf("%d ListGroups reached the primary, want the %d sent once the route opened", n, len(addrs))
	}
	if err := p.OpenRoute("app"); err != nil {
		t.Fatalf("OpenRoute of an open route: %v", err)
	}
	if err := p.OpenRoute("nosuch"); err == nil {
		t.Fatal("OpenRoute of an unknown route gave no error")
	}
}

// TestKfakeRouteRemembersPrimary: after a switch, a topic the route never saw on the primary
// (an instance restarted after the switch, or no client asked for it before) is shown with the
// primary's id as the mirror recorded it, not the standby's; a topic the route learned itself
// keeps the id it learned, and the cluster id pinned by the primary's discovery stays.
func TestKfakeRouteRemembersPrimary(t *testing.T) {
	primary := startKfakeTopics(t, 1, 1, "seen")
	standby := startKfakeTopics(t, 1, 1, "seen", "unseen")
	p, r := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("seen")}}
	before := rawConn(t, r.Addr(), md).(*kmsg.MetadataResponse)
	primaryID := *before.ClusterID

	recorded := map[string][16]byte{"seen": {9, 9}, "unseen": {7, 7}}
	if err := p.RememberPrimary("app", "recorded-cluster", recorded); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.SwitchRoute(ctx, "app", FetchHold{}); err != nil {
		t.Fatal(err)
	}
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("seen")}, {Topic: kmsg.StringPtr("unseen")}}
	after := rawConn(t, r.Addr(), md).(*kmsg.MetadataResponse)
	ids := map[string][16]byte{}
	for _, tp := range after.Topics {
		ids[*tp.Topic] = tp.TopicID
	}
	if ids["seen"] != before.Topics[0].TopicID {
		t.Errorf("seen: id %x after the switch, the primary gave the clients %x", ids["seen"], before.Topics[0].TopicID)
	}
	if ids["unseen"] != recorded["unseen"] {
		t.Errorf("unseen: id %x after the switch, the mirror recorded %x", ids["unseen"], recorded["unseen"])
	}
	if after.ClusterID == nil || *after.ClusterID != primaryID {
		t.Errorf("cluster id %v after the switch, want the primary's %q", after.ClusterID, primaryID)
	}
	if err := p.RememberPrimary("nosuch", "", nil); err == nil {
		t.Error("RememberPrimary of an unknown route gave no error")
	}
}

// Lifting a freeze closes the connections whose Produce it refused, and only those: a client
// that pipelined more Produce requests behind a refused one would otherwise have them
// forwarded ahead of the refused one's retry, out of sequence for an idempotent producer
// (franz-go then takes a new producer id and resends what it is unsure of: a duplicate
// record in the kill-at-each-step test). Reconnected, it resends them in order.
func TestKfakeRouteUnfreezeClosesRefusedConnections(t *testing.T) {
	primary := startKfakeTopics(t, 1, 1, "orders")
	p, r := routedProxy(t, primary.ListenAddrs(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refused, quiet := routeConn(t, r.Addr()), routeConn(t, r.Addr())
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{"orders": true}}); err != nil {
		t.Fatal(err)
	}
	send(t, refused, ordersProduce(nil), 1)
	nextResponse(t, refused, 1, 10*time.Second)
	send(t, quiet, kmsg.NewPtrApiVersionsRequest(), 1)
	nextResponse(t, quiet, 1, 10*time.Second)
	if err := p.FreezeRoute(ctx, "app", nil); err != nil {
		t.Fatal(err)
	}
	expectClosedUnanswered(t, refused, "the connection whose Produce the freeze refused is still open after the freeze was lifted")
	send(t, quiet, kmsg.NewPtrApiVersionsRequest(), 2)
	nextResponse(t, quiet, 2, 10*time.Second)
}

// TestKfakeRouteProduceBehindLiftedFreezeCloses: a Produce that reaches a connection whose
// earlier Produce the freeze refused, after the freeze was lifted but before FreezeRoute's
// sweep closed the connection, closes it rather than reach the primary ahead of the
// refused one's retry (an idempotent producer's missing sequence, route.go enforceFreeze).
func TestKfakeRouteProduceBehindLiftedFreezeCloses(t *testing.T) {
	primary := startKfakeTopics(t, 1, 1, "orders")
	p, r := routedProxy(t, primary.ListenAddrs(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := routeConn(t, r.Addr())
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{"orders": true}}); err != nil {
		t.Fatal(err)
	}
	send(t, c, ordersProduce(nil), 1)
	nextResponse(t, c, 1, 10*time.Second)
	p.routeNamed("app").appRoute.freeze.Store(nil) // lifted, the sweep not yet run
	send(t, c, ordersProduce(nil), 2)
	expectClosedUnanswered(t, c, "a Produce behind a refused one was answered after the freeze was lifted: it reached the primary out of order")
}

// routeConn dials a route's listener; the test closes it.
func routeConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ordersProduce is a Produce v9 (acks=all) of records to orders/0.
func ordersProduce(records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "orders", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: records}}}}
	return req
}

// send writes req on c with correlation id corr.
func send(t *testing.T, c net.Conn, req kmsg.Request, corr int32) {
	t.Helper()
	if _, err := c.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, req, corr)); err != nil {
		t.Fatal(err)
	}
}

// expectClosedUnanswered fails unless the proxy closes c within 10 s without a byte more
// (robust_test.go's expectClosed reads past answers).
func expectClosedUnanswered(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s (read %d bytes, %v)", what, n, err)
	}
}

// TestKfakeRouteSwitchWaitsForForwardedResends: a resend the freeze forwarded to the primary
// (enforcement.Freeze.Written) gets its answer to its client before the switch closes the
// route's connections; closed first, the client would resend it to the standby, which
// writes it again. From the moment the switch begins, no resend is forwarded.
func TestKfakeRouteSwitchWaitsForForwardedResends(t *testing.T) {
	primary := startKfakeTopics(t, 1, 1, "orders")
	release := make(chan struct{})
	var held sync.Once
	holding := make(chan struct{})
	primary.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		held.Do(func() {
			close(holding)
			primary.SleepControl(func() { <-release })
		})
		return nil, nil, false
	})
	p, r := routedProxy(t, primary.ListenAddrs(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := &enforcement.Freeze{Topics: map[string]bool{"orders": true},
		Written: func(context.Context, string, int32, enforcement.ProducerBatch) bool { return true }}
	if err := p.FreezeRoute(ctx, "app", f); err != nil {
		t.Fatal(err)
	}
	c := routeConn(t, r.Addr())
	send(t, c, ordersProduce(kafkatest.IdempotentBatch(t, 7, 0, 0, []*kgo.Record{{Value: []byte("v")}})), 1)
	select {
	case <-holding: // forwarded, the primary holds its answer
	case <-ctx.Done():
		t.Fatal("the resend never reached the primary: the freeze refused it")
	}
	switched := make(chan error, 1)
	go func() { switched <- p.SwitchRoute(ctx, "app", FetchHold{}) }()
	polltest.Until(t, 10*time.Second, "the switch stops forwarding resends", func() bool {
		f := r.appRoute.freeze.Load()
		return f.Frozen() && f.Written == nil
	})
	if r.appRoute.switched.Load() {
		t.Fatal("the route switched while the primary had not answered a resend it forwarded")
	}
	close(release)
	nextResponse(t, c, 1, 10*time.Second)
	if err := <-switched; err != nil {
		t.Fatal(err)
	}
	expectClosedUnanswered(t, c, "the route's connection is still open after the switch")
}

// TestKfakeRouteForgetsThePrimaryAtTheSwitch: a Metadata answer of the primary that arrives
// after the switch (in flight at it, or on a connection it has not closed yet) does not teach
// the route the primary's broker addresses again. It did, under load: new connections of the
// switched route led to the primary, and each taught the next one (the route flipped back to
// the primary every 30 s in TestRouteSwitchDriverKilledAtEachStep).
func TestKfakeRouteForgetsThePrimaryAtTheSwitch(t *testing.T) {
	primary := startKfakeTopics(t, 1, 1, "orders")
	standby := startKfakeTopics(t, 1, 1, "orders")
	p, r := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	before := rawConn(t, r.Addr(), md).(*kmsg.MetadataResponse)
	if len(before.Brokers) != 1 {
		t.Fatalf("the primary's metadata through the route: %+v", before.Brokers)
	}
	node := before.Brokers[0].NodeID
	addr := func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		if b := r.brokers[node]; b != nil {
			return b.addr
		}
		return ""
	}
	if got := addr(); got != primary.ListenAddrs()[0] {
		t.Fatalf("node %d at %q through the route, the primary's is %s", node, got, primary.ListenAddrs()[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.SwitchRoute(ctx, "app", FetchHold{}); err != nil {
		t.Fatal(err)
	}
	rawConn(t, r.Addr(), md) // the standby's answer teaches its address, if discovery did not
	if got := addr(); got != standby.ListenAddrs()[0] {
		t.Fatalf("node %d at %q after the switch, want the standby's %s", node, got, standby.ListenAddrs()[0])
	}
	host, port, err := net.SplitHostPort(primary.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	if _, ok := r.advertise(node, host, int32(n)); !ok {
		t.Fatal("the late answer's broker was hidden")
	}
	if got := addr(); got != standby.ListenAddrs()[0] {
		t.Errorf("a late answer of the primary led node %d back to %q; the standby's is %s", node, got, standby.ListenAddrs()[0])
	}
}

// TestKfakeRouteSwitchedWhileClosed: a route switched before it opens (an instance that
// restarted after a switch) leads its first client to the standby, never to the primary.
func TestKfakeRouteSwitchedWhileClosed(t *testing.T) {
	primary, standby := startKfake(t, 1), startKfake(t, 1)
	onPrimary, onStandby := countListGroups(primary), countListGroups(standby)
	p, r := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), []Option{WithRoutesClosedAtStart()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.SwitchRoute(ctx, "app", FetchHold{}); err != nil {
		t.Fatal(err)
	}
	if err := p.OpenRoute("app"); err != nil {
		t.Fatal(err)
	}
	rawConn(t, r.Addr(), kmsg.NewPtrListGroupsRequest())
	if a, b := onPrimary.Load(), onStandby.Load(); a != 0 || b != 1 {
		t.Fatalf("the request reached the primary %d times and the standby %d times; want the standby once", a, b)
	}
}

// countListGroups counts the ListGroups requests c answers: no discovery of a route asks
// one, so they are the test's client's.
func countListGroups(c *kfake.Cluster) *atomic.Int32 {
	var n atomic.Int32
	c.ControlKey(int16(kmsg.ListGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

// TestKfakeRouteBrokersListenWhereItsBootstrapDoes: a route's broker listeners bind on its
// own listen host, not the destination's (found behind the kill test's balancer: every
// instance serves the routes on an address of its own, and the routes' broker ports were
// bound on the destination listener's host, where the balancer had them: "address already
// in use").
func TestKfakeRouteBrokersListenWhereItsBootstrapDoes(t *testing.T) {
	primary := startKfake(t, 1)
	p := startProxyWith(t, primary.ListenAddrs(), nil, func(c *Config) {
		c.Routes = []RouteConfig{{Name: "app", Listen: "127.0.0.2:0", Mirror: "dr", Primary: RouteUpstream{Bootstrap: primary.ListenAddrs()}}}
	})
	r := p.routeNamed("app")
	if r == nil {
		t.Fatal("route app did not start")
	}
	ports := r.BrokerListenerPorts()
	if len(ports) != 1 {
		t.Fatalf("route broker listeners %v, want one", ports)
	}
	for _, port := range ports {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(port)), 5*time.Second)
		if err != nil {
			t.Fatalf("the route's broker port %d is not on its listen host 127.0.0.2: %v", port, err)
		}
		c.Close()
	}
}
