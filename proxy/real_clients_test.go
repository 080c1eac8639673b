package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Every test here runs a client nobody on this project wrote through the proxy, produces n
// records, reads exactly those n back, and (through realProxy's leak detector) fails if any
// frame sent to the client carried a real broker address.

func uniqueTopic(prefix string) string { return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()) }

// createTopic creates topic (replication factor 3) through bootstrap and waits until it
// is described there with a leader for every partition.
func createTopic(t *testing.T, bootstrap, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, partitions, 3, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	awaitTopic(t, ctx, adm, topic, int(partitions))
}

// awaitTopic waits until adm describes topic with its partitions, each with a leader.
// CreateTopics returns once the controller committed the topic; each broker learns it,
// and its partitions' leaders, a moment later (KRaft, slower on a loaded machine), so the
// broker a client asks next may not know it yet.
func awaitTopic(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, partitions int) {
	t.Helper()
	what := fmt.Sprintf("topic %s described with %d partitions, each with a leader", topic, partitions)
	polltest.Eventually(t, time.Minute, what, func() (bool, string) {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return false, fmt.Sprintf("describe: %v", err)
		}
		d := td[topic]
		if d.Err != nil || len(d.Partitions) != partitions {
			return false, fmt.Sprintf("described %d partitions (%v)", len(d.Partitions), d.Err)
		}
		for _, pd := range d.Partitions {
			if pd.Err != nil || pd.Leader < 0 {
				return false, fmt.Sprintf("partition %d: leader %d (%v)", pd.Partition, pd.Leader, pd.Err)
			}
		}
		return true, ""
	})
}

func TestRealFranzGoTransactions(t *testing.T) {
	p, _, _ := realProxy(t)
	var d dialRecorder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrap := p.AdvertisedAddr()
	topic := uniqueTopic("txn")
	createTopic(t, bootstrap, topic, 3)

	prod, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.Dialer(d.dial),
		kgo.DefaultProduceTopic(topic), kgo.TransactionalID(topic+"-tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const committed, aborted = 500, 200
	for _, txn := range []struct {
		n      int
		commit kgo.TransactionEndTry
		prefix string
	}{{committed, kgo.TryCommit, "c"}, {aborted, kgo.TryAbort, "a"}} {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		recs := make([]*kgo.Record, txn.n)
		for i := range recs {
			recs[i] = &kgo.Record{Value: []byte(txn.prefix + strconv.Itoa(i))}
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("transactional produce: %v", err)
		}
		if err := prod.EndTransaction(ctx, txn.commit); err != nil {
			t.Fatalf("end transaction: %v", err)
		}
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.Dialer(d.dial), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < committed {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d committed records: %v", len(seen), committed, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if !strings.HasPrefix(v, "c") || seen[v] {
				t.Errorf("read_committed consumer saw %q (aborted or duplicate)", v)
			}
			seen[v] = true
		})
	}
	assertOnlyProxyDialed(t, p, &d)
}

func TestRealFranzGoAdmin(t *testing.T) {
	p, _, _ := realProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var d dialRecorder
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.AdvertisedAddr()), kgo.Dialer(d.dial))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := uniqueTopic("admin")
	if _, err := adm.CreateTopic(ctx, 4, 2, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, topic); err != nil {
		t.Fatalf("create: %v", err)
	}
	awaitTopic(t, ctx, adm, topic, 4)
	// Each broker applies the metadata log on its own, so the broker that answers
	// DescribeConfigs may not know the topic yet although another one described it
	// (CI saw UNKNOWN_TOPIC_OR_PARTITION here). Wait for that; any other answer fails.
	polltest.Eventually(t, 30*time.Second, "topic config retention.ms=3600000", func() (bool, string) {
		cfgs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		c, err := cfgs.On(topic, nil)
		if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(c.Err, kerr.UnknownTopicOrPartition) {
			return false, "a broker does not know the topic yet"
		}
		if err != nil || c.Err != nil || !hasConfig(c.Configs, "retention.ms", "3600000") {
			t.Fatalf("topic config retention.ms not 3600000: %v %+v", err, c)
		}
		return true, ""
	})
	bm, err := adm.BrokerMetadata(ctx)
	if err != nil || len(bm.Brokers) != 3 {
		t.Fatalf("broker metadata: %v %v", err, bm.Brokers)
	}
	// Broker configs spell out listener addresses: they must name the proxy.
	bcfgs, err := adm.DescribeBrokerConfigs(ctx, bm.Brokers[0].NodeID)
	if err != nil {
		t.Fatalf("describe broker configs: %v", err)
	}
	port := p.BrokerListenerPorts()[bm.Brokers[0].NodeID]
	wantListener := "://127.0.0.1:" + strconv.Itoa(port)
	for _, rc := range bcfgs {
		for _, c := range rc.Configs {
			if (c.Key == "advertised.listeners" || c.Key == "listeners") && (c.Value == nil || !strings.Contains(*c.Value, wantListener)) {
				t.Errorf("broker config %s = %v, want the proxy listener %s", c.Key, c.MaybeValue(), wantListener)
			}
		}
	}
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatalf("delete: %v", err)
	}
	polltest.Until(t, 30*time.Second, "deleted topic to disappear", func() bool {
		td, err := adm.ListTopics(ctx, topic)
		return err == nil && !td.Has(topic)
	})
	assertOnlyProxyDialed(t, p, &d)
}

func hasConfig(cs []kadm.Config, key, value string) bool {
	for _, c := range cs {
		if c.Key == key && c.Value != nil && *c.Value == value {
			return true
		}
	}
	return false
}

// TestRealJavaTools drives the Java client through Kafka's own command-line tools.
func TestRealJavaTools(t *testing.T) {
	p, _, _ := realProxy(t)
	javaToolsRoundTrip(t, p.AdvertisedAddr())
}

// javaToolsRoundTrip creates a topic with TopicCommand, writes it with ConsoleProducer, reads
// it back exactly once with a ConsoleConsumer group and describes the group, all through bs.
func javaToolsRoundTrip(t *testing.T, bs string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := uniqueTopic("java")
	const n = 500

	if out, err := kafkatest.RunTool(t, ctx, "org.apache.kafka.tools.TopicCommand",
		"--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3"); err != nil {
		t.Fatalf("TopicCommand --create: %v\n%s", err, out)
	}
	out, err := kafkatest.RunTool(t, ctx, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bs, "--describe", "--topic", topic)
	if err != nil || strings.Count(out, "Partition: ") != 3 {
		t.Fatalf("TopicCommand --describe: %v\n%s", err, out)
	}

	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, "java-%d\n", i)
	}
	cmd, err := kafkatest.ToolCommand(ctx, "org.apache.kafka.tools.ConsoleProducer",
		"--bootstrap-server", bs, "--topic", topic, "--producer-property", "acks=all")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = strings.NewReader(lines.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ConsoleProducer: %v\n%s", err, out)
	}

	group := topic + "-g"
	cmd, err = kafkatest.ToolCommand(ctx, "org.apache.kafka.tools.consumer.ConsoleConsumer",
		"--bootstrap-server", bs, "--topic", topic, "--from-beginning", "--group", group,
		"--max-messages", strconv.Itoa(n), "--timeout-ms", "60000")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ConsoleConsumer: %v\n%s", err, stderr.String())
	}
	got := map[string]bool{}
	for _, l := range strings.Fields(stdout.String()) {
		if got[l] {
			t.Errorf("ConsoleConsumer read %q twice", l)
		}
		got[l] = true
	}
	for i := range n {
		if !got[fmt.Sprintf("java-%d", i)] {
			t.Fatalf("ConsoleConsumer read %d records, missing java-%d\nstderr: %s", len(got), i, stderr.String())
		}
	}
	if len(got) != n {
		t.Fatalf("ConsoleConsumer read %d distinct records, want %d", len(got), n)
	}

	out, err = kafkatest.RunTool(t, ctx, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", bs, "--describe", "--group", group)
	if err != nil || !strings.Contains(out, topic) {
		t.Fatalf("ConsumerGroupCommand --describe: %v\n%s", err, out)
	}
}

// TestRealKcat drives librdkafka through kcat.
func TestRealKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found: install the Debian package kcat (apt-get install kcat; make test-deps does it): %v", err)
	}
	p, _, _ := realProxy(t)
	kcatRoundTrip(t, kcat, p.AdvertisedAddr())
}

// kcatRoundTrip writes and reads a topic with kcat through bs and checks that kcat's
// metadata listing shows the 3 brokers at proxy addresses only.
func kcatRoundTrip(t *testing.T, kcat, bs string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := uniqueTopic("kcat")
	createTopic(t, bs, topic, 3)
	const n = 1000
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, "kcat-%d\n", i)
	}
	prod := exec.CommandContext(ctx, kcat, "-b", bs, "-P", "-t", topic, "-X", "acks=all")
	prod.Stdin = strings.NewReader(lines.String())
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	cons := exec.CommandContext(ctx, kcat, "-b", bs, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-c", strconv.Itoa(n))
	var stdout, stderr bytes.Buffer
	cons.Stdout, cons.Stderr = &stdout, &stderr
	if err := cons.Run(); err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, stderr.String())
	}
	got := map[string]bool{}
	for _, l := range strings.Fields(stdout.String()) {
		got[l] = true
	}
	if len(got) != n {
		t.Fatalf("kcat read %d distinct records, want %d\nstderr: %s", len(got), n, stderr.String())
	}
	// Metadata listing through librdkafka: every broker it reports must be the proxy.
	md := exec.CommandContext(ctx, kcat, "-b", bs, "-L", "-t", topic)
	out, err := md.CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -L: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "3 brokers") {
		t.Fatalf("kcat -L did not list 3 brokers:\n%s", out)
	}
	for _, a := range shared.c.Bootstrap() {
		if strings.Contains(string(out), a) {
			t.Errorf("kcat -L shows real broker %s:\n%s", a, out)
		}
	}
}

// TestRealSarama drives IBM/sarama.
func TestRealSarama(t *testing.T) {
	p, _, _ := realProxy(t)
	bs := p.AdvertisedAddr()
	topic := uniqueTopic("sarama")
	createTopic(t, bs, topic, 3)
	var d dialRecorder
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	// The broker sarama asks may learn the new topic's leaders after the one createTopic
	// asked: retry on (the default 3 tries can run out on a slow machine).
	cfg.Metadata.Retry.Max = 20
	cfg.Producer.Retry.Max = 20
	cfg.Net.Proxy.Enable = true
	cfg.Net.Proxy.Dialer = &saramaDialer{d: &d}
	cl, err := sarama.NewClient([]string{bs}, cfg)
	if err != nil {
		t.Fatalf("sarama client: %v", err)
	}
	defer cl.Close()
	prod, err := sarama.NewSyncProducerFromClient(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 600
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("sarama-" + strconv.Itoa(i))}
	}
	if err := prod.SendMessages(msgs); err != nil {
		t.Fatalf("sarama produce: %v", err)
	}
	cons, err := sarama.NewConsumerFromClient(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[string]bool{}
	timeout := time.After(60 * time.Second)
	for part := int32(0); part < 3; part++ {
		hwm, err := cl.GetOffset(topic, part, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if hwm == 0 {
			continue
		}
		pc, err := cons.ConsumePartition(topic, part, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		for done := false; !done; {
			select {
			case m := <-pc.Messages():
				got[string(m.Value)] = true
				done = m.Offset+1 >= hwm
			case err := <-pc.Errors():
				t.Fatalf("sarama consume: %v", err)
			case <-timeout:
				t.Fatalf("sarama consumed %d of %d records", len(got), n)
			}
		}
		pc.AsyncClose()
	}
	if len(got) != n {
		t.Fatalf("sarama read %d distinct records, want %d", len(got), n)
	}
	assertOnlyProxyDialed(t, p, &d)
}

type saramaDialer struct{ d *dialRecorder }

func (s *saramaDialer) Dial(network, addr string) (net.Conn, error) {
	return s.d.dial(context.Background(), network, addr)
}
