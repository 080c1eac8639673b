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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/protocol"
)

// The source's reader exists only on the source, under a name and password the destination
// does not know: a mirror that copies proves the source client used the mirror config's
// credentials, not kmirror's own (upstream_sasl), which are the destination's.
const (
	sourceReader     = "source-reader"
	sourceReaderPass = "source-reader-7d1c"
)

// saslClient is a franz-go client through kmirror at addr that authenticates as user of dst
// and can send mirror RPCs.
func saslClient(t *testing.T, dst *kafkatest.Cluster, addr, user string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return kafkatest.NewClient(t, []string{addr}, append(append(dst.UserOpts(user),
		kgo.MaxVersions(protocol.KgoMaxVersions(nil))), opts...)...)
}

// TestMirrorOverSASL runs kmirror between two SASL clusters (SCRAM-SHA-512 and PLAIN, the
// StandardAuthorizer, no unauthenticated listener): kmirror reaches its destination only
// with its own credentials (upstream_sasl) and the source only with the mirror config's, so
// a mirror that copies offset for offset proves that discovery, the state topic, the
// ownership group and the data path all authenticate. Then clients nobody here wrote
// (Kafka's Java tools, kcat) authenticate through kmirror, and a wrong password is refused
// by the broker through it.
func TestMirrorOverSASL(t *testing.T) {
	began := time.Now()
	src := kafkatest.Start(t, kafkatest.WithSASL(), kafkatest.SASLUser(sourceReader, sourceReaderPass))
	dst := kafkatest.Start(t, kafkatest.WithSASL())
	t.Logf("two SASL clusters in %s", time.Since(began).Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	grantSourceReader(t, ctx, src)

	src.CreateKeptTopic(t, "sasl-orders", 2)
	produce(t, src, "sasl-orders", 2, 500, kgo.ZstdCompression())
	km := kmirror(t, dst) // upstream_sasl: kmirror / SCRAM-SHA-512
	addr := km.Proxy.Addr()
	// Discovery ran at start, before any client: only kmirror's own credentials could have
	// listed the broker.
	if n := len(km.Proxy.BrokerListenerPorts()); n != 1 {
		t.Fatalf("kmirror discovered %d brokers of a 1-broker SASL destination at start", n)
	}
	cl := saslClient(t, dst, addr, kafkatest.AdminUser)
	// The source password as an operator gives it: a config provider reference that every
	// instance resolves (kmirror never stores a secret in clear; docs/SECURITY.md, Secrets).
	secretFile := filepath.Join(t.TempDir(), "source.properties")
	if err := os.WriteFile(secretFile, []byte("sasl.password="+sourceReaderPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	createMirror(t, cl, "sasl-dr", "bootstrap.servers", src.BootstrapString(),
		"security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", kafkatest.MechanismSCRAM,
		"sasl.username", sourceReader, "sasl.password", "${file:"+secretFile+":sasl.password}")
	addTopics(t, cl, "sasl-dr", "sasl-orders")
	waitMirrored(t, cl, "sasl-dr", map[string]int64{"sasl-orders": 1000})
	mirrortest.VerifyIdentical(t, src.Client(t), dst.Client(t), "sasl-orders")
	t.Logf("mirrored 1000 records between SASL clusters %s after start", time.Since(began).Round(100*time.Millisecond))

	t.Run("an authenticated client is still refused writes to a mirror topic", func(t *testing.T) {
		alice := saslClient(t, dst, addr, kafkatest.AliceUser, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		err := alice.ProduceSync(ctx, &kgo.Record{Topic: "sasl-orders", Value: []byte("must not land")}).FirstErr()
		if !errors.Is(err, kerr.PolicyViolation) {
			t.Fatalf("alice produces to a mirror topic through kmirror: %v, want POLICY_VIOLATION", err)
		}
	})

	dst.CreateKeptTopic(t, "sasl-events", 1)

	t.Run("Java tools authenticate through kmirror with SCRAM-SHA-512 and PLAIN", func(t *testing.T) {
		javaToolsOverSASL(t, ctx, dst, addr)
	})
	t.Run("kcat authenticates through kmirror", func(t *testing.T) { kcatOverSASL(t, ctx, dst, addr) })
	t.Run("a wrong password is refused by the broker through kmirror", func(t *testing.T) {
		wrongPasswordRefused(t, ctx, addr)
	})
}

// grantSourceReader lets the source's reader describe the configs of every topic of src.
func grantSourceReader(t *testing.T, ctx context.Context, src *kafkatest.Cluster) {
	t.Helper()
	// The reader has alice's grants, plus reading topic configs (kmirror creates destination
	// topics with the source's configs); nothing on CLUSTER.
	grant, err := kadm.NewClient(src.Client(t)).CreateACLs(ctx, kadm.NewACLs().Allow("User:"+sourceReader).
		Topics("*").ResourcePatternType(kadm.ACLPatternLiteral).Operations(kadm.OpDescribeConfigs))
	if err == nil {
		for _, r := range grant {
			err = errors.Join(err, r.Err)
		}
	}
	if err != nil {
		t.Fatalf("grant %s DESCRIBE_CONFIGS on topics: %v", sourceReader, err)
	}
}

// javaToolsOverSASL writes sasl-events with Kafka's console producer as alice over
// SCRAM-SHA-512 and reads it back with the console consumer as alice over PLAIN, both
// through kmirror at addr.
func javaToolsOverSASL(t *testing.T, ctx context.Context, dst *kafkatest.Cluster, addr string) {
	t.Helper()
	var lines strings.Builder
	for i := range 20 {
		fmt.Fprintf(&lines, "java-%d\n", i)
	}
	out, err := kafkatest.RunToolInput(t, ctx, lines.String(), "org.apache.kafka.tools.ConsoleProducer",
		"--bootstrap-server", addr, "--topic", "sasl-events", "--producer-property", "acks=all",
		"--producer.config", dst.Real().PropertiesFile(kafkatest.AliceUser))
	if err != nil {
		t.Fatalf("ConsoleProducer as alice (SCRAM-SHA-512) through kmirror: %v\n%s", err, out)
	}
	cmd, err := kafkatest.ToolCommand(ctx, "org.apache.kafka.tools.consumer.ConsoleConsumer",
		"--bootstrap-server", addr, "--topic", "sasl-events", "--from-beginning", "--group", "sasl-events-g",
		"--max-messages", "20", "--timeout-ms", "60000",
		"--command-config", dst.Real().PropertiesFileMechanism(kafkatest.AliceUser, kafkatest.MechanismPLAIN))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ConsoleConsumer as alice (PLAIN) through kmirror: %v\n%s", err, stderr.String())
	}
	if got, want := strings.Fields(stdout.String()), strings.Fields(lines.String()); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ConsoleConsumer read %v, want %v\nstderr: %s", got, want, stderr.String())
	}
}

// kcatOverSASL writes two records to sasl-events with kcat as alice through kmirror at
// addr, and reads them back the same way.
func kcatOverSASL(t *testing.T, ctx context.Context, dst *kafkatest.Cluster, addr string) {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found: apt-get install kcat: %v", err)
	}
	prod := exec.CommandContext(ctx, kcat, append([]string{"-b", addr, "-P", "-t", "sasl-events", "-X", "acks=all"},
		dst.KcatArgs(kafkatest.AliceUser)...)...)
	prod.Stdin = strings.NewReader("kcat-0\nkcat-1\n")
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P as alice through kmirror: %v\n%s", err, out)
	}
	cons := exec.CommandContext(ctx, kcat, append([]string{"-b", addr, "-C", "-t", "sasl-events", "-o", "-2", "-e", "-q"},
		dst.KcatArgs(kafkatest.AliceUser)...)...)
	out, err := cons.Output()
	if err != nil || strings.Join(strings.Fields(string(out)), " ") != "kcat-0 kcat-1" {
		t.Fatalf("kcat -C as alice through kmirror: %v\n%s", err, out)
	}
}

// wrongPasswordRefused checks that franz-go, Kafka's topic tool and kcat, each with a wrong
// password for alice, are refused by the broker through kmirror at addr.
func wrongPasswordRefused(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	wrong := scram.Auth{User: kafkatest.AliceUser, Pass: "not-alices"}.AsSha512Mechanism()
	fc := kafkatest.NewClient(t, []string{addr}, kgo.SASL(wrong), kgo.RequestRetries(0))
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, fc); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("franz-go with a wrong SCRAM password through kmirror: %v, want SASL_AUTHENTICATION_FAILED", err)
	}

	props := filepath.Join(t.TempDir(), "wrong.properties")
	if err := os.WriteFile(props, []byte(kafkatest.ClientProperties(
		kafkatest.User{Name: kafkatest.AliceUser, Password: "not-alices"}, kafkatest.MechanismSCRAM)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := kafkatest.RunTool(t, ctx, "org.apache.kafka.tools.TopicCommand",
		"--bootstrap-server", addr, "--command-config", props, "--list")
	if err == nil || !strings.Contains(out, "SaslAuthenticationException") {
		t.Fatalf("kafka-topics with a wrong password through kmirror: %v\n%s", err, out)
	}

	args := append([]string{"-b", addr, "-L", "-m", "10"},
		kafkatest.KcatArgs(kafkatest.User{Name: kafkatest.AliceUser, Password: "not-alices"}, kafkatest.MechanismPLAIN)...)
	kout, err := exec.CommandContext(ctx, "kcat", args...).CombinedOutput()
	if err == nil || !strings.Contains(string(kout), "Authentication failed") {
		t.Fatalf("kcat with a wrong password through kmirror: %v\n%s", err, kout)
	}
}
