package coordinator

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// worker drives one owned mirror partition. It alone writes the partition's
// state record and calls the DataPath for it; actions that take time run in
// goroutines that report back as events, so the worker never blocks on I/O
// while holding decisions.
type worker struct {
	c      *Coordinator
	key    statetopic.Key
	cancel context.CancelFunc
	done   chan struct{}

	// The inputs reconcile last ticked the worker for (reconcile alone
	// reads and writes it, under Coordinator.mu).
	inputs workerInputs

	pending atomic.Int32 // events posted and not yet handled (tests wait for 0)

	mu     sync.Mutex
	ref    PartitionRef
	queue  []Event
	signal chan struct{} // cap 1: something is queued

	// Owned by the run goroutine.
	local  Local
	writer Writer
	retry  *time.Timer
}

const writeRetryDelay = time.Second

func startWorker(parent context.Context, c *Coordinator, k statetopic.Key, ref PartitionRef) *worker {
	ctx, cancel := context.WithCancel(parent)
	w := &worker{c: c, key: k, ref: ref, cancel: cancel, done: make(chan struct{}), signal: make(chan struct{}, 1)}
	go w.run(ctx)
	return w
}

func (w *worker) setRef(ref PartitionRef) {
	w.mu.Lock()
	w.ref = ref
	w.mu.Unlock()
}

func (w *worker) getRef() PartitionRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ref
}

// post queues an event; safe from any goroutine, never blocks.
func (w *worker) post(ev Event) {
	w.pending.Add(1)
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// postDataPath queues what the running copy reports as the state
// machine's input: its failures with the retriability their errors carry.
func (w *worker) postDataPath(ev datapath.Event) {
	switch ev.Kind {
	case datapath.EventFenced:
		w.post(Event{Kind: EvFenced, Err: ev.Err})
	case datapath.EventGapFilled:
		w.post(Event{Kind: EvRetentionGap, Note: ev.Note()})
	default:
		w.post(Event{Kind: EvCopyFailed, Err: ev.Err, Retriable: datapath.Retriable(ev.Err)})
	}
}

// tick asks the worker to look at the state again; ticks coalesce.
func (w *worker) tick() {
	w.mu.Lock()
	if len(w.queue) > 0 && w.queue[len(w.queue)-1].Kind == EvTick {
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.post(Event{Kind: EvTick})
}

// stop ends the worker and releases the partition without writing state.
func (w *worker) stop() {
	w.cancel()
	<-w.done
}

func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	defer func() {
		if w.retry != nil {
			w.retry.Stop()
		}
		ref := w.getRef()
		// Stop with a fresh context: ctx is already cancelled.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if w.local.Copying || w.local.Prepared {
			if _, err := w.c.cfg.DataPath.Stop(sctx, ref, datapath.StopHandover); err != nil {
				w.c.log.Warn("stopping copy while handing over", "mirror", ref.Mirror, "topic", ref.Topic, "partition", ref.Partition, "err", err)
			}
		}
		w.c.cfg.DataPath.Forget(ref)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.signal:
		}
		w.mu.Lock()
		evs := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range evs {
			if ctx.Err() != nil {
				return
			}
			w.handle(ctx, ev)
			w.pending.Add(-1)
		}
	}
}

func (w *worker) handle(ctx context.Context, ev Event) {
	switch ev.Kind {
	case EvWriter:
		w.writer = ev.Writer
		return
	case EvStopFailed:
		w.local.Busy = false
		return
	case EvPrepared:
		w.local.Busy, w.local.Prepared = false, true
	case EvPrepareFailed:
		w.local.Busy, w.local.Prepared = false, false
	case EvStopped:
		w.local.Busy, w.local.Copying = false, false
	case EvCopyFailed:
		// The pipeline stopped itself; Stop is still called to collect it.
	case EvTick:
		if !w.local.RetryDueAt.IsZero() && !time.Now().Before(w.local.RetryDueAt) {
			// The retry fires through this tick; clear it after Next used it.
			defer func() { w.local.RetryDueAt = time.Time{} }()
		}
	}
	ref := w.getRef()
	var (
		cur     *statetopic.PartitionState
		desired statetopic.TopicDesire
		policy  RetryPolicy
		present bool
	)
	w.c.store.Read(func(v *statetopic.View) {
		m := v.Mirror(ref.Mirror)
		if m == nil {
			return
		}
		t := m.Topics[ref.Topic]
		if t == nil {
			return
		}
		present, desired = true, t.Desired
		if p := m.Partitions[statetopic.PartitionID{SourceTopicID: ref.SourceTopicID, Partition: ref.Partition}]; p != nil {
			cp := *p
			cur = &cp
		}
		policy = retryPolicy(m.Config)
	})
	if !present {
		return // the reconcile loop stops this worker
	}
	w.c.evaluations.Add(1)
	step := Next(cur, ref.Topic, desired, w.local, ev, policy, time.Now())
	if step.Persist != nil {
		if w.writer.ProducerID != 0 || w.writer.Epoch != 0 {
			step.Persist.WriterProducerID, step.Persist.WriterEpoch = w.writer.ProducerID, w.writer.Epoch
		}
		if w.writer.Data != nil {
			step.Persist.DataWriter = w.writer.Data
		}
		if err := w.c.Write(ctx, Record{Key: w.key, Value: step.Persist}); err != nil {
			// Nothing is acted on before it is persisted: try the step again.
			w.c.log.Warn("persisting mirror partition state; will retry", "mirror", ref.Mirror, "topic", ref.Topic,
				"partition", ref.Partition, "state", step.Persist.State, "err", err)
			w.after(ctx, writeRetryDelay, ev)
			return
		}
		if step.Persist.State == protocol.MirrorStateFailed {
			w.c.log.Warn("mirror partition failed", "mirror", ref.Mirror, "topic", ref.Topic, "partition", ref.Partition,
				"retry_attempt", step.Persist.RetryAttempt, "err", step.Persist.ErrorMessage)
		}
	}
	for _, a := range step.Actions {
		w.act(ctx, ref, a, step, desired, cur)
	}
}

// after re-posts ev once d has passed (unless the worker stops first).
func (w *worker) after(ctx context.Context, d time.Duration, ev Event) {
	t := time.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
			w.post(ev)
		}
	}()
}

func (w *worker) act(ctx context.Context, ref PartitionRef, a Action, step Step, desired statetopic.TopicDesire, cur *statetopic.PartitionState) {
	dp := w.c.cfg.DataPath
	switch a {
	case ActPrepare:
		w.local.Busy, w.local.Prepared = true, false
		var data *statetopic.Producer
		if cur != nil {
			data = cur.DataWriter
		}
		go func() {
			wr, notes, err := dp.Prepare(ctx, ref, data)
			if err != nil {
				w.post(Event{Kind: EvPrepareFailed, Err: err, Retriable: datapath.Retriable(err)})
				return
			}
			w.post(Event{Kind: EvWriter, Writer: wr})
			w.post(Event{Kind: EvPrepared})
			for _, n := range notes {
				w.post(Event{Kind: EvRetentionGap, Note: n})
			}
		}()
	case ActStartCopy:
		if err := dp.Start(ctx, ref, w.writer, w.postDataPath); err != nil {
			w.post(Event{Kind: EvCopyFailed, Err: err, Retriable: datapath.Retriable(err)})
			return
		}
		w.local.Copying = true
	case ActStopCopy:
		w.local.Busy = true
		how := datapath.StopHandover
		switch desired {
		case statetopic.DesireStop:
			how = datapath.StopFailover
		case statetopic.DesirePause:
			how = datapath.StopPause
		}
		go func() {
			end, err := dp.Stop(ctx, ref, how)
			if err != nil {
				w.c.log.Warn("stopping copy; will retry", "mirror", ref.Mirror, "topic", ref.Topic, "partition", ref.Partition, "err", err)
				w.post(Event{Kind: EvStopFailed})
				w.after(ctx, writeRetryDelay, Event{Kind: EvTick})
				return
			}
			w.post(Event{Kind: EvStopped, End: end})
		}()
	case ActScheduleRetry:
		w.local.RetryDueAt = step.RetryAt
		w.after(ctx, time.Until(step.RetryAt), Event{Kind: EvTick})
	case ActRelinquish:
		if w.local.Copying || w.local.Prepared {
			_, _ = dp.Stop(ctx, ref, datapath.StopHandover)
		}
		w.local = Local{}
		w.writer = Writer{}
		// Fenced, yet still the owner of the state partition (reconcile stops
		// this worker when the assignment moves): look again after a pause,
		// which prepares again and fences the other writer in turn. No record
		// of this worker's changed, so nothing else would wake it before the
		// resync (a soak run's soak.tx/2 restarted only every 30 s).
		w.after(ctx, writeRetryDelay, Event{Kind: EvTick})
	}
}

func retryPolicy(cfg *statetopic.MirrorConfig) RetryPolicy {
	if cfg == nil {
		cfg = &statetopic.MirrorConfig{}
	}
	// The three keys alone: this runs on every event of every partition worker.
	return RetryPolicy{InitialBackoff: mirrorconfig.Millis(cfg.Configs, "failed.retry.initial.backoff.ms"),
		MaxBackoff:  mirrorconfig.Millis(cfg.Configs, "failed.retry.max.backoff.ms"),
		MaxAttempts: int16(min(mirrorconfig.Number(cfg.Configs, "failed.retry.max.attempts"), 32767))}
}
