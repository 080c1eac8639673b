package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/metricstest"
)

// TestRefusedWritesMetric: a Produce to a read-only mirror topic and an admin
// mutation of one are refused through the proxy and counted in
// kmirror_proxy_refused_writes_total by reason; a write to another topic is
// not counted.
func TestRefusedWritesMetric(t *testing.T) {
	c := startKfake(t, 1)
	p := startProxy(t, c.ListenAddrs(), func(cfg *Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	g, err := enforcement.New(enforcement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g.Update(enforcement.FromView(statetopic.NewView()).WithLost(map[string]string{"orders": "dr"}))
	p.SetGuard(g)

	cl, err := kgo.NewClient(kgo.SeedBrokers(p.AdvertisedAddr()), kgo.RecordRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "orders", "free"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "free", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce to a topic no mirror has: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr(); err == nil {
		t.Fatal("produce to read-only orders succeeded")
	}
	resp, err := adm.CreatePartitions(ctx, 2, "orders")
	if err == nil {
		err = resp["orders"].Err
	}
	if err == nil {
		t.Fatal("CreatePartitions of read-only orders succeeded")
	}
	body, err := metricstest.Scrape(p.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`kmirror_proxy_refused_writes_total{reason="mirror_topic"} 1`,
		`kmirror_proxy_refused_writes_total{reason="mirror_topic_admin"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, metricstest.Grep(body, "refused_writes"))
		}
	}
}
