// Package instance assembles one kmirror instance: the proxy in front of the
// destination brokers, the control plane (coordinator, __mirror_state), the
// mirror RPC handlers, read-only enforcement, the periodic refresh and the
// copy pipeline. `kmirror proxy`, `kmirror demo` and the end-to-end tests all
// run this same assembly.
package instance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/apis"
	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/routeswitch"
	"github.com/kmirror/kmirror/coordinator/secrets"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/syncjobs"
	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/clientid"
	"github.com/kmirror/kmirror/internal/clientmetrics"
	"github.com/kmirror/kmirror/proxy"
	"github.com/kmirror/kmirror/statuspage"
)

// Config configures an instance.
type Config struct {
	Proxy proxy.Config
	// Mirroring turns the control plane and pipeline on (default on in the
	// command; a proxy-only instance answers mirror RPCs with a clear error).
	Mirroring              bool
	StateTopic             string
	StatePartitions        int32
	StateReplicationFactor int16
	GroupID                string
	SessionTimeout         time.Duration
	// ReadOnlyErrorCode is what refused writes carry: 44 POLICY_VIOLATION
	// (default) or 134 READ_ONLY_TOPIC.
	ReadOnlyErrorCode int16
	// BrokerACLs makes the destination brokers refuse direct writes to mirror
	// topics too (DENY ACLs for User:* while a topic is mirrored;
	// brokeracls.go). It needs an authoriser on the destination and
	// upstream_sasl credentials of a super user; every instance of a
	// destination must have the same setting.
	BrokerACLs bool
	// StatusPageEvery is how often the status page samples (default 10 s).
	StatusPageEvery time.Duration
	Logger          *slog.Logger
}

// Instance is a running kmirror.
type Instance struct {
	cfg     Config
	log     *slog.Logger
	Proxy   *proxy.Proxy
	Coord   *coordinator.Coordinator
	Guard   *enforcement.Guard
	Backend *apis.Backend
	sources *sourceclient.Cache
	// requests counts what every Kafka client of this instance sends.
	requests *clientmetrics.Requests
	dstCl    *kgo.Client
	data     *DataPath
	rpo      *apis.RPOSampler
	routes   *routeDriver // drives the switches of the routes whose state partition this instance owns
	page     *statuspage.Page
}

// New builds an instance; Run starts it.
func New(ctx context.Context, cfg Config) (_ *Instance, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := []proxy.Option{proxy.WithLogger(log)}
	if cfg.Mirroring {
		// A route opens once this instance has applied its switch state (routeapply.go).
		opts = append(opts, proxy.WithRoutesClosedAtStart())
	}
	p, err := proxy.New(cfg.Proxy, opts...)
	if err != nil {
		return nil, err
	}
	in := &Instance{cfg: cfg, log: log, Proxy: p}
	if !cfg.Mirroring {
		return in, nil
	}
	defer func() {
		if err != nil {
			in.release()
		}
	}()
	dstOpts, err := p.UpstreamClientOptions()
	if err != nil {
		return nil, err
	}
	// Every client of the control plane and the copy counts its requests
	// (kmirror_client_requests_total): the load kmirror puts on each cluster.
	in.requests = &clientmetrics.Requests{}
	dstOpts = append(slices.Clip(dstOpts), in.requests.Opt(clientmetrics.Destination))
	// Each client says what it is for (internal/clientid), so destination
	// quotas and broker logs tell the control plane from the copies.
	withID := func(id string) []kgo.Opt { return append(slices.Clip(dstOpts), kgo.ClientID(id)) }
	in.dstCl, err = kgo.NewClient(withID(clientid.Admin)...)
	if err != nil {
		return nil, fmt.Errorf("destination client: %w", err)
	}
	in.Guard, err = enforcement.New(enforcement.Options{ErrorCode: cfg.ReadOnlyErrorCode, ResolveTopicID: in.topicName})
	if err != nil {
		return nil, err
	}
	resolver, err := secretsResolver(cfg.Proxy.SecretsKeyFile, log)
	if err != nil {
		return nil, err
	}
	in.sources = sourceclient.NewCache(in.requests.Opt(clientmetrics.Source)).WithSecrets(resolver, log)
	identities, err := identityClients(withID(clientid.Identities))
	if err != nil {
		return nil, err
	}
	in.data = NewDataPath(in.sources, in.dstCl, identities, log)
	if cfg.BrokerACLs {
		if err := checkBrokerACLs(ctx, in.dstCl, cfg.Proxy.UpstreamSASL); err != nil {
			return nil, fmt.Errorf("broker ACLs (--broker-acls): %w", err)
		}
		in.data.acls = &brokerACLs{adm: kadm.NewClient(in.dstCl)}
		log.Info("mirror topics are read-only at the destination brokers too: DENY ACLs for User:* while they are mirrored")
	}
	in.Coord, err = coordinator.New(ctx, coordinator.Config{
		Client: withID(clientid.State), StateTopic: cfg.StateTopic, StatePartitions: cfg.StatePartitions,
		StateReplicationFactor: cfg.StateReplicationFactor, GroupID: cfg.GroupID,
		SessionTimeout: cfg.SessionTimeout, DataPath: in.data, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	in.data.SetLease(in.Coord.Lease)
	in.wireProxy()
	in.rpo = apis.NewRPOSampler(in.Backend, 0)
	in.routes = newRouteDriver(in.Coord.Store(), in.Coord.Write, in.Coord.MemberID, in.Coord.OwnsRoute, in.Coord.LiveMembers,
		in.routeNames, in.routeMirror, apis.SwitchActions{B: in.Backend}, log)
	in.routes.back = func(back string) routeswitch.Actions { return apis.SwitchActions{B: in.Backend, Back: back} }
	in.routes.findBack = apis.SwitchActions{B: in.Backend}.FindBack
	in.Backend.Routes = in.Proxy.Routes
	if err := in.registerMetrics(); err != nil {
		return nil, err
	}
	in.newStatusPage()
	return in, nil
}

// wireProxy installs the mirror RPC handlers, the guard and the readiness
// check on the proxy.
func (in *Instance) wireProxy() {
	p := in.Proxy
	in.Backend = &apis.Backend{Coord: in.Coord, Sources: in.sources, Destination: kadm.NewClient(in.dstCl), Log: in.log}
	apis.Register(p.Handlers, in.Backend)
	p.SetConfigResources(apis.ConfigResources(in.Backend))
	in.Guard.SetInternals(enforcement.Internals{StateTopic: in.Coord.StateTopic(), MarksTopic: in.Coord.MarksTopic(), GroupID: in.Coord.GroupID(),
		TransactionalIDPrefix: coordinator.TransactionalIDPrefix})
	p.SetGuard(in.Guard)
	p.SetReadiness(in.Coord.Ready) // /ready: joined the group and caught up with the state
	// Until the view has read __mirror_state to its end, no topic is known not to be a mirror
	// topic: every write is refused, retriably (readOnlyFollower).
	in.Guard.Update(enforcement.Loading("starting").WithLost(in.Coord.Loss().Topics()))
}

// registerMetrics publishes the mirroring side's metrics beside the proxy's.
func (in *Instance) registerMetrics() error {
	meter := in.Proxy.MeterProvider().Meter("github.com/kmirror/kmirror/coordinator")
	if err := errors.Join(in.Coord.RegisterMetrics(meter), in.rpo.RegisterMetrics(meter), in.sources.Throttles().RegisterMetrics(meter),
		in.requests.RegisterMetrics(meter)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// secretsResolver loads the secrets key file, if any: without one, source
// secrets can only be given as config provider references.
func secretsResolver(keyFile string, log *slog.Logger) (*secrets.Resolver, error) {
	if keyFile == "" {
		log.Info("no secrets key file: mirrors' source secrets must be config provider references (${file:…}, ${env:…}); literal ones are refused and encrypted ones do not copy here")
		return secrets.NewResolver(nil), nil
	}
	keys, err := secrets.LoadKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	log.Info("secrets key file loaded", "file", keyFile, "encrypting_key", keys.Current(), "keys", keys.IDs())
	return secrets.NewResolver(keys), nil
}

// release closes what a failing New opened (a coordinator that never ran
// included).
func (in *Instance) release() {
	if in.Coord != nil {
		in.Coord.Close()
	}
	in.closeDataPath()
}

// closeDataPath closes the copy path's clients: Run's once the coordinator
// has stopped, New's when it fails.
func (in *Instance) closeDataPath() {
	if in.data != nil {
		in.data.Close()
	}
	if in.sources != nil {
		in.sources.Close()
	}
	if in.dstCl != nil {
		in.dstCl.Close()
	}
}

// identityConnections is how many connections to each destination broker
// writer identities are taken over (see DataPath.identities).
const identityConnections = 4

func identityClients(opts []kgo.Opt) ([]*kgo.Client, error) {
	var cls []*kgo.Client
	for range identityConnections {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			for _, c := range cls {
				c.Close()
			}
			return nil, fmt.Errorf("destination client for writer identities: %w", err)
		}
		cls = append(cls, cl)
	}
	return cls, nil
}

// topicName resolves a destination topic id for the guard.
func (in *Instance) topicName(ctx context.Context, id [16]byte) (string, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.TopicID = id
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, in.dstCl)
	if err != nil {
		return "", err
	}
	for _, rt := range resp.Topics {
		if rt.TopicID == id && rt.Topic != nil {
			return *rt.Topic, nil
		}
	}
	return "", fmt.Errorf("no topic has id %x", id)
}

// Start makes the proxy listen; Run then serves until ctx ends.
func (in *Instance) Start(ctx context.Context) error { return in.Proxy.Start(ctx) }

// Run serves until ctx ends, then stops everything it started.
func (in *Instance) Run(ctx context.Context) error {
	if !in.cfg.Mirroring {
		return in.Proxy.Run(ctx)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var coordErr error
	parts := newStopTracker(in.log)
	parts.run("coordinator", func() { coordErr = in.Coord.Run(mctx) })
	parts.run("sync jobs", func() {
		jobs := &syncjobs.Scheduler{Coord: in.Coord, Mirrors: in.Backend, Sources: in.sources, Destination: in.Backend.Destination, Log: in.log}
		jobs.Run(mctx)
	})
	parts.run("read-only set", func() {
		(&readOnlyFollower{guard: in.Guard, view: in.Coord.Store(), caughtUp: in.Coord.CaughtUp,
			lost: func() map[string]string { return in.Coord.Loss().Topics() }, log: in.log, retry: 250 * time.Millisecond}).run(mctx)
	})
	if len(in.Proxy.Routes()) > 0 {
		parts.run("route switches", func() {
			a := newRouteApplier(in.Coord.Store(), in.Coord.Write, in.Coord.MemberID, in.Coord.Ready, in.Proxy, in.log)
			a.sourceClient = in.sources.Client
			a.destClient = func() (*kgo.Client, error) { return in.dstCl, nil }
			a.run(mctx)
		})
		parts.run("route switch driver", func() { in.routes.run(mctx) })
	}
	parts.run("rpo report", func() { in.rpo.Run(mctx) })
	parts.run("status page", func() { in.page.Run(mctx) })
	err := in.Proxy.Run(ctx)
	in.log.Info("stopping: the proxy stopped serving; stopping the control plane and the copy")
	cancel()
	parts.wait()
	parts.run("copy pipeline and clients", in.closeDataPath)
	parts.wait()
	in.log.Info("stopped", "took", parts.since().Round(time.Millisecond))
	return errors.Join(err, coordErr)
}

// routeNames lists the routes this instance serves.
func (in *Instance) routeNames() []string {
	var out []string
	for _, r := range in.Proxy.Routes() {
		out = append(out, r.Name)
	}
	return out
}

// routeMirror names the mirror a route is tied to ("" for no such route).
func (in *Instance) routeMirror(route string) string {
	for _, r := range in.Proxy.Routes() {
		if r.Name == route {
			return r.Mirror
		}
	}
	return ""
}

// stopTracker runs the instance's parts and, once they are told to stop, logs every
// stopLogEvery which are still running: a graceful stop that takes long (the soak saw
// SIGTERM take over 30 s under faults) then says what it waits for.
type stopTracker struct {
	log     *slog.Logger
	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[string]bool
	began   time.Time
	every   time.Duration // stopLogEvery; tests shorten it
}

const stopLogEvery = 5 * time.Second

func newStopTracker(log *slog.Logger) *stopTracker {
	return &stopTracker{log: log, running: map[string]bool{}, every: stopLogEvery}
}

func (s *stopTracker) run(name string, fn func()) {
	s.mu.Lock()
	s.running[name] = true
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { s.mu.Lock(); delete(s.running, name); s.mu.Unlock() }()
		fn()
	}()
}

// wait returns once every part returned, logging those still running meanwhile.
func (s *stopTracker) wait() {
	if s.began.IsZero() {
		s.began = time.Now()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			s.mu.Lock()
			names := slices.Sorted(maps.Keys(s.running))
			s.mu.Unlock()
			s.log.Warn("still stopping", "waiting_for", names, "for", time.Since(s.began).Round(time.Second))
		}
	}
}

func (s *stopTracker) since() time.Duration { return time.Since(s.began) }
