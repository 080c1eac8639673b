package statetopic

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kmirror/kmirror/internal/enumname"
)

// The records of a route switch (docs/cutover.md, issue 21). A route is a
// listener set whose upstream is the primary cluster until a switch and the
// standby after it; switching it is a sequence of steps, each recorded in a
// RouteSwitch record *before* its effect, so that the next driver (after the
// current one dies) reads where the switch stands and completes it or rolls
// it back. Instances serving the route answer the steps that need every one
// of them (the produce freeze, the commit freeze, the switch itself) with a
// RouteAck record.
//
// Both records are keyed by the route's name where mirror records have the
// mirror's, and both hash by that name alone: a route's switch record and
// all its acks share one state partition, so an ack written after an
// instance read a switch record is after that record in the log, and a
// reader sees them in the order they were written.

// RouteStep is where a switch stands. The numbers are the on-disk format
// (JSON carries the name, see MarshalText): never renumber.
type RouteStep int8

const (
	// RouteIdle: the route has never been switched (also the meaning of no
	// record at all).
	RouteIdle RouteStep = 0
	// RouteFreezing: every instance refuses Produce to the mirror's topics;
	// the driver waits for every live instance's ack.
	RouteFreezing RouteStep = 1
	// RouteTxnWait: open transactions may still commit (EndTxn passes) for
	// switch.transaction.wait; those still open after it are aborted.
	RouteTxnWait RouteStep = 2
	// RouteDraining: the primary's log ends are recorded (DrainTargets) and
	// the driver waits for the mirror's LMOs to reach them.
	RouteDraining RouteStep = 3
	// RouteGroupsQuiet: commits stay open while consumers reach the log end
	// and commit it; the driver waits until every group did, or is quiet.
	RouteGroupsQuiet RouteStep = 4
	// RouteGroupsCopy: commits are frozen on every instance (acked), and
	// the groups' committed offsets are copied to the standby.
	RouteGroupsCopy RouteStep = 5
	// RouteFailingOver: the mirror's topics fail over on the standby. From
	// here the switch only goes forward.
	RouteFailingOver RouteStep = 6
	// RouteSwitching: the record names the new upstream; every instance
	// applies it, closes the route's client connections and acks.
	RouteSwitching RouteStep = 7
	// RouteSwitched: every live instance serves the new upstream (final).
	RouteSwitched RouteStep = 8
	// RouteRolledBack: the switch was abandoned before the failover; the
	// route serves its old upstream, unfrozen (final). Reason says why.
	RouteRolledBack RouteStep = 9
)

var routeStepNames = []string{
	RouteIdle:        "IDLE",
	RouteFreezing:    "FREEZING",
	RouteTxnWait:     "TXN_WAIT",
	RouteDraining:    "DRAINING",
	RouteGroupsQuiet: "GROUPS_QUIET",
	RouteGroupsCopy:  "GROUPS_COPY",
	RouteFailingOver: "FAILING_OVER",
	RouteSwitching:   "SWITCHING",
	RouteSwitched:    "SWITCHED",
	RouteRolledBack:  "ROLLED_BACK",
}

func (s RouteStep) String() string { return enumname.Of(s, "RouteStep", routeStepNames) }

// Known reports whether this version knows the step; a newer kmirror may
// write one it does not, which is kept as a number and left to its writer.
func (s RouteStep) Known() bool {
	return s >= 0 && int(s) < len(routeStepNames)
}

// InProgress reports whether a switch is under way in this step (a new
// switch request is refused).
func (s RouteStep) InProgress() bool { return s >= RouteFreezing && s <= RouteSwitching }

// ParseRouteStep parses a step name (any case), or the RouteStep(n) form
// String gives a step this version does not know.
func ParseRouteStep(name string) (RouteStep, error) {
	for i, n := range routeStepNames {
		if strings.EqualFold(n, name) {
			return RouteStep(i), nil
		}
	}
	if inner, ok := strings.CutPrefix(name, "RouteStep("); ok {
		if num, ok := strings.CutSuffix(inner, ")"); ok {
			if n, err := strconv.ParseInt(num, 10, 8); err == nil {
				return RouteStep(n), nil
			}
		}
	}
	return 0, fmt.Errorf("statetopic: unknown route switch step %q (want one of %s)", name, strings.Join(routeStepNames, ", "))
}

// MarshalText and UnmarshalText make the step read as its name in the JSON
// value (dump-state, describe --json). A step this version does not know
// round-trips as RouteStep(n) instead of making the record undecodable.
func (s RouteStep) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *RouteStep) UnmarshalText(text []byte) error {
	parsed, err := ParseRouteStep(string(text))
	if err != nil {
		return err
	}
	*s = parsed
	return nil
}

// Upstream names the cluster a route's connections lead to.
type Upstream string

const (
	UpstreamPrimary Upstream = "primary" // the route's own cluster (routes[].primary)
	UpstreamStandby Upstream = "standby" // this kmirror's destination
)

// Other is the upstream a switch from u leads to.
func (u Upstream) Other() Upstream {
	if u == UpstreamStandby {
		return UpstreamPrimary
	}
	return UpstreamStandby
}

// RouteSwitchKey names a route's switch record.
func RouteSwitchKey(route string) Key { return Key{Type: TypeRouteSwitch, Route: route} }

// RouteAckKey names an instance's ack of a switch step on a route. Acks of
// different attempts share the key (compaction keeps the last); the value
// says which attempt it acks.
func RouteAckKey(route, instance string, step RouteStep) Key {
	return Key{Type: TypeRouteAck, Route: route, Instance: instance, Step: step}
}

// RouteSwitch is the value of a TypeRouteSwitch record: the route's last (or
// current) switch. It holds no credentials: the route's primary is named by
// the route's configuration, not here.
type RouteSwitch struct {
	Route string `json:"route"`
	// Mirror is the route's mirror (its source the primary, its destination
	// the standby). A switch to the standby drains it and fails it over; a
	// switch back to the primary takes its topics from it.
	Mirror string `json:"mirror"`
	// BackMirror, on a switch back to the primary, is the mirror copying the
	// standby back to the primary: it lives on the kmirror in front of the
	// primary (the route's mirror's source), which fails it over; it is
	// drained by the primary's log ends (docs/cutover.md, "Switching back").
	BackMirror string    `json:"back_mirror,omitempty"`
	Step       RouteStep `json:"step"`
	// Forced: no freeze, drain or final group copy (the primary is gone).
	Forced bool `json:"forced,omitempty"`
	// Upstream is where the route's connections lead now: every instance
	// serves it. It becomes Target when the switch reaches SWITCHING.
	Upstream Upstream `json:"upstream"`
	// Target is where this switch leads.
	Target Upstream `json:"target"`
	// Driver is the instance driving the switch; DriverTerm counts the
	// drivers of this attempt (a new driver writes Term+1 before it acts),
	// so a late write of a replaced driver is recognised as older.
	Driver     string `json:"driver"`
	DriverTerm int32  `json:"driver_term"`
	// Attempt counts the switches of the route (1 for the first): acks name
	// it, so an ack of an earlier, rolled-back attempt is not counted.
	Attempt int32 `json:"attempt"`
	// Steps lists when each step began, in order (unix ms); describe shows
	// how long each took. A step redone by a new driver is not repeated.
	Steps []StepStart `json:"steps,omitempty"`
	// FreezeStartMs is when Produce was first frozen (unix ms, 0: never).
	FreezeStartMs int64 `json:"freeze_start_ms,omitempty"`
	// DrainTargets are the primary's log ends read once produce was frozen
	// and transactions were done: the drain waits for the mirror's LMO to
	// reach each. Recorded so that a new driver waits for the same ones.
	DrainTargets []DrainTarget `json:"drain_targets,omitempty"`
	// HeldGroups are the consumer groups copied at GROUPS_COPY that had
	// members on the primary, with their member counts: at the switch every
	// instance holds the route's Fetch of the switched topics until each is
	// Stable on the standby with as many members (proxy.FetchHold), so no
	// member reads before its rejoin. A forced switch, which copies no
	// groups, holds those with offsets of the topics on the standby, one
	// member each (routeswitch.Actions.StandbyGroups).
	HeldGroups map[string]int `json:"held_groups,omitempty"`
	// RecordsAtRisk is, for a forced switch, describe's records at risk
	// when it was asked for (the RPO); -1 unknown.
	RecordsAtRisk int64 `json:"records_at_risk,omitempty"`
	// Reason says why the switch rolled back, or what it is waiting for or
	// retrying (a lagging instance, an error), for describe.
	Reason string `json:"reason,omitempty"`
	// UpdatedMs is when the record was written (unix ms).
	UpdatedMs int64 `json:"updated_ms"`
}

// StepStart is when a switch step began.
type StepStart struct {
	Step RouteStep `json:"step"`
	AtMs int64     `json:"at_ms"`
}

// DrainTarget is a primary partition's log end when the drain began.
type DrainTarget struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// StepStartMs is when the current step began (unix ms; 0 if not recorded).
func (r *RouteSwitch) StepStartMs() int64 {
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if r.Steps[i].Step == r.Step {
			return r.Steps[i].AtMs
		}
	}
	return 0
}

// Final reports whether the step ends a switch (SWITCHED, ROLLED_BACK).
func (s RouteStep) Final() bool { return s == RouteSwitched || s == RouteRolledBack }

// RouteTimings is how long a switch took, in milliseconds: of one in
// progress, so far.
type RouteTimings struct {
	// Total runs from the first step to SWITCHED or ROLLED_BACK; -1 when no
	// step is recorded.
	Total int64
	// Freeze runs from the produce freeze to the new upstream (SWITCHING)
	// or the rollback; -1 when writes were never frozen (a forced switch).
	Freeze int64
	// Steps are the durations of the steps taken, final ones left out.
	Steps []StepDuration
}

// StepDuration is how long one step of a switch took.
type StepDuration struct {
	Step RouteStep
	Ms   int64
}

// Timings measures the switch on its recorded step starts; nowMs ends what
// is still in progress.
func (r *RouteSwitch) Timings(nowMs int64) RouteTimings {
	t := RouteTimings{Total: -1, Freeze: -1}
	end := func(i int) int64 { // when step i ended
		if i+1 < len(r.Steps) {
			return r.Steps[i+1].AtMs
		}
		return nowMs
	}
	for i, s := range r.Steps {
		if !s.Step.Final() {
			t.Steps = append(t.Steps, StepDuration{s.Step, max(0, end(i)-s.AtMs)})
		}
	}
	if len(r.Steps) > 0 {
		last := nowMs
		if l := r.Steps[len(r.Steps)-1]; l.Step.Final() {
			last = l.AtMs
		}
		t.Total = max(0, last-r.Steps[0].AtMs)
	}
	if r.FreezeStartMs != 0 {
		t.Freeze = max(0, nowMs-r.FreezeStartMs)
		for _, s := range r.Steps {
			if s.AtMs >= r.FreezeStartMs && (s.Step == RouteSwitching || s.Step.Final()) {
				t.Freeze = max(0, s.AtMs-r.FreezeStartMs)
				break
			}
		}
	}
	return t
}

// ProduceFrozen reports whether instances refuse Produce to the mirror's
// topics on the route. In SWITCHING an instance stays frozen until it has
// applied the new upstream (that is local to the instance, not recorded).
func (r *RouteSwitch) ProduceFrozen() bool {
	return r.FreezeStartMs != 0 && r.Step >= RouteFreezing && r.Step <= RouteSwitching
}

// CommitsFrozen reports whether instances refuse OffsetCommit and
// TxnOffsetCommit for the route (the final group copy has begun), with the
// same SWITCHING caveat as ProduceFrozen.
func (r *RouteSwitch) CommitsFrozen() bool {
	return r.FreezeStartMs != 0 && r.Step >= RouteGroupsCopy && r.Step <= RouteSwitching
}

// Newer reports whether r supersedes old: a later attempt, or a later driver
// of the same attempt. Records of one driver are ordered by the log.
func (r *RouteSwitch) Newer(old *RouteSwitch) bool {
	if r.Attempt != old.Attempt {
		return r.Attempt > old.Attempt
	}
	return r.DriverTerm >= old.DriverTerm
}

// RouteRequestKey names a route's switch request record.
func RouteRequestKey(route string) Key { return Key{Type: TypeRouteRequest, Route: route} }

// RouteRequest is the value of a TypeRouteRequest record: an operator's
// request to switch a route (the SwitchRoute RPC), written by the instance
// that received it and answered in place by the route's driver, the owner
// of the route's state partition (where the request hashes with the route's
// other records). One request per route is current: a newer one replaces
// an unanswered older one, whose caller is told so.
type RouteRequest struct {
	ID     string `json:"id"`
	Forced bool   `json:"forced,omitempty"`
	AtMs   int64  `json:"at_ms"`
	// The driver's answer: when (0: not yet), and either the attempt the
	// request started or escalated, or why it was refused.
	AnsweredMs int64  `json:"answered_ms,omitempty"`
	Attempt    int32  `json:"attempt,omitempty"`
	Refused    string `json:"refused,omitempty"`
}

// RouteAck is the value of a TypeRouteAck record: an instance applied a
// switch step (the produce freeze, the commit freeze, the new upstream).
type RouteAck struct {
	Attempt int32 `json:"attempt"`
	AtMs    int64 `json:"at_ms"`
}

// Route is one route's replayed switch state.
type Route struct {
	Name    string
	Switch  *RouteSwitch // nil: never switched
	Acks    map[RouteAckID]*RouteAck
	Request *RouteRequest // the last switch request, nil: none
}

// RouteAckID names an ack within a route.
type RouteAckID struct {
	Instance string
	Step     RouteStep
}

func (v *View) applyRoute(k Key, val any) {
	r := v.routes[k.Route]
	if r == nil {
		if val == nil {
			return
		}
		r = &Route{Name: k.Route, Acks: map[RouteAckID]*RouteAck{}}
		v.routes[k.Route] = r
	}
	switch k.Type {
	case TypeRouteSwitch:
		s, ok := val.(*RouteSwitch)
		switch {
		case !ok:
			r.Switch = nil
		case r.Switch == nil || s.Newer(r.Switch):
			r.Switch = s
		}
		// else: a replaced driver's late write; the current driver's stands.
	case TypeRouteAck:
		putOrDelete(r.Acks, RouteAckID{k.Instance, k.Step}, val)
	case TypeRouteRequest:
		r.Request, _ = val.(*RouteRequest)
	}
	if r.Switch == nil && len(r.Acks) == 0 && r.Request == nil {
		delete(v.routes, k.Route)
	}
}

// RouteSwitch returns a copy of a route's switch record, or nil.
func (v *View) RouteSwitch(route string) *RouteSwitch {
	r := v.routes[route]
	if r == nil || r.Switch == nil {
		return nil
	}
	c := *r.Switch
	c.Steps = slices.Clone(r.Switch.Steps)
	c.DrainTargets = slices.Clone(r.Switch.DrainTargets)
	c.HeldGroups = maps.Clone(r.Switch.HeldGroups)
	return &c
}

// RouteRequest returns a copy of a route's last switch request, or nil.
func (v *View) RouteRequest(route string) *RouteRequest {
	r := v.routes[route]
	if r == nil || r.Request == nil {
		return nil
	}
	c := *r.Request
	return &c
}

// RouteAcked lists, sorted, the instances that acked a step of a route's
// switch attempt; acks of other attempts do not count.
func (v *View) RouteAcked(route string, step RouteStep, attempt int32) []string {
	var out []string
	if r := v.routes[route]; r != nil {
		for id, a := range r.Acks {
			if id.Step == step && a.Attempt == attempt {
				out = append(out, id.Instance)
			}
		}
	}
	slices.Sort(out)
	return out
}

// RouteNames lists the routes that have any record, sorted.
func (v *View) RouteNames() []string { return sortedKeys(v.routes) }
