package coordinator

// Losing __mirror_state. Someone with access straight to a broker can
// delete the state topic (or delete and re-create it), or write records
// into it that do not decode. kmirror must not forget its mirrors then:
// their topics stay read-only, nothing is copied into them without the
// state that fences and positions the copy, the loss is logged at ERROR and
// reported by describe and the metrics, and the operator rebuilds the state
// with `kmirror mirrors --recover-state` (CreateMirror with RecoverState).
//
// What survives is the marks topic (statetopic.MarksTopicName): the
// instance that owns a mirror's config partition keeps one mark per
// read-only topic of that mirror there, naming the source topic and the id
// of the state topic the mirror is recorded in. A mark whose state topic id
// is not the current state topic's belongs to lost state. So a restarted
// instance finds the loss as well as a running one: the state topic is
// missing, or has another id than its marks say.
//
// checkState runs every stateCheckInterval and whenever a fetch of the
// state topic says it is missing:
//   - topic gone (it was seen before): the Store freezes: the view stays the
//     last known state (the read-only set keeps refusing), nothing is
//     applied or written, every worker stops (handing over: open destination
//     transactions stay open for whoever recovers the partition);
//   - topic with a new id (re-created): the Store restarts on it with an
//     empty view; the mirrors of the old view stay lost until recovered;
//   - then the marks are read and the lost mirrors computed; a newly lost
//     mirror is logged at ERROR once, a recovered one at INFO.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

const stateCheckInterval = 2 * time.Second

// LostTopic is a mirror topic whose state was lost.
type LostTopic struct {
	SourceTopicID   statetopic.UUID
	SourceClusterID string
}

// StateLoss says what this instance knows it lost of the mirror state.
type StateLoss struct {
	// Frozen: the state topic is gone; the view is its last known state.
	Frozen bool
	// Reason says what happened, for logs and describe ("" if nothing).
	Reason string
	// Mirrors lists the lost mirrors and their read-only topics.
	Mirrors map[string]map[string]LostTopic
}

// Lost reports whether any state is lost.
func (l StateLoss) Lost() bool { return l.Frozen || len(l.Mirrors) > 0 }

// Topics maps every lost read-only topic to its mirror.
func (l StateLoss) Topics() map[string]string {
	out := map[string]string{}
	for m, ts := range l.Mirrors {
		for t := range ts {
			out[t] = m
		}
	}
	return out
}

// Error is the error every mirror RPC answers while the state is frozen,
// and for a lost mirror: INVALID_MIRROR_STATE (145), naming what was lost
// and the way back.
func (l StateLoss) Error(mirror string) error {
	names := slices.Sorted(maps.Keys(l.Mirrors))
	if mirror != "" {
		names = []string{mirror}
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, n+" (topics "+strings.Join(slices.Sorted(maps.Keys(l.Mirrors[n])), ",")+")")
	}
	what := "mirrors " + strings.Join(parts, ", ")
	if len(parts) == 0 {
		what = "no mirror topic was marked"
	}
	return protocol.ErrInvalidMirrorState.WithMessage("MIRROR STATE LOST: %s; %s are kept read-only and not copied. "+
		"Recover each mirror with `kmirror mirrors --recover-state --mirror NAME --config FILE` (docs/SECURITY.md, \"When __mirror_state is lost\")",
		l.Reason, what)
}

// lossTracker is the Coordinator's part that watches for state loss.
type lossTracker struct {
	marks *marksTopic

	mu       sync.Mutex
	checked  bool                            // the first check completed
	loaded   map[MarkKey]statetopic.Mark     // last read or written
	reason   string                          // why the state is (or was) lost
	dropped  map[string]map[string]LostTopic // mirrors of a frozen view replaced by reset
	reported map[string]bool                 // lost mirrors logged at ERROR
}

// Loss reports what this instance knows it lost.
func (c *Coordinator) Loss() StateLoss {
	id, frozen := c.store.ID()
	c.loss.mu.Lock()
	defer c.loss.mu.Unlock()
	out := StateLoss{Frozen: frozen, Mirrors: map[string]map[string]LostTopic{}}
	if !c.loss.checked {
		return out
	}
	add := func(mirror, topic string, lt LostTopic) {
		if out.Mirrors[mirror] == nil {
			out.Mirrors[mirror] = map[string]LostTopic{}
		}
		out.Mirrors[mirror][topic] = lt
	}
	present := map[string]bool{}
	c.store.Read(func(v *statetopic.View) {
		for _, name := range v.MirrorNames() {
			if !frozen {
				present[name] = true
				continue
			}
			m := v.Mirror(name)
			for topic, t := range m.Topics {
				if !allStopped(m, t) {
					add(name, topic, LostTopic{SourceTopicID: t.SourceTopicID, SourceClusterID: m.Config.SourceClusterID})
				}
			}
		}
	})
	for k, mk := range c.loss.loaded {
		if (frozen || mk.StateTopicID != id) && !present[k.Mirror] {
			add(k.Mirror, k.Topic, LostTopic{SourceTopicID: mk.SourceTopicID, SourceClusterID: mk.SourceClusterID})
		}
	}
	for mirror, ts := range c.loss.dropped {
		if present[mirror] {
			continue
		}
		for topic, lt := range ts {
			add(mirror, topic, lt)
		}
	}
	if out.Lost() {
		out.Reason = c.loss.reason
		if out.Reason == "" {
			out.Reason = "the state topic " + c.cfg.StateTopic + " no longer holds mirrors that the marks in " + c.cfg.MarksTopic + " name (it was deleted or re-created while no kmirror ran)"
		}
	}
	return out
}

func allStopped(m *statetopic.Mirror, t *statetopic.MirrorTopic) bool {
	if t.Partitions == 0 {
		return false
	}
	for p := range t.Partitions {
		s := m.Partitions[statetopic.PartitionID{SourceTopicID: t.SourceTopicID, Partition: p}]
		if s == nil || s.State != protocol.MirrorStateStopped {
			return false
		}
	}
	return true
}

// runLossCheck checks for state loss until ctx ends.
func (c *Coordinator) runLossCheck(ctx context.Context) {
	t := time.NewTicker(stateCheckInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := c.CheckState(cctx); err != nil && ctx.Err() == nil {
			c.log.Warn("checking the mirror state topic", "topic", c.cfg.StateTopic, "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.store.Gone():
		}
	}
}

// CheckState looks at the state topic and the marks once: it freezes the
// view when the state topic is gone, restarts it on a re-created one,
// reports newly lost and recovered mirrors, and (when the state is sound)
// brings the marks of the mirrors this instance owns up to date.
func (c *Coordinator) CheckState(ctx context.Context) error { return c.checkState(ctx, true) }

// checkState is CheckState; withMarks false leaves the marks as they are (before Run, whose
// store reads the view they are computed from).
func (c *Coordinator) checkState(ctx context.Context, withMarks bool) error {
	c.lossMu.Lock()
	defer c.lossMu.Unlock()
	md, err := c.store.admin.Metadata(kadm.WithAuthorizedOps(ctx), c.cfg.StateTopic)
	if err != nil {
		return err
	}
	t, listed := md.Topics[c.cfg.StateTopic]
	exists := listed && t.Err == nil && len(t.Partitions) > 0
	if listed && t.Err != nil && !errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
		return t.Err
	}
	known, frozen := c.store.ID()
	switch {
	case !exists && !known.IsZero() && !frozen:
		c.stateGone("the state topic " + c.cfg.StateTopic + " (topic id " + known.String() + ") was deleted behind kmirror's back at about " + time.Now().UTC().Format(time.RFC3339))
	case exists && known.IsZero():
		c.store.adopt(statetopic.UUID(t.ID))
	case exists && statetopic.UUID(t.ID) != known:
		if !frozen {
			c.stateGone("the state topic " + c.cfg.StateTopic + " was deleted and re-created behind kmirror's back (topic id " + known.String() + " is now " + statetopic.UUID(t.ID).String() + ")")
		}
		// The old view is no longer the state: start over on the new topic;
		// its mirrors stay lost (and read-only) until recovered.
		c.loss.mu.Lock()
		c.store.Read(func(v *statetopic.View) {
			if c.loss.dropped == nil {
				c.loss.dropped = map[string]map[string]LostTopic{}
			}
			for _, name := range v.MirrorNames() {
				m := v.Mirror(name)
				for topic, mt := range m.Topics {
					if !allStopped(m, mt) {
						if c.loss.dropped[name] == nil {
							c.loss.dropped[name] = map[string]LostTopic{}
						}
						c.loss.dropped[name][topic] = LostTopic{SourceTopicID: mt.SourceTopicID, SourceClusterID: m.Config.SourceClusterID}
					}
				}
			}
		})
		c.loss.mu.Unlock()
		c.mu.Lock()
		c.numPartitions = 0
		c.mu.Unlock()
		if err := c.store.reset(statetopic.UUID(t.ID)); err != nil {
			return err
		}
		c.group.ForceMetadataRefresh()
		c.log.Warn("reading the re-created mirror state topic from its start; the mirrors of the old one stay read-only until recovered",
			"topic", c.cfg.StateTopic, "topic_id", statetopic.UUID(t.ID).String())
	}
	marks, err := c.loss.marks.load(ctx)
	if err != nil {
		return err
	}
	c.loss.mu.Lock()
	c.loss.loaded, c.loss.checked = marks, true
	c.loss.mu.Unlock()
	c.reportLoss()
	if _, frozen := c.store.ID(); withMarks && !frozen {
		return c.writeMarks(ctx)
	}
	return nil
}

// stateGone freezes the view and stops every copy.
func (c *Coordinator) stateGone(reason string) {
	c.loss.mu.Lock()
	c.loss.reason = reason
	c.loss.mu.Unlock()
	c.store.freeze()
	c.stopWorkers(func(statetopic.Key) bool { return true })
	c.poke()
}

// reportLoss logs each newly lost mirror at ERROR, once, and each
// recovered one at INFO; the read-only set follows through Store.Changed.
func (c *Coordinator) reportLoss() {
	l := c.Loss()
	c.loss.mu.Lock()
	defer c.loss.mu.Unlock()
	if c.loss.reported == nil {
		c.loss.reported = map[string]bool{}
	}
	changed := false
	for name, ts := range l.Mirrors {
		if c.loss.reported[name] {
			continue
		}
		c.loss.reported[name], changed = true, true
		c.log.Error("MIRROR STATE LOST: the mirror's topics stay read-only and are not copied until it is recovered with `kmirror mirrors --recover-state`",
			"mirror", name, "topics", strings.Join(slices.Sorted(maps.Keys(ts)), ","), "reason", l.Reason, "state_topic", c.cfg.StateTopic)
	}
	for name := range c.loss.reported {
		if _, still := l.Mirrors[name]; !still {
			delete(c.loss.reported, name)
			changed = true
			c.log.Info("mirror state recovered", "mirror", name)
		}
	}
	if changed {
		c.store.mu.Lock()
		c.store.notifyLocked()
		c.store.mu.Unlock()
	}
}

// writeMarks brings the marks of the mirrors this instance owns in line with
// the view: a mark per topic not yet failed over, none for the others.
func (c *Coordinator) writeMarks(ctx context.Context) error {
	id, _ := c.store.ID()
	if id.IsZero() {
		return nil
	}
	if err := c.store.CatchUp(ctx); err != nil {
		return err
	}
	want := map[MarkKey]statetopic.Mark{}
	inView := map[string]map[MarkKey]statetopic.Mark{}
	c.store.Read(func(v *statetopic.View) {
		for _, name := range v.MirrorNames() {
			m := v.Mirror(name)
			inView[name] = map[MarkKey]statetopic.Mark{}
			for topic, t := range m.Topics {
				if !allStopped(m, t) {
					inView[name][MarkKey{name, topic}] = statetopic.Mark{SourceTopicID: t.SourceTopicID, SourceClusterID: m.Config.SourceClusterID, StateTopicID: id}
				}
			}
		}
	})
	// OwnsMirror takes Coordinator.mu, which comes before Store.mu.
	var mine []string
	for name, marks := range inView {
		if c.OwnsMirror(name) {
			mine = append(mine, name)
			maps.Copy(want, marks)
		}
	}
	c.loss.mu.Lock()
	have := maps.Clone(c.loss.loaded)
	c.loss.mu.Unlock()
	writes := map[MarkKey]*statetopic.Mark{}
	for k, mk := range want {
		if old, ok := have[k]; !ok || old.SourceTopicID != mk.SourceTopicID || old.StateTopicID != mk.StateTopicID || old.SourceClusterID != mk.SourceClusterID {
			mk.MarkedAt = time.Now().UTC()
			writes[k] = &mk
		}
	}
	for k, mk := range have {
		_, keep := want[k]
		_, recordedHere := inView[k.Mirror]
		switch {
		case !keep && slices.Contains(mine, k.Mirror):
			writes[k] = nil // failed over, or no longer in the mirror
		case !recordedHere && mk.StateTopicID == id:
			// A mirror deleted from this state topic. (Marks of another
			// state topic are lost state: they stay until recovered.)
			writes[k] = nil
		}
	}
	if err := c.loss.marks.write(ctx, writes); err != nil {
		return err
	}
	c.loss.mu.Lock()
	for k, mk := range writes {
		if mk == nil {
			delete(c.loss.loaded, k)
		} else {
			c.loss.loaded[k] = *mk
		}
	}
	c.loss.mu.Unlock()
	return nil
}
