package coordinator

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// TestMachineScenarios runs the state machine (Next) through the scenario
// files in testdata/machine, the way etcd raft tests its own: each file is a
// story of steps, each step an input and the output Next must give. The
// files, not this driver, say what the machine does; together they reach every
// branch of machine.go (go test -coverprofile shows it).
//
// A scenario keeps what the worker keeps between steps: the partition's
// record (replaced by every record Next writes, as the worker persists it),
// the operator's desire, the retry policy and a clock. The facts of this
// instance (Local) are given per step, so every step reads on its own.
//
// Commands:
//
//	policy initial=1s max=8s attempts=5      set the retry policy (this one is the default)
//	record none                              the partition has no record
//	record state=S [prev=S] [retry=N] [lmo=N] [error=(text)] [writer=ID/EPOCH] [notes=N]
//	                                         set the record (S a state name or number; notes=N: N notes)
//	desire mirror|pause|stop                 what the operator asked for the topic
//	advance 2s                               move the clock on
//	next [ev=tick|prepared|prepare-failed|copy-failed|gap|stopped|fenced]
//	     [busy] [copying] [prepared] [retry-due=+2s]
//	     [err=(text)] [retriable] [note=(text)] [end=N]
//	                                         one transition; prints the record written, the actions and the retry time
//	backoff attempt=N                        the policy's wait before retry attempt N
//
// Times print as offsets from the scenario's start.
//
// After a deliberate change to the machine, rewrite the expected outputs and
// read the diff before committing it:
//
//	go test ./coordinator -run TestMachineScenarios -rewrite
//	git diff coordinator/testdata/machine
func TestMachineScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		s := newScenario()
		datadriven.RunTest(t, path, s.run)
	})
}

// scenario is what a scenario file carries from step to step.
type scenario struct {
	start   time.Time
	now     time.Time
	cur     *statetopic.PartitionState
	desired statetopic.TopicDesire
	policy  RetryPolicy
}

const scenarioTopic = "t"

func newScenario() *scenario {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return &scenario{
		start:   start,
		now:     start,
		desired: statetopic.DesireMirror,
		policy:  RetryPolicy{InitialBackoff: time.Second, MaxBackoff: 8 * time.Second, MaxAttempts: 5},
	}
}

func (s *scenario) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "policy":
		d.ScanArgs(t, "initial", &s.policy.InitialBackoff)
		d.ScanArgs(t, "max", &s.policy.MaxBackoff)
		d.ScanArgs(t, "attempts", &s.policy.MaxAttempts)
		return "ok"
	case "record":
		s.cur = s.parseRecord(t, d)
		return s.formatRecord(s.cur)
	case "desire":
		s.desired = statetopic.TopicDesire(d.CmdArgs[0].Key)
		return "ok"
	case "advance":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "advance: %v", err)
		}
		s.now = s.now.Add(dur)
		return "now " + s.offset(s.now)
	case "next":
		return s.next(t, d)
	case "backoff":
		var attempt int16
		d.ScanArgs(t, "attempt", &attempt)
		return s.policy.Backoff(attempt).String()
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// next runs one transition and, like the worker, makes the written record the
// partition's record.
func (s *scenario) next(t *testing.T, d *datadriven.TestData) string {
	local, ev := parseStep(t, d, s.start)
	step := Next(s.cur, scenarioTopic, s.desired, local, ev, s.policy, s.now)
	var b strings.Builder
	if step.Persist == nil {
		b.WriteString("write: none\n")
	} else {
		fmt.Fprintf(&b, "write: %s\n", s.formatRecord(step.Persist))
		s.cur = step.Persist
	}
	fmt.Fprintf(&b, "actions: %s", formatActions(step.Actions))
	if !step.RetryAt.IsZero() {
		fmt.Fprintf(&b, "\nretry at: %s", s.offset(step.RetryAt))
	}
	return b.String()
}

var scenarioEvents = map[string]EventKind{
	"tick": EvTick, "prepared": EvPrepared, "prepare-failed": EvPrepareFailed, "copy-failed": EvCopyFailed,
	"gap": EvRetentionGap, "stopped": EvStopped, "fenced": EvFenced,
}

func parseStep(t *testing.T, d *datadriven.TestData, start time.Time) (Local, Event) {
	var local Local
	ev := Event{Kind: EvTick}
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "ev":
			kind, ok := scenarioEvents[arg.SingleVal(t)]
			if !ok {
				d.Fatalf(t, "unknown event %q", arg.SingleVal(t))
			}
			ev.Kind = kind
		case "busy":
			local.Busy = true
		case "copying":
			local.Copying = true
		case "prepared":
			local.Prepared = true
		case "retry-due":
			local.RetryDueAt = start.Add(parseOffset(t, d, arg.SingleVal(t)))
		case "err":
			ev.Err = errors.New(arg.SingleVal(t))
		case "retriable":
			ev.Retriable = true
		case "note":
			ev.Note = arg.SingleVal(t)
		case "end":
			arg.Scan(t, 0, &ev.End)
		default:
			d.Fatalf(t, "unknown argument %q", arg.Key)
		}
	}
	return local, ev
}

func (s *scenario) parseRecord(t *testing.T, d *datadriven.TestData) *statetopic.PartitionState {
	if d.HasArg("none") {
		return nil
	}
	p := &statetopic.PartitionState{Topic: scenarioTopic, PreviousState: protocol.MirrorStateUnknown, LastMirroredOffset: -1, UpdatedAt: s.now}
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "state":
			p.State = parseState(t, d, arg.SingleVal(t))
		case "prev":
			p.PreviousState = parseState(t, d, arg.SingleVal(t))
		case "retry":
			arg.Scan(t, 0, &p.RetryAttempt)
		case "lmo":
			arg.Scan(t, 0, &p.LastMirroredOffset)
		case "error":
			p.ErrorMessage = arg.SingleVal(t)
		case "writer":
			id, epoch, ok := strings.Cut(arg.SingleVal(t), "/")
			if !ok {
				d.Fatalf(t, "writer=%s: want ID/EPOCH", arg.SingleVal(t))
			}
			p.WriterProducerID, _ = strconv.ParseInt(id, 10, 64)
			e, _ := strconv.ParseInt(epoch, 10, 16)
			p.WriterEpoch = int16(e)
		case "notes":
			var n int
			arg.Scan(t, 0, &n)
			for i := 1; i <= n; i++ {
				p.Notes = append(p.Notes, fmt.Sprintf("note-%d", i))
			}
		default:
			d.Fatalf(t, "unknown argument %q", arg.Key)
		}
	}
	return p
}

// parseState reads a state name, or a number for a state this version does
// not know (a newer peer may write one).
func parseState(t *testing.T, d *datadriven.TestData, v string) protocol.MirrorState {
	if n, err := strconv.ParseInt(v, 10, 8); err == nil {
		return protocol.MirrorState(n)
	}
	st, err := protocol.ParseMirrorState(v)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return st
}

func parseOffset(t *testing.T, d *datadriven.TestData, v string) time.Duration {
	dur, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
	if err != nil {
		d.Fatalf(t, "offset %q: %v", v, err)
	}
	return dur
}

// formatRecord prints every field of a record that Next may set or must keep.
func (s *scenario) formatRecord(p *statetopic.PartitionState) string {
	if p == nil {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s prev=%s topic=%s retry=%d lmo=%d at=%s", p.State, p.PreviousState, p.Topic, p.RetryAttempt, p.LastMirroredOffset, s.offset(p.UpdatedAt))
	if p.WriterProducerID != 0 || p.WriterEpoch != 0 {
		fmt.Fprintf(&b, " writer=%d/%d", p.WriterProducerID, p.WriterEpoch)
	}
	if p.ErrorMessage != "" {
		fmt.Fprintf(&b, " error=(%s)", p.ErrorMessage)
	}
	if len(p.Notes) > 0 {
		fmt.Fprintf(&b, " notes=(%s)", strings.Join(p.Notes, ", "))
	}
	return b.String()
}

var actionNames = map[Action]string{
	ActPrepare: "prepare", ActStartCopy: "start-copy", ActStopCopy: "stop-copy",
	ActScheduleRetry: "schedule-retry", ActRelinquish: "relinquish",
}

func formatActions(actions []Action) string {
	if len(actions) == 0 {
		return "none"
	}
	names := make([]string, len(actions))
	for i, a := range actions {
		names[i] = actionNames[a]
	}
	return strings.Join(names, ", ")
}

func (s *scenario) offset(at time.Time) string {
	return "+" + at.Sub(s.start).String()
}
