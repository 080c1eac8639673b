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

// secretsSourceUser is the source's SASL user that the mirrors log in as.
const secretsSourceUser = "mirror-src"

// realSecretsEnv is what the steps of TestSecretsNeverInStateRealKafka
// share. The steps run in order, each on what the earlier ones left.
type realSecretsEnv struct {
	marker       string // the source user's password, unique to this run
	src, dst     *kafkatest.Cluster
	in           *instance.Instance
	logs         syncbuf.Buffer // everything the instance logged
	ctx          context.Context
	passwordFile string // the file that the ${file:…} reference reads
}

func TestSecretsNeverInStateRealKafka(t *testing.T) {
	e := startRealSecretsEnv(t)

	// Records to copy, in one topic per mirror.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.ctx = ctx
	srcCl := e.seedSource(t)
	e.createMirrors(t)
	e.waitBothCopy(t, srcCl)
	e.stateReadByKcat(t)
	e.outputsAndLog(t)
}

// startRealSecretsEnv starts a SASL source whose mirror user has a unique
// marker password, a plain destination and a kmirror instance with a
// secrets key file. If the test fails, it prints the instance's log.
func startRealSecretsEnv(t *testing.T) *realSecretsEnv {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatal("kcat is not installed (apt-get install kcat)")
	}
	e := &realSecretsEnv{marker: "kmirror-marker-" + hex.EncodeToString(randomBytes(t, 8))}
	const user = secretsSourceUser
	e.src = kafkatest.Start(t, kafkatest.SASLUser(user, e.marker))
	e.dst = kafkatest.Start(t)
	log := slog.New(slog.NewTextHandler(&e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	keyFile := writeFile(t, "secrets.keys", "# kmirror secrets keys, the first encrypts\nk1="+base64.StdEncoding.EncodeToString(randomBytes(t, 32))+"\n")
	e.in = instancetest.Start(t, e.dst, log, func(c *instance.Config) { c.Proxy.SecretsKeyFile = keyFile })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the instance's log:\n%s", e.logs.String())
		}
	})
	return e
}

// run runs kmirror mirrors against the instance.
func (e *realSecretsEnv) run(t *testing.T, args ...string) result {
	t.Helper()
	return runMirrors(t, append([]string{"--bootstrap-server", e.in.Proxy.Addr()}, args...)...)
}

// seedSource lets the mirror user read topic configs and writes ten
// records to each of the topics literal and provided. It returns the
// client it wrote with.
func (e *realSecretsEnv) seedSource(t *testing.T) *kgo.Client {
	t.Helper()
	ctx := e.ctx
	const user = secretsSourceUser
	srcCl := e.src.Client(t)
	// A mirror's source user also reads topic configs (the destination
	// topic is created like the source's); the harness grants reads only.
	acl := kadm.NewACLs().Allow("User:" + user).Topics("*").Operations(kadm.OpDescribeConfigs).ResourcePatternType(kadm.ACLPatternLiteral)
	if res, err := kadm.NewClient(srcCl).CreateACLs(ctx, acl); err != nil || res[0].Err != nil {
		t.Fatalf("granting DESCRIBE_CONFIGS: %v %v", err, res)
	}
	for _, topic := range []string{"literal", "provided"} {
		e.src.CreateKeptTopic(t, topic, 2)
		for i := range 10 {
			if err := srcCl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s #%d", topic, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return srcCl
}

// createMirrors creates the mirrors literal and provided, each with its
// own topic.
func (e *realSecretsEnv) createMirrors(t *testing.T) {
	t.Helper()
	const user = secretsSourceUser
	// One mirror with the password given literally (encrypted with k1), one
	// with a ${file:…} reference; only that password lets kmirror in.
	common := "bootstrap.servers=" + e.src.BootstrapString() + "\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n" +
		"sasl.username=" + user + "\nfetch.wait.max.ms=100\nmetadata.refresh.interval.ms=1000\n"
	e.passwordFile = writeFile(t, "source-secrets.properties", "# read by every kmirror instance\nsasl.password="+e.marker+"\n")
	mustRun(t, 0, e.run(t, "--create", "--mirror", "literal", "--mirror-config", writeFile(t, "literal.properties", common+"sasl.password="+e.marker+"\n")))
	mustRun(t, 0, e.run(t, "--create", "--mirror", "provided", "--mirror-config",
		writeFile(t, "provided.properties", common+"sasl.password=${file:"+e.passwordFile+":sasl.password}\n")))
	for _, m := range []string{"literal", "provided"} {
		mustRun(t, 0, e.run(t, "--add", "--mirror", m, "--topics", m))
	}
}

// waitBothCopy waits until both mirrors copied every record, which proves
// that each got the password, and compares the copies with the source.
func (e *realSecretsEnv) waitBothCopy(t *testing.T, srcCl *kgo.Client) {
	t.Helper()
	ctx := e.ctx
	srcAdm, dstAdm := kadm.NewClient(srcCl), kadm.NewClient(e.dst.Client(t))
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
	mirrortest.VerifyIdentical(t, srcCl, e.dst.Client(t), "literal", "provided")
}

// stateReadByKcat reads __mirror_state straight from the broker, with
// kcat, keys and values: the password is there only encrypted or as the
// reference.
func (e *realSecretsEnv) stateReadByKcat(t *testing.T) {
	t.Helper()
	out, err := exec.CommandContext(e.ctx, "kcat", "-b", e.dst.BootstrapString(), "-C", "-t", statetopic.TopicName, "-o", "beginning", "-e", "-q",
		"-f", "%k %s\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	state := string(out)
	mustContain(t, "__mirror_state read by kcat", state, "encrypted:v1:k1:", "${file:"+e.passwordFile+":sasl.password}", "sasl.username")
	if strings.Contains(state, e.marker) {
		t.Fatalf("the source password is in __mirror_state:\n%s", state)
	}
}

// outputsAndLog checks every describe, dump-state and the instance's log
// for the password.
func (e *realSecretsEnv) outputsAndLog(t *testing.T) {
	t.Helper()
	marker, passwordFile := e.marker, e.passwordFile
	outputs := map[string]result{
		"--list":                   mustRun(t, 0, e.run(t, "--list")),
		"--describe":               mustRun(t, 0, e.run(t, "--describe")),
		"--describe --json":        mustRun(t, 0, e.run(t, "--describe", "--json")),
		"--describe --configs (l)": mustRun(t, 0, e.run(t, "--describe", "--configs", "--mirror", "literal")),
		"--describe --configs (p)": mustRun(t, 0, e.run(t, "--describe", "--configs", "--mirror", "provided")),
		"dump-state":               mustRun(t, 0, runDumpState(t, "--bootstrap-server", e.dst.BootstrapString())),
	}
	mustContain(t, "describe --configs", outputs["--describe --configs (l)"].stdout, "sasl.password")
	mustContain(t, "dump-state", outputs["dump-state"].stdout, `"sasl.password":"****** (encrypted, key k1)"`,
		`"sasl.password":"${file:`+passwordFile+`:sasl.password}"`)
	for what, r := range outputs {
		if strings.Contains(r.stdout+r.stderr, marker) {
			t.Fatalf("%s shows the source password:\n%s", what, r)
		}
	}
	mustContain(t, "the instance's log", e.logs.String(), "secrets key file loaded", "mirror created")
	if strings.Contains(e.logs.String(), marker) {
		t.Fatalf("the instance's log holds the source password:\n%s", e.logs.String())
	}
}
