package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/metricstest"
	"github.com/kmirror/kmirror/internal/syncbuf"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/audit"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// internalsUser is how a client reaches kmirror's proxy: its Kafka tool
// properties (nil: plaintext, unauthenticated), kcat -X arguments and
// franz-go options.
type internalsUser struct {
	name      string
	toolProps string // a client properties file for --command-config, "" for none
	kcat      []string
	kgo       []kgo.Opt
}

// commandConfig returns the tool arguments that make a Java tool use u's
// credentials, with flag the tool's name for the properties file option.
func (u internalsUser) commandConfig(flag string) []string {
	if u.toolProps == "" {
		return nil
	}
	return []string{flag, u.toolProps}
}

// tool runs a Kafka tool, which is expected to report a refusal: its output
// is returned whatever its exit status.
func tool(t *testing.T, class string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := kafkatest.RunTool(t, ctx, class, args...)
	if err != nil && ctx.Err() != nil {
		t.Fatalf("%s %v: %v", class, args, err)
	}
	return out
}

func mustContain(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: output lacks %q:\n%s", what, w, out)
		}
	}
}

// internalsGroup is the consumer group of kmirror's coordinators: no client may join or
// delete it.
const internalsGroup = "kmirror-coordinators"

// assertInternalsRefused tries, as u through kmirror at addr, everything a
// client must not do to kmirror's internals, with the tools users have,
// and checks each is refused with the error shown.
func assertInternalsRefused(t *testing.T, addr string, u internalsUser, mirrorTopic string) {
	const state = statetopic.TopicName

	assertToolsRefused(t, addr, u, mirrorTopic)

	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found: install the Debian package kcat: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, append([]string{"-P", "-b", addr, "-t", state}, u.kcat...)...)
	cmd.Stdin = strings.NewReader("junk\n")
	kout, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("%s: kcat -P -t %s succeeded:\n%s", u.name, state, kout)
	}
	mustContain(t, u.name+": kcat -P", string(kout), "Topic authorization failed")

	assertFranzGoRefused(t, ctx, addr, u, mirrorTopic)
}

// assertToolsRefused is assertInternalsRefused's part for Kafka's Java tools: deleting,
// reconfiguring and deleting records of __mirror_state, deleting kmirror's group and
// consuming in it (with both group protocols).
func assertToolsRefused(t *testing.T, addr string, u internalsUser, mirrorTopic string) {
	t.Helper()
	const state, group = statetopic.TopicName, internalsGroup
	const stateMsg = "is kmirror's state topic"

	out := tool(t, "org.apache.kafka.tools.TopicCommand", append([]string{"--bootstrap-server", addr, "--delete", "--topic", state},
		u.commandConfig("--command-config")...)...)
	mustContain(t, u.name+": kafka-topics --delete", out, "TopicAuthorizationException", stateMsg)

	out = tool(t, "org.apache.kafka.tools.ConfigCommand", append([]string{"--bootstrap-server", addr, "--alter", "--entity-type", "topics",
		"--entity-name", state, "--add-config", "cleanup.policy=delete"}, u.commandConfig("--command-config")...)...)
	mustContain(t, u.name+": kafka-configs --alter", out, "TopicAuthorizationException", stateMsg)

	offsets := filepath.Join(t.TempDir(), "offsets.json")
	if err := os.WriteFile(offsets, []byte(`{"version":1,"partitions":[{"topic":"`+state+`","partition":0,"offset":1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out = tool(t, "org.apache.kafka.tools.DeleteRecordsCommand", append([]string{"--bootstrap-server", addr, "--offset-json-file", offsets},
		u.commandConfig("--command-config")...)...)
	mustContain(t, u.name+": kafka-delete-records", out, "TopicAuthorizationException")

	out = tool(t, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", append([]string{"--bootstrap-server", addr, "--delete",
		"--group", group}, u.commandConfig("--command-config")...)...)
	mustContain(t, u.name+": kafka-consumer-groups --delete", out, "GroupAuthorizationException")

	out = tool(t, "org.apache.kafka.tools.consumer.ConsoleConsumer", append([]string{"--bootstrap-server", addr, "--topic", mirrorTopic,
		"--group", group, "--from-beginning", "--timeout-ms", "30000"}, u.commandConfig("--command-config")...)...)
	mustContain(t, u.name+": kafka-console-consumer --group "+group, out, "GroupAuthorizationException", group)

	// The consumer group protocol of KIP-848: ConsumerGroupHeartbeat.
	out = tool(t, "org.apache.kafka.tools.consumer.ConsoleConsumer", append([]string{"--bootstrap-server", addr, "--topic", mirrorTopic,
		"--group", group, "--command-property", "group.protocol=consumer", "--from-beginning", "--timeout-ms", "30000"},
		u.commandConfig("--command-config")...)...)
	mustContain(t, u.name+": kafka-console-consumer --group "+group+" (group.protocol=consumer)", out, "GroupAuthorizationException", group)
}

// assertFranzGoRefused is assertInternalsRefused's part for franz-go, within ctx: a
// producer with a kmirror transactional id, a large Produce to __mirror_state and a member
// of kmirror's group.
func assertFranzGoRefused(t *testing.T, ctx context.Context, addr string, u internalsUser, mirrorTopic string) {
	t.Helper()
	const state, group = statetopic.TopicName, internalsGroup

	// franz-go: a producer with a kmirror transactional id, and a member of kmirror's group.
	txn, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.TransactionalID("kmirror-dr-probe-0")}, u.kgo...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	err = txn.BeginTransaction()
	if err == nil {
		err = txn.ProduceSync(ctx, &kgo.Record{Topic: mirrorTopic + "-other", Value: []byte("x")}).FirstErr()
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Errorf("%s: franz-go with a kmirror transactional id: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", u.name, err)
	}

	// A Produce large enough to be forwarded before it is complete (256 KiB or more) is
	// still checked whole.
	large, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, u.kgo...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer large.Close()
	err = large.ProduceSync(ctx, &kgo.Record{Topic: state, Partition: 0, Value: bytes.Repeat([]byte("j"), 300<<10)}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("%s: a 300 KiB Produce to %s: %v, want TOPIC_AUTHORIZATION_FAILED", u.name, state, err)
	}

	member, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(mirrorTopic)}, u.kgo...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	var joinErr error
	for joinErr == nil && ctx.Err() == nil {
		member.PollFetches(ctx).EachError(func(_ string, _ int32, err error) {
			if errors.Is(err, kerr.GroupAuthorizationFailed) {
				joinErr = err
			}
		})
	}
	if joinErr == nil {
		t.Errorf("%s: a franz-go member of %s was not refused", u.name, group)
	}
}

// assertStateIntact checks __mirror_state is still there, readable through
// kmirror, and that the mirror still copies.
func assertStateIntact(t *testing.T, src *kafkatest.Cluster, cl *kgo.Client, mirror, topic string, before int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, statetopic.TopicName)
	if err != nil || ends.Error() != nil {
		t.Fatalf("reading %s through kmirror: %v %v", statetopic.TopicName, err, ends.Error())
	}
	var records int64
	ends.Each(func(o kadm.ListedOffset) { records += o.Offset })
	if records == 0 {
		t.Fatalf("%s holds no records", statetopic.TopicName)
	}
	produce(t, src, topic, 1, 7, kgo.NoCompression())
	waitMirrored(t, cl, mirror, map[string]int64{topic: before + 7})
}

// auditRefusals returns the APIs of the audit log's refusals.
func auditRefusals(log string) map[string]bool {
	apis := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"decision":"`+audit.Refused+`"`) {
			if i := strings.Index(line, `"api":"`); i >= 0 {
				rest := line[i+7:]
				apis[rest[:strings.IndexByte(rest, '"')]] = true
			}
		}
	}
	return apis
}

// TestInternalsRefusedThroughProxy: with a destination that authenticates
// nobody (every client is the unauthenticated ANONYMOUS), a client going
// through kmirror can neither delete, write nor reconfigure __mirror_state,
// join or delete kmirror's group nor take a kmirror transactional id; the
// refusals are audited and counted, and the mirror keeps working.
func TestInternalsRefusedThroughProxy(t *testing.T) {
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t)
	// --broker-acls needs to know kmirror's principal (and an authoriser, which dst lacks).
	if _, err := instancetest.StartWith(t, dst, nil, func(c *instance.Config) { c.BrokerACLs = true }); err == nil ||
		!strings.Contains(err.Error(), "upstream_sasl") {
		t.Fatalf("an instance without upstream_sasl started with --broker-acls (err %v)", err)
	}
	km := kmirror(t, dst)
	var auditLog syncbuf.Buffer
	km.Proxy.SetAudit(audit.New(&auditLog))

	src.CreateKeptTopic(t, "ledger", 1)
	produce(t, src, "ledger", 1, 20, kgo.NoCompression())
	cl := admin(t, km.Proxy.Addr())
	createMirror(t, cl, "dr", "bootstrap.servers", src.BootstrapString())
	addTopics(t, cl, "dr", "ledger")
	waitMirrored(t, cl, "dr", map[string]int64{"ledger": 20})

	assertInternalsRefused(t, km.Proxy.Addr(), internalsUser{name: "anonymous"}, "ledger")
	// An unclean election could lose records already copied from the source.
	out := tool(t, "org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", km.Proxy.Addr(), "--election-type", "unclean",
		"--topic", "ledger", "--partition", "0")
	mustContain(t, "kafka-leader-election --election-type unclean", out, "PolicyViolationException", "unclean leader election refused")
	assertStateIntact(t, src, cl, "dr", "ledger", 20)

	got := auditRefusals(auditLog.String())
	for _, api := range []string{"DeleteTopics", "IncrementalAlterConfigs", "DeleteRecords", "DeleteGroups", "JoinGroup", "ConsumerGroupHeartbeat", "Produce", "InitProducerID", "ElectLeaders"} {
		if !got[api] {
			t.Errorf("no audit line for the refused %s; refusals audited: %v\n%s", api, got, auditLog.String())
		}
	}
	metrics := scrape(t, km.Proxy.MetricsAddr())
	mustContain(t, "metrics", metrics, `kmirror_proxy_refusals_total{api="DeleteTopics",reason="state_topic"}`,
		`kmirror_proxy_refusals_total{api="JoinGroup",reason="coordinator_group"}`,
		`kmirror_proxy_refusals_total{api="InitProducerID",reason="transactional_id"}`)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	body, err := metricstest.Scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// saslKmirror runs kmirror in front of a SASL destination, authenticating as the harness's
// kmirror user (a super user) for discovery, state and copy.
func saslKmirror(t *testing.T, dst *kafkatest.Cluster, brokerACLs bool) *instance.Instance {
	t.Helper()
	in, err := instancetest.StartWith(t, dst, nil, func(c *instance.Config) {
		c.Proxy.UpstreamSASL = proxy.UpstreamSASL{Mechanism: kafkatest.MechanismSCRAM, Username: kafkatest.KmirrorUser,
			Password: dst.Password(kafkatest.KmirrorUser)}
		c.BrokerACLs = brokerACLs
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// userAdmin is admin (for mirror RPCs) through kmirror, authenticated as user.
func userAdmin(t *testing.T, addr string, dst *kafkatest.Cluster, user string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.MaxVersions(protocol.KgoMaxVersions(nil))}, dst.UserOpts(user)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func alice(dst *kafkatest.Cluster) internalsUser {
	return internalsUser{name: kafkatest.AliceUser, toolProps: dst.Real().PropertiesFile(kafkatest.AliceUser),
		kcat: dst.KcatArgs(kafkatest.AliceUser), kgo: dst.UserOpts(kafkatest.AliceUser)}
}

// TestInternalsRefusedThroughProxySASL: on a SASL destination with the StandardAuthorizer,
// alice (who may write any topic, read any group and use any transactional id at the
// broker) is refused by kmirror what would touch its internals.
func TestInternalsRefusedThroughProxySASL(t *testing.T) {
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t, kafkatest.WithSASL())
	km := saslKmirror(t, dst, false)
	cl := userAdmin(t, km.Proxy.Addr(), dst, kafkatest.AdminUser)

	src.CreateKeptTopic(t, "ledger", 1)
	produce(t, src, "ledger", 1, 20, kgo.NoCompression())
	createMirror(t, cl, "dr", "bootstrap.servers", src.BootstrapString())
	addTopics(t, cl, "dr", "ledger")
	waitMirrored(t, cl, "dr", map[string]int64{"ledger": 20})

	assertInternalsRefused(t, km.Proxy.Addr(), alice(dst), "ledger")
	assertStateIntact(t, src, cl, "dr", "ledger", 20)
}

// denyBindings counts kmirror's DENY bindings on topic as the (single) destination broker's
// authoriser lists them.
func denyBindings(t *testing.T, adm *kadm.Client, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).
		Deny("User:*").DenyHosts("*").Operations(kadm.OpWrite, kadm.OpDelete, kadm.OpAlterConfigs))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		n += len(r.Described)
	}
	return n
}

// kcatDirect produces one record as user straight to the destination broker, bypassing
// kmirror, and returns kcat's output and whether it succeeded.
func kcatDirect(t *testing.T, dst *kafkatest.Cluster, user, topic string) (string, bool) {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found: install the Debian package kcat: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, append([]string{"-P", "-b", dst.BootstrapString(), "-t", topic, "-p", "0"}, dst.KcatArgs(user)...)...)
	cmd.Stdin = strings.NewReader("direct write\n")
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// waitStates polls until every partition of the mirror is in state.
func waitStates(t *testing.T, cl *kgo.Client, mirror, state string) {
	t.Helper()
	polltest.Eventually(t, 2*time.Minute, "every partition of "+mirror+" "+state, func() (bool, string) {
		req := protocol.NewPtrDescribeMirrorsRequest()
		req.MirrorNames = []string{mirror}
		resp := request[*protocol.DescribeMirrorsResponse](t, cl, req)
		if len(resp.Mirrors) != 1 || resp.Mirrors[0].ErrorCode != 0 {
			return false, "mirror not described"
		}
		var b strings.Builder
		for _, tp := range resp.Mirrors[0].Topics {
			for _, p := range tp.Partitions {
				if p.State != state {
					fmt.Fprintf(&b, "%s/%d %s; ", tp.Name, p.Partition, p.State)
				}
			}
		}
		return b.Len() == 0, b.String()
	})
}

// TestBrokerACLsKeepMirrorTopicsReadOnly: with --broker-acls, a client that goes straight
// to a destination broker (alice, who may write any topic) cannot write to a mirror topic
// while it is mirrored or paused, kmirror's own copy still passes, and after failover the
// same write succeeds. An instance whose principal is no super user does not start.
func TestBrokerACLsKeepMirrorTopicsReadOnly(t *testing.T) {
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t, kafkatest.WithSASL())
	_, err := instancetest.StartWith(t, dst, nil, func(c *instance.Config) {
		c.Proxy.UpstreamSASL = proxy.UpstreamSASL{Mechanism: kafkatest.MechanismSCRAM, Username: kafkatest.AliceUser,
			Password: dst.Password(kafkatest.AliceUser)}
		c.BrokerACLs = true
	})
	if err == nil || !strings.Contains(err.Error(), "super user") {
		t.Fatalf("an instance authenticating as alice started with --broker-acls (err %v); want a refusal naming the super-user precondition", err)
	}

	km := saslKmirror(t, dst, true)
	cl := userAdmin(t, km.Proxy.Addr(), dst, kafkatest.AdminUser)
	adm := kadm.NewClient(dst.Client(t))
	src.CreateKeptTopic(t, "ledger", 2)
	produce(t, src, "ledger", 2, 10, kgo.NoCompression())
	createMirror(t, cl, "dr", "bootstrap.servers", src.BootstrapString())
	addTopics(t, cl, "dr", "ledger")
	waitMirrored(t, cl, "dr", map[string]int64{"ledger": 20})
	polltest.Eventually(t, 30*time.Second, "the broker lists kmirror's 3 DENY bindings on ledger", func() (bool, string) {
		n := denyBindings(t, adm, "ledger")
		return n == 3, fmt.Sprint(n, " bindings")
	})

	if out, ok := kcatDirect(t, dst, kafkatest.AliceUser, "ledger"); ok || !strings.Contains(out, "Topic authorization failed") {
		t.Fatalf("alice wrote to mirror topic ledger straight at the broker (ok %v):\n%s", ok, out)
	}
	// kmirror's copy, a super user's, passes the DENY.
	produce(t, src, "ledger", 2, 5, kgo.NoCompression())
	waitMirrored(t, cl, "dr", map[string]int64{"ledger": 30})

	pause := protocol.NewPtrPauseMirrorTopicsRequest()
	pause.MirrorName, pause.Topics = "dr", []protocol.TopicName{{Name: "ledger"}}
	if r := request[*protocol.PauseMirrorTopicsResponse](t, cl, pause); r.ErrorCode != 0 || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("pause: %+v", r)
	}
	waitStates(t, cl, "dr", "PAUSED")
	if n := denyBindings(t, adm, "ledger"); n != 3 {
		t.Fatalf("paused: %d DENY bindings on ledger, want 3", n)
	}
	if out, ok := kcatDirect(t, dst, kafkatest.AliceUser, "ledger"); ok || !strings.Contains(out, "Topic authorization failed") {
		t.Fatalf("alice wrote to paused mirror topic ledger straight at the broker (ok %v):\n%s", ok, out)
	}

	remove := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	remove.MirrorName, remove.Topics = "dr", []protocol.TopicName{{Name: "ledger"}}
	if r := request[*protocol.RemoveTopicsFromMirrorResponse](t, cl, remove); r.ErrorCode != 0 {
		t.Fatalf("failover: %s", deref(r.ErrorMessage))
	}
	waitStates(t, cl, "dr", "STOPPED")
	// STOPPED is recorded after the delete was accepted; the broker applies it from the
	// metadata log a moment later.
	polltest.Eventually(t, 30*time.Second, "the broker lists no DENY binding on ledger", func() (bool, string) {
		n := denyBindings(t, adm, "ledger")
		return n == 0, fmt.Sprint(n, " bindings")
	})
	if out, ok := kcatDirect(t, dst, kafkatest.AliceUser, "ledger"); !ok {
		t.Fatalf("alice cannot write to ledger after failover:\n%s", out)
	}
}
