package kafkatest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/polltest"
)

// roundTrip creates topic, produces n records with acks=all and reads exactly
// those n back, checking every key and value.
func roundTrip(t *testing.T, c *Cluster, topic string, partitions int32, rf int16, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client(t))
	resp, err := adm.CreateTopic(ctx, partitions, rf, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	producer := c.Client(t, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))}
	}
	if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records to %s: %v", n, topic, err)
	}
	consumer := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := make(map[string]string, n)
	for len(seen) < n {
		fs := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records from %s before timeout", len(seen), n, topic)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if _, dup := seen[string(r.Key)]; dup {
				t.Fatalf("record %s read twice", r.Key)
			}
			seen[string(r.Key)] = string(r.Value)
		})
	}
	for i := 0; i < n; i++ {
		if got, want := seen[fmt.Sprintf("k%d", i)], fmt.Sprintf("v%d", i); got != want {
			t.Fatalf("record k%d: value %q, want %q", i, got, want)
		}
	}
}

func TestRealBrokerProduceConsume(t *testing.T) {
	c := Start(t)
	if !c.IsReal() {
		t.Fatal("Start without options must give a real cluster")
	}
	roundTrip(t, c, "harness-real", 3, 1, 1000)
	t.Logf("produced and consumed 1000 records through a real Apache Kafka %s broker process at %s", KafkaVersion, c.BootstrapString())
}

func TestFakeProduceConsume(t *testing.T) {
	c := Start(t, Fake(), Brokers(3))
	if c.IsReal() {
		t.Fatal("Fake() must give a kfake cluster")
	}
	roundTrip(t, c, "harness-fake", 3, 3, 1000)
	t.Logf("produced and consumed 1000 records through kfake at %s", c.BootstrapString())
}

// Two clusters in one test must be independent: a source and a destination.
func TestTwoRealClusters(t *testing.T) {
	began := time.Now()
	src := Start(t)
	dst := Start(t)
	t.Logf("two single-node clusters ready in %s", time.Since(began).Round(100*time.Millisecond))
	if src.Real().ClusterID() == dst.Real().ClusterID() {
		t.Fatalf("both clusters have id %s", src.Real().ClusterID())
	}
	roundTrip(t, src, "only-on-source", 1, 1, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := kadm.NewClient(dst.Client(t)).ListTopics(ctx)
	if err != nil {
		t.Fatalf("list destination topics: %v", err)
	}
	if topics.Has("only-on-source") {
		t.Fatal("a topic created on the source cluster appeared on the destination")
	}
}

func TestThreeBrokerClusterSurvivesBrokerRestart(t *testing.T) {
	c := Start(t, Brokers(3))
	if got := len(c.NodeIDs()); got != 3 {
		t.Fatalf("%d brokers, want 3", got)
	}
	roundTrip(t, c, "rf3-before", 6, 3, 300)
	c.StopBroker(t, 0)
	roundTrip(t, c, "rf3-during", 6, 2, 300)
	c.StartBroker(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokers, err := kadm.NewClient(c.Client(t)).ListBrokers(ctx)
	if err != nil {
		t.Fatalf("list brokers after restart: %v", err)
	}
	if len(brokers) != 3 {
		t.Fatalf("%d brokers after restart, want 3", len(brokers))
	}
}

func TestRunToolTopicCommand(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := RunTool(t, ctx, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.BootstrapString(),
		"--create", "--topic", "made-by-java-tool", "--partitions", "4", "--replication-factor", "1"); err != nil {
		t.Fatal(err)
	}
	out, err := RunTool(t, ctx, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.BootstrapString(),
		"--describe", "--topic", "made-by-java-tool")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`PartitionCount:\s*4`).MatchString(out) {
		t.Fatalf("describe output lacks PartitionCount: 4:\n%s", out)
	}
	details, err := kadm.NewClient(c.Client(t)).ListTopics(ctx, "made-by-java-tool")
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	if got := len(details["made-by-java-tool"].Partitions); got != 4 {
		t.Fatalf("franz-go sees %d partitions, want 4", got)
	}
}

func TestPomPinsKafkaVersion(t *testing.T) {
	for name, pin := range map[string]struct {
		pom     []byte
		version string
	}{"pom.xml": {pomXML, KafkaVersion}, "mm2-pom.xml": {mm2PomXML, MirrorMakerVersion}, "pom-zk.xml": {pomZKXML, legacyPomVersion}} {
		if !strings.Contains(string(pin.pom), "<kafka.version>"+pin.version+"</kafka.version>") {
			t.Errorf("%s does not pin kafka.version %s", name, pin.version)
		}
	}
}

func TestJavaMajor(t *testing.T) {
	for in, want := range map[string]int{
		`openjdk version "17.0.15" 2025-04-15`: 17,
		`java version "1.8.0_292"`:             8,
		`openjdk version "21" 2023-09-19`:      21,
		`garbage`:                              0,
	} {
		if got := javaMajor([]byte(in)); got != want {
			t.Errorf("javaMajor(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestRandomClusterIDNeverLooksLikeAnOption(t *testing.T) {
	for i := 0; i < 10000; i++ {
		if id := randomClusterID(); id[0] == '-' || len(id) != 22 {
			t.Fatalf("cluster id %q", id)
		}
	}
}

// MirrorMaker 2 from Maven Central replicates a topic into "source.<topic>".
func TestMirrorMaker2Replicates(t *testing.T) {
	src, dst := Start(t), Start(t)
	roundTrip(t, src, "mm2-in", 2, 1, 1000)
	StartMM2(t, MirrorMaker2Config{Source: src.BootstrapString(), Target: dst.BootstrapString(), Topics: []string{"mm2-in"}})
	adm := kadm.NewClient(dst.Client(t))
	polltest.Eventually(t, 2*time.Minute, "MirrorMaker 2 replicates 1000 records into source.mm2-in", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, "source.mm2-in")
		if err != nil {
			return false, err.Error()
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += max(0, o.Offset) })
		return n == 1000, fmt.Sprintf("%d records", n)
	})
}

// A second listener tells its own clients the address it was given, and the first listener
// still tells its clients the brokers' own: a relay in front of the second listener keeps
// its clients on the relay.
func TestRealListenerAdvertisesItsOwnAddress(t *testing.T) {
	const relayed = "127.0.0.1:1" // never dialled: only Metadata is asked, of the seed itself
	c := Start(t, Real(), WithListener("RELAY", func(i int) string {
		if i != 0 {
			t.Errorf("advertise called for broker index %d of a 1-broker cluster", i)
		}
		return relayed
	}))
	addrs := c.Real().ListenerAddrs("RELAY")
	if len(addrs) != 1 || addrs[0] == c.Bootstrap()[0] {
		t.Fatalf("RELAY listener addresses %v (bootstrap %v)", addrs, c.Bootstrap())
	}
	if got := c.Real().ListenerAddrs("OTHER"); got != nil {
		t.Fatalf("ListenerAddrs of an unknown listener = %v, want nil", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for seed, want := range map[string]string{addrs[0]: relayed, c.Bootstrap()[0]: c.Bootstrap()[0]} {
		cl := NewClient(t, []string{seed})
		resp, err := cl.SeedBrokers()[0].Request(ctx, kmsg.NewPtrMetadataRequest())
		if err != nil {
			t.Fatalf("metadata from %s: %v", seed, err)
		}
		md := resp.(*kmsg.MetadataResponse)
		if len(md.Brokers) != 1 {
			t.Fatalf("metadata from %s lists %d brokers", seed, len(md.Brokers))
		}
		if got := fmt.Sprintf("%s:%d", md.Brokers[0].Host, md.Brokers[0].Port); got != want {
			t.Fatalf("metadata from %s advertises %s, want %s", seed, got, want)
		}
	}
}

func TestParseVersionAndModes(t *testing.T) {
	for in, want := range map[string]string{"4.4.0": "4.4.0", "3.9": "3.9.0", "2.8.2": "2.8.2"} {
		v, err := ParseVersion(in)
		if err != nil || v.String() != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %s", in, v, err, want)
		}
	}
	for _, bad := range []string{"", "4", "4.x.0", "4.4.0.1", "-1.0", "v4.4"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
	for _, c := range []struct {
		v  string
		zk bool
		ok bool
	}{{"2.8.2", true, true}, {"2.8.2", false, false}, {"3.6.2", true, true}, {"3.3.0", false, true},
		{"3.9.1", true, true}, {"4.0.0", true, false}, {"4.4.0", false, true}, {"2.7.0", true, false}} {
		v, _ := ParseVersion(c.v)
		if err := v.Supported(c.zk); (err == nil) != c.ok {
			t.Errorf("%s zookeeper=%v: %v, want supported=%v", c.v, c.zk, err, c.ok)
		}
	}
	if !strings.Contains(string(pomFor(Version{3, 6, 2})), "<kafka.version>3.6.2</kafka.version>") ||
		!strings.Contains(string(pomFor(Version{4, 0, 0})), "<kafka.version>4.0.0</kafka.version>") {
		t.Error("pomFor does not put the version in")
	}
}
