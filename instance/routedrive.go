package instance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/kmirror/kmirror/apis"
	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/routeswitch"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// routeDriver drives the route switches this instance owns (docs/cutover.md):
// the owner of a route's state partition is its driver, so requests for a
// route are served by one instance and serialised. It runs the pure machine
// (routeswitch.Next) with what it observed, writes the record Next returns
// before any effect, and runs the actions that are the driver's alone (the
// checks, the drain, the group copy, the failover) one at a time per route,
// feeding their outcomes to the next call (routeswitch.Actions: the
// primary is the mirror's source, the standby its destination). The actions every instance
// applies (the freezes, the switch, the unfreeze) are the route applier's
// (routeapply.go), on this instance too: the driver only counts their acks.
type routeDriver struct {
	view     stateView
	write    func(context.Context, ...coordinator.Record) error
	self     func() string
	owns     func(route string) bool
	live     func(context.Context) ([]string, error) // the coordinators' group member ids
	routes   func() []string                         // the routes this instance serves
	mirrorOf func(route string) string               // the mirror from a route's primary to its standby
	acts     routeswitch.Actions
	// back gives the actions of a switch back to the primary, whose mirror back (named) lives
	// on the primary's kmirror, and findBack finds that mirror (apis.SwitchActions.FindBack);
	// nil: switching back is refused.
	back     func(backMirror string) routeswitch.Actions
	findBack func(ctx context.Context, mirror string, topics []string) (string, error)
	policy   routeswitch.Policy
	now      func() time.Time
	log      *slog.Logger

	requests chan *switchCall
	results  chan actionResult
	driven   map[string]*drivenRoute
	paused   bool // by the test hook pauseAt: drive no more
}

// switchCall is an operator's request, answered once Next has seen it.
type switchCall struct {
	route string
	req   routeswitch.Request
	reply chan error
}

// actionResult is an action's outcome, for the step and attempt it ran in.
type actionResult struct {
	route     string
	step      statetopic.RouteStep
	attempt   int32
	set       func(*routeswitch.Input)
	err       error
	retriable bool
}

// drivenRoute is what the driver knows of a route between calls of Next:
// the facts of the current step (reset when the step or attempt changes),
// an action in flight, when to call again, and the groups' last changes.
type drivenRoute struct {
	step     statetopic.RouteStep
	attempt  int32
	facts    routeswitch.Input
	busy     bool
	lastSeen map[string]groupSeen
	answer   *statetopic.RouteRequest // the last switch request answered (serveMailbox)
}

type groupSeen struct {
	fingerprint string
	changed     time.Time
}

// ErrNotRouteDriver refuses a request at an instance that does not drive the route.
var ErrNotRouteDriver = errors.New("this instance does not drive the route (another instance owns its state partition)")

func newRouteDriver(view stateView, write func(context.Context, ...coordinator.Record) error, self func() string,
	owns func(string) bool, live func(context.Context) ([]string, error), routes func() []string, mirrorOf func(string) string,
	acts routeswitch.Actions, log *slog.Logger) *routeDriver {
	return &routeDriver{view: view, write: write, self: self, owns: owns, live: live, routes: routes, mirrorOf: mirrorOf, acts: acts,
		policy: routeswitch.DefaultPolicy(), now: time.Now, log: log,
		requests: make(chan *switchCall), results: make(chan actionResult, 16), driven: map[string]*drivenRoute{}}
}

// Request asks for a switch of route; it returns once the driver started it
// or refused it (the machine's reason), or ctx ends.
func (d *routeDriver) Request(ctx context.Context, route string, req routeswitch.Request) error {
	c := &switchCall{route: route, req: req, reply: make(chan error, 1)}
	select {
	case d.requests <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run drives until ctx ends; actions in flight end with it.
func (d *routeDriver) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if d.paused {
			<-ctx.Done()
			return
		}
		changed := d.view.Changed()
		next := d.driveAll(ctx, nil)
		timer.Reset(max(time.Until(next), time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-timer.C:
		case c := <-d.requests:
			d.serve(ctx, c)
		case r := <-d.results:
			d.record(r)
		}
	}
}

// serve hands a request to its route's next call of Next.
func (d *routeDriver) serve(ctx context.Context, c *switchCall) {
	if !slices.Contains(d.routes(), c.route) {
		c.reply <- fmt.Errorf("route %q: no such route on this instance", c.route)
		return
	}
	if !d.owns(c.route) {
		c.reply <- fmt.Errorf("route %q: %w", c.route, ErrNotRouteDriver)
		return
	}
	d.driveAll(ctx, c)
}

// record stores an action's outcome as a fact of its step.
func (d *routeDriver) record(r actionResult) {
	st := d.driven[r.route]
	if st == nil {
		return
	}
	st.busy = false
	if st.step != r.step || st.attempt != r.attempt {
		return // the switch moved on meanwhile: a fact of an earlier step
	}
	if r.err != nil {
		st.facts.Err, st.facts.Retriable = r.err, r.retriable
		return
	}
	if r.set != nil {
		r.set(&st.facts)
	}
}

// driveAll calls Next for every route this instance drives; it returns
// when to call again at the latest.
func (d *routeDriver) driveAll(ctx context.Context, call *switchCall) time.Time {
	next := d.now().Add(time.Minute)
	for _, route := range d.routes() {
		var c *switchCall
		if call != nil && call.route == route {
			c = call
		}
		if !d.owns(route) {
			delete(d.driven, route)
			continue
		}
		if at := d.drive(ctx, route, c); !at.IsZero() && at.Before(next) {
			next = at
		}
	}
	return next
}

// drive makes one call of Next for route and acts on its answer.
func (d *routeDriver) drive(ctx context.Context, route string, call *switchCall) time.Time {
	var rec *statetopic.RouteSwitch
	var mailbox *statetopic.RouteRequest
	var acked []string
	d.view.Read(func(v *statetopic.View) {
		rec = v.RouteSwitch(route)
		mailbox = v.RouteRequest(route)
		if rec != nil {
			acked = v.RouteAcked(route, rec.Step, rec.Attempt)
		}
	})
	if call == nil && mailbox != nil && mailbox.AnsweredMs == 0 {
		if at, served := d.serveMailbox(ctx, route, rec, mailbox); served {
			return at
		}
	}
	if call == nil && (rec == nil || !rec.Step.InProgress()) {
		return time.Time{}
	}
	st := d.state(route, rec)
	in := st.facts
	in.Driver, in.Acked, in.Busy = d.self(), acked, st.busy
	if call != nil {
		req := call.req
		in.Request = &req
	}
	live, err := d.live(ctx)
	if err != nil {
		d.log.Warn("route switch: the live instances could not be read; trying again", "route", route, "err", err)
		if call != nil {
			call.reply <- fmt.Errorf("route %q: reading the live instances: %w", route, err)
		}
		return d.now().Add(d.policy.RetryBackoff)
	}
	in.Live = live
	if in.Driver == "" {
		if call != nil {
			call.reply <- fmt.Errorf("route %q: this instance has not joined the coordinators' group yet", route)
		}
		return d.now().Add(d.policy.RetryBackoff)
	}
	out := routeswitch.Next(route, rec, in, d.now(), d.policy)
	st.facts.Err, st.facts.Retriable = nil, false // an error is answered once
	if out.Persist != nil {
		if err := d.write(ctx, coordinator.Record{Key: statetopic.RouteSwitchKey(route), Value: out.Persist}); err != nil {
			d.log.Warn("route switch: writing the record failed; nothing was done, trying again", "route", route, "step", out.Persist.Step, "err", err)
			if call != nil {
				call.reply <- fmt.Errorf("route %q: writing the switch record: %w", route, err)
			}
			return d.now().Add(d.policy.RetryBackoff)
		}
		d.log.Info("route switch", "route", route, "attempt", out.Persist.Attempt, "step", out.Persist.Step,
			"driver", out.Persist.Driver, "reason", out.Persist.Reason)
		st = d.state(route, out.Persist)
	}
	if call != nil {
		call.reply <- out.Refused
	}
	if cur := out.Persist; cur != nil || rec != nil {
		if cur == nil {
			cur = rec
		}
		// The topics of the record being acted on: a switch's first record names the
		// mirror only now (a forced switch's first action is the failover; taken from the
		// record read before Next, its topics were none, and it "failed over" nothing).
		var topics []string
		d.view.Read(func(v *statetopic.View) { topics = mirrorTopics(v, cur.Mirror) })
		d.start(ctx, route, st, cur, topics, out.Actions)
		if pauseAt != nil && out.Persist != nil && pauseAt(route, out.Persist) {
			d.log.Warn("test hook: the route switch driver pauses here until the process is killed",
				"route", route, "step", out.Persist.Step, "attempt", out.Persist.Attempt)
			d.paused = true
		}
	}
	return out.RetryAt
}

// pauseAt is nil but in a binary built for the kill-at-each-step test
// (routedrive_pause.go, build tag kmirror_testhooks): it says whether the
// driver stops driving once it wrote rec (run stops at its next turn, after
// a request's answer was written).
var pauseAt func(route string, rec *statetopic.RouteSwitch) bool

// serveMailbox answers a switch request recorded by the SwitchRoute RPC
// (on any instance): it runs it through Next like a local request and writes
// the answer into the request record. An answer whose write failed is
// written again as it was (serving the request again would refuse it as
// "in progress" after it started the switch). It reports whether it served
// the request, and when to look again.
func (d *routeDriver) serveMailbox(ctx context.Context, route string, rec *statetopic.RouteSwitch, req *statetopic.RouteRequest) (time.Time, bool) {
	st := d.state(route, rec)
	answer := st.answer
	if answer == nil || answer.ID != req.ID {
		answer = &statetopic.RouteRequest{ID: req.ID, Forced: req.Forced, AtMs: req.AtMs}
		if age := d.now().Sub(time.UnixMilli(req.AtMs)); age > apis.SwitchRequestExpiry {
			answer.Refused = fmt.Sprintf("route %q: the switch request expired unanswered (%s old; its caller gave up after %s): ask again", route, age.Round(time.Second), apis.SwitchRequestExpiry)
		} else if call, err := d.requestOf(ctx, route, rec, req.Forced); err != nil {
			answer.Refused = err.Error()
		} else {
			d.drive(ctx, route, call)
			if err := <-call.reply; err != nil {
				answer.Refused = err.Error()
			}
			d.view.Read(func(v *statetopic.View) {
				if cur := v.RouteSwitch(route); cur != nil {
					answer.Attempt = cur.Attempt
				}
			})
		}
		st = d.driven[route] // drive may have moved it to the started step
		st.answer = answer
	}
	answer.AnsweredMs = d.now().UnixMilli()
	if err := d.write(ctx, coordinator.Record{Key: statetopic.RouteRequestKey(route), Value: answer}); err != nil {
		d.log.Warn("route switch: writing the answer to a switch request failed; trying again", "route", route, "request", req.ID, "err", err)
		return d.now().Add(d.policy.RetryBackoff), true
	}
	d.log.Info("route switch: request answered", "route", route, "request", req.ID, "attempt", answer.Attempt, "refused", answer.Refused)
	return d.now(), true
}

// requestOf is an operator's switch request of route as the machine takes it: the route's
// mirror, and on a route that leads to its standby the mirror back to the primary (found on
// the primary's kmirror); a forced switch's records at risk and the groups it holds.
func (d *routeDriver) requestOf(ctx context.Context, route string, rec *statetopic.RouteSwitch, forced bool) (*switchCall, error) {
	mirror, back := d.mirrorOf(route), ""
	if rec != nil && rec.Upstream == statetopic.UpstreamStandby && mirror != "" {
		if d.findBack == nil {
			return nil, fmt.Errorf("route %q: switching back to the primary is not available on this instance", route)
		}
		var topics []string
		d.view.Read(func(v *statetopic.View) { topics = mirrorTopics(v, mirror) })
		var err error
		if back, err = d.findBack(ctx, mirror, topics); err != nil {
			return nil, fmt.Errorf("route %q: switching back to the primary: %w", route, err)
		}
	}
	call := &switchCall{route: route, req: routeswitch.Request{Forced: forced, Mirror: mirror, Back: back, RecordsAtRisk: -1}, reply: make(chan error, 1)}
	if forced && mirror != "" {
		call.req.RecordsAtRisk = d.recordsAtRisk(ctx, route, mirror, back)
		call.req.HeldGroups = d.standbyGroups(ctx, route, mirror, back)
	}
	return call, nil
}

// actsFor are the actions of a switch whose mirror back is back ("": a switch to the standby).
func (d *routeDriver) actsFor(back string) routeswitch.Actions {
	if back == "" || d.back == nil {
		return d.acts
	}
	return d.back(back)
}

// recordsAtRisk is what a forced switch of route records as its RPO: describe's records at
// risk of the mirror, -1 when the primary does not answer (it is gone: the last describe or
// the kmirror_mirror_at_risk_records gauge before it went is the figure then).
func (d *routeDriver) recordsAtRisk(ctx context.Context, route, mirror, back string) int64 {
	n, err := d.actsFor(back).RecordsAtRisk(ctx, mirror)
	if err != nil {
		d.log.Warn("route switch: a forced switch cannot tell what it loses; the last describe before the primary went says it",
			"route", route, "mirror", mirror, "err", err)
		return -1
	}
	d.log.Warn("route switch: a forced switch fails over with records still at risk", "route", route, "mirror", mirror, "records_at_risk", n)
	return n
}

// standbyGroups are the groups a forced switch of route holds fetches for (routeswitch.Request):
// those with offsets of the mirror's topics on the standby, less those the group sync last saw
// without members on the primary (nobody would rejoin them, and the hold would wait out its
// bound for them); a group the group sync has no record of is held. None when the standby does
// not answer, which the switch then cannot wait for anyway.
func (d *routeDriver) standbyGroups(ctx context.Context, route, mirror, back string) map[string]int {
	var topics []string
	d.view.Read(func(v *statetopic.View) { topics = mirrorTopics(v, mirror) })
	held, err := d.actsFor(back).StandbyGroups(ctx, mirror, topics)
	if err != nil {
		d.log.Warn("route switch: a forced switch cannot list the groups of the cluster it leads to; their consumers may fetch before they rejoin",
			"route", route, "mirror", mirror, "err", err)
		return nil
	}
	if back != "" {
		return held // the group sync's records are of the route's mirror, not of the mirror back
	}
	d.view.Read(func(v *statetopic.View) {
		m := v.Mirror(mirror)
		if m == nil {
			return
		}
		for g := range held {
			if rec := m.Groups[g]; rec != nil && !rec.SourceMembers {
				delete(held, g)
			}
		}
	})
	return held
}

// state returns the route's driver state, its facts reset when rec is in
// another step or attempt than they were gathered in.
func (d *routeDriver) state(route string, rec *statetopic.RouteSwitch) *drivenRoute {
	st := d.driven[route]
	if st == nil {
		st = &drivenRoute{lastSeen: map[string]groupSeen{}}
		d.driven[route] = st
	}
	if rec != nil && (st.step != rec.Step || st.attempt != rec.Attempt) {
		if rec.Attempt != st.attempt {
			st.lastSeen = map[string]groupSeen{}
		}
		st.step, st.attempt, st.facts = rec.Step, rec.Attempt, routeswitch.Input{}
	}
	return st
}

// start runs the driver's own actions of one answer, in order, in one
// goroutine; nothing new starts while they run (the machine is told Busy).
func (d *routeDriver) start(ctx context.Context, route string, st *drivenRoute, rec *statetopic.RouteSwitch, topics []string, actions []routeswitch.Action) {
	var mine []routeswitch.Action
	for _, a := range actions {
		switch a {
		case routeswitch.ActFreeze, routeswitch.ActFreezeGroupCommits, routeswitch.ActSwitchUpstream,
			routeswitch.ActCloseConnections, routeswitch.ActUnfreeze:
			// The applier's: every instance reads the record.
		default:
			mine = append(mine, a)
		}
	}
	if len(mine) == 0 || st.busy {
		return
	}
	st.busy = true
	step, attempt, mirror, acts := rec.Step, rec.Attempt, rec.Mirror, d.actsFor(rec.BackMirror)
	targets := slices.Clone(rec.DrainTargets)
	go func() {
		var sets []func(*routeswitch.Input)
		var err error
		for _, a := range mine {
			var set func(*routeswitch.Input)
			set, err = d.act(ctx, acts, route, st, a, mirror, topics, targets)
			if err != nil {
				err = fmt.Errorf("%s: %w", a, err)
				break
			}
			if set != nil {
				sets = append(sets, set)
			}
		}
		res := actionResult{route: route, step: step, attempt: attempt, err: err, retriable: err != nil && datapath.Retriable(err),
			set: func(in *routeswitch.Input) {
				for _, s := range sets {
					s(in)
				}
			}}
		select {
		case d.results <- res:
		case <-ctx.Done():
		}
	}()
}

// act runs one action and returns how it changes the facts.
func (d *routeDriver) act(ctx context.Context, acts routeswitch.Actions, route string, st *drivenRoute, a routeswitch.Action, mirror string, topics []string, targets []statetopic.DrainTarget) (func(*routeswitch.Input), error) {
	switch a {
	case routeswitch.ActCheckTransactions:
		n, err := acts.OpenTransactions(ctx, mirror, topics)
		return func(in *routeswitch.Input) { in.TransactionsChecked, in.OpenTransactions = true, n }, err
	case routeswitch.ActAbortTransactions:
		return nil, acts.AbortTransactions(ctx, mirror, topics)
	case routeswitch.ActReadDrainTargets:
		ends, err := acts.LogEnds(ctx, mirror, topics)
		return func(in *routeswitch.Input) { in.TargetsRead, in.DrainTargets = true, ends }, err
	case routeswitch.ActWaitDrain:
		ends, err := acts.CopiedEnds(ctx, mirror, topics)
		return func(in *routeswitch.Input) { in.LMOs = ends }, err
	case routeswitch.ActCheckGroups:
		gs, err := acts.Groups(ctx, mirror, topics, targets)
		now := d.now()
		return func(in *routeswitch.Input) {
			in.GroupsChecked, in.Groups = true, nil
			for _, g := range gs {
				// Kafka keeps no commit time: a change is seen by polling,
				// and a first reading counts as one (routeswitch.Group).
				seen, ok := st.lastSeen[g.Name]
				if !ok || seen.fingerprint != g.Fingerprint {
					seen = groupSeen{g.Fingerprint, now}
					st.lastSeen[g.Name] = seen
				}
				in.Groups = append(in.Groups, routeswitch.Group{Name: g.Name, AtLogEnd: g.AtLogEnd, LastChange: seen.changed})
			}
		}, err
	case routeswitch.ActCopyGroupOffsets:
		held, err := acts.CopyGroups(ctx, mirror, topics)
		return func(in *routeswitch.Input) { in.GroupsCopied, in.HeldGroups = true, held }, err
	case routeswitch.ActFailOver:
		done, err := acts.FailOver(ctx, mirror, topics)
		return func(in *routeswitch.Input) { in.FailedOver = done }, err
	}
	return nil, fmt.Errorf("route %s: the driver has no %s action", route, a)
}

// mirrorTopics lists the mirror's topics in the view.
func mirrorTopics(v *statetopic.View, mirror string) []string {
	if m := v.Mirror(mirror); m != nil {
		return m.TopicNames()
	}
	return nil
}
