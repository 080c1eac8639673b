package fetcher

// The Copier runs the data path of one mirror on one kmirror instance.
//
// Goroutines (all started by the Copier, all stopped by Close):
//   - one source worker per source leader broker: READ_COMMITTED Fetch
//     requests for every owned partition that broker leads and that has
//     buffer room; the planner (plan.go) turns each fetched batch into the
//     destination operations that put it at its source offsets;
//   - one destination worker per destination leader broker: pipelined
//     acks=all Produce requests (up to maxRequestsInFlight), each with the
//     next append of every partition that broker leads, written to the
//     connection strictly in order (destination.go);
//   - a control goroutine per partition while a transaction operation runs
//     at the head of its queue (begin, end and wait for the marker, marker
//     filler; control.go);
//   - one admin goroutine: metadata refreshes after leader errors, source
//     ListOffsets after OFFSET_OUT_OF_RANGE, DeleteRecords on the
//     destination after a gap was filled (admin.go);
//   - one event goroutine delivering Events in order, outside any lock.
//
// One mutex (Copier.mu) guards every partition's state; no I/O happens under
// it. A partition's queue is strictly ordered: appends at its head may be in
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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Config configures a Copier.
type Config struct {
	Source      *kgo.Client
	Destination *kgo.Client
	// WriterClientID, if set, is the client id of the copy's destination
	// writes (Produce and transaction control): destination quotas can
	// then single out one mirror's writes (internal/clientid).
	WriterClientID string
	// FetchMaxBytes is the per-partition fetch size (default 1 MiB); partitions that share
	// a leader with few others fetch more (partitionFetchBytes).
	FetchMaxBytes int32
	// FetchResponseMaxBytes bounds one Fetch response (default 10 MiB).
	FetchResponseMaxBytes int32
	// FetchMaxWait is how long a broker may hold a Fetch (default 500 ms).
	FetchMaxWait time.Duration
	// MaxBufferedBytes bounds fetched-but-unwritten bytes over all
	// partitions (default 64 MiB). A broker may return one batch larger than
	// the fetch limits (to make progress), so the bound can be exceeded by at
	// most one destination max.message.bytes per source broker.
	MaxBufferedBytes int64
	// ProduceTimeout is the destination's acks=all wait (default 30 s).
	ProduceTimeout time.Duration
	// RateLimit bounds the source bytes copied per second over all
	// partitions (0: unlimited); SetRateLimit changes it at runtime.
	RateLimit int64
	// FillerTransactions is how many empty aborted transactions may be in
	// flight at once per partition to fill offsets the source has no record
	// at (default 32).
	FillerTransactions int
	// Lease, if set, is asked before every write to the destination; an
	// error holds the write back (the caller may have lost the partition).
	Lease  func() error
	Logger *slog.Logger
}

// Task names one mirror partition to copy.
type Task struct {
	Topic     string
	Partition int32
	// SourceTopicID is the source topic id the mirror recorded; a different
	// id on the source means the topic was deleted and re-created. Zero:
	// learn it at Start (see Progress.SourceTopicID).
	SourceTopicID [16]byte
	// TransactionalID prefixes the partition's destination transactional ids
	// (txn.go); every owner of the partition must use the same one.
	TransactionalID string
	// Writer is the partition's idempotent writer (NewWriter), the same for
	// every owner of the partition. Nil: Start takes a new one (tests).
	// (Producer id 0 is a valid id: the first a cluster hands out.)
	Writer *ProducerIdentity
}

// Progress is where a partition's copy stands.
type Progress struct {
	SourceTopicID       [16]byte
	SourceLogStart      int64
	SourceHighWatermark int64
	// SourceLastStable is the source's last stable offset: the copy goes up
	// to it (batches above it belong to transactions not yet decided).
	SourceLastStable int64
	// DestinationLogEnd is the next offset the destination will assign,
	// which is also the next source offset to copy.
	DestinationLogEnd int64
	RecordsCopied     int64 // source records appended (filler not counted)
	BytesCopied       int64 // source batch bytes appended
	FillerRecords     int64 // filler offsets appended to close retention gaps
	// FillerMarkers counts offsets filled with markers of empty aborted
	// transactions (source offsets with no record, left by compaction).
	FillerMarkers int64
	// Transactions counts source transaction markers replayed.
	Transactions int64
	// OpenTransactions is how many destination transactions are open now.
	OpenTransactions int
	// AbortedAtFailover counts open destination transactions that Failover
	// aborted (their markers follow DestinationLogEnd).
	AbortedAtFailover int
	// LastCopiedTimestamp is the max timestamp of the last copied batch.
	LastCopiedTimestamp time.Time
	UpdatedAt           time.Time
	ProducerID          int64
	ProducerEpoch       int16
}

// EventKind says what happened to a partition.
type EventKind int8

const (
	// EventNonRetriable: the partition stopped and must go to FAILED without
	// automatic retry (offset mismatch, divergence, unsupported batch,
	// source topic deleted or re-created, batch too large).
	EventNonRetriable EventKind = iota + 1
	// EventRetriable: the partition stopped after an error that a later
	// Start may get past (the coordinator retries with backoff).
	EventRetriable
	// EventFenced: another owner took over the partition; it stopped.
	EventFenced
	// EventGapFilled: destination offsets [From, To) were filled because
	// the source no longer has them (retention or DeleteRecords on the
	// source); the partition keeps running.
	EventGapFilled
)

func (k EventKind) String() string {
	switch k {
	case EventNonRetriable:
		return "non-retriable failure"
	case EventRetriable:
		return "retriable failure"
	case EventFenced:
		return "fenced"
	case EventGapFilled:
		return "retention gap filled"
	}
	return fmt.Sprintf("EventKind(%d)", int8(k))
}

// Event reports a change of a partition to the Start caller.
type Event struct {
	Kind      EventKind
	Topic     string
	Partition int32
	Err       error // failures and fencing
	From, To  int64 // EventGapFilled: filled destination offsets [From, To)
	Progress  Progress
}

// Sentinel errors carried by Events (wrapped with context).
var (
	ErrOffsetMismatch      = errors.New("destination assigned an offset other than the source offset")
	ErrDiverged            = errors.New("destination log diverged from the source")
	ErrFenced              = errors.New("fenced by a newer owner of the partition")
	ErrSourceTopicChanged  = errors.New("source topic was deleted or re-created")
	ErrBatchTooLarge       = errors.New("source batch is larger than the destination accepts")
	ErrDestinationRejected = errors.New("destination rejected a batch")
	ErrForeignTransaction  = errors.New("a producer outside the mirror has an open transaction on the destination partition")
)

type topicPartition struct {
	topic     string
	partition int32
}

type partitionState int8

const (
	stateRunning partitionState = iota
	stateStopping
	stateDone
)

type pendingGap struct {
	from     int64 // destination log end when the gap was seen
	logStart int64 // source log start
}

type partition struct {
	lane    int // the destination lane its appends go over (Copier.lanes)
	tp      topicPartition
	task    Task
	onEvent func(Event)

	// The idempotent writer: its sequence advances as appends are sent.
	writer  ProducerIdentity
	nextSeq int32
	// Destination transactional ids by source producer id, and the fillers.
	txns    map[int64]*destTxn
	fillers []*destTxn
	// What the partition knew of producers at Start (their sequences).
	seqHints map[int64]seqHint

	srcTopicID, dstTopicID [16]byte
	srcLeader              int32 // -1: refresh metadata
	srcLeaderEpoch         int32
	dstLeader              int32

	// fetchOffset is the next source offset to fetch and plan: every offset
	// below it is written or queued.
	fetchOffset int64
	// blocked: the source holds a batch the copier cannot copy at
	// fetchOffset; the partition fails once everything before it is written.
	blocked     error
	gap         *pendingGap
	needOffsets bool
	trimTo      int64
	fillerMax   int32
	keyedFiller bool // the destination is compacted: filler records need a key
	bigFirst    bool

	queue    []*op
	buffered int64
	inFlight int  // ops at the queue head sent and not answered (this gen)
	stale    int  // answers still due for sends of an older gen
	gen      int  // bumped when in-flight sends are given up and resent
	control  bool // a control operation at the queue head is running

	state partitionState
	// quiet: stop at the first point with no destination transaction open.
	quiet    bool
	quietBy  time.Time
	failover bool // abort open destination transactions when stopping
	err      error
	done     chan struct{}
	progress Progress

	retryAt   time.Time
	errStreak int
	errSince  time.Time // first error of the streak
}

// openTxnsLocked counts destination transactions open on the partition.
func (p *partition) openTxnsLocked() int {
	n := 0
	for _, x := range p.txns {
		if x.open {
			n++
		}
	}
	return n
}

type worker struct {
	id   int32
	lane int // destination workers: the lane (Copier.lanes) it produces over
	wake chan struct{}
	// Produce requests written to this broker's connection (OnBrokerWrite),
	// so the next request is enqueued only after the previous one is on the
	// wire: kgo writes a broker's requests in the order they are issued.
	writes    atomic.Int64
	wrote     chan struct{}
	inFlight  int           // requests in flight (under Copier.mu)
	lastReply chan struct{} // closed once the last issued request is handled
}

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

	mu         sync.Mutex
	parts      map[topicPartition]*partition
	srcWorkers map[int32]*worker
	dstWorkers map[laneKey]*worker
	// lanes are the destination clients Produce goes over, each with its own
	// connection to every broker; a partition always uses the same one
	// (partition.lane), so its appends stay in order. lanes[0] is dst.
	lanes    []*kgo.Client
	reserved int64 // buffered + in-flight fetch reservations
	// Test hooks: partitions whose fetching or producing is held, and
	// offsets from which a partition's operations are held.
	holdFetch, holdProduce map[topicPartition]bool
	holdFrom               map[topicPartition]int64
	events                 []func()
	closed                 bool

	fetchTurn int          // rotates the partition order of fetches (under mu)
	rate      atomic.Int64 // bytes/s, 0 unlimited
	nextFetch time.Time    // rate limit: when the next fetch may go (under mu)

	adminWake chan struct{}
	eventWake chan struct{}
}

const (
	// maxErrStreak and maxErrTime bound how many consecutive retriable
	// errors, and for how long, a partition absorbs before it stops with
	// EventRetriable: long enough to ride out a leader election or a
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
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 1 << 20
	}
	if cfg.FetchResponseMaxBytes <= 0 {
		cfg.FetchResponseMaxBytes = 10 << 20
	}
	if cfg.FetchMaxWait <= 0 {
		cfg.FetchMaxWait = 500 * time.Millisecond
	}
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = 64 << 20
	}
	if cfg.ProduceTimeout <= 0 {
		cfg.ProduceTimeout = 30 * time.Second
	}
	if cfg.FillerTransactions <= 0 {
		cfg.FillerTransactions = 32
	}
	if cfg.MaxBufferedBytes < int64(cfg.FetchMaxBytes) {
		return nil, fmt.Errorf("fetcher: MaxBufferedBytes %d is below FetchMaxBytes %d", cfg.MaxBufferedBytes, cfg.FetchMaxBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Copier{
		cfg:        cfg,
		log:        cfg.Logger,
		ctx:        ctx,
		cancel:     cancel,
		parts:      make(map[topicPartition]*partition),
		srcWorkers: make(map[int32]*worker),
		dstWorkers: make(map[laneKey]*worker),
		adminWake:  make(chan struct{}, 1),
		eventWake:  make(chan struct{}, 1),

		holdFetch:   make(map[topicPartition]bool),
		holdProduce: make(map[topicPartition]bool),
		holdFrom:    make(map[topicPartition]int64),
	}
	c.rate.Store(cfg.RateLimit)
	for lane := range produceLanes {
		// Clipped: Opts is the client's own slice, which lanes must not share.
		opts := append(slices.Clip(cfg.Destination.Opts()), kgo.WithHooks(writeHook{c, lane}))
		if cfg.WriterClientID != "" {
			opts = append(opts, kgo.ClientID(cfg.WriterClientID))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			cancel()
			for _, l := range c.lanes {
				l.Close()
			}
			return nil, fmt.Errorf("fetcher: destination client: %w", err)
		}
		c.lanes = append(c.lanes, cl)
	}
	dst := c.lanes[0]
	c.dst, c.dstAdm = dst, kadm.NewClient(dst)
	c.txn = newTxnClient(dst, c.dstAdm)
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

// laneKey names a destination worker: a broker and a lane.
type laneKey struct {
	id   int32
	lane int
}

func (h writeHook) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key != 0 {
		return
	}
	h.c.mu.Lock()
	w := h.c.dstWorkers[laneKey{meta.NodeID, h.lane}]
	h.c.mu.Unlock()
	if w != nil {
		w.writes.Add(1)
		signal(w.wrote)
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
	for _, cl := range c.lanes {
		cl.Close()
	}
}

// Progress returns a partition's progress, false if it is not started.
func (c *Copier) Progress(topic string, partition int32) (Progress, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.parts[topicPartition{topic, partition}]
	if !ok {
		return Progress{}, false
	}
	pr := p.progress
	pr.OpenTransactions = p.openTxnsLocked()
	return pr, true
}

// StopMode says how Stop leaves a partition.
type StopMode int8

const (
	// StopHandover stops at once; open destination transactions stay open
	// for the next owner, which adopts them.
	StopHandover StopMode = iota
	// StopQuiet keeps copying until no destination transaction is open (or
	// the timeout passes), so the partition can rest (pause) without a
	// transaction that the destination would time out and abort.
	StopQuiet
	// StopFailover stops and aborts every open destination transaction (the
	// partition becomes an ordinary topic); the markers land after
	// DestinationLogEnd, which is the last mirrored offset.
	StopFailover
)

// quietTimeout bounds StopQuiet.
const quietTimeout = 30 * time.Second

// Stop stops copying a partition, waits until none of its writes is in
// flight and returns its final progress, with the error that stopped it
// earlier, if any. After Stop the partition may be started again.
func (c *Copier) Stop(topic string, partition int32) (Progress, error) {
	return c.StopWith(topic, partition, StopHandover)
}

// StopWith is Stop with a StopMode.
func (c *Copier) StopWith(topic string, partition int32, mode StopMode) (Progress, error) {
	tp := topicPartition{topic, partition}
	c.mu.Lock()
	p, ok := c.parts[tp]
	if !ok {
		c.mu.Unlock()
		return Progress{}, fmt.Errorf("fetcher: %s/%d is not started", topic, partition)
	}
	p.failover = p.failover || mode == StopFailover
	if p.state == stateRunning {
		if mode == StopQuiet && p.openTxnsLocked() > 0 {
			p.quiet, p.quietBy = true, time.Now().Add(quietTimeout)
			c.log.Info("pausing at the next point with no destination transaction open", "topic", topic, "partition", partition,
				"open_transactions", p.openTxnsLocked())
			c.wakeDstLocked(p)
			c.wakeSrcLocked(p.srcLeader)
		} else {
			p.state = stateStopping
		}
		c.maybeDoneLocked(p)
	}
	c.mu.Unlock()
	<-p.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parts[tp] == p {
		delete(c.parts, tp)
	}
	c.releaseLocked(p)
	pr := p.progress
	pr.OpenTransactions = p.openTxnsLocked()
	return pr, p.err
}

// Start begins copying a partition: it settles the partition's destination
// transactions left in flight by an earlier owner, reads the destination log
// end (the next source offset to copy, by offset identity) with the writers'
// sequences, checks it against the source, and starts the pipeline; a
// destination behind the source log start is aligned first
// (EventGapFilled). Errors found here are returned; later ones arrive as
// Events on onEvent, which must not block for long.
func (c *Copier) Start(ctx context.Context, task Task, onEvent func(Event)) error {
	tp := topicPartition{task.Topic, task.Partition}
	if onEvent == nil {
		onEvent = func(Event) {}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("fetcher: copier is closed")
	}
	if old, ok := c.parts[tp]; ok && old.state != stateDone {
		c.mu.Unlock()
		return fmt.Errorf("fetcher: %s/%d is already being copied", task.Topic, task.Partition)
	}
	c.mu.Unlock()
	if task.TransactionalID == "" {
		return fmt.Errorf("fetcher: %s/%d: Task.TransactionalID is required (it names the partition's writers)", task.Topic, task.Partition)
	}
	if task.Writer == nil {
		w, err := NewWriter(ctx, c.cfg.Destination)
		if err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		task.Writer = &w
	}
	if err := c.awaitLease(ctx); err != nil {
		return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
	}

	// The lookups that do not depend on each other go at once: a partition's
	// start is a chain of round trips, and 64 partitions starting together
	// meet brokers busy with the first ones' copies.
	var src, dst partitionMeta
	meta, mctx := errgroup.WithContext(ctx)
	meta.Go(func() (err error) {
		src, err = partitionMetadata(mctx, c.cfg.Source, task.Topic, task.Partition)
		if err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) && task.SourceTopicID != ([16]byte{}) {
				return fmt.Errorf("%w: %s/%d is not on the source: %v", ErrSourceTopicChanged, task.Topic, task.Partition, err)
			}
			return fmt.Errorf("fetcher: source %s/%d: %w", task.Topic, task.Partition, err)
		}
		if task.SourceTopicID != ([16]byte{}) && src.topicID != task.SourceTopicID {
			return fmt.Errorf("%w: %s has id %s on the source, the mirror recorded %s", ErrSourceTopicChanged,
				task.Topic, kadm.TopicID(src.topicID), kadm.TopicID(task.SourceTopicID))
		}
		return nil
	})
	meta.Go(func() (err error) {
		if dst, err = partitionMetadata(mctx, c.cfg.Destination, task.Topic, task.Partition); err != nil {
			return fmt.Errorf("fetcher: destination %s/%d (prepare it with EnsureDestinationTopic): %w", task.Topic, task.Partition, err)
		}
		return nil
	})
	if err := meta.Wait(); err != nil {
		return err
	}
	var (
		rp   resumePoint
		offs offsets
		tc   topicLimits
	)
	look, lctx := errgroup.WithContext(ctx)
	look.Go(func() (err error) {
		if tc, err = destinationTopicLimits(lctx, c.dstAdm, task.Topic); err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		return nil
	})
	look.Go(func() (err error) {
		if rp, err = c.resume(lctx, task); err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		// The source's offsets are read after the destination's log end: every
		// record on the destination came from the source before, so a
		// destination ahead of this high watermark truly diverged.
		if offs, err = listOffsets(lctx, c.cfg.Source, nil, task.Topic, task.Partition); err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		return nil
	})
	if err := look.Wait(); err != nil {
		return err
	}
	if rp.logEnd > offs.srcHW {
		return fmt.Errorf("%w: destination log of %s/%d has %d records more than the source (destination log end %d, source high watermark %d); it diverged",
			ErrDiverged, task.Topic, task.Partition, rp.logEnd-offs.srcHW, rp.logEnd, offs.srcHW)
	}

	p := &partition{
		lane:           laneOf(tp, len(c.lanes)),
		tp:             tp,
		task:           task,
		onEvent:        onEvent,
		writer:         *task.Writer,
		nextSeq:        rp.writerNextSeq,
		txns:           rp.txns,
		seqHints:       rp.seqHints,
		srcTopicID:     src.topicID,
		dstTopicID:     dst.topicID,
		srcLeader:      src.leader,
		srcLeaderEpoch: src.leaderEpoch,
		dstLeader:      dst.leader,
		fetchOffset:    rp.logEnd,
		fillerMax:      fillerRecordsFor(tc.maxMessageBytes),
		keyedFiller:    tc.compacted,
		done:           make(chan struct{}),
	}
	for k := range c.cfg.FillerTransactions {
		p.fillers = append(p.fillers, &destTxn{id: fillerIDFor(task.TransactionalID, k), sourcePID: -1})
	}
	p.progress = Progress{
		SourceTopicID:       src.topicID,
		SourceLogStart:      offs.srcStart,
		SourceHighWatermark: offs.srcHW,
		SourceLastStable:    offs.srcHW,
		DestinationLogEnd:   rp.logEnd,
		UpdatedAt:           time.Now(),
		ProducerID:          task.Writer.ID,
		ProducerEpoch:       task.Writer.Epoch,
	}
	if rp.logEnd < offs.srcStart {
		if len(rp.txns) > 0 && p.openTxnsLocked() > 0 {
			return fmt.Errorf("%w: %s/%d: the source log start %d passed the destination log end %d while a destination transaction is open",
				ErrDiverged, task.Topic, task.Partition, offs.srcStart, rp.logEnd)
		}
		p.gap = &pendingGap{from: rp.logEnd, logStart: offs.srcStart}
		p.fetchOffset = offs.srcStart
	}
	c.log.Info("copy starting", "topic", task.Topic, "partition", task.Partition, "producer_id", task.Writer.ID,
		"producer_epoch", task.Writer.Epoch, "next_sequence", rp.writerNextSeq, "open_transactions", p.openTxnsLocked(),
		"destination_log_end", rp.logEnd, "source_log_start", offs.srcStart, "source_high_watermark", offs.srcHW)

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("fetcher: copier is closed")
	}
	if old, ok := c.parts[tp]; ok {
		if old.state != stateDone {
			return fmt.Errorf("fetcher: %s/%d is already being copied", task.Topic, task.Partition)
		}
		c.releaseLocked(old)
	}
	c.parts[tp] = p
	c.wakeSrcLocked(p.srcLeader)
	return nil
}

func (c *Copier) lease() error {
	if c.cfg.Lease == nil {
		return nil
	}
	if err := c.cfg.Lease(); err != nil {
		return fmt.Errorf("not writing to the destination: %w", err)
	}
	return nil
}

// leaseWait is how long a start waits for the write lease. An instance
// gets its partitions before its first heartbeat confirms the membership;
// a start that failed there instead waited out the retry back-off (1–2 s,
// a warning each time) on every fresh instance.
const leaseWait = 2 * time.Second

// awaitLease waits up to leaseWait for the lease; the error is the last
// refusal.
func (c *Copier) awaitLease(ctx context.Context) error {
	deadline := time.Now().Add(leaseWait)
	for {
		err := c.lease()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return err
		}
	}
}

// ---- lock-held helpers ----

func (c *Copier) wakeSrcLocked(id int32) {
	if id < 0 {
		return
	}
	w, ok := c.srcWorkers[id]
	if !ok {
		w = &worker{id: id, wake: make(chan struct{}, 1)}
		c.srcWorkers[id] = w
		c.wg.Add(1)
		go c.sourceLoop(w)
	}
	signal(w.wake)
}

func (c *Copier) wakeDstLocked(p *partition) {
	id := p.dstLeader
	if id < 0 {
		return
	}
	k := laneKey{id, p.lane}
	w, ok := c.dstWorkers[k]
	if !ok {
		w = &worker{id: id, lane: p.lane, wake: make(chan struct{}, 1), wrote: make(chan struct{}, 1)}
		c.dstWorkers[k] = w
		c.wg.Add(1)
		go c.destinationLoop(w)
	}
	signal(w.wake)
}

func (c *Copier) wakeAllSrcLocked() {
	for _, w := range c.srcWorkers {
		signal(w.wake)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// releaseLocked returns a stopped partition's buffered bytes to the budget.
func (c *Copier) releaseLocked(p *partition) {
	c.reserved -= p.buffered
	p.buffered = 0
	p.queue = nil
	c.wakeAllSrcLocked()
}

// busyLocked: something of the partition is in flight.
func (p *partition) busyLocked() bool { return p.inFlight > 0 || p.stale > 0 || p.control }

// maybeDoneLocked finishes a stopping partition once nothing of it is in
// flight (and, for a failover, once its open transactions are aborted).
func (c *Copier) maybeDoneLocked(p *partition) {
	if p.state == stateRunning && p.quiet && (p.openTxnsLocked() == 0 || time.Now().After(p.quietBy)) {
		if p.openTxnsLocked() > 0 {
			c.log.Warn("pausing with destination transactions open: no point without one came in time; they stay open until the copy resumes",
				"topic", p.tp.topic, "partition", p.tp.partition, "open_transactions", p.openTxnsLocked())
		}
		p.state = stateStopping
	}
	if p.state != stateStopping || p.busyLocked() {
		return
	}
	if p.failover && p.openTxnsLocked() > 0 {
		c.startAbortLocked(p)
		return
	}
	p.state = stateDone
	close(p.done)
	c.releaseLocked(p)
}

// failLocked stops a partition with a terminal event.
func (c *Copier) failLocked(p *partition, kind EventKind, err error) {
	if p.state == stateDone || p.err != nil {
		return
	}
	p.err = err
	if p.state == stateRunning {
		p.state = stateStopping
	}
	c.log.Warn("copy stopped", "topic", p.tp.topic, "partition", p.tp.partition, "event", kind.String(), "err", err)
	c.emitLocked(p, Event{Kind: kind, Err: err})
	c.maybeDoneLocked(p)
}

// blockLocked stops fetching at an uncopyable source batch; the partition
// fails (non-retriable) once the batches before it are on the destination, so
// the destination ends exactly at the batch the error names.
func (c *Copier) blockLocked(p *partition, err error) {
	p.blocked = err
	c.maybeFailBlockedLocked(p)
}

func (c *Copier) maybeFailBlockedLocked(p *partition) {
	if p.blocked != nil && len(p.queue) == 0 && !p.busyLocked() {
		c.failLocked(p, EventNonRetriable, p.blocked)
	}
}

func (c *Copier) emitLocked(p *partition, ev Event) {
	ev.Topic, ev.Partition, ev.Progress = p.tp.topic, p.tp.partition, p.progress
	on := p.onEvent
	c.events = append(c.events, func() { on(ev) })
	signal(c.eventWake)
}

// retryLocked counts a retriable error; after maxErrStreak in a row the
// partition stops with EventRetriable.
func (c *Copier) retryLocked(p *partition, err error) {
	now := time.Now()
	if p.errStreak == 0 {
		p.errSince = now
	}
	p.errStreak++
	backoff := min(time.Duration(p.errStreak)*100*time.Millisecond, 2*time.Second)
	p.retryAt = now.Add(backoff)
	c.log.Debug("retrying", "topic", p.tp.topic, "partition", p.tp.partition, "err", err, "attempt", p.errStreak)
	if p.errStreak >= maxErrStreak && now.Sub(p.errSince) >= maxErrTime {
		c.failLocked(p, EventRetriable, fmt.Errorf("%s/%d: giving up after %d attempts in %v: %w", p.tp.topic, p.tp.partition,
			p.errStreak, now.Sub(p.errSince).Round(time.Second), err))
	}
}

func (c *Copier) eventLoop() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		evs := c.events
		c.events = nil
		c.mu.Unlock()
		for _, f := range evs {
			f()
		}
		select {
		case <-c.ctx.Done():
			c.mu.Lock()
			evs := c.events
			c.events = nil
			c.mu.Unlock()
			for _, f := range evs {
				f()
			}
			return
		case <-c.eventWake:
		}
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

// hold pauses (or resumes) fetching and producing of a partition: tests use it
// to create the races they check.
func (c *Copier) hold(topic string, partition int32, fetch, produce bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tp := topicPartition{topic, partition}
	c.holdFetch[tp], c.holdProduce[tp] = fetch, produce
	c.wakeAllSrcLocked()
	for _, w := range c.dstWorkers {
		signal(w.wake)
	}
	if p := c.parts[tp]; p != nil && !produce {
		c.kickLocked(p)
	}
}

// heldLocked reports whether a test holds the partition's operation o.
func (c *Copier) heldLocked(p *partition, o *op) bool {
	if c.holdProduce[p.tp] {
		return true
	}
	from, ok := c.holdFrom[p.tp]
	return ok && o.base >= from
}

// holdOpsFrom holds a partition's operations at and after a destination
// offset (from < 0 releases them): tests stop a copy at an exact point.
func (c *Copier) holdOpsFrom(topic string, partition int32, from int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tp := topicPartition{topic, partition}
	if from < 0 {
		delete(c.holdFrom, tp)
	} else {
		c.holdFrom[tp] = from
	}
	if p := c.parts[tp]; p != nil {
		c.kickLocked(p)
	}
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
