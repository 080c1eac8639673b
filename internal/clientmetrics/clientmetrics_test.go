package clientmetrics

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Each client counts what it writes under its own cluster, and the metric
// carries the counts by cluster and API name.
func TestRequestsCountedPerClusterAndAPI(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var r Requests
	src, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), r.Opt(Source))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	for range 3 {
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Count(Source, 3); got < 3 {
		t.Fatalf("source Metadata requests: %d, want at least 3", got)
	}
	if got := r.Count(Destination, 3); got != 0 {
		t.Fatalf("destination Metadata requests: %d, want 0 (no destination client sent any)", got)
	}

	reader := sdkmetric.NewManualReader()
	if err := r.RegisterMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t")); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "kmirror.client.requests" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				cluster, _ := dp.Attributes.Value("cluster")
				api, _ := dp.Attributes.Value("api")
				if cluster.AsString() == "destination" {
					t.Fatalf("a destination point with nothing sent: %v", dp.Attributes)
				}
				if api.AsString() == "Metadata" && dp.Value >= 3 {
					found = true
				}
			}
		}
	}
	if !found {
		t.Fatalf("no kmirror.client.requests{cluster=source,api=Metadata} >= 3 in %+v", rm)
	}
}
