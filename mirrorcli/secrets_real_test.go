package mirrorcli

// The source's SASL password is never in __mirror_state, logs or any
// describe output (issue 15, part 4), on real Apache Kafka: a SASL source
// whose mirror user has a unique marker password, a plain destination, a
// real kmirror instance with a secrets key file, the CLI run in-process and
// kcat reading __mirror_state straight from the broker.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/internal/syncbuf"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSecretsNeverInStateRealKafka(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatal("kcat is not installed (apt-get install kcat)")
	}
	marker := "kmirror-marker-" + hex.EncodeToString(randomBytes(t, 8))
	const user = "mirror-src"
	src := kafkatest.Start(t, kafkatest.SASLUser(user, marker))
	dst := kafkatest.Start(t)
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	keyFile := writeFile(t, "secrets.keys", "# kmirror secrets keys, the first encrypts\nk1="+base64.StdEncoding.EncodeToString(randomBytes(t, 32))+"\n")
	in := instancetest.Start(t, dst, log, func(c *instance.Config) { c.Proxy.SecretsKeyFile = keyFile })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the instance's log:\n%s", logs.String())
		}
	})
	run := func(args ...string) result {
		t.Helper()
		return runMirrors(t, append([]string{"--bootstrap-server", in.Proxy.Addr()}, args...)...)
	}

	// Records to copy, in one topic per mirror.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srcCl := src.Client(t)
	// A mirror's source user also reads topic configs (the destination
	// topic is created like the source's); the harness grants reads only.
	acl := kadm.NewACLs().Allow("User:" + user).Topics("*").Operations(kadm.OpDescribeConfigs).ResourcePatternType(kadm.ACLPatternLiteral)
	if res, err := kadm.NewClient(srcCl).CreateACLs(ctx, acl); err != nil || res[0].Err != nil {
		t.Fatalf("granting DESCRIBE_CONFIGS: %v %v", err, res)
	}
	for _, topic := range []string{"literal", "provided"} {
		src.CreateKeptTopic(t, topic, 2)
		for i := range 10 {
			if err := srcCl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s #%d", topic, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// One mirror with the password given literally (encrypted with k1), one
	// with a ${file:…} reference; only that password lets kmirror in.
	common := "bootstrap.servers=" + src.BootstrapString() + "\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n" +
		"sasl.username=" + user + "\nfetch.wait.max.ms=100\nmetadata.refresh.interval.ms=1000\n"
	passwordFile := writeFile(t, "source-secrets.properties", "# read by every kmirror instance\nsasl.password="+marker+"\n")
	mustRun(t, 0, run("--create", "--mirror", "literal", "--mirror-config", writeFile(t, "literal.properties", common+"sasl.password="+marker+"\n")))
	mustRun(t, 0, run("--create", "--mirror", "provided", "--mirror-config",
		writeFile(t, "provided.properties", common+"sasl.password=${file:"+passwordFile+":sasl.password}\n")))
	for _, m := range []string{"literal", "provided"} {
		mustRun(t, 0, run("--add", "--mirror", m, "--topics", m))
	}

	// Both copy.
	srcAdm, dstAdm := kadm.NewClient(srcCl), kadm.NewClient(dst.Client(t))
	polltest.Eventually(t, 2*time.Minute, "both mirrors copy every record", func() (bool, string) {
		want, err := srcAdm.ListEndOffsets(ctx, "literal", "provided")
		if err != nil {
			return false, err.Error()
		}
		got, err := dstAdm.ListEndOffsets(ctx, "literal", "provided")
		if err != nil {
			return false, err.Error()
		}
		ok := true
		want.Each(func(o kadm.ListedOffset) {
			if g, _ := got.Lookup(o.Topic, o.Partition); g.Err != nil || g.Offset != o.Offset {
				ok = false
			}
		})
		return ok, fmt.Sprintf("source %v, destination %v", want, got)
	})
	mirrortest.VerifyIdentical(t, srcCl, dst.Client(t), "literal", "provided")

	// __mirror_state straight from the broker, with kcat: keys and values.
	out, err := exec.CommandContext(ctx, "kcat", "-b", dst.BootstrapString(), "-C", "-t", statetopic.TopicName, "-o", "beginning", "-e", "-q",
		"-f", "%k %s\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	state := string(out)
	mustContain(t, "__mirror_state read by kcat", state, "encrypted:v1:k1:", "${file:"+passwordFile+":sasl.password}", "sasl.username")
	if strings.Contains(state, marker) {
		t.Fatalf("the source password is in __mirror_state:\n%s", state)
	}

	// Every describe, dump-state and the instance's log.
	outputs := map[string]result{
		"--list":                   mustRun(t, 0, run("--list")),
		"--describe":               mustRun(t, 0, run("--describe")),
		"--describe --json":        mustRun(t, 0, run("--describe", "--json")),
		"--describe --configs (l)": mustRun(t, 0, run("--describe", "--configs", "--mirror", "literal")),
		"--describe --configs (p)": mustRun(t, 0, run("--describe", "--configs", "--mirror", "provided")),
		"dump-state":               mustRun(t, 0, runDumpState(t, "--bootstrap-server", dst.BootstrapString())),
	}
	mustContain(t, "describe --configs", outputs["--describe --configs (l)"].stdout, "sasl.password")
	mustContain(t, "dump-state", outputs["dump-state"].stdout, `"sasl.password":"****** (encrypted, key k1)"`,
		`"sasl.password":"${file:`+passwordFile+`:sasl.password}"`)
	for what, r := range outputs {
		if strings.Contains(r.stdout+r.stderr, marker) {
			t.Fatalf("%s shows the source password:\n%s", what, r)
		}
	}
	mustContain(t, "the instance's log", logs.String(), "secrets key file loaded", "mirror created")
	if strings.Contains(logs.String(), marker) {
		t.Fatalf("the instance's log holds the source password:\n%s", logs.String())
	}
}
