// Package coordinator runs the mirror control plane on one kmirror instance:
// it keeps this instance's copy of __mirror_state (Store), takes a share of
// the mirror partitions through a Kafka consumer group on that topic (the
// instance assigned state partition p coordinates every mirror partition whose
// key hashes to p), and drives each owned partition through the state machine
// of docs/PROTOCOL.md (Next), persisting every state before acting on it.
//
// Goroutines: Run owns the reconcile loop; the group client calls back on
// (re)assignment; each owned partition has a worker goroutine that alone
// writes that partition's state and calls the DataPath for it.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// Config configures a Coordinator.
type Config struct {
	// Client holds the destination connection options (seed brokers, TLS,
	// SASL): the state topic lives on the destination cluster.
	Client                 []kgo.Opt
	StateTopic             string        // default __mirror_state
	StatePartitions        int32         // default 50; never change it once created
	StateReplicationFactor int16         // default 3, clamped to the broker count
	MarksTopic             string        // default __mirror_state_marks (stateloss.go)
	GroupID                string        // default kmirror-coordinators
	SessionTimeout         time.Duration // default 10s: how fast a dead instance's share moves
	DataPath               DataPath
	Logger                 *slog.Logger
	// ResyncEvery: how often every worker looks at its state even when none
	// of its records changed (default 30s; a safety net, see reconcile).
	ResyncEvery time.Duration
}

func (c *Config) defaults() {
	if c.StateTopic == "" {
		c.StateTopic = statetopic.TopicName
	}
	if c.MarksTopic == "" {
		c.MarksTopic = statetopic.MarksTopicName
	}
	if c.StatePartitions <= 0 {
		c.StatePartitions = 50
	}
	if c.StateReplicationFactor <= 0 {
		c.StateReplicationFactor = 3
	}
	if c.GroupID == "" {
		c.GroupID = "kmirror-coordinators"
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ResyncEvery <= 0 {
		c.ResyncEvery = 30 * time.Second
	}
}

// Coordinator is one instance's share of the control plane.
type Coordinator struct {
	cfg   Config
	log   *slog.Logger
	store *Store
	group *kgo.Client
	wake  chan struct{}

	// Lease (lease.go): leaseUntil is how long after leaseBase (monotonic)
	// writes may go on.
	leaseBase  time.Time
	leaseUntil atomic.Int64
	leaseNow   chan struct{} // renew at once: partitions were just assigned

	joined atomic.Bool // assigned since the last loss of membership (ready.go)

	mu            sync.Mutex
	owned         map[int32]bool
	numPartitions int32 // of the state topic, once it exists
	workers       map[statetopic.Key]*worker
	resyncedAt    time.Time     // when reconcile last ticked every worker (Run's goroutine only)
	reconciled    reconciled    // what reconcile last read (Run's goroutine only)
	catchUp       catchUp       // the view position the current assignment's workers wait for (Run's goroutine only)
	ownedGen      uint64        // changes of owned
	evaluations   atomic.Int64  // state machine decisions taken by the workers (a metric)
	reconciledGen atomic.Uint64 // the Store generation the last full reconcile pass read

	lossMu sync.Mutex // one CheckState at a time
	loss   lossTracker
}

// New connects to the destination. Run starts the work.
func New(ctx context.Context, cfg Config) (*Coordinator, error) {
	cfg.defaults()
	if cfg.DataPath == nil {
		return nil, errors.New("coordinator: Config.DataPath is required")
	}
	c := &Coordinator{cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1), leaseBase: time.Now(), leaseNow: make(chan struct{}, 1),
		owned: map[int32]bool{}, workers: map[statetopic.Key]*worker{}}
	var err error
	c.store, err = OpenStore(ctx, StoreConfig{Topic: cfg.StateTopic, Partitions: cfg.StatePartitions,
		ReplicationFactor: cfg.StateReplicationFactor, Client: cfg.Client, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	c.loss.marks, err = newMarksTopic(cfg.MarksTopic, cfg.StateReplicationFactor, cfg.Client, cfg.Logger)
	if err != nil {
		c.store.Close()
		return nil, err
	}
	c.group, err = kgo.NewClient(append(cfg.Client,
		kgo.ConsumerGroup(cfg.GroupID),
		kgo.ConsumeTopics(cfg.StateTopic),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(cfg.SessionTimeout/5),
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.MetadataMaxAge(5*time.Second),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	)...)
	if err != nil {
		c.store.Close()
		c.loss.marks.close()
		return nil, fmt.Errorf("coordinator: group client: %w", err)
	}
	// Membership is all this client is for; the Store reads the records.
	c.group.PauseFetchTopics(cfg.StateTopic)
	// Know before serving whether state was lost while no instance ran, so
	// the read-only set includes the lost mirrors' topics from the start;
	// an unreachable destination is retried by Run. The marks are brought up
	// to date by Run's loss check: they need the view caught up with the
	// state topic, which only Run reads (waiting for it here held every
	// restart for this whole bound, 15 s, before the instance served).
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := c.checkState(cctx, false); err != nil {
		c.log.Warn("checking the mirror state topic at start-up; retrying while running", "err", err)
	}
	return c, nil
}

// StateTopic is the name of the state topic (the configured one or the default).
func (c *Coordinator) StateTopic() string { return c.cfg.StateTopic }

// MarksTopic is the topic that keeps lost mirrors' topics read-only (marks.go).
func (c *Coordinator) MarksTopic() string { return c.cfg.MarksTopic }

// GroupID is the group the instances share the work through.
func (c *Coordinator) GroupID() string { return c.cfg.GroupID }

// Store is this instance's view of __mirror_state, for the admin RPCs.
func (c *Coordinator) Store() *Store { return c.store }

// StatePartitions is the state topic's partition count (the hash modulus);
// it asks the destination until the topic exists.
func (c *Coordinator) StatePartitions(ctx context.Context) (int32, error) {
	c.mu.Lock()
	n := c.numPartitions
	c.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	n, err := c.store.Partitions(ctx)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.numPartitions = n
	c.mu.Unlock()
	return n, nil
}

// EnsureStateTopic creates __mirror_state if needed (first CreateMirror).
func (c *Coordinator) EnsureStateTopic(ctx context.Context) error {
	if err := c.store.EnsureTopic(ctx); err != nil {
		return err
	}
	c.group.ForceMetadataRefresh()
	return nil
}

// Write persists records, hashing them onto the state topic's partitions.
func (c *Coordinator) Write(ctx context.Context, recs ...Record) error {
	n, err := c.StatePartitions(ctx)
	if err != nil {
		return err
	}
	return c.store.Write(ctx, n, recs...)
}

// OwnsRoute reports whether this instance owns a route's state partition
// (where its switch record and acks live): that instance alone drives the
// route's switches, so requests for a route are serialised there.
func (c *Coordinator) OwnsRoute(route string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.numPartitions == 0 {
		return false
	}
	return c.owned[statetopic.RouteSwitchKey(route).StatePartition(c.numPartitions)]
}

// LiveMembers lists the member ids of the coordinators' group: the
// instances a route switch waits for (their acks are written under these).
func (c *Coordinator) LiveMembers(ctx context.Context) ([]string, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids, nil
}

// MemberID is this instance's member id in the coordinators' group ("" before
// its first join). It changes when the instance rejoins: an acknowledgement
// written under it (a route switch's RouteAck) counts for this membership only.
func (c *Coordinator) MemberID() string {
	id, _ := c.group.GroupMetadata()
	return id
}

// Close releases the clients of a coordinator that is never Run (its
// caller failed after New); Run releases them itself when it returns.
func (c *Coordinator) Close() {
	c.group.Close()
	c.store.Close()
	c.loss.marks.close()
}

// Run works until ctx ends, then stops every worker (without writing state:
// the next owner finishes what this one started) and closes the clients.
func (c *Coordinator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		c.store.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		c.runLossCheck(ctx)
	}()
	go func() {
		defer wg.Done()
		c.runLease(ctx)
	}()
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		c.reconcile(ctx)
		last := time.Now()
		select {
		case <-ctx.Done():
		case <-c.store.Changed():
			// A start-up writes thousands of state records, applied in as many
			// batches: one pass per reconcileEvery reads them together (each
			// pass reads every mirror partition).
			t := time.NewTimer(reconcileEvery - time.Since(last))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		case <-c.wake:
		case <-ticker.C:
		}
		if ctx.Err() != nil {
			c.stopWorkers(func(statetopic.Key) bool { return true })
			c.group.Close()
			wg.Wait()
			c.store.Close()
			c.loss.marks.close()
			return nil
		}
	}
}

// reconcileEvery is the shortest time between two reconcile passes woken by
// state changes: what a change waits for at most before its workers look.
const reconcileEvery = 50 * time.Millisecond

func (c *Coordinator) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Coordinator) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	c.joined.Store(true) // kgo calls this after every join, with or without partitions
	c.mu.Lock()
	for _, p := range m[c.cfg.StateTopic] {
		c.owned[p] = true
	}
	c.ownedGen++
	c.mu.Unlock()
	c.log.Info("coordinating state partitions", "assigned", m[c.cfg.StateTopic])
	select {
	case c.leaseNow <- struct{}{}:
	default:
	}
	c.poke()
}

// revoked stops the workers of the lost state partitions before returning,
// so that the next owner rarely overlaps with this one (fencing makes an
// overlap harmless, not free).
func (c *Coordinator) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	lost := map[int32]bool{}
	c.mu.Lock()
	for _, p := range m[c.cfg.StateTopic] {
		delete(c.owned, p)
		lost[p] = true
	}
	c.ownedGen++
	n := c.numPartitions
	c.mu.Unlock()
	if len(lost) == 0 {
		return
	}
	c.log.Info("handing over state partitions", "revoked", m[c.cfg.StateTopic])
	c.stopWorkers(func(k statetopic.Key) bool { return n > 0 && lost[k.StatePartition(n)] })
}

// reconcile starts workers for owned mirror partitions, stops the others, and
// tells every worker to look at the state again.
func (c *Coordinator) reconcile(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	if _, frozen := c.store.ID(); frozen {
		// No state to fence or position a copy: copy nothing (stateloss.go).
		c.stopWorkers(func(statetopic.Key) bool { return true })
		c.reconciled, c.catchUp = reconciled{}, catchUp{}
		return
	}
	n, err := c.StatePartitions(ctx)
	if err != nil {
		return // no mirror yet
	}
	resync := time.Since(c.resyncedAt) >= c.cfg.ResyncEvery
	c.mu.Lock()
	seen := reconciled{store: c.store.Generation(), owned: c.ownedGen, partitions: n}
	c.mu.Unlock()
	if seen == c.reconciled && !resync {
		// Nothing a worker set or a worker's inputs come from changed: the
		// once-a-second pass would rebuild the same map of every partition
		// (an idle instance's largest allocation, bench/README.md "Scale").
		return
	}
	want, configs := c.wantedWorkers(n)
	if mc, ok := c.cfg.DataPath.(MirrorConfigurer); ok {
		for name, cfg := range configs {
			mc.ConfigureMirror(name, cfg)
		}
	}
	c.stopWorkers(func(k statetopic.Key) bool { _, keep := want[k]; return !keep })
	if !c.caughtUpFor(ctx, seen.owned) {
		return // the next applied batch runs reconcile again
	}
	if resync {
		c.resyncedAt = time.Now()
	}
	c.reconciled = seen
	c.reconciledGen.Store(seen.store)
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, wv := range want {
		w := c.workers[k]
		fresh := w == nil
		if fresh {
			w = startWorker(ctx, c, k, wv.ref)
			c.workers[k] = w
		}
		// A worker decides from its ref and these records alone (Next is a
		// function of them, the worker's own state and the event; its timers
		// post their own ticks), so one whose inputs are the ones it was last
		// ticked for would decide the same again. Ticking every worker at
		// every applied batch (group sync and progress records included) and
		// every second cost an idle instance of 2,000 partitions 2,000
		// evaluations a second, and a start-up of 4,000 partitions one per
		// worker per applied batch (bench/README.md, "Scale").
		// Config.ResyncEvery ticks them all anyway: a safety net, not a
		// mechanism (an informer's resync period).
		if fresh || resync || w.getRef() != wv.ref || w.inputs != wv.inputs {
			w.setRef(wv.ref)
			w.inputs = wv.inputs
			w.tick()
		}
	}
}

// wantedWorkers lists the mirror partitions whose state partition (of n) this
// instance owns, with the records their workers decide from, and every
// mirror's config.
func (c *Coordinator) wantedWorkers(n int32) (want map[statetopic.Key]wanted, configs map[string]*statetopic.MirrorConfig) {
	want = map[statetopic.Key]wanted{}
	configs = map[string]*statetopic.MirrorConfig{}
	c.mu.Lock()
	owned := make(map[int32]bool, len(c.owned))
	for p := range c.owned {
		owned[p] = true
	}
	c.mu.Unlock()
	c.store.Read(func(v *statetopic.View) {
		for _, name := range v.MirrorNames() {
			m := v.Mirror(name)
			configs[name] = m.Config
			for topic, t := range m.Topics {
				for p := int32(0); p < t.Partitions; p++ {
					k := statetopic.PartitionStateKey(name, t.SourceTopicID, p)
					if owned[k.StatePartition(n)] {
						want[k] = wanted{
							ref:    PartitionRef{Mirror: name, Topic: topic, Partition: p, SourceTopicID: t.SourceTopicID, Config: m.Config},
							inputs: workerInputs{topic: t, part: m.Partitions[statetopic.PartitionID{SourceTopicID: t.SourceTopicID, Partition: p}]},
						}
					}
				}
			}
		}
	})
	return want, configs
}

// caughtUpFor reports whether the view holds every state record written
// before this assignment (owned, Coordinator.ownedGen) was taken: only then
// may workers decide. A worker that decides from a view without its
// partition's record takes the partition for new (a fresh data writer, a
// PREPARING record over a FAILED one): a CI soak run's instance, restarted,
// started soak.tx/0 again that way 0.5 s after its view had read the state
// topic's records of other partitions, after it had failed for good. The end
// offsets are read once per assignment and the view compared with them at
// every pass (each applied batch wakes reconcile), so a state topic that
// keeps being written cannot keep workers waiting.
func (c *Coordinator) caughtUpFor(ctx context.Context, owned uint64) bool {
	if c.catchUp.want == nil || c.catchUp.owned != owned {
		want, err := c.store.endOffsets(ctx)
		if err != nil {
			c.log.Debug("reading the state topic's end offsets before starting workers; retrying", "err", err)
			return false
		}
		c.catchUp = catchUp{owned: owned, want: want}
	}
	return c.store.reached(c.catchUp.want)
}

// catchUp is the view position an assignment's workers wait for.
type catchUp struct {
	owned uint64
	want  map[int32]int64
}

// reconciled is what a reconcile pass read: a pass that would read the same
// decides the same.
type reconciled struct {
	store      uint64 // Store.Generation
	owned      uint64 // Coordinator.ownedGen
	partitions int32
}

// wanted is a partition reconcile wants a worker for, with the records its
// decisions read.
type wanted struct {
	ref    PartitionRef
	inputs workerInputs
}

// workerInputs are the state records a worker's decisions read, by
// identity: the view replaces a record's value with a new one whenever a
// record is applied (statetopic.View.ApplyDecoded), so an equal pointer is
// an unchanged record. The mirror's config is in PartitionRef.
type workerInputs struct {
	topic *statetopic.MirrorTopic
	part  *statetopic.PartitionState
}

func (c *Coordinator) stopWorkers(match func(statetopic.Key) bool) {
	c.mu.Lock()
	var stop []*worker
	for k, w := range c.workers {
		if match(k) {
			stop = append(stop, w)
			delete(c.workers, k)
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range stop {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.stop()
		}()
	}
	wg.Wait()
}

// Progress reports the copy progress of a partition this instance runs.
func (c *Coordinator) Progress(ref PartitionRef) (datapath.Progress, bool) {
	return c.cfg.DataPath.Progress(ref)
}

// OwnsMirror reports whether this instance coordinates the mirror-level
// records of a mirror (its config's state partition): that instance alone
// runs the mirror's periodic refresh.
func (c *Coordinator) OwnsMirror(mirror string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.numPartitions == 0 {
		return false
	}
	return c.owned[statetopic.MirrorConfigKey(mirror).StatePartition(c.numPartitions)]
}
