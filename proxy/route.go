package proxy

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/enforcement"
)

// Routes (docs/cutover.md, issue 21): a route is a listener set of its own — a bootstrap
// port and one port per broker node id, by the same port rule as the destination's listeners
// — whose upstream is the route's *primary* cluster, the source of the mirror it names.
// Applications bootstrap to the route. Until a switch it is an ordinary transparent proxy to
// the primary; a switch (later build steps) makes the same addresses lead to the standby, the
// mirror's destination, without a client being reconfigured.
//
// A route is served by a Proxy of its own (routeProxy) sharing the parent's metrics and audit
// log: the listener machinery, address rewriting, in-order responses and SASL pass-through
// are exactly those of the destination's listeners. What differs on a route:
//   - no mirror RPCs (they are the destination's; the route's upstream is the primary) and
//     no read-only guard (the primary's topics are the writable originals);
//   - Fetch is capped at v12, the last version naming topics, as Produce is capped everywhere
//     (and OffsetCommit/OffsetFetch at v9, the id-addressed group and share keys hidden:
//     routeVersionCaps): after a switch the standby's topic ids differ from the primary's, and a
//     client that fetched by id would see its topics "re-created";
//   - the cluster id clients see is pinned to the route's (the primary's, learned at start),
//     and topic ids in Metadata are mapped to the primary's, so that neither changes when the
//     upstream does.

// RouteConfig is one route of the proxy configuration (YAML `routes`).
type RouteConfig struct {
	// Name identifies the route in describe, logs, metrics and the switch command.
	Name string `yaml:"name"`
	// Listen is the route's bootstrap listener; applications are configured with it.
	Listen string `yaml:"listen"`
	// AdvertisedHost is the host name clients are given for the route's broker listeners
	// (default: the proxy's advertised_host).
	AdvertisedHost string `yaml:"advertised_host"`
	// BrokerPortBase and BrokerPortCount are the route's port rule (node id N on
	// BrokerPortBase+N). The range must not overlap the destination's or another route's.
	// 0 means ephemeral ports (a single instance, tests).
	BrokerPortBase  int `yaml:"broker_port_base"`
	BrokerPortCount int `yaml:"broker_port_count"`
	// Mirror is the mirror whose source is the primary and whose destination (this kmirror's
	// upstream) is the standby.
	Mirror string `yaml:"mirror"`
	// Primary is where the route leads until a switch.
	Primary RouteUpstream `yaml:"primary"`
}

// RouteUpstream is a route's upstream cluster: its bootstrap list and kmirror's own TLS and
// SASL towards it (used for broker discovery only; clients authenticate end to end through
// their 1:1 connections, as on the destination's listeners).
type RouteUpstream struct {
	Bootstrap []string     `yaml:"bootstrap"`
	TLS       UpstreamTLS  `yaml:"tls"`
	SASL      UpstreamSASL `yaml:"sasl"`
}

// routeVersionCaps are the newest versions a route advertises of the keys that address
// topics by id in newer versions (-1: not at all). The standby's topic ids are not the
// primary's; by name a client's view survives the switch. Fetch v13+, OffsetCommit and
// OffsetFetch v10+, TxnOffsetCommit v6+ use ids (found by the transactional switch test:
// a Java 4.4 transactional producer committed its offsets on the standby with the
// primary's topic id and got UNKNOWN_TOPIC_ID until it gave up); Produce is capped at
// v12 on every listener; the KIP-848 consumer group protocol (68) and share groups
// (76-79) assign partitions by id, and DescribeTopicPartitions (75) answers with ids: without
// them clients use the classic group protocol and Metadata, which every client falls back
// to. The lists are also what keeps a freeze exact: it matches topics by name
// (enforcement.Freeze).
var routeVersionCaps = map[int16]int16{
	1: routeFetchVersion, 8: 9, 9: 9, 28: 5,
	68: -1, 75: -1, 76: -1, 77: -1, 78: -1, 79: -1,
}

// routeFetchVersion is the newest Fetch a route advertises: v13 names topics by id.
const routeFetchVersion = 12

var routeNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// validateRoutes checks the routes against each other and against the destination's
// listeners: names unique, addresses well formed, no port claimed twice.
func (c Config) validateRoutes() error {
	type claim struct {
		lo, hi int // ports [lo, hi)
		who    string
	}
	var claims []claim
	claimPort := func(addr, who string) error {
		_, ps, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("%s %q is not HOST:PORT: %w", who, addr, err)
		}
		port, err := strconv.Atoi(ps)
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("%s %q: port %q is not a number in 0..65535", who, addr, ps)
		}
		if port != 0 {
			claims = append(claims, claim{port, port + 1, who})
		}
		return nil
	}
	claimRange := func(base, count int, who string) {
		if base != 0 {
			claims = append(claims, claim{base, base + count, who})
		}
	}
	if err := claimPort(c.Listen, "listen"); err != nil {
		return err
	}
	claimRange(c.BrokerPortBase, c.BrokerPortCount, "broker ports")
	for node, port := range c.BrokerPorts {
		claimRange(port, 1, fmt.Sprintf("broker_ports[%d]", node))
	}
	names := map[string]bool{}
	for i, r := range c.Routes {
		switch {
		case !routeNameRE.MatchString(r.Name):
			return fmt.Errorf("routes[%d]: name %q: want 1 to 249 of a-z A-Z 0-9 . _ -", i, r.Name)
		case names[r.Name]:
			return fmt.Errorf("routes[%d]: name %q is used by two routes", i, r.Name)
		case r.Mirror == "":
			return fmt.Errorf("route %s: mirror is not set: a route needs the mirror whose source is its primary", r.Name)
		case len(r.Primary.Bootstrap) == 0:
			return fmt.Errorf("route %s: primary.bootstrap is empty", r.Name)
		case r.BrokerPortBase < 0 || r.BrokerPortBase+r.brokerPortCount() > 65536:
			return fmt.Errorf("route %s: broker port range %d+%d does not fit in 1..65535", r.Name, r.BrokerPortBase, r.brokerPortCount())
		}
		names[r.Name] = true
		for _, b := range r.Primary.Bootstrap {
			if _, _, err := net.SplitHostPort(b); err != nil {
				return fmt.Errorf("route %s: primary.bootstrap %q is not HOST:PORT: %w", r.Name, b, err)
			}
		}
		if err := claimPort(r.Listen, "route "+r.Name+" listen"); err != nil {
			return err
		}
		claimRange(r.BrokerPortBase, r.brokerPortCount(), "route "+r.Name+" broker ports")
		if err := r.Primary.SASL.validate("route " + r.Name + " primary.sasl"); err != nil {
			return err
		}
	}
	for i, a := range claims {
		for _, b := range claims[i+1:] {
			if a.lo < b.hi && b.lo < a.hi {
				return fmt.Errorf("%s (%d..%d) and %s (%d..%d) claim the same port", a.who, a.lo, a.hi-1, b.who, b.lo, b.hi-1)
			}
		}
	}
	return nil
}

func (r RouteConfig) brokerPortCount() int {
	return cmp.Or(r.BrokerPortCount, Defaults().BrokerPortCount)
}

// routeIdentity is what a route keeps stable for its clients across a switch.
type routeIdentity struct {
	name, mirror string
	// clusterID is the id clients see (the primary's, learned by the first discovery);
	// empty until known, and then responses pass unchanged.
	clusterID atomic.Pointer[string]
	// upstreamClusterID is the cluster id of the cluster the route leads to now (learned by
	// discovery and from Metadata answers before they are rewritten).
	upstreamClusterID atomic.Pointer[string]
	// ids are the topic ids the route's clients were given, by topic name: learned from
	// the primary's Metadata answers until a switch, given back in place of the standby's
	// after it (a forced switch cannot ask a primary that is gone).
	idsMu sync.Mutex
	ids   map[string][16]byte
	// switched: the route leads to the standby (SwitchRoute; SwitchRouteBack clears it).
	switched atomic.Bool
	// primary is the route's own upstream (routes[].primary), for a switch back.
	primary *upstreamSet
	// freeze is the write freeze of a switch in progress (nil: none).
	freeze atomic.Pointer[enforcement.Freeze]
	// writers are the mirror's writers on the switched topics' partitions, whose producer
	// ids an application's batch must not carry (enforcement.MirrorWriters; nil: none).
	writers atomic.Pointer[enforcement.MirrorWriters]
	// hold is the fetch hold after a switch (route_hold.go; nil: none).
	hold atomic.Pointer[fetchHold]
	// gate keeps the route from listening until OpenRoute (WithRoutesClosedAtStart,
	// route_gate.go).
	gate routeGate
}

// pinClusterID makes id the cluster id the route's clients see, unless one is pinned.
func (ri *routeIdentity) pinClusterID(id string) {
	if id != "" {
		id = strings.Clone(id) // it may alias a response frame (reencode decodes unsafely)
		ri.clusterID.CompareAndSwap(nil, &id)
	}
}

// rewriteClusterID replaces *id, the upstream's cluster id, with the pinned cluster id; it
// reports a change.
func (ri *routeIdentity) rewriteClusterID(id *string) bool {
	if id != nil && *id != "" {
		if known := ri.upstreamClusterID.Load(); known == nil || *known != *id {
			actual := strings.Clone(*id) // stored only when it changes; *id aliases the response frame
			ri.upstreamClusterID.Store(&actual)
		}
	}
	pinned := ri.clusterID.Load()
	if pinned == nil {
		if id != nil {
			ri.pinClusterID(*id)
		}
		return false
	}
	if id == nil || *id == *pinned {
		return false
	}
	*id = *pinned
	return true
}

// rewriteMetadata gives a route's Metadata answer the route's cluster id and topic ids:
// before a switch it learns the primary's ids, after it gives them back for the standby's
// topics of the same names. A topic first seen after the switch keeps the standby's id.
func (ri *routeIdentity) rewriteMetadata(resp *kmsg.MetadataResponse) {
	ri.rewriteClusterID(resp.ClusterID)
	switched := ri.switched.Load()
	ri.idsMu.Lock()
	defer ri.idsMu.Unlock()
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic == nil || t.TopicID == ([16]byte{}) || t.ErrorCode != 0 {
			continue
		}
		known, ok := ri.ids[*t.Topic]
		switch {
		case ok && switched:
			t.TopicID = known
		case !switched:
			if ri.ids == nil {
				ri.ids = map[string][16]byte{}
			}
			if known != t.TopicID || !ok {
				// A copy: *t.Topic aliases the response frame (reencode decodes unsafely), which
				// is reused; a key aliasing it changed under the map, the primary's id was not
				// found after the switch, and franz-go took the standby's for a re-created topic
				// (TestRealDrivenRouteSwitch, one run in three).
				ri.ids[strings.Clone(*t.Topic)] = t.TopicID
			}
		}
	}
}

// routeProxy builds the Proxy serving route rc, sharing the parent's metrics and audit log.
// The parent's configuration was validated, the routes included.
func (p *Proxy) routeProxy(rc RouteConfig) *Proxy {
	cfg := p.cfg
	cfg.Routes = nil
	cfg.Listen = rc.Listen
	// The route's broker listeners bind where its bootstrap listener does (the destination's
	// broker_listen_host defaults to the destination's listen host, another interface when the
	// instances behind a balancer serve routes on addresses of their own: docs/deploy.md).
	if host, _, err := net.SplitHostPort(rc.Listen); err == nil {
		cfg.BrokerListenHost = host
	}
	cfg.AdvertisedHost = cmp.Or(rc.AdvertisedHost, p.cfg.AdvertisedHost)
	cfg.BrokerPortBase, cfg.BrokerPortCount, cfg.BrokerPorts = rc.BrokerPortBase, rc.brokerPortCount(), nil
	cfg.Upstream, cfg.UpstreamTLS, cfg.UpstreamSASL = nil, UpstreamTLS{}, UpstreamSASL{} // r.up holds the route's
	cfg.MetricsAddr = ""
	r := &Proxy{
		cfg:      cfg,
		log:      p.log.With("route", rc.Name),
		Handlers: &Handlers{},
		brokers:  make(map[int32]*brokerEntry),
		metrics:  p.metrics,
		appRoute: &routeIdentity{name: rc.Name, mirror: rc.Mirror},

		testHookClientFrame: p.testHookClientFrame,
	}
	r.appRoute.gate.closed = p.routesClosed
	r.appRoute.primary = &upstreamSet{role: upstreamPrimary, bootstrap: rc.Primary.Bootstrap, tls: rc.Primary.TLS, sasl: rc.Primary.SASL}
	r.up.Store(r.appRoute.primary)
	r.auditLog.Store(p.auditLog.Load())
	return r
}

// WithRoutesClosedAtStart makes every route start closed: its ports are taken at start and
// refuse connections until OpenRoute (route_gate.go). An instance that mirrors uses it and
// opens a route only once it has read the route's switch state and applied it
// (instance/routeapply.go): a restarting instance must not lead a route's clients to the
// primary after a switch made the standby their cluster, nor let a write through a freeze it
// has not yet seen.
func WithRoutesClosedAtStart() Option { return func(p *Proxy) { p.routesClosed = true } }

// OpenRoute makes the route named name listen (see WithRoutesClosedAtStart). A port it cannot
// listen on fails it, and it can be called again.
func (p *Proxy) OpenRoute(name string) error {
	r := p.routeNamed(name)
	if r == nil {
		return fmt.Errorf("no route %q on this instance", name)
	}
	opened, err := r.appRoute.gate.open()
	if err != nil {
		return fmt.Errorf("opening route %s: %w", name, err)
	}
	if opened {
		r.log.Info("route open: this instance has applied the route's switch state and listens")
	}
	return nil
}

// routes are the proxies serving the configured routes (Start makes them).
type routes struct {
	mu  sync.Mutex
	all []*Proxy
}

// startRoutes starts every configured route; a route that cannot start stops the proxy's
// start (a route that silently did not listen would leave its applications without a
// cluster).
func (p *Proxy) startRoutes(ctx context.Context) error {
	for _, rc := range p.cfg.Routes {
		r := p.routeProxy(rc)
		if err := r.Start(ctx); err != nil {
			return fmt.Errorf("starting route %s: %w", rc.Name, err)
		}
		p.routes.mu.Lock()
		p.routes.all = append(p.routes.all, r)
		p.routes.mu.Unlock()
	}
	return nil
}

// routeProxies returns the running routes.
func (p *Proxy) routeProxies() []*Proxy {
	p.routes.mu.Lock()
	defer p.routes.mu.Unlock()
	return append([]*Proxy(nil), p.routes.all...)
}

// RouteStatus is a route as describe and the status page show it.
type RouteStatus struct {
	Name      string
	Mirror    string
	Bootstrap string // the route's bootstrap listener
	Upstream  string // "primary" until a switch
	ClusterID string // the cluster id the route's clients see ("" until learned)
	// Open: the route listens (false until the instance applied its switch state;
	// WithRoutesClosedAtStart).
	Open bool
}

// Routes returns the status of every route.
func (p *Proxy) Routes() []RouteStatus {
	var out []RouteStatus
	for _, r := range p.routeProxies() {
		st := RouteStatus{Name: r.appRoute.name, Mirror: r.appRoute.mirror, Bootstrap: r.Addr(), Upstream: r.upstream().role,
			Open: !r.appRoute.gate.isClosed()}
		if id := r.appRoute.clusterID.Load(); id != nil {
			st.ClusterID = *id
		}
		out = append(out, st)
	}
	return out
}

// routeNamed returns the running route named name (nil: none).
func (p *Proxy) routeNamed(name string) *Proxy {
	for _, r := range p.routeProxies() {
		if r.appRoute.name == name {
			return r
		}
	}
	return nil
}

// RouteBrokerPorts returns node id -> listener port of the route's broker listeners.
func (p *Proxy) RouteBrokerPorts(name string) map[int32]int {
	if r := p.routeNamed(name); r != nil {
		return r.BrokerListenerPorts()
	}
	return nil
}

// RouteAddr is the bootstrap address of the route named name ("" if there is none).
func (p *Proxy) RouteAddr(name string) string {
	if r := p.routeNamed(name); r != nil {
		return r.Addr()
	}
	return ""
}

// produceBarrier counts a route session's Produce requests (acks other than 0): claimed
// before the freeze is read, answered once the response reached the client, the broker's or
// the freeze's refusal alike, in request order (session.produceAnswered). The freeze stores
// itself and then reads claimed; dispatch adds to claimed and then reads the freeze: with
// Go's sequentially consistent atomics, a Produce either sees the freeze or is counted in the
// snapshot FreezeRoute waits for.
type produceBarrier struct{ claimed, answered atomic.Int64 }

// FreezeRoute installs the write freeze of the route named name (nil lifts it). With a
// freeze, it returns once every Produce the route forwarded before it has been answered by
// the primary (or its connection closed), bounded by ctx: from then on no write of the frozen
// topics reaches the primary through this instance, which is what the instance's freeze
// acknowledgement promises the switch (docs/cutover.md, step 1).
func (p *Proxy) FreezeRoute(ctx context.Context, name string, f *enforcement.Freeze) error {
	r := p.routeNamed(name)
	if r == nil {
		return fmt.Errorf("no route %q on this instance", name)
	}
	r.appRoute.freeze.Store(f)
	if !f.Frozen() {
		// A connection whose Produce the freeze refused may have more Produce requests
		// pipelined behind it, sent before the client saw the refusal: forwarded now, they
		// would reach the primary ahead of the refused one's retry, and an idempotent
		// producer's next sequence would be missing (OUT_OF_ORDER_SEQUENCE_NUMBER: franz-go
		// then takes a new producer id and resends batches whose outcome it did not know,
		// which duplicated a record in TestRouteSwitchDriverKilledAtEachStep). Closed, the
		// client resends them all in order.
		closed := 0
		r.sessions.Range(func(k, _ any) bool {
			if s := k.(*session); s.refusedFrozen.Load() {
				s.closeWith(errRouteUnfrozen)
				closed++
			}
			return true
		})
		r.log.Info("route unfrozen", "connections_closed", closed)
		return nil
	}
	if waiting, err := r.awaitProduceAnswers(ctx); err != nil {
		return fmt.Errorf("route %s: freeze installed, but %d connections still wait for answers to writes forwarded before it: %w", name, waiting, err)
	}
	r.log.Info("route frozen for a switch", "topics", len(f.Topics), "commits", f.Commits)
	return nil
}

// awaitProduceAnswers (on a route's proxy) returns once every Produce its connections forwarded so far
// has been answered to its client (or its connection closed), or with the number of
// connections still waiting when ctx ends.
func (r *Proxy) awaitProduceAnswers(ctx context.Context) (int, error) {
	type mark struct {
		s       *session
		claimed int64
	}
	var marks []mark
	r.sessions.Range(func(k, _ any) bool {
		s := k.(*session)
		marks = append(marks, mark{s, s.produces.claimed.Load()})
		return true
	})
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		waiting := 0
		for _, m := range marks {
			if m.s.ctx.Err() == nil && m.s.produces.answered.Load() < m.claimed {
				waiting++
			}
		}
		if waiting == 0 {
			return 0, nil
		}
		select {
		case <-ctx.Done():
			return waiting, ctx.Err()
		case <-tick.C:
		}
	}
}

// freezeProduce applies a route's write freeze f to a Produce request; what the freeze lets
// through (other topics, resends the cluster being left holds) then meets the guard g and the
// mirror writers w (nil: none). A connection whose Produce the freeze refused closes at its
// next Produce once the freeze is lifted.
func (s *session) freezeProduce(f *enforcement.Freeze, g *enforcement.Guard, w enforcement.MirrorWriters, h requestHeader, frame []byte, pr *pending, acks int16) (local, forward []byte, err error) {
	if !f.Frozen() {
		// The freeze refused an earlier Produce of this connection and was lifted before
		// FreezeRoute's sweep closed it: this one may be pipelined behind the refused one
		// (see FreezeRoute), so the connection closes rather than forward it out of order.
		// Deciding here, in the connection's own request order, leaves no window between
		// lifting the freeze and the sweep.
		return nil, nil, errRouteUnfrozen
	}
	ctx, cancel := context.WithTimeout(s.ctx, guardTimeout) // Written may ask the cluster being left
	d, err := f.Produce(ctx, h.version, frame[4+h.bodyOff:])
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("route %s: checking Produce against the freeze: %w", s.p.appRoute.name, err)
	}
	if d.Refused != nil {
		s.p.metrics.refusal(h.key, refusedRouteFrozen)
		s.refusedFrozen.Store(true)
	}
	if d.Forward != nil && (g != nil || len(w) > 0) {
		rest, err := s.produceDecision(g, w, h, d.Forward)
		if err != nil {
			return nil, nil, err
		}
		d.Forward, d.Refused = rest.Forward, mergeDecisions(d.Refused, rest.Refused)
	}
	local, forward = produceOutcome(h, frame, pr, acks, d)
	return local, forward, nil
}

// freezeCommit answers an OffsetCommit or TxnOffsetCommit the freeze refuses (nil: it does
// not).
func (s *session) freezeCommit(f *enforcement.Freeze, h requestHeader, frame []byte) ([]byte, error) {
	resp, err := f.Commit(h.key, h.version, frame[4+h.bodyOff:])
	if err != nil {
		return nil, fmt.Errorf("route %s: checking %s against the freeze: %w", s.p.appRoute.name, kmsg.NameForKey(h.key), err)
	}
	if resp == nil {
		return nil, nil
	}
	s.p.metrics.refusal(h.key, refusedRouteFrozen)
	return appendResponseFrame(nil, h.corrID, responseHeaderVersion(h.key, h.version), resp.AppendTo(nil)), nil
}

// RememberPrimary tells the route named name the primary's cluster id and topic ids by topic
// name, as the mirror recorded them when it began copying from the primary. The route keeps
// what it learned itself from the primary and adds what it lacks, so that after a switch its
// clients see the ids they knew even when this instance never served the primary: it was
// restarted after the switch (the primary may be gone by then), or no client of this instance
// asked for a topic's metadata before it. Called before SwitchRoute; empty values are
// ignored.
func (p *Proxy) RememberPrimary(name, clusterID string, topicIDs map[string][16]byte) error {
	r := p.routeNamed(name)
	if r == nil {
		return fmt.Errorf("no route %q on this instance", name)
	}
	ri := r.appRoute
	ri.pinClusterID(clusterID)
	ri.idsMu.Lock()
	defer ri.idsMu.Unlock()
	for t, id := range topicIDs {
		if _, known := ri.ids[t]; known || id == ([16]byte{}) {
			continue
		}
		if ri.ids == nil {
			ri.ids = map[string][16]byte{}
		}
		ri.ids[t] = id
	}
	return nil
}

// switchAnswerWait bounds how long a switch waits for the primary's answers to the resends
// it forwarded during the freeze: the primary answers a duplicate from memory.
const switchAnswerWait = 10 * time.Second

// GuardMirrorWriters gives the route named name the producer ids of the mirror's writers on
// its topics' partitions, which the standby gave: once switched, the route refuses an
// application's batch under one of them (enforcement.MirrorWriters). Called before
// SwitchRoute; nil or empty guards nothing.
func (p *Proxy) GuardMirrorWriters(name string, w enforcement.MirrorWriters) error {
	r := p.routeNamed(name)
	if r == nil {
		return fmt.Errorf("no route %q on this instance", name)
	}
	r.appRoute.writers.Store(&w)
	return nil
}

// errRouteSwitched closes a route's client connections at a switch: clients reconnect to the
// same addresses and reach the standby.
var errRouteSwitched = errors.New("the route was switched to its other cluster; the client reconnects there")

// errRouteUnfrozen closes a connection whose Produce a lifted freeze refused (FreezeRoute).
var errRouteUnfrozen = errors.New("the route's write freeze was lifted; the client reconnects and resends its writes in order")

// SwitchRoute makes the route named name lead to the standby, the cluster this proxy fronts
// (docs/cutover.md, step 6): new connections and broker discovery go to the standby with
// kmirror's own destination TLS and SASL, the standby's read-only guard applies (mirror topics
// not switched stay read-only, kmirror's internals stay protected), every client connection of
// the route is closed so that clients reconnect and re-read metadata, and only then is the
// freeze lifted: a write refused during the switch is retried by its client on the standby.
// The cluster id and the topic ids the route's clients know stay the primary's. hold is the
// fetch hold for the consumer groups copied at the switch (route_hold.go); it is installed
// before the connections close, so no reconnecting member fetches before it. Switching a
// switched route again does nothing.
func (p *Proxy) SwitchRoute(ctx context.Context, name string, hold FetchHold) error {
	r := p.routeNamed(name)
	if r == nil {
		return fmt.Errorf("no route %q on this instance", name)
	}
	cur := p.upstream()
	return r.switchTo(ctx, &upstreamSet{role: upstreamStandby, bootstrap: cur.bootstrap, tls: cur.tls, sasl: cur.sasl}, p.guard.Load(), hold)
}

// SwitchRouteBack makes the route named name, switched to the standby, lead to its primary
// again (a switch back, docs/cutover.md "Switching back"): the same as SwitchRoute in the
// other direction. The primary's own TLS and SASL from the route's configuration apply, the
// destination's read-only guard no longer does (the primary's topics are not this kmirror's to
// guard), and the cluster id and topic ids the clients know are the primary's own again. The
// mirror writers (GuardMirrorWriters) are then those of the mirror that copied the standby
// back to the primary. Switching a route that leads to its primary does nothing.
func (p *Proxy) SwitchRouteBack(ctx context.Context, name string, hold FetchHold) error {
	r := p.routeNamed(name)
	if r == nil {
		return fmt.Errorf("no route %q on this instance", name)
	}
	return r.switchTo(ctx, r.appRoute.primary, nil, hold)
}

// switchTo makes route r lead to next, whose guard is g (nil: none), with hold as its fetch
// hold; nothing when it leads there already.
func (r *Proxy) switchTo(ctx context.Context, next *upstreamSet, g *enforcement.Guard, hold FetchHold) error {
	if r.upstream().role == next.role {
		return nil
	}
	if f := r.appRoute.freeze.Load(); f.Frozen() && f.Written != nil {
		// Resends the cluster being left holds were forwarded to it during the freeze
		// (enforcement.Freeze): their answers must reach their clients before the connections
		// close, or the clients resend them to the other cluster, which writes them again. None
		// is forwarded from here on, and the switch waits for the answers of those that were.
		final := *f
		final.Written = nil
		r.appRoute.freeze.Store(&final)
		wctx, cancel := context.WithTimeout(ctx, switchAnswerWait)
		waiting, err := r.awaitProduceAnswers(wctx)
		cancel()
		if err != nil {
			r.log.Warn("switching with resent writes still unanswered by the cluster left: their clients may write them again on the other",
				"connections", waiting, "err", err)
		}
	}
	left := r.upstream().role
	r.guard.Store(g)
	r.mu.Lock()
	// switched before the standby is reachable: a Metadata answer of the standby read with
	// switched still false would teach the route the standby's topic ids as the primary's and
	// pass them through, and franz-go takes a topic whose id changes for re-created and fails
	// its buffered writes with UNKNOWN_TOPIC_ID for good.
	r.appRoute.switched.Store(next.role == upstreamStandby)
	r.up.Store(next)
	for addr, from := range r.retired {
		if from == next.role {
			delete(r.retired, addr) // the cluster led to again: its addresses are right again
		}
	}
	for _, b := range r.brokers {
		if b.addr != "" {
			if r.retired == nil {
				r.retired = map[string]string{}
			}
			r.retired[b.addr] = left
		}
		b.addr = "" // the new upstream's discovery or Metadata gives each node id its address
	}
	r.mu.Unlock()
	r.installFetchHold(hold)
	if err := r.discover(ctx); err != nil {
		// Not fatal: the new upstream's Metadata answers to the reconnecting clients advertise
		// its brokers too.
		r.log.Warn("broker discovery failed at the switch; broker listeners learn their addresses from clients' metadata", "to", next.role, "err", err)
	}
	// Every connection with an upstream connection closes: it leads to the cluster left. One
	// without (still dialing: connectUpstream dials again when the route switched meanwhile)
	// makes its first to the new upstream; closed before its first answer, franz-go would
	// take it for a TLS mistake and fail its records (kgo.ErrFirstReadEOF: seen at
	// connections a restarted instance's closed route held through a switch, when closed
	// routes still accepted them).
	closed, kept := 0, 0
	r.sessions.Range(func(k, _ any) bool {
		s := k.(*session)
		s.mu.Lock()
		connected := s.upstream != nil
		s.mu.Unlock()
		if !connected {
			kept++
			return true
		}
		s.closeWith(errRouteSwitched)
		closed++
		return true
	})
	r.appRoute.freeze.Store(nil)
	r.log.Info("route switched", "to", next.role, "bootstrap", next.bootstrap, "connections_closed", closed, "connections_kept", kept)
	return nil
}

// routeApiVersions makes a route's ApiVersions v5+ request pass the broker's cluster check
// once the route leads to another cluster than the one its clients know. A client names the
// cluster id it knows with the node it dials (KIP-1102), the route's pinned id, and a broker
// of another cluster answers REBOOTSTRAP_REQUIRED: after a switch every Kafka 4 Java client
// rebootstrapped forever (TestRealRouteSwitchJavaClients). Both fields are cleared, as a
// bootstrapping client sends them: the route, not the client's memory, decides which cluster
// a listener leads to (replacing only the cluster id still failed the check for the
// coordinator connections of the Java consumer, one run in two).
func (s *session) routeApiVersions(h requestHeader, frame []byte) ([]byte, error) {
	ri := s.p.appRoute
	if h.version < 5 {
		return frame, nil
	}
	req := kmsg.NewApiVersionsRequest()
	req.Version = h.version
	if err := req.ReadFrom(frame[4+h.bodyOff:]); err != nil {
		return nil, fmt.Errorf("route %s: decoding ApiVersions v%d: %w", ri.name, h.version, err)
	}
	pinned, actual := ri.clusterID.Load(), ri.upstreamClusterID.Load()
	if req.ClusterID == nil || pinned == nil || *req.ClusterID != *pinned || (actual != nil && *actual == *pinned) {
		return frame, nil
	}
	req.ClusterID, req.NodeID = nil, -1
	out := append(make([]byte, 0, len(frame)), frame[:4+h.bodyOff]...)
	out = req.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
}
