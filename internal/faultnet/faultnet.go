// Package faultnet puts a Toxiproxy proxy in front of every broker of a real
// test cluster, so that tests and benchmarks can add latency, bandwidth caps,
// resets and blackholes between kmirror and that cluster (issues 17 and 18).
//
// The brokers advertise the proxies on a listener of their own
// (kafkatest.WithListener), so every client that bootstraps to Addrs() reaches
// every broker through its proxy, while the cluster's other listeners stay
// direct. The chicken-and-egg of addresses is solved in two steps: the proxies
// listen first (their addresses go into the brokers' advertised listener), and
// Connect points them at the broker ports once the cluster runs.
//
// Toxiproxy is used as a library (github.com/Shopify/toxiproxy/v2): the
// well-kept fault proxy Shopify runs in its own resiliency tests, with the
// toxics a Kafka link needs (latency with jitter, bandwidth, reset_peer,
// timeout, slow_close, slicer) already written and tested.
package faultnet

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// parked is where a proxy points before Connect: a port nothing listens on, so
// a client that connects too early is refused at once instead of reaching
// something else.
const parked = "127.0.0.1:1"

// Front is one Toxiproxy proxy per broker of one cluster.
//
// Toxiproxy 2.5.0 (the newest release on the module proxy) can wedge a
// proxy: removing or adding a toxic interrupts every link's toxics, and a
// toxic blocked handing a chunk to a link whose writer has exited (its
// client reset the connection while data flowed) is never interrupted, so
// the call waits forever while holding the proxy's toxic lock, and every
// later call and new connection of that proxy waits behind it
// (Shopify/toxiproxy#412 and #558, fix proposed in #760; it stopped the
// first 1,000-fault soak at fault 66). The Front therefore bounds each
// toxic change and replaces a proxy that does not answer in time with a
// fresh one on the same address, carrying the toxics that are still meant
// to be there. The wedged proxy's open connections may stay open with
// nothing flowing (its Stop can wait behind the same lock) until their
// clients time them out: for a client, a blackhole on those connections.
// Wedged counts the replacements; the wedged proxy's goroutines cannot be
// stopped and stay until the process ends (leaktest.Toxiproxy).
type Front struct {
	listener      string
	server        *toxiproxy.ApiServer
	removeTimeout time.Duration

	mu      sync.Mutex
	proxies []*toxiproxy.Proxy
	toxics  []map[string]Toxic // per proxy: what should be applied now
	wedged  int
}

// defaultChangeTimeout bounds one toxic change: a healthy proxy answers in
// milliseconds (a latency toxic's removal flushes what it holds).
const defaultChangeTimeout = 15 * time.Second

// New starts n proxies on loopback (one per broker, in broker order) that are
// stopped when the test ends. Use Listener when starting the cluster and
// Connect after it.
func New(t testing.TB, listener string, n int) *Front {
	t.Helper()
	return newFront(t, listener, n)
}

func newFront(t testing.TB, listener string, n int) *Front {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	f := &Front{listener: listener, server: server, removeTimeout: defaultChangeTimeout}
	for i := range n {
		p := toxiproxy.NewProxy(server, fmt.Sprintf("%s-%d", strings.ToLower(listener), i), "127.0.0.1:0", parked)
		if err := p.Start(); err != nil {
			f.Close()
			t.Fatalf("faultnet: start proxy %d: %v", i, err)
		}
		f.proxies = append(f.proxies, p)
		f.toxics = append(f.toxics, map[string]Toxic{})
	}
	t.Cleanup(f.Close)
	return f
}

// Listener is the kafkatest option that gives every broker a listener named
// like the Front, advertised at broker i's proxy.
func (f *Front) Listener() kafkatest.Option {
	addrs := f.Addrs()
	return kafkatest.WithListener(f.listener, func(i int) string { return addrs[i] })
}

// Connect points each proxy at its broker's port of the Front's listener.
func (f *Front) Connect(t testing.TB, c *kafkatest.Cluster) {
	t.Helper()
	f.connect(t, c.Real().ListenerAddrs(f.listener))
}

// connect points proxy i at upstreams[i].
func (f *Front) connect(t testing.TB, upstreams []string) {
	t.Helper()
	if len(upstreams) != len(f.proxies) {
		t.Fatalf("faultnet: %d proxies for %d brokers on listener %s", len(f.proxies), len(upstreams), f.listener)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range f.proxies {
		// Update restarts the proxy on the same address (Listen holds the bound port).
		if err := p.Update(&toxiproxy.Proxy{Listen: p.Listen, Upstream: upstreams[i], Enabled: true}); err != nil {
			t.Fatalf("faultnet: connect proxy %d to %s: %v", i, upstreams[i], err)
		}
	}
}

// Addrs are the proxies' addresses, in broker order: a bootstrap list that
// reaches the cluster through the faults.
func (f *Front) Addrs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.proxies))
	for i, p := range f.proxies {
		out[i] = p.Listen
	}
	return out
}

// Len is the number of proxies (brokers).
func (f *Front) Len() int { return len(f.proxies) }

// Toxic is one Toxiproxy toxic: Type is one of latency, bandwidth,
// reset_peer, timeout, slow_close, slicer, limit_data; Stream is "upstream"
// (towards the broker) or "downstream" (towards the client, the default);
// Toxicity is the share of connections it applies to (0 means 1); Attributes
// are the type's own (e.g. latency, jitter in ms; rate in KB/s; timeout in ms).
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream,omitempty"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Add adds a toxic to broker i's proxy. Existing connections get it too.
func (f *Front) Add(i int, tx Toxic) error {
	if tx.Toxicity == 0 {
		tx.Toxicity = 1
	}
	if tx.Stream == "" {
		tx.Stream = "downstream"
	}
	body, err := json.Marshal(tx)
	if err != nil {
		return fmt.Errorf("faultnet: encode toxic %s: %w", tx.Name, err)
	}
	err = f.change(i, func(p *toxiproxy.Proxy) error {
		_, err := p.Toxics.AddToxicJson(strings.NewReader(string(body)))
		return err
	}, func(m map[string]Toxic) { m[tx.Name] = tx })
	if err != nil {
		return fmt.Errorf("faultnet: add toxic %s (%s) to proxy %d: %w", tx.Name, tx.Type, i, err)
	}
	return nil
}

// AddAll adds the same toxic to every proxy.
func (f *Front) AddAll(tx Toxic) error {
	for i := range f.proxies {
		if err := f.Add(i, tx); err != nil {
			return err
		}
	}
	return nil
}

// Remove removes a toxic by name from broker i's proxy.
func (f *Front) Remove(i int, name string) error {
	err := f.change(i, func(p *toxiproxy.Proxy) error {
		return p.Toxics.RemoveToxic(context.Background(), name)
	}, func(m map[string]Toxic) { delete(m, name) })
	if err != nil {
		return fmt.Errorf("faultnet: remove toxic %s from proxy %d: %w", name, i, err)
	}
	return nil
}

// Reset removes every toxic from every proxy.
func (f *Front) Reset() {
	for i := range f.proxies {
		_ = f.change(i, func(p *toxiproxy.Proxy) error {
			p.Toxics.ResetToxics(context.Background())
			return nil
		}, func(m map[string]Toxic) { clear(m) })
	}
}

// Wedged is how many times a proxy did not answer a toxic change in time
// and was replaced.
func (f *Front) Wedged() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wedged
}

// change applies do to proxy i and, once it succeeded, record to the toxics
// meant to be there. A proxy that does not answer within removeTimeout is
// replaced (replace), and the replacement gets the recorded toxics.
func (f *Front) change(i int, do func(*toxiproxy.Proxy) error, record func(map[string]Toxic)) error {
	p := f.proxy(i)
	done := make(chan error, 1)
	go func() { done <- do(p) }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		f.mu.Lock()
		record(f.toxics[i])
		f.mu.Unlock()
		return nil
	case <-time.After(f.removeTimeout):
	}
	f.mu.Lock()
	record(f.toxics[i])
	f.mu.Unlock()
	return f.replace(i, p)
}

// replace swaps a wedged proxy for a new one on the same address. The old
// proxy's Stop closes its listener first and may then wait forever (its
// accept loop can be stuck behind the wedged toxic lock), so it runs on a
// goroutine of its own and the port being free again is the signal.
//
// Stop did not always free the port: a soak run saw the address still taken
// 30 s later, twice in a row. So after forceCloseAfter the old listener is
// closed directly (closeListener), and a failure names what holds the port.
func (f *Front) replace(i int, old *toxiproxy.Proxy) error {
	go old.Stop()
	start := time.Now()
	forced := false
	for {
		ln, err := net.Listen("tcp", old.Listen)
		if err == nil {
			ln.Close()
			break
		}
		if !forced && time.Since(start) > forceCloseAfter {
			forced = true
			closeListener(old)
		}
		if time.Since(start) > 30*time.Second {
			return fmt.Errorf("replacing wedged proxy %d: its address %s is still taken after 30s (%s): %w", i, old.Listen, portHolders(old.Listen), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p := toxiproxy.NewProxy(f.server, old.Name, old.Listen, old.Upstream)
	if err := p.Start(); err != nil {
		return fmt.Errorf("replacing wedged proxy %d on %s: %w", i, old.Listen, err)
	}
	f.mu.Lock()
	f.proxies[i] = p
	f.wedged++
	keep := make([]Toxic, 0, len(f.toxics[i]))
	for _, tx := range f.toxics[i] {
		keep = append(keep, tx)
	}
	f.mu.Unlock()
	for _, tx := range keep {
		body, err := json.Marshal(tx)
		if err != nil {
			return fmt.Errorf("faultnet: encode toxic %s: %w", tx.Name, err)
		}
		// A fresh proxy has no links yet: nothing to wedge on.
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
			return fmt.Errorf("replacing wedged proxy %d: adding back toxic %s: %w", i, tx.Name, err)
		}
	}
	return nil
}

// toxicNames lists the toxics proxy i has now, sorted.
func (f *Front) toxicNames(i int) []string {
	var names []string
	for _, tx := range f.proxy(i).Toxics.GetToxicArray() {
		if w, ok := tx.(*toxics.ToxicWrapper); ok {
			names = append(names, w.Name)
		}
	}
	slices.Sort(names)
	return names
}

// Latency gives every proxy a round trip of rtt ms (half each way) with the
// given jitter (ms, each way): the WAN between kmirror and the cluster.
func (f *Front) Latency(rttMs, jitterMs int) error {
	for _, stream := range []string{"upstream", "downstream"} {
		if err := f.AddAll(Toxic{Name: "latency_" + stream, Type: "latency", Stream: stream,
			Attributes: map[string]any{"latency": rttMs / 2, "jitter": jitterMs}}); err != nil {
			return err
		}
	}
	return nil
}

// Bandwidth caps each proxy's downstream (broker to client) at kbps KB/s, each
// connection on its own.
func (f *Front) Bandwidth(kbps int) error {
	return f.AddAll(Toxic{Name: "bandwidth_downstream", Type: "bandwidth", Stream: "downstream",
		Attributes: map[string]any{"rate": kbps}})
}

// SharedBandwidth caps each proxy's downstream at kbps KB/s for all of its
// connections together (SharedBandwidthToxic): a link of that bandwidth.
func (f *Front) SharedBandwidth(kbps int) error {
	return f.AddAll(Toxic{Name: "shared_bandwidth_downstream", Type: sharedBandwidth, Stream: "downstream",
		Attributes: map[string]any{"rate": kbps}})
}

// Close stops every proxy and closes its connections.
func (f *Front) Close() {
	for _, p := range f.snapshot() {
		p.Stop()
	}
}

func (f *Front) proxy(i int) *toxiproxy.Proxy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.proxies[i]
}

func (f *Front) snapshot() []*toxiproxy.Proxy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*toxiproxy.Proxy(nil), f.proxies...)
}
