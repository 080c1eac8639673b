package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// A ZooKeeper-era source may still store v0/v1 message sets (before Kafka 0.11): a Kafka 2.8
// topic with message.format.version=0.10.2 converts every batch produced to it down to v1.
// kmirror copies v2 batches byte for byte and does not copy those: AddTopicsToMirror refuses
// a topic configured so, saying what to change; a topic whose config was raised after v1
// data was written passes that check, and its partition fails on the first batch with a
// FAILED reason naming the format (docs/versions.md).
func TestLegacyMessageFormatSource(t *testing.T) {
	src := kafkatest.Start(t, kafkatest.WithVersion("2.8.2"), kafkatest.WithZooKeeper())
	dst := kafkatest.Start(t)
	cl := admin(t, kmirror(t, dst).Proxy.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := kadm.NewClient(src.Client(t))
	for _, topic := range []string{"legacy", "upgraded"} {
		resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"message.format.version": kadm.StringPtr("0.10.2"), "retention.ms": kadm.StringPtr("-1")}, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
		// v1 has no headers, producer ids or sequences: a plain, non-idempotent producer.
		recs := make([]*kgo.Record, 50)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
		}
		if err := src.Client(t, kgo.DisableIdempotentWrite()).ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
	}
	// upgraded: the config raised, the v1 segments still there.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "message.format.version", Value: kadm.StringPtr("2.8")}}, "upgraded"); err != nil {
		t.Fatal(err)
	}
	createMirror(t, cl, "old", "bootstrap.servers", src.BootstrapString())

	add := protocol.NewPtrAddTopicsToMirrorRequest()
	add.MirrorName = "old"
	add.Topics = []protocol.AddTopicsToMirrorRequestTopic{{Name: "legacy", NumPartitions: -1}}
	r := request[*protocol.AddTopicsToMirrorResponse](t, cl, add)
	if r.ErrorCode != 0 || len(r.Topics) != 1 {
		t.Fatalf("add legacy: %d %s %+v", r.ErrorCode, deref(r.ErrorMessage), r.Topics)
	}
	msg := deref(r.Topics[0].ErrorMessage)
	if r.Topics[0].ErrorCode != protocol.ErrInvalidRequest.Code || !strings.Contains(msg, "message.format.version=0.10.2") ||
		!strings.Contains(msg, "--add-config message.format.version=2.8") {
		t.Fatalf("add legacy: error %d %q, want INVALID_REQUEST naming the format and what to change", r.Topics[0].ErrorCode, msg)
	}
	t.Logf("AddTopicsToMirror refused legacy: %s", msg)

	addTopics(t, cl, "old", "upgraded")
	polltest.Eventually(t, 2*time.Minute, "upgraded/0 FAILED naming the v1 format", func() (bool, string) {
		req := protocol.NewPtrDescribeMirrorsRequest()
		req.MirrorNames = []string{"old"}
		resp := request[*protocol.DescribeMirrorsResponse](t, cl, req)
		if len(resp.Mirrors) != 1 || len(resp.Mirrors[0].Topics) != 1 || len(resp.Mirrors[0].Topics[0].Partitions) != 1 {
			return false, fmt.Sprintf("%+v", resp.Mirrors)
		}
		p := resp.Mirrors[0].Topics[0].Partitions[0]
		if p.State == "FAILED" && strings.Contains(deref(p.ErrorMessage), "magic 1") {
			t.Logf("upgraded/0 %s: %s", p.State, deref(p.ErrorMessage))
			return true, ""
		}
		return false, fmt.Sprintf("upgraded/0 %s %s", p.State, deref(p.ErrorMessage))
	})
}
