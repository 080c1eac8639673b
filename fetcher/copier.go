package fetcher

// The Copier runs the data path of one mirror on one kmirror instance.
//
// Goroutines (all started by the Copier, all stopped by Close):
//   - one source per source leader broker (source.go): READ_COMMITTED
//     Fetch requests for every owned partition that broker leads and that
//     has buffer room; the planner (plan.go) turns each fetched batch into
//     the destination operations that put it at its source offsets;
//   - one sink per destination leader broker and lane (sink.go): pipelined
//     acks=all Produce requests (up to maxRequestsInFlight), each with the
//     next append of every partition that broker leads, written to the
//     connection strictly in order;
//   - a control goroutine per partition while a transaction operation runs
//     at the head of its queue (begin, end and wait for the marker, marker
//     filler; control.go);
//   - one admin goroutine: metadata refreshes after leader errors, source
//     ListOffsets after OFFSET_OUT_OF_RANGE, DeleteRecords on the
//     destination after a gap was filled (admin.go);
//   - one event goroutine delivering datapath.Events in order, outside any
//     lock (lifecycle.go).
//
// One mutex (Copier.mu) guards every partition's state (partition.go says
// which fields move together); no I/O happens under it. docs/DESIGN.md
// ("Data path") draws the objects and how a batch travels between them. A partition's queue is strictly ordered: appends at its head may be in
// flight together (the broker's idempotence keeps them in order and
// deduplicates resends), a control operation runs only when nothing before it
// is in flight.
//
// Writers and owners. Non-transactional source batches are appended by the
// partition's idempotent writer, whose producer id and epoch the caller
// keeps in the partition's state and hands to every later owner unchanged;
// source transactions are replayed in destination transactions (txn.go).
// Nothing is re-fenced on a change of owner: every write is a deterministic
// function of the source log and the destination position, so an old owner
// that wakes up (frozen past its session) can only repeat a write the new
// owner makes too, which the broker answers from its idempotence cache (same
// producer id, epoch and sequence) or refuses (stale sequence or epoch). The
// caller's Lease additionally stops an owner from writing once it may have
// lost the partition.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

// Sentinel errors carried by Events and returned by Start (wrapped with
// context). Those retrying cannot fix are marked datapath.Permanent, so the
// coordinator reads their retriability from the error itself.
var (
	ErrOffsetMismatch      = datapath.NewPermanent("destination assigned an offset other than the source offset")
	ErrDiverged            = datapath.NewPermanent("destination log diverged from the source")
	ErrFenced              = errors.New("fenced by a newer owner of the partition")
	ErrSourceTopicChanged  = datapath.NewPermanent("source topic was deleted or re-created")
	ErrBatchTooLarge       = datapath.NewPermanent("source batch is larger than the destination accepts")
	ErrDestinationRejected = errors.New("destination rejected a batch")
	ErrForeignTransaction  = errors.New("a producer outside the mirror has an open transaction on the destination partition")
	ErrCoordinatorBehind   = datapath.NewPermanent("the destination's transaction coordinator lost the end of a transaction its partition has")
)

// Copier copies batches of many partitions of one mirror.
type Copier struct {
	cfg    Config
	log    *slog.Logger
	dst    *kgo.Client // the copier's own destination client (write hook)
	dstAdm *kadm.Client
	txn    txnClient

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	parts   map[topicPartition]*partition
	sources map[int32]*source // by source broker
	sinks   map[laneKey]*sink // by destination broker and lane
	// lanes are the destination clients Produce goes over, each with its own
	// connection to every broker; a partition always uses the same one
	// (partition.lane), so its appends stay in order. lanes[0] is dst.
	lanes []*kgo.Client
	// fetchers are the source clients Fetch goes over: fetchers[i] is the
	// connection of every source's i-th fetch goroutine (source.go). Clones
	// of Config.Source, owned here.
	fetchers []*kgo.Client
	reserved int64 // buffered + in-flight fetch reservations
	events   []func()
	closed   bool

	fetchTurn int          // rotates the partition order of fetches (under mu)
	rate      atomic.Int64 // bytes/s, 0 unlimited
	nextFetch time.Time    // rate limit: when the next fetch may go (under mu)

	adminWake chan struct{}
	eventWake chan struct{}
}

const (
	// maxErrStreak and maxErrTime bound how many consecutive retriable
	// errors, and for how long, a partition absorbs before it stops with
	// a retriable EventFailed: long enough to ride out a leader election or a
	// coordinator moving (seconds), short enough that a partition that
	// cannot make progress shows as FAILED.
	maxErrStreak = 20
	maxErrTime   = time.Minute
	// maxInFlightPerPartition is the broker's idempotence window: a resend
	// is recognised only among a producer's last 5 batches.
	maxInFlightPerPartition = 5
	maxRequestsInFlight     = 5
	// maxRequestBytes bounds one Produce request (about; a request holds at
	// least one batch): smaller requests keep the broker busy while the next
	// is on the wire, where one request of every partition's batch would
	// leave it idle between huge requests.
	maxRequestBytes = 4 << 20
)

// NewCopier starts a Copier's background goroutines; Close stops them.
func NewCopier(cfg Config) (*Copier, error) {
	if cfg.Source == nil || cfg.Destination == nil {
		return nil, errors.New("fetcher: Config.Source and Config.Destination are required")
	}
	cfg = cfg.withDefaults()
	if cfg.MaxBufferedBytes < int64(cfg.FetchMaxBytes) {
		return nil, fmt.Errorf("fetcher: MaxBufferedBytes %d is below FetchMaxBytes %d", cfg.MaxBufferedBytes, cfg.FetchMaxBytes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Copier{
		cfg:       cfg,
		log:       cfg.Logger,
		ctx:       ctx,
		cancel:    cancel,
		parts:     make(map[topicPartition]*partition),
		sources:   make(map[int32]*source),
		sinks:     make(map[laneKey]*sink),
		adminWake: make(chan struct{}, 1),
		eventWake: make(chan struct{}, 1),
	}
	c.rate.Store(cfg.RateLimit)
	for lane := range produceLanes {
		opts := []kgo.Opt{kgo.WithHooks(writeHook{c, lane})}
		if cfg.WriterClientID != "" {
			opts = append(opts, kgo.ClientID(cfg.WriterClientID))
		}
		cl, err := clone(cfg.Destination, opts...)
		if err != nil {
			cancel()
			c.closeClients()
			return nil, fmt.Errorf("fetcher: destination client: %w", err)
		}
		c.lanes = append(c.lanes, cl)
	}
	for range cfg.FetchesInFlight {
		// One connection per fetch goroutine (source.go says why), none of
		// them Config.Source's: an idle poll holds its connection for up to
		// idleFetchWait, and the broker reads a connection's next request
		// only after answering it, so a Fetch of anyone else over the
		// caller's client (the RPO report, log entries, the next copier of
		// the same source after a restart) would wait behind it.
		cl, err := clone(cfg.Source)
		if err != nil {
			cancel()
			c.closeClients()
			return nil, fmt.Errorf("fetcher: source fetch client: %w", err)
		}
		c.fetchers = append(c.fetchers, cl)
	}
	dst := c.lanes[0]
	c.dst, c.dstAdm = dst, kadm.NewClient(dst)
	c.txn = newTxnClient(dst, c.dstAdm)
	c.txn.lease = c.lease
	c.wg.Add(2)
	go c.adminLoop()
	go c.eventLoop()
	return c, nil
}

// writeHook counts Produce requests written per destination broker and lane.
type writeHook struct {
	c    *Copier
	lane int
}

// laneKey names a sink: a destination broker and a lane.
type laneKey struct {
	id   int32
	lane int
}

func (h writeHook) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key != 0 {
		return
	}
	h.c.mu.Lock()
	k := h.c.sinks[laneKey{meta.NodeID, h.lane}]
	h.c.mu.Unlock()
	if k != nil {
		k.writes.Add(1)
		signal(k.wrote)
	}
}

// SetRateLimit changes the copy's byte-rate limit (0: unlimited).
func (c *Copier) SetRateLimit(bytesPerSecond int64) { c.rate.Store(max(bytesPerSecond, 0)) }

// Close stops every partition (without waiting for in-flight produces to be
// answered: use Stop for an orderly handover) and every goroutine.
func (c *Copier) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	for _, p := range c.parts {
		if p.state != stateDone {
			p.state = stateDone
			close(p.done)
		}
	}
	c.mu.Unlock()
	c.closeClients()
}

// clone makes a client with base's options (seeds, TLS, SASL, client id,
// hooks) and connections of its own, plus extra options.
func clone(base *kgo.Client, extra ...kgo.Opt) (*kgo.Client, error) {
	// Clipped: Opts is the client's own slice, which the clone must not share.
	return kgo.NewClient(append(slices.Clip(base.Opts()), extra...)...)
}

// closeClients closes the clients the copier made: its produce lanes and
// the clones of the source client (Config.Source is the caller's).
func (c *Copier) closeClients() {
	for _, cl := range c.lanes {
		cl.Close()
	}
	for _, cl := range c.fetchers {
		cl.Close()
	}
}

// Progress returns a partition's progress, false if it is not started.
func (c *Copier) Progress(topic string, partition int32) (datapath.Progress, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.parts[topicPartition{topic, partition}]
	if !ok {
		return datapath.Progress{}, false
	}
	return p.snapshot(), true
}

// ---- lock-held helpers ----

func (c *Copier) wakeSrcLocked(id int32) {
	if id < 0 {
		return
	}
	s, ok := c.sources[id]
	if !ok {
		s = &source{c: c, id: id, wake: make(chan struct{}, 1)}
		c.sources[id] = s
		s.start()
	}
	signal(s.wake)
}

func (c *Copier) wakeDstLocked(p *partition) {
	id := p.dstLeader
	if id < 0 {
		return
	}
	k := laneKey{id, p.lane}
	sk, ok := c.sinks[k]
	if !ok {
		sk = &sink{c: c, id: id, lane: p.lane, wake: make(chan struct{}, 1), wrote: make(chan struct{}, 1)}
		c.sinks[k] = sk
		c.wg.Add(1)
		go sk.run()
	}
	signal(sk.wake)
}

func (c *Copier) wakeAllSrcLocked() {
	for _, s := range c.sources {
		signal(s.wake)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleep waits d or until the copier closes; it reports whether to go on.
func (c *Copier) sleep(ch chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.ctx.Done():
		return false
	case <-ch:
	case <-t.C:
	}
	return true
}

// sortedParts lists partitions in a stable order (requests are
// deterministic, and partitions that need a big first batch go first).
func sortedParts(ps []*partition) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].bigFirst != ps[j].bigFirst {
			return ps[i].bigFirst
		}
		if ps[i].tp.topic != ps[j].tp.topic {
			return ps[i].tp.topic < ps[j].tp.topic
		}
		return ps[i].tp.partition < ps[j].tp.partition
	})
}

// produceLanes is how many connections to each destination broker a copy's
// Produce requests are spread over. A broker serves one connection's requests
// one at a time, and on one connection the 4 MiB requests of a 64-partition
// copy were answered at about 115 MB/s, 40–220 ms each with 5 in flight,
// while the broker had cores to spare. Over two, paired benchmark runs of
// that copy (loaded machine) went from 58–67 to 92–159 MB/s; four lanes did
// no better than two.
const produceLanes = 2

// laneOf spreads partitions over n lanes.
func laneOf(tp topicPartition, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tp.topic))
	return int((h.Sum32() + uint32(tp.partition)) % uint32(n))
}
