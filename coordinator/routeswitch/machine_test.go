package routeswitch

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// TestSwitchScenarios runs the route switch (Next) through the scenario
// files in testdata, like the partition machine's (coordinator/machine_test.go):
// each file is a story of steps, each step the facts a driver observed and
// the answer Next must give. The files, not this driver, say what the
// switch does; together they reach every branch of machine.go (go test
// -cover shows it).
//
// A scenario keeps what the state topic keeps between steps: the route's
// record (replaced by every record Next writes, as the driver persists it)
// and the instances' acks (keyed like RouteAck records: instance, step,
// attempt); and what the coordinators' group says: the live instances. The
// driver's facts are given per step, so every step reads on its own.
//
// Commands:
//
//	policy [ack=10s] [txn=10s] [abort=10s] [drain=60s] [quiet=10s] [group-max=30s]
//	       [group-copy=30s] [poll=500ms] [backoff=1s]
//	                                  change the policy (DefaultPolicy at the start)
//	record none                       the route has no record
//	record step=S [attempt=N] [term=N] [driver=ID] [mirror=M] [upstream=U] [target=U]
//	       [forced] [freeze=+0s] [started=+0s] [targets=(t/p=off, ...)] [reason=(text)]
//	                                  set the record (S a step name or RouteStep(n))
//	live ID...                        the live instances (i1 i2 i3 at the start)
//	ack ID... [step=S] [attempt=N]    instances ack a step (the record's step and attempt by default)
//	advance 2s                        move the clock on
//	next [driver=ID] [request] [forced] [mirror=M] [back=M] [at-risk=N] [busy]
//	     [err=(text)] [retriable] [txns=N] [targets=(t/p=off, ...)] [lmo=(t/p=off, ...)]
//	     [groups=(name=end|name=+2s, ...)] [copied[=(group=members, ...)]] [failed-over]
//	                                  one call of Next (driver i1 by default; request
//	                                  is a switch request, mirror dr unless mirror= says
//	                                  otherwise, back= the mirror back of a switch back; groups: at the log end, or last changed at
//	                                  that offset); prints the record written, the actions,
//	                                  the retry time and a refusal
//
// Times print as offsets from the scenario's start.
//
// After a deliberate change to the machine, rewrite the expected outputs and
// read the diff before committing it:
//
//	go test ./coordinator/routeswitch -run TestSwitchScenarios -rewrite
//	git diff coordinator/routeswitch/testdata
func TestSwitchScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := newScenario()
		datadriven.RunTest(t, path, s.run)
	})
}

const scenarioRoute = "payments"

// scenario is what a scenario file carries from step to step.
type scenario struct {
	start  time.Time
	now    time.Time
	cur    *statetopic.RouteSwitch
	policy Policy
	live   []string
	acks   map[ack]bool
}

type ack struct {
	instance string
	step     statetopic.RouteStep
	attempt  int32
}

func newScenario() *scenario {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return &scenario{start: start, now: start, policy: DefaultPolicy(), live: []string{"i1", "i2", "i3"}, acks: map[ack]bool{}}
}

func (s *scenario) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "policy":
		s.setPolicy(t, d)
		return fmt.Sprintf("%+v", s.policy)
	case "record":
		s.cur = s.parseRecord(t, d)
		return s.formatRecord(s.cur)
	case "live":
		s.live = nil
		for _, a := range d.CmdArgs {
			s.live = append(s.live, a.Key)
		}
		return "live: " + strings.Join(s.live, " ")
	case "ack":
		return s.ack(t, d)
	case "advance":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "advance: %v", err)
		}
		s.now = s.now.Add(dur)
		return "now " + s.offset(s.now)
	case "next":
		return s.next(t, d)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func (s *scenario) setPolicy(t *testing.T, d *datadriven.TestData) {
	fields := map[string]*time.Duration{
		"ack": &s.policy.AckTimeout, "txn": &s.policy.TxnWait, "abort": &s.policy.AbortTimeout,
		"drain": &s.policy.DrainTimeout, "quiet": &s.policy.GroupQuiet, "group-max": &s.policy.GroupWaitMax,
		"group-copy": &s.policy.GroupCopyTimeout, "poll": &s.policy.Poll, "backoff": &s.policy.RetryBackoff,
	}
	for _, a := range d.CmdArgs {
		f, ok := fields[a.Key]
		if !ok {
			d.Fatalf(t, "unknown policy field %q", a.Key)
		}
		a.Scan(t, 0, f)
	}
}

func (s *scenario) ack(t *testing.T, d *datadriven.TestData) string {
	a := ack{}
	if s.cur != nil {
		a.step, a.attempt = s.cur.Step, s.cur.Attempt
	}
	var who []string
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "step":
			a.step = parseStep(t, d, arg.SingleVal(t))
		case "attempt":
			arg.Scan(t, 0, &a.attempt)
		default:
			who = append(who, arg.Key)
		}
	}
	for _, w := range who {
		a.instance = w
		s.acks[a] = true
	}
	return fmt.Sprintf("acked %s: %s (attempt %d)", a.step, strings.Join(who, " "), a.attempt)
}

// acked is View.RouteAcked for the record's step and attempt.
func (s *scenario) acked() []string {
	if s.cur == nil {
		return nil
	}
	var out []string
	for a := range s.acks {
		if a.step == s.cur.Step && a.attempt == s.cur.Attempt {
			out = append(out, a.instance)
		}
	}
	slices.Sort(out)
	return out
}

// next runs one call and, like the driver, makes the written record the
// route's record.
func (s *scenario) next(t *testing.T, d *datadriven.TestData) string {
	in := Input{Driver: "i1", Live: slices.Clone(s.live), Acked: s.acked()}
	var req *Request
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "driver":
			in.Driver = arg.SingleVal(t)
		case "request":
			req = &Request{Mirror: "dr", RecordsAtRisk: -1}
		case "forced":
			req.Forced = true
		case "mirror":
			req.Mirror = arg.SingleVal(t)
		case "back":
			req.Back = arg.SingleVal(t)
		case "at-risk":
			arg.Scan(t, 0, &req.RecordsAtRisk)
		case "busy":
			in.Busy = true
		case "err":
			in.Err = errors.New(strings.Join(arg.Vals, ", "))
		case "retriable":
			in.Retriable = true
		case "txns":
			in.TransactionsChecked = true
			arg.Scan(t, 0, &in.OpenTransactions)
		case "targets":
			in.TargetsRead = true
			in.DrainTargets = parseTargets(t, d, arg.Vals)
		case "lmo":
			in.LMOs = map[TopicPartition]int64{}
			for _, tg := range parseTargets(t, d, arg.Vals) {
				in.LMOs[TopicPartition{tg.Topic, tg.Partition}] = tg.Offset
			}
		case "groups":
			in.GroupsChecked = true
			for _, v := range arg.Vals {
				if v == "" {
					continue
				}
				name, at, _ := strings.Cut(v, "=")
				g := Group{Name: name, AtLogEnd: at == "end"}
				if !g.AtLogEnd {
					g.LastChange = s.start.Add(parseOffset(t, d, at))
				}
				in.Groups = append(in.Groups, g)
			}
		case "copied":
			in.GroupsCopied = true
			in.HeldGroups = parseGroups(t, d, arg)
		case "standby-groups":
			req.HeldGroups = parseGroups(t, d, arg)
		case "failed-over":
			in.FailedOver = true
		default:
			d.Fatalf(t, "unknown argument %q", arg.Key)
		}
	}
	in.Request = req
	before := clone(s.cur)
	step := Next(scenarioRoute, s.cur, in, s.now, s.policy)
	if !reflect.DeepEqual(before, s.cur) {
		d.Fatalf(t, "Next changed the record it was given:\n%+v\n%+v", before, s.cur)
	}
	var b strings.Builder
	if step.Persist == nil {
		b.WriteString("write: none\n")
	} else {
		fmt.Fprintf(&b, "write: %s\n", s.formatRecord(step.Persist))
		s.cur = s.persist(t, d, step.Persist)
	}
	fmt.Fprintf(&b, "actions: %s", formatActions(step.Actions))
	if !step.RetryAt.IsZero() {
		fmt.Fprintf(&b, "\nretry at: %s", s.offset(step.RetryAt))
	}
	if step.Refused != nil {
		fmt.Fprintf(&b, "\nrefused: %v", step.Refused)
	}
	return b.String()
}

// persist writes the record through the state topic's codec, as the driver
// does, and reads it back: the next step starts from what a new driver
// would read.
func (s *scenario) persist(t *testing.T, d *datadriven.TestData, r *statetopic.RouteSwitch) *statetopic.RouteSwitch {
	b, err := statetopic.EncodeValue(r)
	if err != nil {
		d.Fatalf(t, "encode: %v", err)
	}
	v, err := statetopic.DecodeValue(statetopic.TypeRouteSwitch, b)
	if err != nil {
		d.Fatalf(t, "decode: %v", err)
	}
	got := v.(*statetopic.RouteSwitch)
	if !reflect.DeepEqual(got, r) {
		d.Fatalf(t, "the record does not survive the codec:\nwrote %+v\nread  %+v", r, got)
	}
	return got
}

func clone(r *statetopic.RouteSwitch) *statetopic.RouteSwitch {
	if r == nil {
		return nil
	}
	c := *r
	c.Steps = slices.Clone(r.Steps)
	c.DrainTargets = slices.Clone(r.DrainTargets)
	c.HeldGroups = maps.Clone(r.HeldGroups)
	return &c
}

func (s *scenario) parseRecord(t *testing.T, d *datadriven.TestData) *statetopic.RouteSwitch {
	if d.HasArg("none") {
		return nil
	}
	r := &statetopic.RouteSwitch{Route: scenarioRoute, Mirror: "dr", Upstream: statetopic.UpstreamPrimary, Target: statetopic.UpstreamStandby,
		Driver: "i1", DriverTerm: 1, Attempt: 1, UpdatedMs: s.now.UnixMilli()}
	started := s.now
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "step":
			r.Step = parseStep(t, d, arg.SingleVal(t))
		case "attempt":
			arg.Scan(t, 0, &r.Attempt)
		case "term":
			arg.Scan(t, 0, &r.DriverTerm)
		case "driver":
			r.Driver = arg.SingleVal(t)
		case "mirror":
			r.Mirror = arg.SingleVal(t)
		case "upstream":
			r.Upstream = statetopic.Upstream(arg.SingleVal(t))
		case "target":
			r.Target = statetopic.Upstream(arg.SingleVal(t))
		case "forced":
			r.Forced = true
		case "freeze":
			r.FreezeStartMs = s.start.Add(parseOffset(t, d, arg.SingleVal(t))).UnixMilli()
		case "started":
			started = s.start.Add(parseOffset(t, d, arg.SingleVal(t)))
		case "targets":
			r.DrainTargets = parseTargets(t, d, arg.Vals)
		case "reason":
			r.Reason = strings.Join(arg.Vals, ", ")
		default:
			d.Fatalf(t, "unknown argument %q", arg.Key)
		}
	}
	r.Steps = []statetopic.StepStart{{Step: r.Step, AtMs: started.UnixMilli()}}
	return r
}

func parseStep(t *testing.T, d *datadriven.TestData, v string) statetopic.RouteStep {
	st, err := statetopic.ParseRouteStep(v)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return st
}

// parseTargets reads topic/partition=offset items.
func parseTargets(t *testing.T, d *datadriven.TestData, vals []string) []statetopic.DrainTarget {
	out := []statetopic.DrainTarget{}
	for _, v := range vals {
		if v == "" {
			continue
		}
		tp, off, ok1 := strings.Cut(v, "=")
		topic, part, ok2 := strings.Cut(tp, "/")
		p, err1 := strconv.ParseInt(part, 10, 32)
		o, err2 := strconv.ParseInt(off, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil {
			d.Fatalf(t, "%q: want topic/partition=offset", v)
		}
		out = append(out, statetopic.DrainTarget{Topic: topic, Partition: int32(p), Offset: o})
	}
	return out
}

// parseGroups reads group=members values (nil for none).
func parseGroups(t *testing.T, d *datadriven.TestData, arg datadriven.CmdArg) map[string]int {
	var out map[string]int
	for _, v := range arg.Vals {
		if v == "" {
			continue
		}
		name, n, _ := strings.Cut(v, "=")
		members, err := strconv.Atoi(n)
		if err != nil {
			d.Fatalf(t, "%s: %q is not group=members", arg.Key, v)
		}
		if out == nil {
			out = map[string]int{}
		}
		out[name] = members
	}
	return out
}

func parseOffset(t *testing.T, d *datadriven.TestData, v string) time.Duration {
	dur, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
	if err != nil {
		d.Fatalf(t, "offset %q: %v", v, err)
	}
	return dur
}

// formatRecord prints every field of a record that Next may set or must keep.
func (s *scenario) formatRecord(r *statetopic.RouteSwitch) string {
	if r == nil {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s attempt=%d term=%d driver=%s upstream=%s target=%s mirror=%s", r.Step, r.Attempt, r.DriverTerm, r.Driver, r.Upstream, r.Target, r.Mirror)
	if r.BackMirror != "" {
		fmt.Fprintf(&b, " back=%s", r.BackMirror)
	}
	if r.Forced {
		fmt.Fprintf(&b, " forced at-risk=%d", r.RecordsAtRisk)
	}
	if r.FreezeStartMs != 0 {
		fmt.Fprintf(&b, " freeze=%s", s.offsetMs(r.FreezeStartMs))
	}
	steps := make([]string, len(r.Steps))
	for i, st := range r.Steps {
		steps[i] = fmt.Sprintf("%s %s", st.Step, s.offsetMs(st.AtMs))
	}
	fmt.Fprintf(&b, " steps=(%s)", strings.Join(steps, ", "))
	if len(r.DrainTargets) > 0 {
		ts := make([]string, len(r.DrainTargets))
		for i, tg := range r.DrainTargets {
			ts[i] = fmt.Sprintf("%s/%d=%d", tg.Topic, tg.Partition, tg.Offset)
		}
		fmt.Fprintf(&b, " targets=(%s)", strings.Join(ts, ", "))
	}
	if len(r.HeldGroups) > 0 {
		gs := make([]string, 0, len(r.HeldGroups))
		for _, g := range slices.Sorted(maps.Keys(r.HeldGroups)) {
			gs = append(gs, fmt.Sprintf("%s=%d", g, r.HeldGroups[g]))
		}
		fmt.Fprintf(&b, " held=(%s)", strings.Join(gs, ", "))
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, " reason=(%s)", r.Reason)
	}
	fmt.Fprintf(&b, " at=%s", s.offsetMs(r.UpdatedMs))
	return b.String()
}

func formatActions(actions []Action) string {
	if len(actions) == 0 {
		return "none"
	}
	names := make([]string, len(actions))
	for i, a := range actions {
		names[i] = a.String()
	}
	return strings.Join(names, ", ")
}

func (s *scenario) offset(at time.Time) string { return "+" + at.Sub(s.start).String() }

func (s *scenario) offsetMs(ms int64) string { return s.offset(time.UnixMilli(ms)) }

func TestActionString(t *testing.T) {
	if ActFreeze.String() != "freeze" || ActUnfreeze.String() != "unfreeze" || Action(0).String() != "Action(0)" || Action(99).String() != "Action(99)" {
		t.Fatal("action names")
	}
}

// Refusals wrap their sentinel, so callers (the SwitchRoute RPC) can map
// them to a protocol error.
func TestRefusalsWrap(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	inProgress := &statetopic.RouteSwitch{Route: "r", Step: statetopic.RouteDraining, Attempt: 1, Driver: "i1"}
	unknown := &statetopic.RouteSwitch{Route: "r", Step: 42}
	for _, c := range []struct {
		cur  *statetopic.RouteSwitch
		req  Request
		want error
	}{
		{inProgress, Request{Mirror: "dr"}, ErrSwitchInProgress},
		{nil, Request{}, ErrNoMirror},
		{unknown, Request{Mirror: "dr"}, ErrUnknownStep},
	} {
		step := Next("r", c.cur, Input{Driver: "i1", Request: &c.req}, now, DefaultPolicy())
		if !errors.Is(step.Refused, c.want) || !strings.HasPrefix(step.Refused.Error(), "route r: ") {
			t.Errorf("refused %v, want %v", step.Refused, c.want)
		}
	}
}
