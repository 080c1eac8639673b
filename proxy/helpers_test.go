package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/twmb/franz-go/pkg/kmsg"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/internal/leaktest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopSharedReal()
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakOptions ignores goroutines that belong to libraries' process-wide pools, not to any
// one proxy: gnet's worker pool, and go-metrics' ticker that sarama (a test client) starts.
func leakOptions() []goleak.Option {
	return leaktest.Join(leaktest.GnetPool(), leaktest.GoMetrics())
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("KMIRROR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startProxy runs a proxy on loopback with ephemeral ports in front of upstream.
func startProxy(t testing.TB, upstream []string, mutate ...func(*Config)) *Proxy {
	t.Helper()
	return startProxyWith(t, upstream, nil, mutate...)
}

func startProxyWith(t testing.TB, upstream []string, opts []Option, mutate ...func(*Config)) *Proxy {
	t.Helper()
	cfg := Config{
		Upstream:        upstream,
		Listen:          "127.0.0.1:0",
		AdvertisedHost:  "127.0.0.1",
		BrokerPortBase:  0,
		MetadataRefresh: time.Second,
		EventLoops:      2,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	p, err := New(cfg, append([]Option{WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("new proxy: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("proxy shutdown: %v", err)
		}
	})
	return p
}

// proxyPorts is every port the proxy listens on, as "host:port" strings clients may dial.
func proxyAddrs(p *Proxy) map[string]bool {
	out := map[string]bool{p.AdvertisedAddr(): true}
	for _, port := range p.BrokerListenerPorts() {
		out[net.JoinHostPort(p.cfg.AdvertisedHost, strconv.Itoa(port))] = true
	}
	return out
}

// dialRecorder records every address a client dials.
type dialRecorder struct {
	mu    sync.Mutex
	addrs map[string]int
}

func (d *dialRecorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	if d.addrs == nil {
		d.addrs = map[string]int{}
	}
	d.addrs[addr]++
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *dialRecorder) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for a := range d.addrs {
		out = append(out, a)
	}
	return out
}

// assertOnlyProxyDialed fails when the client dialed anything but the proxy.
func assertOnlyProxyDialed(t testing.TB, p *Proxy, d *dialRecorder) {
	t.Helper()
	allowed := proxyAddrs(p)
	seen := d.seen()
	if len(seen) == 0 {
		t.Fatalf("client dialed nothing")
	}
	for _, a := range seen {
		if !allowed[a] {
			t.Errorf("client dialed %s, which is not a proxy address (proxy: %v)", a, allowed)
		}
	}
}

// rawConn sends req at its own version on a fresh connection and decodes the answer.
func rawConn(t testing.TB, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	return roundTrip(t, c, req, 1)
}

// roundTrip writes req with correlation id corrID on c and reads its response.
func roundTrip(t testing.TB, c net.Conn, req kmsg.Request, corrID int32) kmsg.Response {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, req, corrID)
	if _, err := c.Write(frame); err != nil {
		t.Fatalf("write %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	resp, err := readResponse(c, req)
	if err != nil {
		t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

func readResponse(c net.Conn, req kmsg.Request) (kmsg.Response, error) {
	frame, err := readFrame(c, 100<<20)
	if err != nil {
		return nil, err
	}
	hv := int16(0)
	if req.IsFlexible() && req.Key() != 18 {
		hv = 1
	}
	_, body, err := splitResponse(frame, hv)
	if err != nil {
		return nil, err
	}
	resp := req.ResponseKind()
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decoding response: %w", err)
	}
	return resp, nil
}

// leakDetector scans every frame the proxy sends to clients for a real broker endpoint as
// Kafka encodes it (the host string immediately followed by the int32 port) and as text
// ("host:port", as in config values). That catches a leak in any response of any client,
// whatever its API key or version.
type leakDetector struct {
	mu       sync.Mutex
	patterns map[string][]byte
	hits     []string
}

func newLeakDetector(realAddrs []string) *leakDetector {
	d := &leakDetector{patterns: map[string][]byte{}}
	for _, a := range realAddrs {
		d.add(a)
	}
	return d
}

func (d *leakDetector) option() Option { return func(p *Proxy) { p.testHookClientFrame = d.scan } }

func (d *leakDetector) add(addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		panic(err)
	}
	n, _ := strconv.Atoi(port)
	d.mu.Lock()
	d.patterns[addr] = binary.BigEndian.AppendUint32([]byte(host), uint32(n))
	d.patterns[addr+" (text)"] = []byte(addr) // config values, error messages
	d.mu.Unlock()
}

func (d *leakDetector) scan(frame []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for addr, pat := range d.patterns {
		if bytes.Contains(frame, pat) {
			d.hits = append(d.hits, addr)
		}
	}
}

func (d *leakDetector) check(t testing.TB) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.hits) > 0 {
		t.Errorf("real broker addresses reached clients %d times: %v", len(d.hits), d.hits)
	}
}

// reflectFields returns the exported fields of a response struct by name.
func reflectFields(r any) map[string]any {
	v := reflect.ValueOf(r).Elem()
	out := map[string]any{}
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() {
			out[f.Name] = v.Field(i).Interface()
		}
	}
	return out
}

func rawDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// nextResponse reads the next response frame from c and fails unless it answers corrID.
func nextResponse(t testing.TB, c net.Conn, corrID int32, timeout time.Duration) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	fr, err := readFrame(c, 1<<20)
	if err != nil {
		t.Fatalf("waiting for response %d: %v", corrID, err)
	}
	if got := int32(binary.BigEndian.Uint32(fr[4:])); got != corrID {
		t.Fatalf("response correlation id %d, want %d", got, corrID)
	}
	return fr
}

// consumeN polls cons until n records have passed check, failing on a fetch error or when
// ctx ends first.
func consumeN(t testing.TB, ctx context.Context, cons *kgo.Client, n int, check func(*kgo.Record)) {
	t.Helper()
	for got := 0; got < n; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d", got, n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			check(r)
			got++
		})
	}
}

// forEachEngine runs test on each plaintext engine (Config.PlaintextEngine): behaviour that
// does not depend on the engine must hold on both.
func forEachEngine(t *testing.T, test func(t *testing.T, engine string)) {
	for _, engine := range []string{EngineNetpoll, EngineGnet} {
		t.Run(engine, func(t *testing.T) { test(t, engine) })
	}
}

// withEngine sets the plaintext engine of a test proxy.
func withEngine(engine string) func(*Config) {
	return func(cfg *Config) { cfg.PlaintextEngine = engine }
}
