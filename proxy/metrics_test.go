package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/metricstest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

func TestMetricsEndpoint(t *testing.T) {
	c := startKfake(t, 3)
	p := startProxy(t, c.ListenAddrs(), func(cfg *Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	var d dialRecorder
	produceConsume(t, p.AdvertisedAddr(), &d, 100)

	// A hostile connection must show up as an error of its API key.
	conn := rawDial(t, p.Addr())
	_, _ = conn.Write([]byte{0, 0, 0, 11, 0, 3, 0, 99, 0, 0, 0, 1, 0xff, 0xff, 0}) // Metadata v99
	expectClosed(t, conn, "Metadata v99")
	// A mirror RPC is counted under its own key and name (keys 1000.. lie beyond Kafka's).
	rawConn(t, p.Addr(), protocol.NewPtrListMirrorsRequest())

	var body string
	defer func() {
		if t.Failed() {
			t.Logf("metrics:\n%s", body)
		}
	}()
	polltest.Until(t, 10*time.Second, "metrics to include the connection errors", func() bool {
		var err error
		if body, err = metricstest.Scrape(p.MetricsAddr()); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(body, `kmirror_proxy_request_errors_total{api="Metadata",api_key="3"} 1`)
	})
	for _, want := range []string{
		`kmirror_proxy_connections{listener="bootstrap"}`,
		`kmirror_proxy_connections_accepted_total{listener="broker-0"}`,
		`kmirror_proxy_requests_total{api="Produce",api_key="0"}`,
		`kmirror_proxy_requests_total{api="Fetch",api_key="1"}`,
		`kmirror_proxy_requests_total{api="ListMirrors",api_key="1004"} 1`,
		`kmirror_proxy_bytes_total{direction="in"}`,
		`kmirror_proxy_bytes_total{direction="out"}`,
		`kmirror_proxy_request_duration_seconds_bucket{api="Produce",api_key="0",le="0.001"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The status page takes every path of the metrics address but /metrics.
func TestMetricsAddressServesTheStatusPage(t *testing.T) {
	c := startKfake(t, 1)
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "page %s", r.URL.Path) })
	p, err := New(Config{Upstream: c.ListenAddrs(), Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"}, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	p.SetStatusPage(page) // before Start, as instance.New does
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("proxy shutdown: %v", err)
		}
	}()
	// /metrics stays Prometheus's (empty: nothing was recorded yet).
	for path, want := range map[string]string{"/": "page /", "/static/style.css": "page /static/style.css", "/metrics": ""} {
		resp, err := http.Get("http://" + p.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != want {
			t.Errorf("GET %s: %.60q, want %q", path, b, want)
		}
	}
}

// TestMetricsHotPathDoesNotAllocate: the counts and the latency of every request are recorded
// on the proxy's hot path; OpenTelemetry's synchronous Add and Record allocated and locked
// per call (3–4 % of the proxy's CPU on small requests, bench/README.md, Proxy).
func TestMetricsHotPathDoesNotAllocate(t *testing.T) {
	m, err := newMetrics()
	if err != nil {
		t.Fatal(err)
	}
	m.latencyOf(0, time.Millisecond) // the key's series is made on first use
	if n := testing.AllocsPerRun(1000, func() {
		m.request(0, 100)
		m.bytesOut(50)
		m.latencyOf(0, time.Millisecond)
	}); n != 0 {
		t.Fatalf("%v allocations per request's metrics, want 0", n)
	}
}
