// Package routeswitch is the route switch of docs/cutover.md (issue 21) as a
// pure function, like the mirror partition machine (coordinator/machine.go):
// Next takes the route's RouteSwitch record, what the driver observed and
// the time, and returns the record to write, the actions to run and when to
// call again. The driver writes the record *before* it runs the actions, so
// an instance that dies leaves a record from which the next driver redoes
// the current step (every step is idempotent) or rolls back. All I/O — the
// freeze on every instance, DescribeProducers, the drain, the group copy,
// the failover — is the driver's.
//
// The planned switch goes FREEZING → TXN_WAIT → DRAINING → GROUPS_QUIET →
// GROUPS_COPY → FAILING_OVER → SWITCHING → SWITCHED. Before FAILING_OVER any
// step can roll back (ROLLED_BACK, with the reason); from FAILING_OVER on
// the switch only goes forward, retrying what fails. A forced switch starts
// at FAILING_OVER.
package routeswitch

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// Policy holds the switch's bounds. Every pre-failover bound protects the
// applications: Produce is refused while the switch runs, so a step that
// cannot finish rolls back rather than keep them waiting (clients retry a
// refused Produce for delivery.timeout.ms, 2 min by default).
type Policy struct {
	// AckTimeout bounds the wait for every live instance to ack the produce
	// freeze or the commit freeze (past it: roll back, since a write through
	// an instance that did not see the freeze could be lost); after the
	// failover it is how often a missing switch ack is reported.
	AckTimeout time.Duration
	// TxnWait is switch.transaction.wait: how long open transactions may
	// still commit before the driver aborts them.
	TxnWait time.Duration
	// AbortTimeout bounds the aborts after TxnWait (past it: roll back).
	AbortTimeout time.Duration
	// DrainTimeout is switch.drain.timeout: how long the mirror may take to
	// copy up to the primary's log ends (past it: roll back, reporting the
	// lag of each partition).
	DrainTimeout time.Duration
	// GroupQuiet is switch.group.quiet: a group that has not committed for
	// this long is done committing, even short of the log end.
	GroupQuiet time.Duration
	// GroupWaitMax bounds the wait for groups to be quiet: a consumer that
	// lags and keeps committing would otherwise hold the freeze forever.
	// Past it the switch goes on; those groups' offsets are copied as they
	// stand (the consumer reads again what it processed since its last
	// commit, as after any rebalance).
	GroupWaitMax time.Duration
	// GroupCopyTimeout bounds the commit freeze with its acks and the copy
	// of every group's offsets (past it: roll back).
	GroupCopyTimeout time.Duration
	// Poll is how often a polled fact (open transactions, LMOs, group
	// commits, the failover) is read again while a step waits for it.
	Poll time.Duration
	// RetryBackoff is the wait after a retriable failure.
	RetryBackoff time.Duration
}

// DefaultPolicy is the design's bounds (docs/cutover.md); GroupWaitMax,
// GroupCopyTimeout, AbortTimeout, Poll and RetryBackoff are this package's.
func DefaultPolicy() Policy {
	return Policy{
		AckTimeout:       10 * time.Second,
		TxnWait:          10 * time.Second,
		AbortTimeout:     10 * time.Second,
		DrainTimeout:     60 * time.Second,
		GroupQuiet:       10 * time.Second,
		GroupWaitMax:     30 * time.Second,
		GroupCopyTimeout: 30 * time.Second,
		Poll:             500 * time.Millisecond,
		RetryBackoff:     time.Second,
	}
}

// Request is an operator's `--switch --route R [--force]`. The driver (the
// one instance that drives the route, so requests are serialised) passes it
// with the facts it has.
type Request struct {
	Forced bool
	// Mirror is the route's mirror, from its primary to its standby: a
	// switch to the standby drains it and fails it over; a switch back
	// takes its topics from it. "" when the route has none.
	Mirror string
	// Back is, for a switch back to the primary, the mirror that copies the
	// standby back to the primary on the primary's kmirror: it is drained
	// and failed over there. "" when there is none.
	Back string
	// RecordsAtRisk is describe's records at risk when a forced switch is
	// asked for: the RPO it accepts, kept in the record. -1 unknown.
	RecordsAtRisk int64
	// HeldGroups are a forced switch's groups to hold fetches for at the
	// switch (Actions.StandbyGroups): a forced switch copies no groups, and
	// a consumer fetching on the standby with the positions it had on the
	// primary would skip what is written there at offsets the primary had
	// given the lost records (TestRealForcedRouteSwitchPrimaryKilled).
	HeldGroups map[string]int
}

// TopicPartition names a partition of a mirrored topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Group is what the driver observed of one consumer group of the mirrored
// topics on the primary.
type Group struct {
	Name string
	// AtLogEnd: the group's committed offsets are the log ends (of the
	// frozen partitions it consumes): nothing more to commit.
	AtLogEnd bool
	// LastChange is when the driver last saw the group's committed offsets
	// change. Kafka gives no commit time (OffsetFetch has none), so the
	// driver polls; a driver counts its first reading as a change, so a new
	// driver waits a full GroupQuiet before calling a group quiet.
	LastChange time.Time
}

// Input is what the driver knows when it calls Next: this instance, an
// operator request if one arrived, and the facts its actions produced. A
// fact only counts in the step it belongs to.
type Input struct {
	Driver  string   // this instance's id
	Request *Request // nil: no request
	// Live are the instances serving the route (members of the
	// coordinators' group). Acked are those that acked the record's
	// current step for its attempt (View.RouteAcked).
	Live  []string
	Acked []string
	// Busy: an action is in flight; its outcome comes with a later call.
	// Only deadlines are checked meanwhile.
	Busy bool
	// Err is the failure of the last action, Retriable whether trying
	// again may help.
	Err       error
	Retriable bool
	// TXN_WAIT: DescribeProducers read the transactions open on the mirrored
	// topics' primary partitions.
	TransactionsChecked bool
	OpenTransactions    int
	// DRAINING: the primary's log ends were read (TargetsRead), and the
	// mirror's LMO of each partition (a missing partition has none yet).
	TargetsRead  bool
	DrainTargets []statetopic.DrainTarget
	LMOs         map[TopicPartition]int64
	// GROUPS_QUIET: the groups' commits were read.
	GroupsChecked bool
	Groups        []Group
	// GROUPS_COPY: every group's offsets are written to the standby;
	// HeldGroups are those of them that had members on the primary, with
	// their member counts, for the fetch hold at the switch (recorded).
	GroupsCopied bool
	HeldGroups   map[string]int
	// FAILING_OVER: every partition of the mirror's topics is STOPPED.
	FailedOver bool
}

// Action is work for the driver. Actions that the record asks of every
// instance (Freeze, FreezeGroupCommits, SwitchUpstream, CloseConnections,
// Unfreeze) are applied by each instance when it reads the record, once per
// attempt, and acked; for the driver they mean "apply it here now", and
// doing it again is a no-op.
type Action int

const (
	ActFreeze             Action = iota + 1 // refuse Produce to the mirror's topics; wait for acks
	ActCheckTransactions                    // DescribeProducers on the primary: open transactions
	ActAbortTransactions                    // WriteTxnMarkers abort for each still open
	ActReadDrainTargets                     // ListOffsets (latest) of every mirrored primary partition
	ActWaitDrain                            // read the mirror's LMOs
	ActCheckGroups                          // read the groups' committed offsets on the primary
	ActFreezeGroupCommits                   // refuse OffsetCommit/TxnOffsetCommit; wait for acks
	ActCopyGroupOffsets                     // read every group's offsets on the primary, commit them on the standby
	ActFailOver                             // fail the mirror's topics over (desire stop)
	ActSwitchUpstream                       // serve the record's upstream; wait for acks
	ActCloseConnections                     // close the route's client connections (once per attempt)
	ActUnfreeze                             // cancel the step in flight and lift the freezes (rollback)
)

var actionNames = []string{
	ActFreeze: "freeze", ActCheckTransactions: "check-transactions", ActAbortTransactions: "abort-transactions",
	ActReadDrainTargets: "read-drain-targets", ActWaitDrain: "wait-drain", ActCheckGroups: "check-groups",
	ActFreezeGroupCommits: "freeze-group-commits", ActCopyGroupOffsets: "copy-group-offsets", ActFailOver: "fail-over",
	ActSwitchUpstream: "switch-upstream", ActCloseConnections: "close-connections", ActUnfreeze: "unfreeze",
}

func (a Action) String() string {
	if a > 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Step is Next's answer.
type Step struct {
	Persist *statetopic.RouteSwitch // write before running Actions; nil: nothing to write
	Actions []Action
	// RetryAt is when to call Next again if no new fact arrives first (a
	// deadline, or the next poll); zero: only when a fact arrives.
	RetryAt time.Time
	// Refused is why the request was refused (the switch in progress, if
	// any, is still driven).
	Refused error
}

// Errors a request is refused with (wrapped with the route's details).
var (
	ErrSwitchInProgress = errors.New("a switch of the route is in progress")
	ErrNoMirror         = errors.New("no mirror copies the route's upstream to the other cluster")
	ErrUnknownStep      = errors.New("the route's switch record has a step this kmirror does not know (written by a newer kmirror)")
)

// Next computes one step of route's switch. cur is the route's record, nil
// when it was never switched.
func Next(route string, cur *statetopic.RouteSwitch, in Input, now time.Time, policy Policy) Step {
	m := &transition{route: route, cur: cur, in: in, now: now, p: policy}
	if cur != nil && !cur.Step.Known() {
		// A newer kmirror drives it; do not touch it.
		return Step{Refused: m.refuse(in.Request, ErrUnknownStep, "upgrade this kmirror")}
	}
	if in.Request != nil {
		if step, started := m.request(*in.Request); started {
			return step
		}
	}
	if cur == nil || !cur.Step.InProgress() {
		return Step{Refused: m.refused} // IDLE, SWITCHED, ROLLED_BACK: nothing to drive
	}
	m.rec = m.copyCur()
	if cur.Driver != in.Driver {
		// The driver died or left: this instance takes the switch over and
		// redoes the current step. The record says so before any effect, and
		// its higher term makes the old driver's late writes the older ones.
		m.rec.Driver = in.Driver
		m.rec.DriverTerm++
		m.setReason(fmt.Sprintf("%s took over from %s in %s", in.Driver, cur.Driver, cur.Step))
	}
	step := m.drive()
	step.Refused = m.refused
	return step
}

// transition is one call of Next.
type transition struct {
	route   string
	cur     *statetopic.RouteSwitch
	in      Input
	now     time.Time
	p       Policy
	rec     *statetopic.RouteSwitch // cur as it will be written, if dirty
	dirty   bool
	refused error
}

func (m *transition) copyCur() *statetopic.RouteSwitch {
	c := *m.cur
	c.Steps = slices.Clone(m.cur.Steps)
	c.DrainTargets = slices.Clone(m.cur.DrainTargets)
	c.HeldGroups = maps.Clone(m.cur.HeldGroups)
	return &c
}

// request starts a switch, escalates a planned one to forced, or records
// the refusal (the switch in progress is still driven).
func (m *transition) request(req Request) (Step, bool) {
	cur := m.cur
	switch {
	case cur == nil || !cur.Step.InProgress():
		return m.start(req)
	case req.Forced && !cur.Forced && cur.Step < statetopic.RouteFailingOver:
		// The primary died during a planned switch: do not make the
		// operator wait for the rollback to force it.
		m.rec = m.copyCur()
		if cur.Driver != m.in.Driver {
			m.rec.Driver = m.in.Driver
			m.rec.DriverTerm++
		}
		m.rec.Forced = true
		m.rec.RecordsAtRisk, m.rec.HeldGroups = req.RecordsAtRisk, maps.Clone(req.HeldGroups)
		return m.enter(statetopic.RouteFailingOver, fmt.Sprintf("forced by the operator during %s", cur.Step), m.now.Add(m.p.Poll), ActFailOver), true
	}
	m.refused = m.refuse(&req, ErrSwitchInProgress, "wait until it is SWITCHED or ROLLED_BACK")
	return Step{}, false
}

// start begins a new attempt towards the other upstream. A SWITCHED route
// is switched back the same way, as a new switch in the other direction,
// which needs a mirror in that direction.
func (m *transition) start(req Request) (Step, bool) {
	from, attempt := statetopic.UpstreamPrimary, int32(1)
	if m.cur != nil {
		from, attempt = m.cur.Upstream, m.cur.Attempt+1
	}
	if req.Mirror == "" || (from == statetopic.UpstreamStandby && req.Back == "") {
		m.refused = fmt.Errorf("route %s: switching from the %s to the %s: %w", m.route, from, from.Other(), ErrNoMirror)
		return Step{}, false
	}
	m.rec = &statetopic.RouteSwitch{Route: m.route, Mirror: req.Mirror, Upstream: from, Target: from.Other(),
		Driver: m.in.Driver, DriverTerm: 1, Attempt: attempt}
	if from == statetopic.UpstreamStandby {
		m.rec.BackMirror = req.Back
	}
	if req.Forced {
		m.rec.Forced, m.rec.RecordsAtRisk, m.rec.HeldGroups = true, req.RecordsAtRisk, maps.Clone(req.HeldGroups)
		return m.enter(statetopic.RouteFailingOver, "", m.now.Add(m.p.Poll), ActFailOver), true
	}
	m.rec.FreezeStartMs = m.now.UnixMilli()
	return m.enter(statetopic.RouteFreezing, "", m.now.Add(m.p.AckTimeout), ActFreeze), true
}

// refuse says why a request (if any) cannot be served.
func (m *transition) refuse(req *Request, why error, hint string) error {
	if req == nil {
		return nil
	}
	c := m.cur
	return fmt.Errorf("route %s: %w: attempt %d is in %s since %s (driver %s); %s",
		m.route, why, c.Attempt, c.Step, time.UnixMilli(c.StepStartMs()).UTC().Format(time.RFC3339), c.Driver, hint)
}

// drive moves the switch in progress on.
func (m *transition) drive() Step {
	if m.in.Err != nil && !m.in.Busy && !m.pastDeadline() {
		return m.failed()
	}
	switch m.rec.Step {
	case statetopic.RouteFreezing:
		return m.freezing()
	case statetopic.RouteTxnWait:
		return m.txnWait()
	case statetopic.RouteDraining:
		return m.draining()
	case statetopic.RouteGroupsQuiet:
		return m.groupsQuiet()
	case statetopic.RouteGroupsCopy:
		return m.groupsCopy()
	case statetopic.RouteFailingOver:
		return m.failingOver()
	}
	return m.switching()
}

// elapsed is the time spent in the current step.
func (m *transition) elapsed() time.Duration {
	return m.now.Sub(time.UnixMilli(m.rec.StepStartMs()))
}

// stepDeadline is when the current step rolls back (or, in GROUPS_QUIET,
// goes on regardless); zero from the failover on.
func (m *transition) stepDeadline() time.Time {
	start := time.UnixMilli(m.rec.StepStartMs())
	switch m.rec.Step {
	case statetopic.RouteFreezing:
		return start.Add(m.p.AckTimeout)
	case statetopic.RouteTxnWait:
		return start.Add(m.p.TxnWait + m.p.AbortTimeout)
	case statetopic.RouteDraining:
		return start.Add(m.p.DrainTimeout)
	case statetopic.RouteGroupsQuiet:
		return start.Add(m.p.GroupWaitMax)
	case statetopic.RouteGroupsCopy:
		return start.Add(m.p.GroupCopyTimeout)
	}
	return time.Time{}
}

// pastDeadline reports whether a pre-failover step has run out of time: a
// retriable failure then is not retried, the step's own timeout rule
// decides (with its own reason).
func (m *transition) pastDeadline() bool {
	d := m.stepDeadline()
	return m.in.Retriable && !d.IsZero() && !m.now.Before(d)
}

// poll is the next time to read a polled fact again, never past the
// step's deadline.
func (m *transition) poll() time.Time {
	at := m.now.Add(m.p.Poll)
	if d := m.stepDeadline(); !d.IsZero() && d.Before(at) {
		return d
	}
	return at
}

// wait stays in the step: the record is written only if it changed (a new
// driver, a new reason), the actions run again (they are idempotent).
func (m *transition) wait(at time.Time, actions ...Action) Step {
	step := Step{Actions: actions, RetryAt: at}
	if m.dirty {
		m.rec.UpdatedMs = m.now.UnixMilli()
		step.Persist = m.rec
	}
	return step
}

// busy is wait while an action is in flight: nothing new is started.
func (m *transition) busy() Step { return m.wait(m.stepDeadline()) }

// enter moves to step s; the record is written before the actions run.
func (m *transition) enter(s statetopic.RouteStep, reason string, at time.Time, actions ...Action) Step {
	m.rec.Step = s
	m.rec.Steps = append(m.rec.Steps, statetopic.StepStart{Step: s, AtMs: m.now.UnixMilli()})
	m.rec.Reason = reason
	m.rec.UpdatedMs = m.now.UnixMilli()
	return Step{Persist: m.rec, Actions: actions, RetryAt: at}
}

// rollBack abandons the switch (only ever before the failover): the record
// says ROLLED_BACK and why, every instance lifts the freezes on reading it.
func (m *transition) rollBack(reason string) Step {
	return m.enter(statetopic.RouteRolledBack, fmt.Sprintf("rolled back in %s: %s", m.rec.Step, reason), time.Time{}, ActUnfreeze)
}

func (m *transition) setReason(r string) {
	if m.rec.Reason != r {
		m.rec.Reason, m.dirty = r, true
	}
}

// failed handles an action's failure: before the failover a permanent one
// rolls back and a retriable one is retried until the step's deadline;
// from the failover on everything is retried, since the switch cannot go
// back.
func (m *transition) failed() Step {
	step := m.rec.Step
	if step < statetopic.RouteFailingOver {
		if !m.in.Retriable {
			return m.rollBack(m.in.Err.Error())
		}
		m.setReason(fmt.Sprintf("retrying %s: %v", step, m.in.Err))
		at := m.now.Add(m.p.RetryBackoff)
		if d := m.stepDeadline(); d.Before(at) {
			at = d // the step's timeout decides then
		}
		return m.wait(at)
	}
	if m.in.Retriable {
		m.setReason(fmt.Sprintf("retrying %s: %v", step, m.in.Err))
	} else {
		m.setReason(fmt.Sprintf("retrying %s: %v (not retriable: it needs the operator; past the failover the switch only goes forward)", step, m.in.Err))
	}
	return m.wait(m.now.Add(m.p.RetryBackoff))
}

// missingAcks lists the live instances that have not acked the current
// step of this attempt, sorted.
func (m *transition) missingAcks() []string {
	var out []string
	for _, inst := range m.in.Live {
		if !slices.Contains(m.in.Acked, inst) {
			out = append(out, inst)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// freezing waits for every live instance to refuse Produce: a write
// through one that has not yet could land on the primary after the drain
// target is read, and be lost.
func (m *transition) freezing() Step {
	missing := m.missingAcks()
	switch {
	case len(missing) == 0:
		return m.enter(statetopic.RouteTxnWait, "", m.now.Add(m.p.Poll), ActCheckTransactions)
	case m.elapsed() >= m.p.AckTimeout:
		return m.rollBack(fmt.Sprintf("instances %s did not ack the produce freeze within %s", strings.Join(missing, ", "), m.p.AckTimeout))
	case m.in.Busy:
		return m.busy()
	}
	return m.wait(m.stepDeadline(), ActFreeze)
}

// txnWait lets open transactions commit (EndTxn passes the freeze) for
// TxnWait, then aborts the rest.
func (m *transition) txnWait() Step {
	settled := m.in.TransactionsChecked && m.in.OpenTransactions == 0
	switch {
	case settled:
		return m.enter(statetopic.RouteDraining, "", m.now.Add(m.p.Poll), ActReadDrainTargets)
	case m.elapsed() >= m.p.TxnWait+m.p.AbortTimeout:
		if !m.in.TransactionsChecked {
			return m.rollBack(fmt.Sprintf("the open transactions could not be read within %s", m.p.TxnWait+m.p.AbortTimeout))
		}
		return m.rollBack(fmt.Sprintf("%d transactions still open %s after aborting them", m.in.OpenTransactions, m.p.AbortTimeout))
	case m.in.Busy:
		return m.busy()
	case !m.in.TransactionsChecked:
		return m.wait(m.poll(), ActCheckTransactions)
	case m.elapsed() < m.p.TxnWait:
		at := m.poll()
		if end := time.UnixMilli(m.rec.StepStartMs()).Add(m.p.TxnWait); end.Before(at) {
			at = end
		}
		return m.wait(at, ActCheckTransactions)
	}
	// Recorded once (not per count) before the first abort.
	m.setReason(fmt.Sprintf("aborting the transactions still open after %s", m.p.TxnWait))
	return m.wait(m.poll(), ActAbortTransactions, ActCheckTransactions)
}

// draining records the primary's log ends, then waits for the mirror to
// copy up to them: zero records at risk at the failover.
func (m *transition) draining() Step {
	if len(m.rec.DrainTargets) == 0 {
		switch {
		case m.in.TargetsRead && len(m.in.DrainTargets) == 0:
			return m.enter(statetopic.RouteGroupsQuiet, "nothing to drain: the mirror has no partitions", m.now.Add(m.p.Poll), ActCheckGroups)
		case m.in.TargetsRead:
			// Recorded before the wait: a new driver waits for these, it
			// does not read newer ends of a log a stray write moved.
			m.rec.DrainTargets = slices.Clone(m.in.DrainTargets)
			m.dirty = true
		case m.elapsed() >= m.p.DrainTimeout:
			return m.rollBack(fmt.Sprintf("the primary's log ends could not be read within %s", m.p.DrainTimeout))
		case m.in.Busy:
			return m.busy()
		default:
			return m.wait(m.poll(), ActReadDrainTargets)
		}
	}
	lagging := m.lagging()
	switch {
	case len(lagging) == 0:
		return m.enter(statetopic.RouteGroupsQuiet, "", m.now.Add(m.p.Poll), ActCheckGroups)
	case m.elapsed() >= m.p.DrainTimeout:
		return m.rollBack(fmt.Sprintf("the drain did not finish within %s: %s", m.p.DrainTimeout, formatLag(lagging)))
	case m.in.Busy:
		return m.busy()
	}
	return m.wait(m.poll(), ActWaitDrain)
}

// lag is a drain target the mirror's LMO has not reached.
type lag struct {
	target statetopic.DrainTarget
	lmo    int64 // -1: none yet
}

func (m *transition) lagging() []lag {
	var out []lag
	for _, t := range m.rec.DrainTargets {
		lmo, ok := m.in.LMOs[TopicPartition{t.Topic, t.Partition}]
		if !ok {
			lmo = -1
		}
		if lmo < t.Offset {
			out = append(out, lag{t, lmo})
		}
	}
	return out
}

// maxLagReported bounds the partitions a drain timeout names (the record
// is one state record; the rest is a count).
const maxLagReported = 10

func formatLag(ls []lag) string {
	parts := make([]string, 0, min(len(ls), maxLagReported)+1)
	for i, l := range ls {
		if i == maxLagReported {
			parts = append(parts, fmt.Sprintf("and %d more partitions", len(ls)-maxLagReported))
			break
		}
		if l.lmo < 0 {
			parts = append(parts, fmt.Sprintf("%s/%d has no LMO yet (target %d)", l.target.Topic, l.target.Partition, l.target.Offset))
		} else {
			parts = append(parts, fmt.Sprintf("%s/%d lags %d records (LMO %d, target %d)", l.target.Topic, l.target.Partition, l.target.Offset-l.lmo, l.lmo, l.target.Offset))
		}
	}
	return strings.Join(parts, ", ")
}

// groupsQuiet keeps commits open while consumers reach the (frozen) log end
// and commit it, so they do not process records again after the switch
// (docs/cutover.md, step 4).
func (m *transition) groupsQuiet() Step {
	if m.in.Busy || !m.in.GroupsChecked {
		switch {
		case m.elapsed() >= m.p.GroupWaitMax:
			return m.toGroupsCopy(fmt.Sprintf("the groups could not be checked within %s; their offsets are copied as they stand", m.p.GroupWaitMax))
		case m.in.Busy:
			return m.busy()
		}
		return m.wait(m.poll(), ActCheckGroups)
	}
	var moving []string
	for _, g := range m.in.Groups {
		if !g.AtLogEnd && m.now.Sub(g.LastChange) < m.p.GroupQuiet {
			moving = append(moving, g.Name)
		}
	}
	slices.Sort(moving)
	switch {
	case len(moving) == 0:
		return m.toGroupsCopy("")
	case m.elapsed() >= m.p.GroupWaitMax:
		return m.toGroupsCopy(fmt.Sprintf("groups %s still committing short of the log end after %s; their offsets are copied as they stand",
			strings.Join(moving, ", "), m.p.GroupWaitMax))
	}
	return m.wait(m.poll(), ActCheckGroups)
}

// toGroupsCopy freezes commits; the acks are due within AckTimeout (which
// GroupCopyTimeout, covering the acks and the copy, must not be below).
func (m *transition) toGroupsCopy(reason string) Step {
	return m.enter(statetopic.RouteGroupsCopy, reason, m.now.Add(m.p.AckTimeout), ActFreezeGroupCommits)
}

// groupsCopy freezes commits on every instance (acked, like the produce
// freeze: a commit through an instance that had not seen it could land on
// the primary after its group was read), then copies every group's offsets.
func (m *transition) groupsCopy() Step {
	if missing := m.missingAcks(); len(missing) > 0 {
		switch {
		case m.elapsed() >= m.p.AckTimeout:
			return m.rollBack(fmt.Sprintf("instances %s did not ack the commit freeze within %s", strings.Join(missing, ", "), m.p.AckTimeout))
		case m.in.Busy:
			return m.busy()
		}
		return m.wait(time.UnixMilli(m.rec.StepStartMs()).Add(m.p.AckTimeout), ActFreezeGroupCommits)
	}
	switch {
	case m.in.GroupsCopied:
		m.rec.HeldGroups = maps.Clone(m.in.HeldGroups)
		return m.enter(statetopic.RouteFailingOver, "", m.now.Add(m.p.Poll), ActFailOver)
	case m.elapsed() >= m.p.GroupCopyTimeout:
		return m.rollBack(fmt.Sprintf("the groups' offsets were not copied within %s", m.p.GroupCopyTimeout))
	case m.in.Busy:
		return m.busy()
	}
	return m.wait(m.stepDeadline(), ActCopyGroupOffsets)
}

// failingOver fails the mirror's topics over; from here only forward.
func (m *transition) failingOver() Step {
	switch {
	case m.in.FailedOver:
		m.rec.Upstream = m.rec.Target // the record says it before any instance applies it
		return m.enter(statetopic.RouteSwitching, "", m.now.Add(m.p.AckTimeout), ActSwitchUpstream, ActCloseConnections)
	case m.in.Busy:
		return m.busy()
	}
	return m.wait(m.poll(), ActFailOver)
}

// switching waits for every live instance to serve the new upstream. An
// instance that has not keeps refusing Produce, so waiting loses nothing;
// one that left the group is no longer waited for.
func (m *transition) switching() Step {
	missing := m.missingAcks()
	switch {
	case len(missing) == 0:
		return m.enter(statetopic.RouteSwitched, "", time.Time{})
	case m.elapsed() >= m.p.AckTimeout:
		m.setReason(fmt.Sprintf("waiting for instances %s to apply the switch (they refuse Produce until they do)", strings.Join(missing, ", ")))
		return m.wait(m.now.Add(m.p.AckTimeout), ActSwitchUpstream, ActCloseConnections)
	case m.in.Busy:
		return m.busy()
	}
	return m.wait(time.UnixMilli(m.rec.StepStartMs()).Add(m.p.AckTimeout), ActSwitchUpstream, ActCloseConnections)
}
