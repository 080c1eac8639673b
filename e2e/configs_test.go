package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

func alterMirror(t *testing.T, cl *kgo.Client, validateOnly bool, resources ...kmsg.IncrementalAlterConfigsRequestResource) *kmsg.IncrementalAlterConfigsResponse {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources, req.ValidateOnly = resources, validateOnly
	return request[*kmsg.IncrementalAlterConfigsResponse](t, cl, req)
}

func mirrorResource(name string, ops ...kmsg.IncrementalAlterConfigsRequestResourceConfig) kmsg.IncrementalAlterConfigsRequestResource {
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName, r.Configs = 64, name, ops
	return r
}

func configOp(op kmsg.IncrementalAlterConfigOp, name string, value *string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Op, c.Name, c.Value = op, name, value
	return c
}

func describeMirrorConfig(t *testing.T, cl *kgo.Client, mirror, key string) (string, bool) {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName, r.ConfigNames = 64, mirror, []string{key}
	req.Resources = append(req.Resources, r)
	resp := request[*kmsg.DescribeConfigsResponse](t, cl, req)
	if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 || len(resp.Resources[0].Configs) != 1 {
		t.Fatalf("describe mirror config %s of %s: %+v", key, mirror, resp.Resources)
	}
	c := resp.Resources[0].Configs[0]
	// IsDefault is DescribeConfigs v0's; later versions say it with Source.
	return deref(c.Value), c.Source == kmsg.ConfigSourceDefaultConfig
}

// A mirror's configs change while it runs, through IncrementalAlterConfigs
// on the mirror's config resource (type 64), and DescribeConfigs shows them:
// a byte-rate limit paces the copy at once and lifting it lets the copy
// finish. Keys naming the source are refused, and so is a request mixing
// mirror and broker resources; nothing of a refused request is applied.
func TestMirrorConfigsChangeWhileMirroring(t *testing.T) {
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t)
	km := kmirror(t, dst)
	cl := admin(t, km.Proxy.Addr())
	src.CreateKeptTopic(t, "metrics", 1)
	produce(t, src, "metrics", 1, 20_000, kgo.NoCompression())

	createMirror(t, cl, "dr", "bootstrap.servers", src.BootstrapString(), "replication.throttled.rate", "100000", "fetch.max.bytes", "16384")
	if v, def := describeMirrorConfig(t, cl, "dr", "replication.throttled.rate"); v != "100000" || def {
		t.Fatalf("replication.throttled.rate described as %q (default %v)", v, def)
	}
	addTopics(t, cl, "dr", "metrics")

	// Throttled at 100 kB/s: measure the copy over a few seconds.
	copied := func() int64 { d, _ := destinationTotal(t, cl, "dr"); return d }
	polltest.Eventually(t, time.Minute, "copying started", func() (bool, string) { return copied() > 0, "" })
	start, began := copied(), time.Now()
	polltest.Eventually(t, time.Minute, "a few seconds of throttled copy", func() (bool, string) {
		return time.Since(began) > 3*time.Second, ""
	})
	rate := float64(copied()-start) / time.Since(began).Seconds() // records/s, ~100 bytes each
	t.Logf("throttled to 100 kB/s: %.0f records/s", rate)
	if rate > 3000 {
		t.Fatalf("copying %.0f records/s (~%.0f kB/s) under a 100 kB/s limit", rate, rate*0.13)
	}

	// Refused: a key naming the source, an unknown key, a bad value, a mixed request.
	for name, res := range map[string]kmsg.IncrementalAlterConfigsRequestResource{
		"connection": mirrorResource("dr", configOp(kmsg.IncrementalAlterConfigOpSet, "bootstrap.servers", kmsg.StringPtr("elsewhere:9092"))),
		"unknown":    mirrorResource("dr", configOp(kmsg.IncrementalAlterConfigOpSet, "no.such.config", kmsg.StringPtr("1"))),
		"bad value":  mirrorResource("dr", configOp(kmsg.IncrementalAlterConfigOpSet, "replication.throttled.rate", kmsg.StringPtr("fast"))),
		"no mirror":  mirrorResource("nope", configOp(kmsg.IncrementalAlterConfigOpDelete, "replication.throttled.rate", nil)),
	} {
		r := alterMirror(t, cl, false, res)
		if r.Resources[0].ErrorCode == 0 {
			t.Fatalf("%s: accepted", name)
		}
		t.Logf("%s refused: %s", name, deref(r.Resources[0].ErrorMessage))
	}
	topicRes := kmsg.NewIncrementalAlterConfigsRequestResource()
	topicRes.ResourceType, topicRes.ResourceName = kmsg.ConfigResourceTypeTopic, "metrics"
	topicRes.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{configOp(kmsg.IncrementalAlterConfigOpSet, "retention.ms", kmsg.StringPtr("1000"))}
	mixed := alterMirror(t, cl, false, mirrorResource("dr", configOp(kmsg.IncrementalAlterConfigOpDelete, "replication.throttled.rate", nil)), topicRes)
	for _, r := range mixed.Resources {
		if r.ErrorCode == 0 || !strings.Contains(deref(r.ErrorMessage), "request of their own") {
			t.Fatalf("mixed request: %s %s answered %d %q", r.ResourceType, r.ResourceName, r.ErrorCode, deref(r.ErrorMessage))
		}
	}
	if r := alterMirror(t, cl, true, mirrorResource("dr", configOp(kmsg.IncrementalAlterConfigOpDelete, "replication.throttled.rate", nil))); r.Resources[0].ErrorCode != 0 {
		t.Fatalf("validate only: %s", deref(r.Resources[0].ErrorMessage))
	}
	if v, _ := describeMirrorConfig(t, cl, "dr", "replication.throttled.rate"); v != "100000" {
		t.Fatalf("after refused and validate-only requests the limit is %q, want 100000", v)
	}

	// Lifted: the copy finishes.
	if r := alterMirror(t, cl, false, mirrorResource("dr", configOp(kmsg.IncrementalAlterConfigOpDelete, "replication.throttled.rate", nil))); r.Resources[0].ErrorCode != 0 {
		t.Fatalf("lift the limit: %s", deref(r.Resources[0].ErrorMessage))
	}
	if v, def := describeMirrorConfig(t, cl, "dr", "replication.throttled.rate"); v != "0" || !def {
		t.Fatalf("after DELETE the limit is %q (default %v), want the default 0", v, def)
	}
	lifted := time.Now()
	waitMirrored(t, cl, "dr", map[string]int64{"metrics": 20_000})
	t.Logf("limit lifted: the rest copied in %v", time.Since(lifted).Round(10*time.Millisecond))
}
