package mirrorcli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
)

func TestDecodeStateRecord(t *testing.T) {
	recs := stateRecords(t)
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var lines []string
	for i, r := range recs {
		lines = append(lines, DecodeStateRecord(4, LogRecord{Offset: int64(i), Timestamp: at, Key: r.Key, Value: r.Value}).FormatText())
	}
	lines = append(lines,
		DecodeStateRecord(4, LogRecord{Offset: 6, Err: errors.New("batch at offset 6: CRC mismatch")}).FormatText(),
		DecodeStateRecord(4, LogRecord{Offset: 7, Control: true}).FormatText())
	golden(t, "dumpstate.golden", []byte(strings.Join(lines, "\n")+"\n"))

	// Secrets are masked whatever their key, also keys this version does not know.
	mc := &statetopic.MirrorConfig{Configs: map[string]string{"sasl.password": "p1", "future.oauth.token": "p2", "ssl.key.password": "p3", "sasl.jaas.config": "p4", "fetch.max.bytes": "1"}}
	v, _ := statetopic.EncodeValue(mc)
	d := DecodeStateRecord(0, LogRecord{Key: statetopic.MirrorConfigKey("m").Bytes(), Value: v})
	if strings.Contains(string(d.Value), "p1") || strings.Contains(string(d.Value), "p2") || strings.Contains(string(d.Value), "p3") ||
		strings.Contains(string(d.Value), "p4") || !strings.Contains(string(d.Value), `"fetch.max.bytes":"1"`) {
		t.Fatalf("masking: %s", d.Value)
	}
	// Route records name their route, and an ack its instance and step.
	d = DecodeStateRecord(0, LogRecord{Key: statetopic.RouteAckKey("payments", "kmirror-2", statetopic.RouteFreezing).Bytes()})
	if d.Type != "RouteAck" || d.Key.Route != "payments" || d.Key.Instance != "kmirror-2" || d.Key.Step != "FREEZING" || d.Key.Mirror != "" {
		t.Fatalf("route ack key dumped as %s %+v", d.Type, d.Key)
	}
	if d = DecodeStateRecord(0, LogRecord{Key: statetopic.RouteSwitchKey("payments").Bytes()}); d.Key.Route != "payments" {
		t.Fatalf("route switch key dumped as %s %+v", d.Type, d.Key)
	}
	// A value that does not decode is not printed: it may hold a secret.
	d = DecodeStateRecord(0, LogRecord{Key: statetopic.MirrorConfigKey("m").Bytes(), Value: append([]byte{0, 0}, `{"configs":{"sasl.password":"p1"`...)})
	if d.Type != "UNDECODABLE" || strings.Contains(d.FormatText(), "p1") {
		t.Fatalf("undecodable value: %s", d.FormatText())
	}
}

// TestDumpStateFromTopic reads a kfake topic with records in two
// partitions, written after the dump's end offsets are ignored.
func TestDumpStateFromTopic(t *testing.T) {
	c := kafkatest.Start(t, kafkatest.Fake())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(c.Client(t)).CreateTopic(ctx, 3, 1, nil, statetopic.TopicName); err != nil {
		t.Fatal(err)
	}
	p := c.Client(t, kgo.DefaultProduceTopic(statetopic.TopicName), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for part := int32(0); part < 2; part++ { // partition 2 stays empty
		recs := stateRecords(t)
		for _, r := range recs {
			r.Partition = part
		}
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	r := runDumpState(t, "--bootstrap-server", c.BootstrapString())
	checkStateDump(t, r, 2)
	if !strings.HasPrefix(r.stdout, "partition=0 offset=0 ") || !strings.Contains(r.stdout, "\npartition=1 offset=5 ") {
		t.Fatalf("partitions out of order:\n%s", r)
	}
	mustContain(t, "summary", r.stderr, "12 records (2 tombstones, 0 control, 4 undecodable)")

	r = runDumpState(t, "--bootstrap-server", c.BootstrapString(), "--json")
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var d DumpedRecord
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("not a JSON line: %v: %s", err, line)
		}
		if d.Type == "MirrorPartitionState" && !strings.Contains(string(d.Value), `"state":"FAILED"`) {
			t.Fatalf("state not by name: %s", line)
		}
	}

	r = runDumpState(t, "--bootstrap-server", c.BootstrapString(), "--topic", "nosuch", "--timeout", "10s")
	if r.code != 1 || !strings.Contains(r.stderr, "nosuch") {
		t.Fatalf("missing topic: %s", r)
	}
}

// TestDumpStateCommandConfigSASL reads a SASL/SCRAM-protected cluster with
// credentials from a Java-style --command-config, and is refused without.
func TestDumpStateCommandConfigSASL(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "admin", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := strings.Join(c.ListenAddrs(), ",")
	seedState(t, c.ListenAddrs(), 4, kgo.SASL(scram.Auth{User: "admin", Pass: "s3cret"}.AsSha256Mechanism()))
	conf := writeFile(t, "client.properties", "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"+
		"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n    username=\"admin\" \\\n    password=\"s3cret\";\n")
	r := mustRun(t, 0, runDumpState(t, "--bootstrap-server", addr, "--command-config", conf))
	mustContain(t, "SASL dump", r.stdout, `MirrorTopic mirror="dr" topic="gone" TOMBSTONE`)

	wrong := writeFile(t, "wrong.properties", "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=admin\nsasl.password=nope\n")
	r = mustRun(t, 1, runDumpState(t, "--bootstrap-server", addr, "--command-config", wrong, "--timeout", "10s"))
	mustContain(t, "wrong password", r.stderr, "check --bootstrap-server and --command-config")

	bad := writeFile(t, "bad.properties", "security.protocol=SASL_PLAINTEXT\nbootstrap.servers=x:1\n")
	r = mustRun(t, 2, runDumpState(t, "--bootstrap-server", addr, "--command-config", bad))
	mustContain(t, "unknown key", r.stderr, `unknown key "bootstrap.servers"`)
}
