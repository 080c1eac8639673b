package apis_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/apis"
	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/secrets"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

func secretsKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func withKeys(t *testing.T, e *env, lines ...string) {
	t.Helper()
	var r *secrets.Resolver
	if len(lines) > 0 {
		k, err := secrets.ParseKeyFile(strings.Join(lines, "\n"))
		if err != nil {
			t.Fatal(err)
		}
		r = secrets.NewResolver(k)
	}
	sources := sourceclient.NewCache().WithSecrets(r, e.b.Log)
	t.Cleanup(sources.Close)
	e.b = &apis.Backend{Coord: e.b.Coord, Sources: sources, Destination: e.b.Destination, Log: e.b.Log, Now: e.b.Now}
}

// saslSource is a kfake source cluster that only lets user in with pass.
func saslSource(t *testing.T, user, pass string) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", user, pass), kfake.SeedTopics(2, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ",")
}

// rawStateBytes is every key and value of __mirror_state as the broker
// holds them, read up to the end offsets of when it is called.
func rawStateBytes(t *testing.T, e *env) []byte {
	t.Helper()
	ends, err := kadm.NewClient(e.dst.Client(t)).ListEndOffsets(e.ctx, statetopic.TopicName)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := e.dst.Client(t, kgo.ConsumeTopics(statetopic.TopicName), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out bytes.Buffer
	for len(left) > 0 {
		fs := cl.PollFetches(e.ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v", statetopic.TopicName, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out.Write(r.Key)
			out.Write(r.Value)
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	return out.Bytes()
}

func storedConfigs(t *testing.T, e *env, mirror string) map[string]string {
	t.Helper()
	m, err := e.b.Mirror(e.ctx, mirror)
	if err != nil {
		t.Fatal(err)
	}
	return m.Config.Configs
}

// TestMirrorSecretsNeverStoredInClear creates mirrors of a SASL source with
// the password given literally (refused without a key, encrypted with one)
// and as ${file:…} and ${env:…} references, and checks that the mirrors
// reach the source while neither __mirror_state nor DescribeConfigs holds
// the password.
func TestMirrorSecretsNeverStoredInClear(t *testing.T) {
	e := newEnv(t)
	marker := fmt.Sprintf("kmirror-marker-%x", time.Now().UnixNano())
	src := saslSource(t, "src", marker)
	sasl := func(pw string) map[string]string {
		return map[string]string{"bootstrap.servers": src, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
			"sasl.username": "src", "sasl.password": pw}
	}
	secretsRefusedWithoutKey(t, e, sasl, marker)
	props := secretsStoredAsReferences(t, e, sasl, marker)
	secretsEncryptedAndRotated(t, e, sasl, marker)
	secretsHiddenByDescribeConfigs(t, e, marker)

	raw := rawStateBytes(t, e)
	if !bytes.Contains(raw, []byte("encrypted:v1:k2:")) || !bytes.Contains(raw, []byte("${file:"+props)) {
		t.Fatalf("the state topic does not hold the mirrors' configs (%d bytes read)", len(raw))
	}
	if bytes.Contains(raw, []byte(marker)) {
		t.Fatal("the password is in __mirror_state")
	}
}

// secretsRefusedWithoutKey checks, on an instance without a secrets key,
// that a literal password and a reference that does not resolve are
// refused at create. sasl gives a source's configs with a password.
func secretsRefusedWithoutKey(t *testing.T, e *env, sasl func(pw string) map[string]string, marker string) {
	t.Helper()
	// Without a key a literal password is refused, and not echoed.
	withKeys(t, e)
	code, msg := e.create("literal", sasl(marker))
	expectCode(t, "literal without key", code, msg, protocol.ErrInvalidConfig, "sasl.password is given literally and this instance has no secrets key")
	if strings.Contains(msg, marker) {
		t.Fatalf("the refusal quotes the password: %s", msg)
	}

	// A reference that does not resolve is refused at create, naming it.
	missing := filepath.Join(t.TempDir(), "missing.properties")
	code, msg = e.create("ref", sasl("${file:"+missing+":sasl.password}"))
	expectCode(t, "unresolvable reference", code, msg, protocol.ErrInvalidConfig, "sasl.password = ${file:"+missing+":sasl.password} does not resolve")
}

// secretsStoredAsReferences creates the mirrors file and env, with the
// password as a ${file:…} and an ${env:…} reference, and returns the file
// the first reads.
func secretsStoredAsReferences(t *testing.T, e *env, sasl func(pw string) map[string]string, marker string) string {
	t.Helper()
	// References are stored as written and resolve.
	props := filepath.Join(t.TempDir(), "source.properties")
	if err := os.WriteFile(props, []byte("sasl.password="+marker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KMIRROR_TEST_SOURCE_PASSWORD", marker)
	for name, ref := range map[string]string{"file": "${file:" + props + ":sasl.password}", "env": "${env:KMIRROR_TEST_SOURCE_PASSWORD}"} {
		if code, msg := e.create(name, sasl(ref)); code != 0 {
			t.Fatalf("create with %s: %d %s", ref, code, msg)
		}
		if got := storedConfigs(t, e, name)["sasl.password"]; got != ref {
			t.Fatalf("stored %q, want the reference %q", got, ref)
		}
		if resp := e.add(name, []string{"orders"}); resp.ErrorCode != 0 {
			t.Fatalf("add with %s: %s", ref, deref(resp.ErrorMessage))
		}
	}
	// (The SASL source lets in only that password: the adds prove it was resolved.)
	return props
}

// secretsEncryptedAndRotated creates the mirror literal on an instance with
// a key, rotates to a second key, and checks that an instance without the
// key builds no source client. The stored password ends encrypted with
// k2, which the check of __mirror_state looks for.
func secretsEncryptedAndRotated(t *testing.T, e *env, sasl func(pw string) map[string]string, marker string) {
	t.Helper()
	// With a key the literal is encrypted, bound to the mirror.
	k1, k2 := secretsKey(t), secretsKey(t)
	withKeys(t, e, "k1="+k1)
	if code, msg := e.create("literal", sasl(marker)); code != 0 {
		t.Fatalf("create with key: %d %s", code, msg)
	}
	stored := storedConfigs(t, e, "literal")["sasl.password"]
	if !strings.HasPrefix(stored, "encrypted:v1:k1:") {
		t.Fatalf("stored %q", stored)
	}
	if resp := e.add("literal", []string{"orders"}); resp.ErrorCode != 0 {
		t.Fatalf("add: %s", deref(resp.ErrorMessage))
	}

	// Rotation: a new key first in the file; any alter re-saves with it.
	withKeys(t, e, "k2="+k2, "k1="+k1)
	resaveByAlter(t, e, "literal")
	if got := storedConfigs(t, e, "literal")["sasl.password"]; !strings.HasPrefix(got, "encrypted:v1:k2:") {
		t.Fatalf("after alter: %q", got)
	}
	withKeys(t, e, "k2="+k2) // k1 is no longer needed
	m, err := e.b.Mirror(e.ctx, "literal")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Sources.Client("literal", m.Config.Configs); err != nil {
		t.Fatalf("source client after rotation: %v", err)
	}

	// An instance without the key says so and builds no client.
	withKeys(t, e)
	_, err = e.b.Sources.Client("literal", m.Config.Configs)
	if err == nil || !strings.Contains(err.Error(), "encrypted with key id k2") || strings.Contains(err.Error(), marker) {
		t.Fatalf("without the key: %v", err)
	}
}

// secretsHiddenByDescribeConfigs checks that DescribeConfigs reports the
// password of every mirror as sensitive with no value.
func secretsHiddenByDescribeConfigs(t *testing.T, e *env, marker string) {
	t.Helper()
	dreq := kmsg.NewPtrDescribeConfigsRequest()
	for _, name := range []string{"literal", "file", "env"} {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = apis.MirrorResourceType, name
		dreq.Resources = append(dreq.Resources, r)
	}
	dresp := e.b.DescribeMirrorConfigs(e.ctx, dreq)
	for _, r := range dresp.Resources {
		for _, c := range r.Configs {
			if c.Name == "sasl.password" && (!c.IsSensitive || c.Value != nil) {
				t.Fatalf("%s: sasl.password described as %+v", r.ResourceName, c)
			}
		}
	}
	if strings.Contains(fmt.Sprintf("%+v", dresp), marker) {
		t.Fatal("DescribeConfigs holds the password")
	}
}

// TestMirrorSecretInClearFromOlderVersion: a clear-text secret written by an
// older kmirror still works, and an alter on an instance with a key
// encrypts it.
func TestMirrorSecretInClearFromOlderVersion(t *testing.T) {
	e := newEnv(t)
	marker := fmt.Sprintf("kmirror-marker-%x", time.Now().UnixNano())
	src := saslSource(t, "src", marker)
	if err := e.b.Coord.EnsureStateTopic(e.ctx); err != nil {
		t.Fatal(err)
	}
	old := &statetopic.MirrorConfig{CreatedAt: time.Now(), Configs: map[string]string{"bootstrap.servers": src, "security.protocol": "SASL_PLAINTEXT",
		"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "src", "sasl.password": marker}}
	if err := e.b.Coord.Write(e.ctx, coordinator.Record{Key: statetopic.MirrorConfigKey("old"), Value: old}); err != nil {
		t.Fatal(err)
	}
	if resp := e.add("old", []string{"orders"}); resp.ErrorCode != 0 {
		t.Fatalf("add with a clear-text password: %s", deref(resp.ErrorMessage))
	}
	withKeys(t, e, "k1="+secretsKey(t))
	resaveByAlter(t, e, "old")
	m, err := e.b.Mirror(e.ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Config.Configs["sasl.password"]; !strings.HasPrefix(got, "encrypted:v1:k1:") {
		t.Fatalf("after alter: %q", got)
	}
	if _, err := e.b.Sources.Client("old", m.Config.Configs); err != nil {
		t.Fatal(err)
	}
}

// resaveByAlter sends an alter of a harmless config of mirror name, which
// re-saves its secrets with the current key.
func resaveByAlter(t *testing.T, e *env, name string) {
	t.Helper()
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = apis.MirrorResourceType, name
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "replication.throttled.rate", kmsg.StringPtr("0")
	res.Configs = append(res.Configs, c)
	alter.Resources = append(alter.Resources, res)
	if r := e.b.AlterMirrorConfigs(e.ctx, alter); r.Resources[0].ErrorCode != 0 {
		t.Fatalf("alter %s: %s", name, deref(r.Resources[0].ErrorMessage))
	}
}
