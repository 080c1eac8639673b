// Package clientmetrics counts the requests kmirror's own Kafka clients send,
// per cluster and API: what kmirror costs the source and the destination
// (issue 18's "requests per second to each cluster"), beside what the
// brokers' own request metrics show for every client together.
package clientmetrics

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Cluster names a side the clients talk to.
type Cluster int

const (
	Source Cluster = iota
	Destination
	clusters
)

func (c Cluster) String() string {
	if c == Source {
		return "source"
	}
	return "destination"
}

// maxKey bounds the API keys counted one by one; higher keys (none that
// kmirror's clients send) are counted under maxKey.
const maxKey = 127

// Requests counts requests written to brokers. The zero value is ready; it
// is safe for concurrent use, and its hooks cost an atomic add per request.
type Requests struct {
	n [clusters][maxKey + 1]atomic.Int64
}

// Hook is the kgo hook that counts the requests of a client of cluster.
func (r *Requests) Hook(c Cluster) kgo.Hook { return hook{r, c} }

// Opt is Hook as a client option.
func (r *Requests) Opt(c Cluster) kgo.Opt { return kgo.WithHooks(r.Hook(c)) }

// Count returns how many requests of key went to cluster.
func (r *Requests) Count(c Cluster, key int16) int64 {
	return r.n[c][min(max(key, 0), maxKey)].Load()
}

type hook struct {
	r *Requests
	c Cluster
}

var _ kgo.HookBrokerWrite = hook{}

// OnBrokerWrite counts a request once it is written (a failed write sent
// nothing the broker handles).
func (h hook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		h.r.n[h.c][min(max(key, 0), maxKey)].Add(1)
	}
}

// RegisterMetrics publishes the counts as kmirror.client.requests{cluster,api}.
func (r *Requests) RegisterMetrics(meter metric.Meter) error {
	requests, err := meter.Int64ObservableCounter("kmirror.client.requests",
		metric.WithDescription("Requests kmirror's own Kafka clients wrote, by cluster (source, destination) and API: the load the copy and the control plane put on each cluster."))
	if err != nil {
		return fmt.Errorf("client metrics: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for c := range clusters {
			for key := range int16(maxKey + 1) {
				if n := r.n[c][key].Load(); n > 0 {
					o.ObserveInt64(requests, n, metric.WithAttributes(attribute.String("cluster", c.String()), attribute.String("api", apiName(key))))
				}
			}
		}
		return nil
	}, requests)
	if err != nil {
		return fmt.Errorf("client metrics: %w", err)
	}
	return nil
}

func apiName(key int16) string {
	if name := kmsg.NameForKey(key); name != "" && name != "Unknown" {
		return name
	}
	return fmt.Sprintf("key%d", key)
}
