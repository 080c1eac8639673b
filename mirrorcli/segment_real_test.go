package mirrorcli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/protocol"
)

// stateRecords are the records the dump tests write: one of each type, a
// secret, a tombstone and a record whose key is garbage.
func stateRecords(t testing.TB) []*kgo.Record {
	t.Helper()
	enc := func(v any) []byte {
		b, err := statetopic.EncodeValue(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	id, _ := statetopic.ParseUUID("I2ODhZNbbdFlpFI1uBR_RQ")
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return []*kgo.Record{
		{Key: statetopic.MirrorConfigKey("dr").Bytes(), Value: enc(&statetopic.MirrorConfig{
			Configs:   map[string]string{"bootstrap.servers": "src:9092", "sasl.username": "alice", "sasl.password": "hunter2", "security.protocol": "SASL_SSL"},
			CreatedAt: at, SourceClusterID: "abc"})},
		{Key: statetopic.MirrorTopicKey("dr", "orders").Bytes(), Value: enc(&statetopic.MirrorTopic{SourceTopicID: id, Desired: statetopic.DesireMirror, Partitions: 3, UpdatedAt: at})},
		{Key: statetopic.PartitionStateKey("dr", id, 2).Bytes(), Value: enc(&statetopic.PartitionState{Topic: "orders",
			State: protocol.MirrorStateFailed, PreviousState: protocol.MirrorStateMirroring, RetryAttempt: 3, ErrorMessage: "boom", LastMirroredOffset: -1, UpdatedAt: at})},
		{Key: statetopic.MirrorTopicKey("dr", "gone").Bytes()}, // tombstone
		{Key: []byte{0, 9, 1}, Value: []byte("not a state record")},
		{Key: statetopic.MirrorTopicKey("dr", "bad-json").Bytes(), Value: append([]byte{0, 0}, `{"partitions":"x"}`...)},
	}
}

// checkStateDump checks the dump of stateRecords written len(codecs) times.
func checkStateDump(t *testing.T, r result, copies int) {
	t.Helper()
	out := r.stdout
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`MirrorConfig mirror="dr" value=\{"configs":\{"bootstrap.servers":"src:9092","sasl.password":"\*\*\*\*\*\* \(stored in clear\)","sasl.username":"alice","security.protocol":"SASL_SSL"\}`),
		regexp.MustCompile(`MirrorTopic mirror="dr" topic="orders" value=\{"source_topic_id":"I2ODhZNbbdFlpFI1uBR_RQ"`),
		regexp.MustCompile(`MirrorPartitionState mirror="dr" source-topic-id=I2ODhZNbbdFlpFI1uBR_RQ mirror-partition=2 value=\{"topic":"orders","state":"FAILED","previous_state":"MIRRORING","retry_attempt":3,"error_message":"boom"`),
		regexp.MustCompile(`MirrorTopic mirror="dr" topic="gone" TOMBSTONE`),
		regexp.MustCompile(`UNDECODABLE raw-key=000901 error="key: statetopic: malformed record`),
		regexp.MustCompile(`UNDECODABLE mirror="dr" topic="bad-json" error="MirrorTopic value \(20 bytes\): statetopic: malformed record: MirrorTopic value: json`),
	} {
		if n := len(want.FindAllString(out, -1)); n != copies {
			t.Errorf("%d lines match %s, want %d", n, want, copies)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("the secret is in the dump")
	}
	if lines := strings.Count(out, "\n"); lines != 6*copies {
		t.Errorf("%d lines, want %d", lines, 6*copies)
	}
	if r.code != 1 || !strings.Contains(r.stderr, "undecodable") {
		t.Errorf("undecodable records must make the exit status 1: %s", r)
	}
	if t.Failed() {
		t.Fatalf("dump:\n%s", r)
	}
}

// TestDumpStateRealKafkaSegment writes state records in batches of every
// codec to a real Apache Kafka broker, then dumps the partition's log
// segment file and the topic itself.
func TestDumpStateRealKafkaSegment(t *testing.T) {
	c := kafkatest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client(t))
	if resp, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, statetopic.TopicName); err != nil || resp.Err != nil {
		t.Fatalf("create: %v %v", err, resp.Err)
	}
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	for _, codec := range codecs {
		p := c.Client(t, kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic(statetopic.TopicName),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
		recs := stateRecords(t)
		for _, r := range recs {
			r.Partition = 1
		}
		// One ProduceSync call: the records go out as one batch.
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce with %v: %v", codec, err)
		}
	}
	seg := filepath.Join(c.Real().Dir(), "node-1", "data", statetopic.TopicName+"-1", "00000000000000000000.log")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// Prove the file really holds compressed batches of each codec.
	seen := map[int16]bool{}
	for pos := 0; pos+61 <= len(data); {
		length := int(uint32(data[pos+8])<<24 | uint32(data[pos+9])<<16 | uint32(data[pos+10])<<8 | uint32(data[pos+11]))
		seen[int16(data[pos+22])&7] = true
		pos += 12 + length
	}
	for codec := int16(0); codec <= 4; codec++ {
		if !seen[codec] {
			t.Fatalf("segment has no batch with codec %d (codecs seen %v)", codec, seen)
		}
	}

	r := runDumpState(t, "--segment", seg)
	checkStateDump(t, r, len(codecs))
	if !strings.HasPrefix(r.stdout, "partition=1 offset=0 ") {
		t.Fatalf("partition not taken from the directory name:\n%s", r)
	}

	r = runDumpState(t, "--segment", seg, "--json", "--partition", "7")
	for i, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.HasPrefix(line, `{"partition":7,"offset":`) {
			t.Fatalf("json line %d: %s", i, line)
		}
	}

	// The same records read from the topic on the broker.
	checkStateDump(t, runDumpState(t, "--bootstrap-server", c.BootstrapString()), len(codecs))
}
