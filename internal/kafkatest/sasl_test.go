package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// One SASL cluster answers every question about the harness's SASL setup: users of both
// mechanisms authenticate, wrong and missing credentials are refused, alice has her topic
// grants and nothing on CLUSTER, the super users have everything, Java tools and kcat use
// the harness's properties and arguments, and an extra listener is SASL too.
func TestRealSASLCluster(t *testing.T) {
	const relayed = "127.0.0.1:1" // never dialled: only Metadata is asked, of the seed itself
	began := time.Now()
	c := Start(t, WithSASL(), SASLUser("bob", "bob-marker-7f3a"), WithListener("RELAY", func(int) string { return relayed }))
	t.Logf("SASL cluster ready in %s", time.Since(began).Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The harness's own client is admin: it may create topics.
	c.CreateKeptTopic(t, "sasl-topic", 1)

	// Each subtest's body is a function below. They are not helpers (no t.Helper): a failure
	// names the line in them that failed.
	t.Run("users produce and consume with both mechanisms", func(t *testing.T) { saslUsersProduceAndConsume(t, ctx, c) })
	t.Run("a wrong password and no credentials are refused", func(t *testing.T) { saslWrongOrNoCredentialsRefused(t, ctx, c) })
	t.Run("alice has nothing on CLUSTER; the super users have it", func(t *testing.T) { saslClusterGrants(t, ctx, c) })
	t.Run("Kafka's Java tools authenticate with the properties files", func(t *testing.T) { saslJavaTools(t, ctx, c) })
	t.Run("kcat authenticates with KcatArgs", func(t *testing.T) { saslKcat(t, ctx, c) })
	t.Run("an extra listener is SASL with the same users", func(t *testing.T) { saslExtraListener(t, ctx, c, relayed) })
}

// saslUsersProduceAndConsume: every user produces with both mechanisms, and alice consumes
// all eight records in her group and commits.
func saslUsersProduceAndConsume(t *testing.T, ctx context.Context, c *Cluster) {
	for _, u := range []string{AliceUser, "bob", KmirrorUser, AdminUser} {
		for _, m := range []string{MechanismSCRAM, MechanismPLAIN} {
			p := c.Client(t, append(c.UserOptsMechanism(u, m), kgo.DefaultProduceTopic("sasl-topic"))...)
			if err := p.ProduceSync(ctx, kgo.StringRecord(u+"/"+m)).FirstErr(); err != nil {
				t.Fatalf("%s with %s: produce: %v", u, m, err)
			}
		}
	}
	cons := c.Client(t, append(c.UserOpts(AliceUser), kgo.ConsumeTopics("sasl-topic"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ConsumerGroup("alice-group"))...)
	seen := map[string]bool{}
	for len(seen) < 8 && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("alice fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	if len(seen) != 8 {
		t.Fatalf("alice consumed %d of 8 records: %v", len(seen), seen)
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("alice commits in her group: %v", err)
	}
}

// saslWrongOrNoCredentialsRefused: a wrong password is refused with either mechanism, and a
// client without SASL gets nothing.
func saslWrongOrNoCredentialsRefused(t *testing.T, ctx context.Context, c *Cluster) {
	for _, m := range []string{MechanismSCRAM, MechanismPLAIN} {
		mech, err := saslMechanism(User{Name: AliceUser, Password: "wrong"}, m)
		if err != nil {
			t.Fatal(err)
		}
		cl := c.Client(t, kgo.SASL(mech), kgo.RequestRetries(0))
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("alice with a wrong %s password: %v, want SASL_AUTHENTICATION_FAILED", m, err)
		}
	}
	// A client without SASL speaks Kafka to a SASL listener: the broker closes the connection.
	cl := NewClient(t, c.Bootstrap(), kgo.RequestRetries(0), kgo.RetryTimeout(5*time.Second))
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(rctx, cl); err == nil {
		t.Fatal("a client without credentials got Metadata from a SASL listener")
	}
}

// saslClusterGrants: alice may not describe ACLs or create a topic; admin and kmirror may
// describe ACLs; the cluster knows each user's password.
func saslClusterGrants(t *testing.T, ctx context.Context, c *Cluster) {
	aliceClient := c.Client(t, c.UserOpts(AliceUser)...)
	alice := kadm.NewClient(aliceClient)
	if err := describeACLs(ctx, aliceClient); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice DescribeACLs: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	resp, err := alice.CreateTopic(ctx, 1, 1, nil, "alice-may-not-create")
	if err == nil {
		err = resp.Err
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice CreateTopic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	for _, u := range []string{AdminUser, KmirrorUser} {
		if err := describeACLs(ctx, c.Client(t, c.UserOpts(u)...)); err != nil {
			t.Fatalf("%s DescribeACLs: %v", u, err)
		}
	}
	if c.Password("bob") != "bob-marker-7f3a" || c.Password(AliceUser) != "alice-secret" {
		t.Fatalf("passwords: bob %q, alice %q", c.Password("bob"), c.Password(AliceUser))
	}
}

// saslJavaTools: Kafka's TopicCommand authenticates with alice's properties files of both
// mechanisms and is refused with a wrong password.
func saslJavaTools(t *testing.T, ctx context.Context, c *Cluster) {
	for _, m := range []string{MechanismSCRAM, MechanismPLAIN} {
		props := c.Real().PropertiesFileMechanism(AliceUser, m)
		if _, err := os.Stat(props); err != nil {
			t.Fatalf("alice's %s properties: %v", m, err)
		}
		out, err := RunTool(t, ctx, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.BootstrapString(),
			"--command-config", props, "--list")
		if err != nil || !strings.Contains(out, "sasl-topic") {
			t.Fatalf("kafka-topics --list as alice with %s: %v\n%s", m, err, out)
		}
	}
	wrong := t.TempDir() + "/wrong.properties"
	if err := os.WriteFile(wrong, []byte(ClientProperties(User{Name: AliceUser, Password: "wrong"}, MechanismSCRAM)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := RunTool(t, ctx, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", c.BootstrapString(),
		"--command-config", wrong, "--list")
	if err == nil || !strings.Contains(out, "SaslAuthenticationException") {
		t.Fatalf("kafka-topics with a wrong password: %v\n%s", err, out)
	}
	if got := c.Real().PropertiesFile(AliceUser); got != c.Real().PropertiesFileMechanism(AliceUser, MechanismSCRAM) {
		t.Fatalf("PropertiesFile(alice) = %s", got)
	}
}

// saslKcat: kcat authenticates with KcatArgs and is refused with a wrong password.
func saslKcat(t *testing.T, ctx context.Context, c *Cluster) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatal("kcat is not installed (apt-get install kcat)")
	}
	args := append([]string{"-b", c.BootstrapString(), "-C", "-t", "sasl-topic", "-o", "beginning", "-e", "-q"}, c.KcatArgs(AliceUser)...)
	out, err := exec.CommandContext(ctx, "kcat", args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "alice/"+MechanismSCRAM) {
		t.Fatalf("kcat as alice: %v\n%s", err, out)
	}
	args = append([]string{"-b", c.BootstrapString(), "-L", "-m", "10"}, KcatArgs(User{Name: AliceUser, Password: "wrong"}, MechanismPLAIN)...)
	out, err = exec.CommandContext(ctx, "kcat", args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Authentication failed") {
		t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
	}
}

// saslExtraListener: the extra listener RELAY serves alice, advertises relayed, and answers
// no client without credentials.
func saslExtraListener(t *testing.T, ctx context.Context, c *Cluster, relayed string) {
	addrs := c.Real().ListenerAddrs("RELAY")
	cl := NewClient(t, addrs, c.UserOpts(AliceUser)...)
	resp, err := cl.SeedBrokers()[0].Request(ctx, kmsg.NewPtrMetadataRequest())
	if err != nil {
		t.Fatalf("metadata from RELAY as alice: %v", err)
	}
	md := resp.(*kmsg.MetadataResponse)
	if got := fmt.Sprintf("%s:%d", md.Brokers[0].Host, md.Brokers[0].Port); got != relayed {
		t.Fatalf("RELAY advertises %s, want %s", got, relayed)
	}
	anon := NewClient(t, addrs, kgo.RequestRetries(0))
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	if _, err := anon.SeedBrokers()[0].Request(rctx, kmsg.NewPtrMetadataRequest()); err == nil {
		t.Fatal("RELAY answered a client without credentials")
	}
}

// describeACLs lists every ACL (DESCRIBE on CLUSTER), returning the request's error.
func describeACLs(ctx context.Context, cl *kgo.Client) error {
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType = kmsg.ACLResourceTypeAny
	req.ResourcePatternType = kmsg.ACLResourcePatternTypeAny
	req.Operation = kmsg.ACLOperationAny
	req.PermissionType = kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

func TestSASLUserValidation(t *testing.T) {
	for _, extra := range [][]User{
		{{Name: "alice", Password: "x"}},
		{{Name: "bob", Password: `a"b`}},
		{{Name: "b=b", Password: "x"}},
		{{Name: "bob", Password: "x"}, {Name: "bob", Password: "y"}},
	} {
		if _, err := saslUsers(extra); err == nil {
			t.Errorf("saslUsers(%v) accepted", extra)
		}
	}
	users, err := saslUsers([]User{{Name: "bob", Password: "bob-1"}})
	if err != nil || len(users) != 4 || users[0].Name != AdminUser || users[3].Password != "bob-1" {
		t.Fatalf("saslUsers: %v %v", users, err)
	}
}

func TestSASLNeedsRealCluster(t *testing.T) {
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		Start(ft, Fake(), WithSASL())
	}()
	if !ft.failed {
		t.Fatal("Start(Fake(), WithSASL()) did not fail the test")
	}
}

// fatalRecorder records Fatalf instead of ending the real test (Fatalf then panics to stop
// the caller, as runtime.Goexit would).
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.failed = true
	panic(fmt.Sprintf(format, args...))
}

func (f *fatalRecorder) Helper() {}

// A SASL cluster has no unauthenticated listener: not for clients, not for relays, not for
// the controllers.
func TestSASLServerPropertiesHaveNoPlaintextListener(t *testing.T) {
	users, err := saslUsers(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &RealCluster{cfg: RealConfig{Brokers: 1, SASL: true, Listeners: []Listener{{Name: "RELAY", Advertise: func(int) string { return "127.0.0.1:1" }}}}, users: users}
	n := &node{id: 1, brokerPort: 1, controllerPort: 2, extraPorts: []int{3}, dir: t.TempDir()}
	props := map[string]string{}
	for _, l := range strings.Split(c.serverProperties(n, []string{"1@127.0.0.1:2"}), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			props[k] = v
		}
	}
	for _, m := range strings.Split(props["listener.security.protocol.map"], ",") {
		name, protocol, _ := strings.Cut(m, ":")
		if protocol != "SASL_PLAINTEXT" {
			t.Errorf("listener %s is %s", name, protocol)
		}
		for _, mech := range []string{"plain", "scram-sha-512"} {
			key := "listener.name." + strings.ToLower(name) + "." + mech + ".sasl.jaas.config"
			if name != "CONTROLLER" && props[key] == "" {
				t.Errorf("%s is not set", key)
			}
		}
	}
	if got := strings.Count(props["listener.security.protocol.map"], ":"); got != 3 {
		t.Errorf("protocol map %q: want 3 listeners", props["listener.security.protocol.map"])
	}
	if props["authorizer.class.name"] == "" || props["allow.everyone.if.no.acl.found"] != "false" {
		t.Errorf("authoriser settings: %q, allow.everyone %q", props["authorizer.class.name"], props["allow.everyone.if.no.acl.found"])
	}
}
