package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/kmirror/kmirror/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
)

// metrics are recorded with OpenTelemetry and exported in Prometheus format. Each proxy has
// its own registry so that several proxies in one process (tests) do not collide.
type metrics struct {
	registry    *prometheus.Registry
	provider    *sdkmetric.MeterProvider
	connections metric.Int64UpDownCounter
	accepted    metric.Int64Counter
	requests    metric.Int64Counter
	errors      metric.Int64Counter
	bytes       metric.Int64Counter
	latency     metric.Float64Histogram
	refusals    metric.Int64Counter
	// refusedWrites counts writes refused because they touch a read-only
	// mirror topic or kmirror's internals (kmirror_proxy_refused_writes_total,
	// alerted on by deploy/prometheus/rules.yml).
	refusedWrites metric.Int64Counter

	// Attribute options per API key are built once: the hot path must not allocate them.
	keyAttrs   [256]metric.MeasurementOption // Kafka's keys (0..255)
	mirrorAttr []metric.MeasurementOption    // by protocol.MirrorKeyIndex
	inAttr     metric.MeasurementOption
	outAttr    metric.MeasurementOption
	unknownKey metric.MeasurementOption

	// home serves every other path of the metrics address (the status
	// page, package statuspage); nil: only /metrics.
	home http.Handler
}

func newMetrics() (*metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("creating prometheus exporter: %w", err)
	}
	// No exemplars: the proxy records no spans, so there is nothing to link a sample to, and
	// the default filter's span lookup and reservoir offer ran on every request.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
	meter := mp.Meter("github.com/kmirror/kmirror/proxy")
	m := &metrics{registry: reg, provider: mp}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	m.connections, err = meter.Int64UpDownCounter("kmirror.proxy.connections", metric.WithDescription("Open client connections."))
	add(err)
	m.accepted, err = meter.Int64Counter("kmirror.proxy.connections.accepted", metric.WithDescription("Client connections accepted."))
	add(err)
	m.requests, err = meter.Int64Counter("kmirror.proxy.requests", metric.WithDescription("Requests received from clients."))
	add(err)
	m.errors, err = meter.Int64Counter("kmirror.proxy.request.errors", metric.WithDescription("Requests that failed in the proxy (connection closed, rewrite or upstream failure)."))
	add(err)
	m.bytes, err = meter.Int64Counter("kmirror.proxy.bytes", metric.WithUnit("By"), metric.WithDescription("Frame bytes from clients (in) and to clients (out)."))
	add(err)
	m.latency, err = meter.Float64Histogram("kmirror.proxy.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from reading a request to handing its response to the client."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	add(err)
	m.refusals, err = meter.Int64Counter("kmirror.proxy.refusals",
		metric.WithDescription("Requests the proxy refused on its own authority, by API and reason."))
	add(err)
	m.refusedWrites, err = meter.Int64Counter("kmirror.proxy.refused_writes",
		metric.WithDescription("Produce requests (or their partitions of mirror topics) and admin mutations refused because they write to a read-only mirror topic or kmirror's internals, by reason."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("creating proxy metrics: %w", err)
	}
	for k := range m.keyAttrs {
		name := "unknown"
		if kmsg.RequestForKey(int16(k)) != nil {
			name = protocol.APIName(int16(k))
		}
		m.keyAttrs[k] = metric.WithAttributeSet(attribute.NewSet(
			attribute.Int("api_key", k), attribute.String("api", name)))
	}
	for _, api := range protocol.MirrorAPIs() {
		m.mirrorAttr = append(m.mirrorAttr, metric.WithAttributeSet(attribute.NewSet(
			attribute.Int("api_key", int(api.Key)), attribute.String("api", api.Name))))
	}
	m.unknownKey = metric.WithAttributeSet(attribute.NewSet(attribute.Int("api_key", -1), attribute.String("api", "unknown")))
	m.inAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("direction", "in")))
	m.outAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("direction", "out")))
	return m, nil
}

func (m *metrics) key(k int16) metric.MeasurementOption {
	if k >= 0 && int(k) < len(m.keyAttrs) {
		return m.keyAttrs[k]
	}
	if i := protocol.MirrorKeyIndex(k); i >= 0 {
		return m.mirrorAttr[i]
	}
	return m.unknownKey
}

func listenerAttr(r route) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("listener", r.String()))
}

var bg = context.Background()

func (m *metrics) connOpened(r route) {
	m.connections.Add(bg, 1, listenerAttr(r))
	m.accepted.Add(bg, 1, listenerAttr(r))
}

func (m *metrics) connClosed(r route) { m.connections.Add(bg, -1, listenerAttr(r)) }

func (m *metrics) request(key int16, size int) {
	m.requests.Add(bg, 1, m.key(key))
	m.bytes.Add(bg, int64(size), m.inAttr)
}

func (m *metrics) requestError(key int16) { m.errors.Add(bg, 1, m.key(key)) }

// refusal counts a request refused by the proxy itself (rare: attributes built per call).
func (m *metrics) refusal(key int16, reason string) {
	m.refusals.Add(bg, 1, metric.WithAttributes(attribute.String("api", protocol.APIName(key)), attribute.String("reason", reason)))
}

// Reasons of refusedWrite besides the internals' refusal kinds.
const (
	refusedMirrorTopic      = "mirror_topic"       // Produce to a read-only mirror topic
	refusedMirrorTopicAdmin = "mirror_topic_admin" // an admin mutation of one (DeleteRecords, CreatePartitions, configs, ...)
	// a write held back by a route's switch (route.go; counted in refusals, not
	// refused_writes: it is retried, and alerts must not fire for a switch)
	refusedRouteFrozen = "route_frozen"
	// refusedRouteFetchHold: a Fetch held after a switch until the groups rejoined (route_hold.go).
	refusedRouteFetchHold = "route_fetch_hold"
	// refusedRouteCommitHold: a commit held after a forced switch until its group rejoined
	// (route_hold.go).
	refusedRouteCommitHold = "route_commit_hold"
	// refusedWriterClash: a batch under the producer id of the mirror's writer, on a switched
	// route (enforcement.MirrorWriters); its client takes a new id.
	refusedWriterClash = "route_writer_clash"
)

func (m *metrics) refusedWrite(reason string) {
	m.refusedWrites.Add(bg, 1, metric.WithAttributes(attribute.String("reason", reason)))
}

func (m *metrics) bytesOut(n int) { m.bytes.Add(bg, int64(n), m.outAttr) }

func (m *metrics) latencyOf(key int16, d time.Duration) {
	m.latency.Record(bg, d.Seconds(), m.key(key))
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// SetStatusPage serves h at / (and every path the metrics address does not
// serve otherwise) on the metrics address; call it before Start. The
// address has no authentication: h must be read-only and carry no secrets
// (docs/SECURITY.md).
func (p *Proxy) SetStatusPage(h http.Handler) { p.metrics.home = h }

// serveMetrics starts the /metrics HTTP endpoint.
func (p *Proxy) serveMetrics() error {
	ln, err := net.Listen("tcp", p.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("metrics listener on %s: %w", p.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", p.metrics.handler())
	p.handleHealth(mux) // /healthz, /ready (ready.go)
	if p.metrics.home != nil {
		mux.Handle("/", p.metrics.home)
	}
	sv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	p.mu.Lock()
	p.metricsLn, p.metricsSv = ln, sv
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := sv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	return nil
}
