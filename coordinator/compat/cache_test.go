package compat

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kmirror/kmirror/protocol"
)

// countedCluster is a kfake cluster of the release v that counts the ApiVersions requests
// its brokers answer, with a client of it.
type countedCluster struct {
	cl       *kgo.Client
	versions atomic.Int64
}

func newCountedCluster(t *testing.T, v *kversion.Versions) *countedCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.MaxVersions(v))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cc := &countedCluster{}
	c.KeepControl()
	c.ControlKey(int16(kmsg.ApiVersions), func(kmsg.Request) (kmsg.Response, error, bool) {
		cc.versions.Add(1)
		return nil, nil, false
	})
	cc.cl, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.cl.Close)
	return cc
}

// asked runs f and returns how many ApiVersions requests the clusters answered meanwhile.
func asked(f func(), cs ...*countedCluster) int64 {
	before := int64(0)
	for _, c := range cs {
		before += c.versions.Load()
	}
	f()
	after := int64(0)
	for _, c := range cs {
		after += c.versions.Load()
	}
	return after - before
}

// A mirror's accepted verdict is reused until the TTL: DescribeMirrors and AddTopicsToMirror
// asking again within it send no ApiVersions; after it, or when CreateMirror asks fresh,
// both clusters are probed again.
func TestCacheReusesVerdictUntilTTL(t *testing.T) {
	src, dst := newCountedCluster(t, kversion.V3_9_0()), newCountedCluster(t, kversion.V3_9_0())
	now := time.Unix(1000, 0)
	c := &Cache{TTL: time.Minute, Now: func() time.Time { return now }}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if n := asked(func() {
		if err := c.Refuse(ctx, log, "m", true, src.cl, kadm.NewClient(dst.cl)); err != nil {
			t.Fatal(err)
		}
	}, src, dst); n < 4 {
		t.Fatalf("the first check asked %d ApiVersions; want one per broker of both clusters (4) at least", n)
	}
	for range 5 {
		if n := asked(func() {
			if d := c.Describe(ctx, "m", src.cl, kadm.NewClient(dst.cl)); d == nil || !strings.HasPrefix(*d, "source Kafka ") {
				t.Fatalf("describe: %v", *d)
			}
			if err := c.Refuse(ctx, log, "m", false, src.cl, kadm.NewClient(dst.cl)); err != nil {
				t.Fatal(err)
			}
		}, src, dst); n != 0 {
			t.Fatalf("within the TTL a describe and an add asked %d ApiVersions; want 0", n)
		}
	}
	if n := asked(func() { _ = c.Refuse(ctx, log, "m", true, src.cl, kadm.NewClient(dst.cl)) }, src, dst); n < 4 {
		t.Fatalf("a fresh check (CreateMirror) asked %d ApiVersions; want 4 at least", n)
	}
	now = now.Add(time.Minute)
	if n := asked(func() { c.Describe(ctx, "m", src.cl, kadm.NewClient(dst.cl)) }, src, dst); n < 4 {
		t.Fatalf("after the TTL a describe asked %d ApiVersions; want 4 at least", n)
	}
	if n := asked(func() { c.Describe(ctx, "other", src.cl, kadm.NewClient(dst.cl)) }, src, dst); n < 4 {
		t.Fatalf("another mirror's first describe asked %d ApiVersions; want 4 at least", n)
	}
}

// A refused pair is not kept: every call asks again, so the operator's upgrade is seen at
// once; and it still refuses AddTopicsToMirror with INVALID_CONFIG.
func TestCacheNeverKeepsRefusal(t *testing.T) {
	src, dst := newCountedCluster(t, kversion.V3_9_0()), newCountedCluster(t, kversion.V2_8_0())
	c := &Cache{}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 2 {
		var err error
		if n := asked(func() { err = c.Refuse(ctx, log, "m", false, src.cl, kadm.NewClient(dst.cl)) }, src, dst); n < 4 {
			t.Fatalf("a refused pair's check asked %d ApiVersions; want 4 at least", n)
		}
		var perr *protocol.Error
		if !errors.As(err, &perr) || perr.Code != protocol.ErrInvalidConfig.Code || !strings.Contains(err.Error(), "lacks DescribeTransactions") {
			t.Fatalf("refusal: %v", err)
		}
	}
}

// A cluster that does not answer is retriable, named by side, and not kept either.
func TestCacheProbeFailure(t *testing.T) {
	src := newCountedCluster(t, kversion.V3_9_0())
	gone, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := &Cache{}
	err = c.Refuse(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), "m", false, src.cl, kadm.NewClient(gone))
	var perr *protocol.Error
	if !errors.As(err, &perr) || perr.Code != protocol.ErrCoordinatorNotAvailable.Code || !strings.Contains(err.Error(), "checking the destination cluster") {
		t.Fatalf("unreachable destination: %v", err)
	}
	if d := c.Describe(ctx, "m", src.cl, kadm.NewClient(gone)); d == nil || !strings.HasPrefix(*d, "unknown: destination cluster: ") {
		t.Fatalf("describe of an unreachable destination: %v", d)
	}
}

// RefuseTopics reads the format of every topic in one DescribeConfigs request, asking for
// message.format.version alone, and refuses only the topic stored in v0/v1 message sets.
func TestRefuseTopicsOneRequest(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var requests atomic.Int64
	c.KeepControl()
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		requests.Add(1)
		req := kr.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range req.Resources {
			if len(r.ConfigNames) != 1 || r.ConfigNames[0] != "message.format.version" {
				t.Errorf("topic %s: asked for configs %v; want message.format.version alone", r.ResourceName, r.ConfigNames)
			}
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			v := map[string]string{"legacy": "0.10.2-IV0", "modern": "2.8-IV1"}[r.ResourceName]
			if r.ResourceName == "missing" {
				rr.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
			} else if v != "" {
				cfg := kmsg.NewDescribeConfigsResponseResourceConfig()
				cfg.Name, cfg.Value = "message.format.version", kmsg.StringPtr(v)
				rr.Configs = append(rr.Configs, cfg)
			}
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	refused := RefuseTopics(context.Background(), cl, []string{"legacy", "modern", "kafka4", "missing"})
	if requests.Load() != 1 {
		t.Fatalf("%d DescribeConfigs requests for four topics; want 1", requests.Load())
	}
	if len(refused) != 1 || refused["legacy"] == nil || !strings.Contains(refused["legacy"].Error(), "message.format.version=0.10.2") {
		t.Fatalf("refused %v; want legacy alone", refused)
	}
}
