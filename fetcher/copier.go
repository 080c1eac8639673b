package fetcher

// The Copier runs the data path of one mirror on one kmirror instance.
//
// Goroutines (all started by the Copier, all stopped by Close):
//   - one source worker per source leader broker: one Fetch at a time for
//     every owned partition that broker leads and that has buffer room;
//   - one destination worker per destination leader broker: one Produce at a
//     time carrying the head batch of every partition that broker leads
//     (one batch per partition per request, as the broker requires), so at
//     most one produce per partition is in flight;
//   - one admin goroutine: metadata refreshes after leader errors, source
//     ListOffsets after OFFSET_OUT_OF_RANGE, DeleteRecords on the destination
//     after a gap was filled;
//   - one event goroutine delivering Events in order, outside any lock.
//
// Fetching and producing are pipelined through each partition's queue. One
// mutex (Copier.mu) guards every partition's state; no I/O happens under it.
// Raw batches are rewritten (producer id/epoch/sequence, CRC) by the
// destination worker outside the lock, while the partition is marked in flight
// and no one else touches the queue head.
//
// Why non-transactional idempotent batches under a transactional id: the
// transactional id makes InitProducerId bump the epoch of one well-known
// producer id, which fences the previous owner of the partition (invariant 4)
// without needing any coordination service. Transactional batches would need
// commit markers, which take offsets and break offset identity; idempotent
// batches need none, and the broker still checks their epoch and sequence
// (KIP-890 verification applies to transactional batches only).
//
// TODO(fetcher): several produces in flight per partition. Items already
// carry their own sequence and destination offset, so a destination worker
// can send the next request before the previous answer (one connection keeps
// them ordered; up to 5 per producer for the broker's dedup window); what is
// missing is resending every later item, in order, after a retriable error
// on an earlier one. Measured today (TestThroughput, 2-core machine running
// both brokers): 6-18 MB/s, bound by one acks=all round trip per batch.
//
// Fencing is lazy and per partition: the old owner's appends fail only after
// the new owner has appended. A zombie append that lands between the new
// owner's ListOffsets and its first append is detected by the new owner as an
// offset mismatch (non-retriable, loud), never absorbed.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a Copier.
type Config struct {
	Source      *kgo.Client
	Destination *kgo.Client
	// FetchMaxBytes is the per-partition fetch size (default 1 MiB).
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
	Logger         *slog.Logger
}

// Task names one mirror partition to copy.
type Task struct {
	Topic     string
	Partition int32
	// SourceTopicID is the source topic id the mirror recorded; a different
	// id on the source means the topic was deleted and re-created. Zero:
	// learn it at Start (see Progress.SourceTopicID).
	SourceTopicID [16]byte
	// TransactionalID identifies the partition's writer on the destination;
	// every owner of the partition must use the same one (fencing).
	TransactionalID string
	// Producer, when set, is an identity the caller already took with
	// InitProducer for TransactionalID (so it could record the epoch before
	// copying); Start then does not bump the epoch again.
	Producer *ProducerIdentity
}

// Progress is where a partition's copy stands.
type Progress struct {
	SourceTopicID       [16]byte
	SourceLogStart      int64
	SourceHighWatermark int64
	// DestinationLogEnd is the next offset the destination will assign,
	// which is also the next source offset to copy.
	DestinationLogEnd int64
	RecordsCopied     int64 // source records appended (filler not counted)
	BytesCopied       int64 // source batch bytes appended
	FillerRecords     int64 // filler offsets appended to close retention gaps
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

// item is one queued append: a source batch, or a run of filler offsets
// produced in chunks.
type item struct {
	raw             []byte
	base            int64
	lastOffsetDelta int32
	records         int32
	maxTimestamp    int64
	seq             int32
	seqSet          bool

	fill           bool
	fillFrom       int64 // first filler offset of the gap (for the event)
	fillTo         int64 // filler covers [base, fillTo)
	fillTrimTo     int64 // DeleteRecords target once written (0 none)
	chunkN         int32
	fillerMaxCount int32
}

type partition struct {
	tp      topicPartition
	task    Task
	onEvent func(Event)

	producerID    int64
	producerEpoch int16
	nextSeq       int32

	srcTopicID, dstTopicID [16]byte
	srcLeader              int32 // -1: refresh metadata
	srcLeaderEpoch         int32
	dstLeader              int32

	fetchOffset int64
	// blocked: the source holds a batch the copier cannot copy at
	// fetchOffset; the partition fails once everything before it is written.
	blocked     error
	gap         *pendingGap
	needOffsets bool
	trimTo      int64
	fillerMax   int32
	bigFirst    bool

	queue    []*item
	buffered int64
	inFlight bool

	state    partitionState
	err      error
	done     chan struct{}
	progress Progress

	retryAt   time.Time
	errStreak int
}

type worker struct {
	id   int32
	wake chan struct{}
}

// Copier copies batches of many partitions of one mirror.
type Copier struct {
	cfg    Config
	log    *slog.Logger
	dstAdm *kadm.Client

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	parts      map[topicPartition]*partition
	srcWorkers map[int32]*worker
	dstWorkers map[int32]*worker
	reserved   int64 // buffered + in-flight fetch reservations
	// Test hooks: partitions whose fetching or producing is held.
	holdFetch, holdProduce map[topicPartition]bool
	events                 []func()
	closed                 bool

	adminWake chan struct{}
	eventWake chan struct{}
}

// maxErrStreak is how many consecutive retriable errors a partition absorbs
// before it stops with EventRetriable.
const maxErrStreak = 20

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
		dstAdm:     kadm.NewClient(cfg.Destination),
		ctx:        ctx,
		cancel:     cancel,
		parts:      make(map[topicPartition]*partition),
		srcWorkers: make(map[int32]*worker),
		dstWorkers: make(map[int32]*worker),
		adminWake:  make(chan struct{}, 1),
		eventWake:  make(chan struct{}, 1),

		holdFetch:   make(map[topicPartition]bool),
		holdProduce: make(map[topicPartition]bool),
	}
	c.wg.Add(2)
	go c.adminLoop()
	go c.eventLoop()
	return c, nil
}

// Close stops every partition (without waiting for in-flight produces to be
// answered: use Stop for an orderly handover) and every goroutine.
func (c *Copier) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.parts {
		if p.state != stateDone {
			p.state = stateDone
			close(p.done)
		}
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
	return p.progress, true
}

// Stop stops copying a partition, waits until none of its produces is in
// flight and returns its final progress, with the error that stopped it
// earlier, if any. After Stop the partition may be started again.
func (c *Copier) Stop(topic string, partition int32) (Progress, error) {
	tp := topicPartition{topic, partition}
	c.mu.Lock()
	p, ok := c.parts[tp]
	if !ok {
		c.mu.Unlock()
		return Progress{}, fmt.Errorf("fetcher: %s/%d is not started", topic, partition)
	}
	if p.state == stateRunning {
		p.state = stateStopping
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
	return p.progress, p.err
}

// Start begins copying a partition: it takes the partition's writer identity
// (InitProducerId with the task's transactional id, which fences the previous
// owner), reads the destination log end (the next source offset to copy,
// by offset identity), checks it against the source, and starts the
// pipeline; a destination behind the source log start is aligned first
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
		return fmt.Errorf("fetcher: %s/%d: Task.TransactionalID is required (it fences older owners)", task.Topic, task.Partition)
	}

	var pid int64
	var epoch int16
	if task.Producer != nil {
		pid, epoch = task.Producer.ID, task.Producer.Epoch
	} else {
		id, err := InitProducer(ctx, c.cfg.Destination, task.TransactionalID)
		if err != nil {
			return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
		}
		pid, epoch = id.ID, id.Epoch
	}
	src, err := partitionMetadata(ctx, c.cfg.Source, task.Topic, task.Partition)
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
	dst, err := partitionMetadata(ctx, c.cfg.Destination, task.Topic, task.Partition)
	if err != nil {
		return fmt.Errorf("fetcher: destination %s/%d (prepare it with EnsureDestinationTopic): %w", task.Topic, task.Partition, err)
	}
	offs, err := listOffsets(ctx, c.cfg.Source, c.cfg.Destination, task.Topic, task.Partition)
	if err != nil {
		return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
	}
	if offs.dstEnd > offs.srcHW {
		return fmt.Errorf("%w: destination log of %s/%d has %d records more than the source (destination log end %d, source high watermark %d); it diverged",
			ErrDiverged, task.Topic, task.Partition, offs.dstEnd-offs.srcHW, offs.dstEnd, offs.srcHW)
	}
	maxMsg, err := maxMessageBytes(ctx, c.dstAdm, task.Topic)
	if err != nil {
		return fmt.Errorf("fetcher: %s/%d: %w", task.Topic, task.Partition, err)
	}

	p := &partition{
		tp:             tp,
		task:           task,
		onEvent:        onEvent,
		producerID:     pid,
		producerEpoch:  epoch,
		srcTopicID:     src.topicID,
		dstTopicID:     dst.topicID,
		srcLeader:      src.leader,
		srcLeaderEpoch: src.leaderEpoch,
		dstLeader:      dst.leader,
		fetchOffset:    offs.dstEnd,
		fillerMax:      fillerRecordsFor(maxMsg),
		done:           make(chan struct{}),
	}
	p.progress = Progress{
		SourceTopicID:       src.topicID,
		SourceLogStart:      offs.srcStart,
		SourceHighWatermark: offs.srcHW,
		DestinationLogEnd:   offs.dstEnd,
		UpdatedAt:           time.Now(),
		ProducerID:          pid,
		ProducerEpoch:       epoch,
	}
	if offs.dstEnd < offs.srcStart {
		p.gap = &pendingGap{from: offs.dstEnd, logStart: offs.srcStart}
		p.fetchOffset = offs.srcStart
	}
	c.log.Info("copy starting", "topic", task.Topic, "partition", task.Partition, "producer_id", pid, "producer_epoch", epoch,
		"destination_log_end", offs.dstEnd, "source_log_start", offs.srcStart, "source_high_watermark", offs.srcHW)

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

func (c *Copier) wakeDstLocked(id int32) {
	if id < 0 {
		return
	}
	w, ok := c.dstWorkers[id]
	if !ok {
		w = &worker{id: id, wake: make(chan struct{}, 1)}
		c.dstWorkers[id] = w
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

// maybeDoneLocked finishes a stopping partition once no produce is in
// flight, and returns its buffered bytes to the budget.
func (c *Copier) maybeDoneLocked(p *partition) {
	if p.state == stateStopping && !p.inFlight {
		p.state = stateDone
		close(p.done)
		c.releaseLocked(p)
	}
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
	if p.blocked != nil && len(p.queue) == 0 && !p.inFlight {
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
	p.errStreak++
	backoff := min(time.Duration(p.errStreak)*100*time.Millisecond, 2*time.Second)
	p.retryAt = time.Now().Add(backoff)
	c.log.Debug("retrying", "topic", p.tp.topic, "partition", p.tp.partition, "err", err, "attempt", p.errStreak)
	if p.errStreak >= maxErrStreak {
		c.failLocked(p, EventRetriable, fmt.Errorf("%s/%d: giving up after %d attempts: %w", p.tp.topic, p.tp.partition, p.errStreak, err))
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
}
