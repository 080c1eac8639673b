package instance

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/proxy"
)

// routeApplier is this instance's side of a route switch (docs/cutover.md):
// every instance serving a route applies what the route's RouteSwitch
// record asks of all of them (the produce freeze, the commit freeze, the new
// upstream, the unfreeze of a rollback) and acknowledges each with a
// RouteAck record under its current group member id, which is what the
// driver counts against the live members. A member id changes when an
// instance rejoins, so an instance that restarted mid-switch acknowledges
// again only after it has applied the record itself.
//
// The applier also opens the routes (proxy.WithRoutesClosedAtStart): a route takes
// connections only once the instance is caught up with the state topic (ready)
// and has applied the route's record as it stood then. A restarting instance
// that opened its routes at once would lead their clients to the primary after
// a switch made the standby their cluster, or let a write through a freeze it
// had not seen yet. The price: an instance that cannot read __mirror_state at
// start (the standby is down) keeps its routes closed; the instances already
// running keep serving theirs (docs/cutover.md).
type routeApplier struct {
	view  stateView
	write func(context.Context, ...coordinator.Record) error
	self  func() string // the coordinators' group member id ("" before the first join)
	// ready reports nil once the instance has joined the coordinators' group
	// and its view has read the state topic to the end offsets of the moment.
	ready  func(context.Context) error
	routes routeProxy
	// sourceClient is the client of a mirror's source, a route's primary: a freeze asks it
	// which resent writes the primary already holds (primaryProducers). Nil: none is asked,
	// and every frozen write is refused.
	sourceClient func(mirror string, configs map[string]string) (*kgo.Client, error)
	// destClient is the client of the destination, a route's standby: a switch back's freeze
	// asks it (as sourceClient above) while the route leads there. Nil: none is asked.
	destClient func() (*kgo.Client, error)
	log        *slog.Logger
	now        func() time.Time
	// freezeWait bounds a freeze's wait for writes forwarded before it
	// (proxy.FreezeRoute): an instance that cannot drain them does not ack,
	// and the driver rolls the switch back after its own ack timeout.
	freezeWait time.Duration
	// retry is how often a route whose record is not final is looked at
	// again without a state change (a new member id, a failed write).
	retry time.Duration

	applied map[string]*appliedRoute
	opened  map[string]bool // the routes opened
	// stopSweep ends the freeze's questions to the primary (primaryProducers.sweep) of a
	// route, when its freeze is replaced or lifted.
	stopSweep map[string]context.CancelFunc
}

// stateView is what the route applier and the read-only follower read of
// the state view.
type stateView interface {
	Read(func(v *statetopic.View))
	Changed() <-chan struct{}
}

// routeProxy is what the applier changes in the proxy.
type routeProxy interface {
	Routes() []proxy.RouteStatus
	FreezeRoute(ctx context.Context, name string, f *enforcement.Freeze) error
	SwitchRoute(ctx context.Context, name string, hold proxy.FetchHold) error
	SwitchRouteBack(ctx context.Context, name string, hold proxy.FetchHold) error
	RememberPrimary(name, clusterID string, topicIDs map[string][16]byte) error
	GuardMirrorWriters(name string, w enforcement.MirrorWriters) error
	OpenRoute(name string) error
}

// primaryIdentity is the primary's cluster id and topic ids as the route's
// mirror recorded them (the mirror's source is the route's primary), and the
// producer ids of the mirror's writers on the standby, which the switched route
// keeps applications from writing under (enforcement.MirrorWriters).
type primaryIdentity struct {
	clusterID string
	topicIDs  map[string][16]byte
	writers   enforcement.MirrorWriters
}

func primaryOf(m *statetopic.Mirror) primaryIdentity {
	id := primaryIdentity{topicIDs: map[string][16]byte{}, writers: enforcement.MirrorWriters{}}
	for pid, p := range m.Partitions {
		if p.DataWriter == nil || p.Topic == "" {
			continue
		}
		if id.writers[p.Topic] == nil {
			id.writers[p.Topic] = map[int32][]enforcement.Writer{}
		}
		id.writers[p.Topic][pid.Partition] = []enforcement.Writer{{ProducerID: p.DataWriter.ID, Epoch: p.DataWriter.Epoch}}
	}
	if m.Config != nil {
		id.clusterID = m.Config.SourceClusterID
	}
	for name, t := range m.Topics {
		id.topicIDs[name] = t.SourceTopicID
	}
	return id
}

// mirrorSource names a route's mirror and its source connection configs (resolved by the
// source client cache): the source is the route's primary.
type mirrorSource struct {
	name    string
	configs map[string]string
}

// appliedRoute is what this instance has applied of a route's record.
type appliedRoute struct {
	attempt int32
	freeze  freezeLevel
	topics  []string // the frozen topics, sorted
	// serving is the upstream the route leads to here (the primary until a switch).
	serving statetopic.Upstream
	// guarded: the attempt's switch gave the route the producer ids to refuse.
	guarded bool
	// acked names the steps acknowledged for attempt, with the member id
	// they were written under.
	acked map[statetopic.RouteStep]string
}

// freezeLevel is how much of a route a record freezes.
type freezeLevel int

const (
	freezeNone freezeLevel = iota
	freezeProduce
	freezeCommits // produce and commits
)

func newRouteApplier(view stateView, write func(context.Context, ...coordinator.Record) error, self func() string,
	ready func(context.Context) error, routes routeProxy, log *slog.Logger) *routeApplier {
	return &routeApplier{view: view, write: write, self: self, ready: ready, routes: routes, log: log, now: time.Now,
		freezeWait: 10 * time.Second, retry: time.Second, applied: map[string]*appliedRoute{}, opened: map[string]bool{},
		stopSweep: map[string]context.CancelFunc{}}
}

// readyEvery bounds how often a closed route's applier asks whether the instance is caught
// up: at start the view changes with every batch it reads.
const readyEvery = 200 * time.Millisecond

// run applies every change of the routes' records until ctx ends.
func (a *routeApplier) run(ctx context.Context) {
	t := time.NewTicker(a.retry)
	defer t.Stop()
	var asked time.Time // when ready was last asked: it reads the state topic's end offsets
	for {
		changed := a.view.Changed()
		// Ready is asked before the view is read: what is applied then is at
		// least the state as of the check.
		caughtUp := false
		if !a.allOpen() && time.Since(asked) >= readyEvery {
			asked = time.Now()
			err := a.ready(ctx)
			caughtUp = err == nil
			if err != nil {
				a.log.Debug("routes stay closed: the switch state is not read yet", "err", err)
			}
		}
		failed := a.applyAll(ctx)
		if caughtUp {
			a.open(failed)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
	}
}

// allOpen reports whether every route has been opened.
func (a *routeApplier) allOpen() bool {
	for _, r := range a.routes.Routes() {
		if !a.opened[r.Name] {
			return false
		}
	}
	return true
}

// open opens every route not yet open whose record applied (failed names
// those that did not).
func (a *routeApplier) open(failed map[string]bool) {
	for _, r := range a.routes.Routes() {
		if a.opened[r.Name] || failed[r.Name] {
			continue
		}
		if err := a.routes.OpenRoute(r.Name); err != nil {
			a.log.Warn("route switch: opening the route failed", "route", r.Name, "err", err)
			continue
		}
		a.opened[r.Name] = true
	}
}

// applyAll applies the record of every route this instance serves; it
// returns the routes whose record could not be applied.
func (a *routeApplier) applyAll(ctx context.Context) (failed map[string]bool) {
	failed = map[string]bool{}
	for _, r := range a.routes.Routes() {
		var rec *statetopic.RouteSwitch
		var topics []string
		var source mirrorSource
		a.view.Read(func(v *statetopic.View) {
			rec = v.RouteSwitch(r.Name)
			if rec != nil {
				if m := v.Mirror(rec.Mirror); m != nil {
					topics = m.TopicNames()
					source.name = m.Name
					if m.Config != nil {
						source.configs = m.Config.Configs
					}
				}
			}
		})
		if rec == nil {
			continue
		}
		// Only a switch uses the primary's identity: it is not read on every view change.
		primary := func() (id primaryIdentity) {
			a.view.Read(func(v *statetopic.View) {
				if m := v.Mirror(rec.Mirror); m != nil {
					id = primaryOf(m)
				}
			})
			return id
		}
		if err := a.apply(ctx, r.Name, rec, topics, primary, source); err != nil {
			failed[r.Name] = true
			a.log.Warn("route switch: applying the route's record failed; trying again", "route", r.Name,
				"attempt", rec.Attempt, "step", rec.Step, "err", err)
		}
	}
	return failed
}

// apply brings one route to what its record asks and acknowledges it.
func (a *routeApplier) apply(ctx context.Context, route string, rec *statetopic.RouteSwitch, topics []string, primary func() primaryIdentity, source mirrorSource) error {
	st := a.applied[route]
	if st == nil || st.attempt != rec.Attempt {
		prev := st
		st = &appliedRoute{attempt: rec.Attempt, acked: map[statetopic.RouteStep]string{}, serving: statetopic.UpstreamPrimary}
		if prev != nil {
			st.freeze, st.topics, st.serving = prev.freeze, prev.topics, prev.serving
		}
		a.applied[route] = st
	}
	if !rec.Step.Known() {
		return nil // a newer kmirror's step: left to its writer
	}
	// The route leads where the record says: the new upstream from SWITCHING on, the one a
	// switch starts from before (a switch back starts from the standby, where an instance
	// started meanwhile does not lead yet).
	switching := rec.Step == statetopic.RouteSwitching || rec.Step == statetopic.RouteSwitched
	leadTo := cmp.Or(rec.Upstream, statetopic.UpstreamPrimary)
	if switching && leadTo == statetopic.UpstreamPrimary && !st.guarded {
		// A switch back: the producer ids to refuse are given before the route leads back, or,
		// on an instance started since, to a route that leads there already.
		if err := a.guardPrimaryProducers(ctx, route, topics, source); err != nil {
			return err
		}
		st.guarded = true
	}
	if st.serving != leadTo {
		if err := a.switchTo(ctx, route, rec, leadTo, switching, topics, primary); err != nil {
			return err
		}
		st.serving = leadTo
		if switching {
			st.freeze, st.topics = freezeNone, nil // the switch lifts the freeze
		}
	}
	if switching {
		if rec.Step == statetopic.RouteSwitching {
			return a.ack(ctx, route, st, statetopic.RouteSwitching)
		}
		return nil
	}
	want := freezeNone
	switch {
	case rec.CommitsFrozen():
		want = freezeCommits
	case rec.ProduceFrozen():
		want = freezeProduce
	}
	if want != st.freeze || (want != freezeNone && !slices.Equal(topics, st.topics)) {
		if err := a.freeze(ctx, route, want, topics, st.serving, source); err != nil {
			return err
		}
		st.freeze, st.topics = want, topics
	}
	if want >= freezeProduce {
		if err := a.ack(ctx, route, st, statetopic.RouteFreezing); err != nil {
			return err
		}
	}
	if want == freezeCommits {
		return a.ack(ctx, route, st, statetopic.RouteGroupsCopy)
	}
	return nil
}

// switchTo makes the route lead to upstream. The switch of the record's attempt (switching)
// holds the fetches of the groups it copied (rec.HeldGroups) until they rejoin there; an
// instance that only catches up with an earlier switch holds none.
func (a *routeApplier) switchTo(ctx context.Context, route string, rec *statetopic.RouteSwitch, upstream statetopic.Upstream,
	switching bool, topics []string, primary func() primaryIdentity) error {
	hold := proxy.FetchHold{Topics: map[string]bool{}}
	if switching {
		// A forced switch's members may hold positions past what the cluster switched to has:
		// their commits wait for their rejoin too (proxy/route_hold.go).
		hold.Groups, hold.Commits = rec.HeldGroups, rec.Forced
	}
	for _, t := range topics {
		hold.Topics[t] = true
	}
	if upstream == statetopic.UpstreamPrimary {
		if err := a.routes.SwitchRouteBack(ctx, route, hold); err != nil {
			return fmt.Errorf("switching back to the primary: %w", err)
		}
		a.endSweep(route)
		a.log.Info("route switch: this instance serves the primary again", "route", route, "attempt", rec.Attempt)
		return nil
	}
	id := primary()
	if err := a.routes.RememberPrimary(route, id.clusterID, id.topicIDs); err != nil {
		return fmt.Errorf("giving the route the primary's ids: %w", err)
	}
	if err := a.routes.GuardMirrorWriters(route, id.writers); err != nil {
		return fmt.Errorf("giving the route the mirror writers' producer ids: %w", err)
	}
	if err := a.routes.SwitchRoute(ctx, route, hold); err != nil {
		return fmt.Errorf("switching to the standby: %w", err)
	}
	a.endSweep(route)
	a.log.Info("route switch: this instance serves the standby", "route", route, "attempt", rec.Attempt)
	return nil
}

// guardPrimaryProducers gives a route switched back the producers the primary knows on the
// topics' partitions (describeAll, as the freeze's resend check asks them), which it keeps
// applications from writing under (enforcement.MirrorWriters): the writer of the mirror that
// copied the standby back is among them. A partition whose leader did not answer fails it:
// the guard must cover every partition. None without a source client.
func (a *routeApplier) guardPrimaryProducers(ctx context.Context, route string, topics []string, source mirrorSource) error {
	w := enforcement.MirrorWriters{}
	if a.sourceClient != nil && source.name != "" {
		cl, err := a.sourceClient(source.name, source.configs)
		if err != nil {
			return fmt.Errorf("reading the primary's producers: %w", err)
		}
		states, errs, err := describe(ctx, cl, topicsSet(topics))
		if err == nil {
			for k, e := range errs {
				err = fmt.Errorf("reading the primary's producers of %s/%d: %w", k.topic, k.partition, e)
			}
		}
		if err != nil {
			return err
		}
		for k, producers := range states {
			if w[k.topic] == nil {
				w[k.topic] = map[int32][]enforcement.Writer{}
			}
			for id, p := range producers {
				w[k.topic][k.partition] = append(w[k.topic][k.partition], enforcement.Writer{ProducerID: id, Epoch: p.epoch})
			}
		}
	}
	if err := a.routes.GuardMirrorWriters(route, w); err != nil {
		return fmt.Errorf("giving the route the primary's producer ids: %w", err)
	}
	return nil
}

// freeze installs the freeze level on the route (freezeNone lifts it); the route leads to
// serving, whose producers the freeze asks about resent writes.
func (a *routeApplier) freeze(ctx context.Context, route string, level freezeLevel, topics []string, serving statetopic.Upstream, source mirrorSource) error {
	a.endSweep(route)
	if level == freezeNone {
		return a.routes.FreezeRoute(ctx, route, nil)
	}
	f := &enforcement.Freeze{Topics: map[string]bool{}, Commits: level == freezeCommits}
	var client func() (*kgo.Client, error)
	switch {
	case serving == statetopic.UpstreamStandby:
		client = a.destClient
	case a.sourceClient != nil && source.name != "":
		configs := source.configs
		client = func() (*kgo.Client, error) { return a.sourceClient(source.name, configs) }
	}
	if client != nil {
		sctx, stop := context.WithCancel(ctx)
		a.stopSweep[route] = stop
		pp := newPrimaryProducers(sctx, client, a.log.With("route", route))
		pp.sweep(topics)
		f.Written = pp.Written
	}
	for _, t := range topics {
		f.Topics[t] = true
	}
	if len(f.Topics) == 0 {
		return fmt.Errorf("the record's mirror has no topics in this instance's view yet: nothing to freeze")
	}
	wctx, cancel := context.WithTimeout(ctx, a.freezeWait)
	defer cancel()
	return a.routes.FreezeRoute(wctx, route, f)
}

// endSweep stops the questions to the primary of route's freeze, if any.
func (a *routeApplier) endSweep(route string) {
	if stop := a.stopSweep[route]; stop != nil {
		stop()
		delete(a.stopSweep, route)
	}
}

// ack writes this instance's RouteAck of step for the route's attempt,
// once per member id.
func (a *routeApplier) ack(ctx context.Context, route string, st *appliedRoute, step statetopic.RouteStep) error {
	self := a.self()
	if self == "" {
		return fmt.Errorf("acknowledging %s: this instance has not joined the coordinators' group yet", step)
	}
	if st.acked[step] == self {
		return nil
	}
	rec := coordinator.Record{Key: statetopic.RouteAckKey(route, self, step),
		Value: &statetopic.RouteAck{Attempt: st.attempt, AtMs: a.now().UnixMilli()}}
	if err := a.write(ctx, rec); err != nil {
		return fmt.Errorf("acknowledging %s: %w", step, err)
	}
	st.acked[step] = self
	a.log.Info("route switch: acknowledged", "route", route, "attempt", st.attempt, "step", step, "member", self)
	return nil
}
