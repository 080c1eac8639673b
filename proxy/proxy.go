package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/audit"
)

// Proxy is a running kmirror proxy: one bootstrap listener plus one listener per upstream
// broker node id, each client connection mapped 1:1 onto an upstream connection.
type Proxy struct {
	cfg Config
	log *slog.Logger

	// Handlers answers the mirror RPCs; later work registers into it.
	Handlers *Handlers
	guard    atomic.Pointer[enforcement.Guard] // read-only mirror topics (guard.go)
	// configResources answers kmirror's own config resources (local.go).
	configResources atomic.Pointer[ConfigResourceHandler]
	// collidingKeys: mirror keys the destination advertises itself, a bit per
	// protocol.MirrorKeyIndex (mirrorkeys.go).
	collidingKeys atomic.Uint32

	ctx    context.Context // cancelled by Close: stops every goroutine the proxy started
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// auditLog gets one line per local answer and refusal (authz.go, internals.go).
	auditLog atomic.Pointer[audit.Logger]
	auditOut io.Closer // the audit_log file, closed by Close

	metrics  *metrics
	sessions sync.Map     // *session -> struct{}
	streamed atomic.Int64 // Produce requests forwarded cut-through (tests)
	relayed  atomic.Int64 // responses relayed socket to socket (tests)
	// connections moved from gnet to a goroutine of their own to splice Produce (tests)
	handedOff atomic.Int64
	spliced   atomic.Int64 // Produce bodies spliced client to upstream (tests)
	// splicedInline: of those, spliced by the client's reader itself (bulk.go, tests)
	splicedInline atomic.Int64
	// testWriterSplices: every splice goes through the writer goroutine (tests of that path)
	testWriterSplices atomic.Bool
	fromBuf           atomic.Int64 // responses written from the reader's buffer (tests)
	draining          atomic.Bool
	readiness         atomic.Pointer[func(context.Context) error] // SetReadiness (ready.go)

	mu        sync.Mutex
	bootstrap listener
	brokers   map[int32]*brokerEntry
	// retired holds the broker addresses of the cluster a route led to before its switch
	// (SwitchRoute). A response still in flight from there, or from a connection the switch
	// has not closed yet, must not teach the route those addresses again: new connections
	// would lead to the old primary, and the next ones learn it from there (seen under load
	// in TestRouteSwitchDriverKilledAtEachStep: the route flipped back every 30 s).
	// The value is the role of the cluster an address was retired from: a switch back to that
	// cluster makes its addresses right again.
	retired   map[string]string
	nextUp    int // round robin over upstream addresses for bootstrap connections
	metricsLn net.Listener
	metricsSv *http.Server
	started   bool

	// up is the cluster the proxy leads to (upstream.go); a route's changes at a switch.
	up atomic.Pointer[upstreamSet]

	// appRoute is set on a proxy serving a route (route.go); routes are the routes this
	// proxy started (none on a route's own proxy).
	appRoute *routeIdentity
	routes   routes
	// routesClosed: the routes start closed and open with OpenRoute (WithRoutesClosedAtStart).
	routesClosed bool

	// testHookClientFrame, when set (tests only), sees every frame sent to a client.
	testHookClientFrame func(frame []byte)
}

// brokerEntry is what the proxy knows about one upstream broker.
type brokerEntry struct {
	addr string   // the broker's own advertised host:port
	ln   listener // nil until the listener is up
}

// listener is one client-facing listening socket (gnet or TLS).
type listener interface {
	addr() net.Addr
	stop(ctx context.Context) error
}

// Option customises a Proxy.
type Option func(*Proxy)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(p *Proxy) { p.log = l } }

// WithAudit sends audit lines to l instead of the configured audit_log.
func WithAudit(l *audit.Logger) Option { return func(p *Proxy) { p.auditLog.Store(l) } }

// New validates cfg and returns a proxy that is not yet listening.
func New(cfg Config, opts ...Option) (*Proxy, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid proxy configuration: %w", err)
	}
	p := &Proxy{
		cfg:      cfg,
		log:      slog.Default(),
		Handlers: &Handlers{},
		brokers:  make(map[int32]*brokerEntry),
	}
	p.up.Store(&upstreamSet{bootstrap: cfg.Upstream, tls: cfg.UpstreamTLS, sasl: cfg.UpstreamSASL})
	for _, o := range opts {
		o(p)
	}
	p.log = p.log.With("component", "proxy")
	m, err := newMetrics()
	if err != nil {
		return nil, err
	}
	p.metrics = m
	if p.auditLog.Load() == nil {
		if err := p.openAudit(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// openAudit opens the audit_log sink.
func (p *Proxy) openAudit() error {
	switch p.cfg.AuditLog {
	case "stderr":
		p.auditLog.Store(audit.New(os.Stderr))
	case "stdout":
		p.auditLog.Store(audit.New(os.Stdout))
	default:
		f, err := os.OpenFile(p.cfg.AuditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("opening audit_log: %w", err)
		}
		p.auditLog.Store(audit.New(f))
		p.auditOut = f
	}
	return nil
}

// Start binds the bootstrap listener, the metrics endpoint and the listeners of the brokers
// found by a first discovery. It returns once clients can connect. ctx only bounds start-up.
func (p *Proxy) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return errors.New("proxy already started")
	}
	p.started = true
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.mu.Unlock()

	ln, err := p.listen(p.target(true, 0), p.cfg.Listen)
	if err != nil {
		p.cancel()
		return fmt.Errorf("starting bootstrap listener on %s: %w", p.cfg.Listen, err)
	}
	p.mu.Lock()
	p.bootstrap = ln
	p.mu.Unlock()

	if p.cfg.MetricsAddr != "" {
		if err := p.serveMetrics(); err != nil {
			_ = p.Close()
			return err
		}
	}
	if err := p.discover(ctx); err != nil {
		// Not fatal: without upstream_sasl on a SASL-only destination the proxy has no
		// credentials of its own and learns brokers from the Metadata its clients fetch.
		p.log.Warn("initial broker discovery failed; broker listeners start when clients fetch metadata", "err", err)
	}
	p.wg.Add(2)
	go p.runJanitor()
	go p.runDiscovery()
	if p.appRoute != nil {
		p.log.Info("route listening; it leads to its primary until a switch", "bootstrap", ln.addr().String(),
			"primary", p.upstream().bootstrap, "mirror", p.appRoute.mirror, "advertised_host", p.cfg.AdvertisedHost,
			"listens_once_switch_state_applied", p.appRoute.gate.isClosed())
		return nil
	}
	p.log.Info("proxy listening", "bootstrap", ln.addr().String(), "upstream", p.upstream().bootstrap, "advertised_host", p.cfg.AdvertisedHost)
	p.logClientAuth(ctx)
	if err := p.startRoutes(ctx); err != nil {
		_ = p.Close()
		return err
	}
	return nil
}

// Run starts the proxy, serves until ctx is cancelled, then shuts down gracefully.
func (p *Proxy) Run(ctx context.Context) error {
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if !started {
		if err := p.Start(ctx); err != nil {
			return err
		}
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownTimeout)
	defer cancel()
	return p.Shutdown(sctx)
}

// Addr is the bootstrap listener's address.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bootstrap == nil {
		return ""
	}
	return p.bootstrap.addr().String()
}

// AdvertisedAddr is the bootstrap address as clients should dial it.
func (p *Proxy) AdvertisedAddr() string {
	_, port, _ := net.SplitHostPort(p.Addr())
	return net.JoinHostPort(p.cfg.AdvertisedHost, port)
}

// BrokerListenerPorts returns node id -> listener port for every broker listener.
func (p *Proxy) BrokerListenerPorts() map[int32]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int32]int)
	for id, b := range p.brokers {
		if b.ln != nil {
			out[id] = b.ln.addr().(*net.TCPAddr).Port
		}
	}
	return out
}

// MetricsAddr is the metrics endpoint's address ("" when disabled).
func (p *Proxy) MetricsAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.metricsLn == nil {
		return ""
	}
	return p.metricsLn.Addr().String()
}

// Shutdown stops reading new requests, waits (bounded by ctx) until every request already
// read has been answered, then closes everything. Clients see their last responses followed
// by a disconnect, which every Kafka client treats as retriable.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.draining.Store(true)
	for _, r := range p.routeProxies() {
		r.draining.Store(true)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var drainErr error
	for p.totalInFlight() > 0 {
		select {
		case <-ctx.Done():
			drainErr = fmt.Errorf("shutdown: %d requests still in flight: %w", p.totalInFlight(), ctx.Err())
		case <-tick.C:
			continue
		}
		break
	}
	return errors.Join(drainErr, p.Close())
}

func (p *Proxy) totalInFlight() int {
	n := 0
	for _, r := range p.routeProxies() {
		n += r.totalInFlight()
	}
	p.sessions.Range(func(k, _ any) bool {
		n += k.(*session).inFlight()
		return true
	})
	return n
}

// Close closes every listener and connection at once and waits for all goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.started || p.cancel == nil {
		p.mu.Unlock()
		return nil
	}
	lns := []listener{}
	if p.bootstrap != nil {
		lns = append(lns, p.bootstrap)
	}
	for _, b := range p.brokers {
		if b.ln != nil {
			lns = append(lns, b.ln)
		}
	}
	sv := p.metricsSv
	p.mu.Unlock()
	var errs []error
	for _, r := range p.routeProxies() {
		if err := r.Close(); err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", r.appRoute.name, err))
		}
	}

	p.draining.Store(true)
	p.cancel()
	for _, ln := range lns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := ln.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping listener %s: %w", ln.addr(), err))
		}
		cancel()
	}
	p.sessions.Range(func(k, _ any) bool {
		k.(*session).closeWith(nil)
		return true
	})
	if sv != nil {
		_ = sv.Close()
	}
	p.wg.Wait()
	if p.auditOut != nil {
		_ = p.auditOut.Close()
	}
	return errors.Join(errs...)
}

// listen starts a listener for r on addr, TLS or plaintext depending on the configuration.
func (p *Proxy) listen(r route, addr string) (listener, error) {
	if ri := p.appRoute; ri != nil {
		ln, gated, err := ri.gate.listen(addr, func(a string) (listener, error) { return p.listenNow(r, a) })
		if gated {
			return ln, err
		}
	}
	return p.listenNow(r, addr)
}

// listenNow starts a listener on addr with the configured transport.
func (p *Proxy) listenNow(r route, addr string) (listener, error) {
	if p.cfg.TLS.CertFile != "" {
		return p.listenTLS(r, addr)
	}
	return p.listenPlain(r, addr)
}

// advertise records a broker seen in an upstream response and returns the port clients
// must use for it, starting its listener when this is the first time the broker is seen.
// ok is false when no port can be given; the caller must then hide the broker.
func (p *Proxy) advertise(node int32, host string, port int32) (int32, bool) {
	real := net.JoinHostPort(host, strconv.Itoa(int(port)))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return 0, false
	}
	b := p.brokers[node]
	if b == nil {
		b = &brokerEntry{}
		p.brokers[node] = b
	}
	if host != "" && b.addr != real && p.retired[real] == "" {
		if b.addr != "" {
			p.log.Info("broker address changed", "node", node, "old", b.addr, "new", real)
		}
		b.addr = real
	}
	if b.ln == nil {
		lp, ok := p.cfg.brokerPort(node)
		if !ok && p.cfg.BrokerPortBase != 0 {
			p.log.Error("broker node id has no proxy port: add it to broker_ports or widen broker_port_count; hiding it from clients",
				"node", node, "broker_port_base", p.cfg.BrokerPortBase, "broker_port_count", p.cfg.BrokerPortCount)
			return 0, false
		}
		ln, err := p.listen(p.target(false, node), net.JoinHostPort(p.cfg.BrokerListenHost, strconv.Itoa(lp)))
		if err != nil {
			p.log.Error("cannot start broker listener; hiding the broker from clients", "node", node, "port", lp, "err", err)
			return 0, false
		}
		b.ln = ln
		p.log.Info("broker listener started", "node", node, "listen", ln.addr().String(), "upstream", b.addr)
	}
	return int32(b.ln.addr().(*net.TCPAddr).Port), true
}

// upstreamAddrs returns the addresses to try for route r, in order.
func (p *Proxy) upstreamAddrs(r route) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !r.bootstrap {
		if b := p.brokers[r.node]; b != nil && b.addr != "" {
			return []string{b.addr}
		}
		return nil
	}
	// Bootstrap connections rotate over the configured bootstrap list so load spreads and a
	// dead first entry does not stall every client; known brokers are the fallback.
	seeds := p.upstream().bootstrap
	n := len(seeds)
	out := make([]string, 0, n+len(p.brokers))
	for i := range n {
		out = append(out, seeds[(p.nextUp+i)%n])
	}
	p.nextUp++
	for _, b := range p.brokers {
		if b.addr != "" {
			out = append(out, b.addr)
		}
	}
	return out
}

// runJanitor closes connections idle for longer than IdleTimeout.
func (p *Proxy) runJanitor() {
	defer p.wg.Done()
	every := min(max(p.cfg.IdleTimeout/4, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case now := <-t.C:
			p.sessions.Range(func(k, _ any) bool {
				s := k.(*session)
				if s.inFlight() == 0 && now.Sub(time.Unix(0, s.lastActive.Load())) > p.cfg.IdleTimeout {
					s.closeWith(fmt.Errorf("idle for more than %s", p.cfg.IdleTimeout))
				}
				return true
			})
		}
	}
}
