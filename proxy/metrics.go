package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
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
	errors      metric.Int64Counter
	// latency is a Prometheus client histogram, not an OpenTelemetry one: OpenTelemetry's
	// Record resolves its attribute set, looks up its series and takes a lock on every call,
	// 3 % of the proxy's CPU on small requests (bench/README.md, Proxy); an Observe of a
	// series resolved once is a few atomic adds. The exposition is the same (name, labels,
	// buckets), in the same registry.
	latency  *prometheus.HistogramVec
	refusals metric.Int64Counter
	// refusedWrites counts writes refused because they touch a read-only
	// mirror topic or kmirror's internals (kmirror_proxy_refused_writes_total,
	// alerted on by deploy/prometheus/rules.yml).
	refusedWrites metric.Int64Counter

	// Requests and bytes are counted in atomics on the hot path and reported through
	// observable counters (observeRequests, observeBytes) when the metrics are read: an
	// OpenTelemetry Add resolves its attribute set and looks up its series on every call,
	// which cost as much CPU per small request as the proxy's own handling of it
	// (bench/README.md, Proxy).
	apis      []apiSeries // by apiSlot
	recvBytes atomic.Int64
	sentBytes atomic.Int64
	inAttr    metric.MeasurementOption
	outAttr   metric.MeasurementOption

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
	_, err = meter.Int64ObservableCounter("kmirror.proxy.requests", metric.WithDescription("Requests received from clients."),
		metric.WithInt64Callback(m.observeRequests))
	add(err)
	m.errors, err = meter.Int64Counter("kmirror.proxy.request.errors", metric.WithDescription("Requests that failed in the proxy (connection closed, rewrite or upstream failure)."))
	add(err)
	_, err = meter.Int64ObservableCounter("kmirror.proxy.bytes", metric.WithUnit("By"), metric.WithDescription("Frame bytes from clients (in) and to clients (out)."),
		metric.WithInt64Callback(m.observeBytes))
	add(err)
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kmirror_proxy_request_duration_seconds",
		Help:    "Time from reading a request to handing its response to the client.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}, []string{"api_key", "api"})
	add(reg.Register(m.latency))
	m.refusals, err = meter.Int64Counter("kmirror.proxy.refusals",
		metric.WithDescription("Requests the proxy refused on its own authority, by API and reason."))
	add(err)
	m.refusedWrites, err = meter.Int64Counter("kmirror.proxy.refused_writes",
		metric.WithDescription("Produce requests (or their partitions of mirror topics) and admin mutations refused because they write to a read-only mirror topic or kmirror's internals, by reason."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("creating proxy metrics: %w", err)
	}
	m.apis = make([]apiSeries, kafkaKeys+len(protocol.MirrorAPIs())+1)
	for k := range kafkaKeys {
		name := "unknown"
		if kmsg.RequestForKey(int16(k)) != nil {
			name = protocol.APIName(int16(k))
		}
		m.apis[k].label(k, name)
	}
	for i, api := range protocol.MirrorAPIs() {
		m.apis[kafkaKeys+i].label(int(api.Key), api.Name)
	}
	m.apis[len(m.apis)-1].label(-1, "unknown")
	m.inAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("direction", "in")))
	m.outAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("direction", "out")))
	return m, nil
}

// kafkaKeys is the number of API keys Kafka may define (0..255) that get series of their own.
const kafkaKeys = 256

// apiSeries is one API key's series: its label values and attributes, built once (the hot
// path must not allocate them), its request count and its latency series.
type apiSeries struct {
	key, name string
	attrs     metric.MeasurementOption
	requests  atomic.Int64
	latency   atomic.Pointer[prometheus.Observer] // resolved on first use: a series appears with its first request
}

func (a *apiSeries) label(key int, name string) {
	a.key, a.name = strconv.Itoa(key), name
	a.attrs = metric.WithAttributeSet(attribute.NewSet(attribute.Int("api_key", key), attribute.String("api", name)))
}

// api is k's series: Kafka's keys, then kmirror's by protocol.MirrorKeyIndex, then one for
// every other key.
func (m *metrics) api(k int16) *apiSeries {
	if k >= 0 && k < kafkaKeys {
		return &m.apis[k]
	}
	if i := protocol.MirrorKeyIndex(k); i >= 0 {
		return &m.apis[kafkaKeys+i]
	}
	return &m.apis[len(m.apis)-1]
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
	m.api(key).requests.Add(1)
	m.recvBytes.Add(int64(size))
}

// observeRequests reports the requests counted so far, per key that has any (as a counter's
// series appears with its first Add).
func (m *metrics) observeRequests(_ context.Context, o metric.Int64Observer) error {
	for i := range m.apis {
		if n := m.apis[i].requests.Load(); n > 0 {
			o.Observe(n, m.apis[i].attrs)
		}
	}
	return nil
}

// observeBytes reports the frame bytes counted so far in each direction.
func (m *metrics) observeBytes(_ context.Context, o metric.Int64Observer) error {
	if n := m.recvBytes.Load(); n > 0 {
		o.Observe(n, m.inAttr)
	}
	if n := m.sentBytes.Load(); n > 0 {
		o.Observe(n, m.outAttr)
	}
	return nil
}

func (m *metrics) requestError(key int16) { m.errors.Add(bg, 1, m.api(key).attrs) }

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

func (m *metrics) bytesOut(n int) { m.sentBytes.Add(int64(n)) }

func (m *metrics) latencyOf(key int16, d time.Duration) {
	a := m.api(key)
	o := a.latency.Load()
	if o == nil {
		obs := m.latency.WithLabelValues(a.key, a.name) // the same series if two race here
		o = &obs
		a.latency.Store(o)
	}
	(*o).Observe(d.Seconds())
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
