// Package kafkatest gives tests a Kafka cluster: a real Apache Kafka KRaft
// cluster whose jars come from Maven Central (the reference for every data-path
// behaviour), or franz-go's in-process kfake (fast; for unit tests and fault
// injection). Both kinds answer the same questions through one Cluster type, so
// a test chooses with one option.
//
// Real clusters need Java 17+ and mvn. Without them a test fails and says what
// to install; KMIRROR_SKIP_REAL_KAFKA=1 skips instead, for local work only —
// it is ignored when CI=true.
package kafkatest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

type config struct {
	fake      bool
	brokers   int
	props     map[string]string
	listeners []Listener
	sasl      bool
	users     []User
	version   string
	zookeeper bool
}

// Option configures Start.
type Option func(*config)

// Real selects a real Apache Kafka cluster (the default).
func Real() Option { return func(c *config) { c.fake = false } }

// Fake selects an in-process kfake cluster.
func Fake() Option { return func(c *config) { c.fake = true } }

// Brokers sets the number of brokers (default 1).
func Brokers(n int) Option { return func(c *config) { c.brokers = n } }

// ServerProperty overrides a broker config of a real cluster (kfake ignores
// the ones it does not know).
func ServerProperty(key, value string) Option {
	return func(c *config) { c.props[key] = value }
}

// WithVersion runs Apache Kafka release v (e.g. "3.6.2"; default KafkaVersion) on a real
// cluster, its jars resolved from Maven Central and cached per version. kfake ignores it.
func WithVersion(v string) Option { return func(c *config) { c.version = v } }

// WithZooKeeper runs a real cluster's brokers in ZooKeeper mode (releases 2.8–3.9) with a
// ZooKeeper server of their own, started by the harness from the same release's jars.
func WithZooKeeper() Option { return func(c *config) { c.zookeeper = true } }

// WithListener gives every broker of a real cluster a second listener (see Listener), plaintext,
// or SASL_PLAINTEXT with the same users on a SASL cluster (WithSASL); Cluster.Real().ListenerAddrs(name) says where it listens. kfake has none: a test
// that needs one must use a real cluster.
func WithListener(name string, advertise func(i int) string) Option {
	return func(c *config) { c.listeners = append(c.listeners, Listener{Name: name, Advertise: advertise}) }
}

// Cluster is a running Kafka cluster owned by one test.
type Cluster struct {
	real *RealCluster
	fake *kfake.Cluster
	t    testing.TB
}

// Start starts a cluster that is stopped when the test ends. A real cluster's
// directory (configs, data, broker logs) is removed after a passing test and
// kept, with its path logged, after a failing one.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cfg := config{brokers: 1, props: map[string]string{}}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.fake {
		return startFake(t, cfg)
	}
	RequireReal(t)
	dir, err := os.MkdirTemp("", "kmirror-kafka-")
	if err != nil {
		t.Fatalf("kafkatest: temp dir: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	rc, err := StartReal(ctx, RealConfig{Brokers: cfg.brokers, Dir: dir, Props: cfg.props, Listeners: cfg.listeners,
		SASL: cfg.sasl, Users: cfg.users, Version: cfg.version, ZooKeeper: cfg.zookeeper})
	if err != nil {
		t.Fatalf("kafkatest: start real Kafka %s (%d brokers): %v\n(logs kept in %s)", cmp.Or(cfg.version, KafkaVersion), cfg.brokers, err, dir)
	}
	t.Logf("kafkatest: real Apache Kafka %s (%s), %d broker(s) at %s, started in %s",
		rc.Version(), rc.Mode(), cfg.brokers, strings.Join(rc.Bootstrap(), ","), time.Since(began).Round(100*time.Millisecond))
	t.Cleanup(func() {
		if err := rc.Stop(); err != nil {
			t.Logf("kafkatest: stop: %v", err)
		}
		if t.Failed() || os.Getenv("KMIRROR_KEEP_KAFKA_LOGS") != "" {
			t.Logf("kafkatest: broker logs kept in %s (server.log and stdout.log per node)", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return &Cluster{real: rc, t: t}
}

// RequireReal fails the test when real Kafka cannot run here, saying what to
// install, unless the local opt-out KMIRROR_SKIP_REAL_KAFKA=1 is set outside CI.
func RequireReal(t testing.TB) {
	t.Helper()
	err := Prerequisites()
	if err == nil {
		return
	}
	if os.Getenv("KMIRROR_SKIP_REAL_KAFKA") == "1" && os.Getenv("CI") != "true" {
		t.Skipf("KMIRROR_SKIP_REAL_KAFKA=1: %v", err)
	}
	t.Fatalf("%v (or set KMIRROR_SKIP_REAL_KAFKA=1 for local work; CI never skips)", err)
}

func startFake(t testing.TB, cfg config) *Cluster {
	if len(cfg.listeners) > 0 {
		t.Fatalf("kafkatest: WithListener needs a real cluster; kfake has one listener per broker")
	}
	if cfg.sasl {
		t.Fatalf("kafkatest: WithSASL and SASLUser need a real cluster; kfake has no authoriser")
	}
	kopts := []kfake.Opt{kfake.NumBrokers(cfg.brokers)}
	for k, v := range cfg.props {
		kopts = append(kopts, kfake.BrokerConfigs(map[string]string{k: v}))
	}
	fc, err := kfake.NewCluster(kopts...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake: %v", err)
	}
	t.Cleanup(fc.Close)
	return &Cluster{fake: fc, t: t}
}

// IsReal reports whether this is a real Apache Kafka cluster.
func (c *Cluster) IsReal() bool { return c.real != nil }

// Bootstrap lists the brokers' addresses.
func (c *Cluster) Bootstrap() []string {
	if c.fake != nil {
		return c.fake.ListenAddrs()
	}
	return c.real.Bootstrap()
}

// BootstrapString is Bootstrap joined with commas, as tools take it.
func (c *Cluster) BootstrapString() string { return strings.Join(c.Bootstrap(), ",") }

// NumBrokers is the number of brokers the cluster was started with.
func (c *Cluster) NumBrokers() int { return len(c.Bootstrap()) }

// NodeIDs lists broker node ids in the order of Bootstrap.
func (c *Cluster) NodeIDs() []int32 {
	if c.fake != nil {
		ids := make([]int32, len(c.fake.ListenAddrs()))
		for i := range ids {
			ids[i] = int32(i)
		}
		return ids
	}
	return c.real.NodeIDs()
}

// Real exposes the real cluster for tests that need its process controls; nil
// for kfake.
func (c *Cluster) Real() *RealCluster { return c.real }

// Fake exposes the kfake cluster for fault injection; nil for a real cluster.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Client returns a franz-go client bootstrapped to this cluster, closed when
// the test ends. On a SASL cluster it authenticates as admin unless opts carry
// a kgo.SASL of their own (UserOpts), so that the harness's helpers work on
// every kind of cluster.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	seeds := kgo.SeedBrokers(c.Bootstrap()...)
	cl, err := kgo.NewClient(append([]kgo.Opt{seeds}, opts...)...)
	if err == nil && c.real != nil && c.real.SASL() && !hasSASL(cl) {
		// kgo.NewClient dials nothing, so trying the options first costs nothing.
		cl.Close()
		cl, err = kgo.NewClient(append(append([]kgo.Opt{seeds}, c.real.adminOpts()...), opts...)...)
	}
	if err != nil {
		t.Fatalf("kafkatest: client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateKeptTopic creates a topic (replication factor 1) that keeps its records: tests
// write old timestamps, which default retention (7 days) would delete on each cluster at
// its own moment, making the log starts differ. It fails the test on error.
func (c *Cluster) CreateKeptTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(c.Client(t)).CreateTopic(ctx, partitions, 1, map[string]*string{"retention.ms": kadm.StringPtr("-1")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: create %s: %v", topic, err)
	}
}

// StopBroker stops broker i (0-based index into Bootstrap) gracefully.
func (c *Cluster) StopBroker(t testing.TB, i int) {
	t.Helper()
	if c.fake != nil {
		c.removeFakeNode(t, i)
		return
	}
	if err := c.real.StopNode(i, false); err != nil {
		t.Fatalf("kafkatest: stop broker %d: %v", i, err)
	}
}

// KillBroker kills broker i with SIGKILL (a crash, not a shutdown).
func (c *Cluster) KillBroker(t testing.TB, i int) {
	t.Helper()
	if c.fake != nil {
		c.removeFakeNode(t, i)
		return
	}
	if err := c.real.StopNode(i, true); err != nil {
		t.Fatalf("kafkatest: kill broker %d: %v", i, err)
	}
}

// removeFakeNode is kfake's nearest thing to a broker going away.
func (c *Cluster) removeFakeNode(t testing.TB, i int) {
	t.Helper()
	if err := c.fake.RemoveNode(c.NodeIDs()[i]); err != nil {
		t.Fatalf("kafkatest: remove kfake node %d: %v", i, err)
	}
}

// StartBroker restarts broker i after StopBroker/KillBroker and waits until it
// serves Metadata.
func (c *Cluster) StartBroker(t testing.TB, i int) {
	t.Helper()
	if c.fake != nil {
		t.Fatalf("kafkatest: kfake cannot restart a stopped broker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.real.StartNode(ctx, i); err != nil {
		t.Fatalf("kafkatest: restart broker %d: %v", i, err)
	}
}

// FreezeBroker stops broker i's process with SIGSTOP until ThawBroker.
func (c *Cluster) FreezeBroker(t testing.TB, i int) { c.signal(t, i, syscall.SIGSTOP) }

// ThawBroker resumes a frozen broker.
func (c *Cluster) ThawBroker(t testing.TB, i int) { c.signal(t, i, syscall.SIGCONT) }

func (c *Cluster) signal(t testing.TB, i int, sig syscall.Signal) {
	t.Helper()
	if c.fake != nil {
		t.Fatalf("kafkatest: kfake brokers cannot be signalled")
	}
	if err := c.real.SignalNode(i, sig); err != nil {
		t.Fatal(fmt.Errorf("kafkatest: signal broker %d: %w", i, err))
	}
}

// NewClient returns a franz-go client for any seeds (a proxy, say), closed
// when the test ends.
func NewClient(t testing.TB, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: client for %v: %v", seeds, err)
	}
	t.Cleanup(cl.Close)
	return cl
}
