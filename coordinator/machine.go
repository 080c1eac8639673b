package coordinator

import (
	"time"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// This file is the mirror partition state machine of docs/PROTOCOL.md as a pure
// function: it takes what is recorded, what the operator wants, what this
// instance is doing for the partition and what just happened, and returns the
// state to persist and the actions to run. All I/O is the worker's (worker.go),
// so every transition is testable without a network.

// EventKind is what happened to a partition.
type EventKind int

const (
	EvTick          EventKind = iota // reconcile: desire changed, ownership gained, timer
	EvPrepared                       // writer fenced in and destination aligned
	EvPrepareFailed                  // preparation failed (Err, Retriable)
	EvCopyFailed                     // the running copy failed (Err, Retriable)
	EvRetentionGap                   // source retention overtook the copy; a gap was filled (Note)
	EvStopped                        // copying stopped; End is the destination log end
	EvFenced                         // another writer took the partition over
	EvWriter                         // worker-only: Prepare fenced in Writer
	EvStopFailed                     // worker-only: Stop failed; a tick retries it
)

// Event is an input to Next.
type Event struct {
	Kind      EventKind
	Err       error
	Retriable bool
	Note      string
	End       int64  // EvStopped: destination log end offset
	Writer    Writer // EvWriter
}

// Local is what this instance is doing for the partition right now.
type Local struct {
	Busy       bool // an action is in flight; its outcome arrives as an event
	Copying    bool // the copy pipeline runs
	Prepared   bool // writer fenced in by this instance and destination aligned
	RetryDueAt time.Time
}

// Action is work for the worker.
type Action int

const (
	ActPrepare       Action = iota + 1 // fence in the writer, create/align the destination
	ActStartCopy                       // start the copy pipeline
	ActStopCopy                        // stop the pipeline (if any) and read the destination log end
	ActScheduleRetry                   // arm the retry timer for Step.RetryAt
	ActRelinquish                      // forget local work without writing state (fenced)
)

// Step is Next's answer.
type Step struct {
	Persist *statetopic.PartitionState // nil: nothing to write
	Actions []Action
	RetryAt time.Time
}

// RetryPolicy bounds FAILED retries.
type RetryPolicy struct {
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	MaxAttempts    int16 // 0 = unlimited
}

// Backoff is the wait before retry attempt n (1-based): initial·2^(n-1), capped.
func (p RetryPolicy) Backoff(attempt int16) time.Duration {
	d := p.InitialBackoff
	for i := int16(1); i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// Next computes one transition. cur is nil for a partition with no record.
func Next(cur *statetopic.PartitionState, topic string, desired statetopic.TopicDesire, local Local, ev Event, policy RetryPolicy, now time.Time) Step {
	m := transition{cur: cur, state: protocol.MirrorStateUnknown, topic: topic, local: local, policy: policy, now: now}
	if cur != nil {
		m.state = cur.State
	}
	// Outcomes of actions come first: they are facts about the world.
	if step, decided := m.outcome(ev, desired); decided {
		return step
	}
	if local.Busy {
		return Step{}
	}
	switch desired {
	case statetopic.DesireStop:
		return m.failover()
	case statetopic.DesirePause:
		return m.pause()
	}
	return m.mirror()
}

// transition is one call of Next: its inputs, and the record it may write.
type transition struct {
	cur    *statetopic.PartitionState
	state  protocol.MirrorState // cur's state; Unknown without a record
	topic  string
	local  Local
	policy RetryPolicy
	now    time.Time
}

// to is the record for state s: cur changed to s (or a new record), edited.
func (m *transition) to(s protocol.MirrorState, edit func(*statetopic.PartitionState)) *statetopic.PartitionState {
	next := statetopic.PartitionState{Topic: m.topic, LastMirroredOffset: -1}
	if m.cur != nil {
		next = *m.cur
		next.Notes = append([]string(nil), m.cur.Notes...)
	}
	if s != next.State || m.cur == nil {
		next.PreviousState = m.state
	}
	next.State = s
	next.UpdatedAt = m.now
	if s != protocol.MirrorStateFailed {
		next.RetryAttempt, next.ErrorMessage = 0, ""
	}
	if edit != nil {
		edit(&next)
	}
	return &next
}

// outcome handles the events that report what an action did; decided is
// false when the desire decides instead (a tick, or a preparation that
// completed while the operator wants something other than a copy).
func (m *transition) outcome(ev Event, desired statetopic.TopicDesire) (step Step, decided bool) {
	switch ev.Kind {
	case EvFenced:
		return Step{Actions: []Action{ActRelinquish}}, true
	case EvPrepareFailed, EvCopyFailed:
		if m.state == protocol.MirrorStateStopping || m.state == protocol.MirrorStateStopped {
			return Step{}, true // failover wins; the stop path reads what landed
		}
		return m.fail(ev.Err, ev.Retriable), true
	case EvRetentionGap:
		return Step{Persist: m.to(m.state, func(p *statetopic.PartitionState) {
			p.Notes = append(p.Notes, ev.Note)
			if len(p.Notes) > maxNotes {
				p.Notes = p.Notes[len(p.Notes)-maxNotes:]
			}
		})}, true
	case EvStopped:
		if m.state == protocol.MirrorStateStopping {
			return Step{Persist: m.to(protocol.MirrorStateStopped, func(p *statetopic.PartitionState) {
				p.LastMirroredOffset = ev.End
			})}, true
		}
		return Step{}, true // a pause or a failure stopped the copy; nothing more to record
	case EvPrepared:
		if desired != statetopic.DesireMirror {
			return Step{}, false // the desire decides (pause, stop)
		}
		switch m.state {
		case protocol.MirrorStatePreparing, protocol.MirrorStateFailed, protocol.MirrorStateMirroring:
			// MIRRORING too: a new owner finishing what the previous one
			// started records its writer epoch before it writes data.
			return Step{Persist: m.to(protocol.MirrorStateMirroring, nil), Actions: []Action{ActStartCopy}}, true
		}
	}
	return Step{}, false
}

// fail records FAILED: counting retriable attempts up to the policy's
// limit, stopping the copy and scheduling the retry.
func (m *transition) fail(err error, retriable bool) Step {
	st := m.to(protocol.MirrorStateFailed, func(p *statetopic.PartitionState) {
		p.ErrorMessage = err.Error()
		if m.state == protocol.MirrorStateFailed {
			p.PreviousState = m.cur.PreviousState // FAILED→FAILED keeps where it failed from
		}
		switch {
		case !retriable:
			p.RetryAttempt = -1
		case p.RetryAttempt < 0:
			p.RetryAttempt = 1
		default:
			p.RetryAttempt++
		}
		if retriable && m.policy.MaxAttempts > 0 && p.RetryAttempt >= m.policy.MaxAttempts {
			p.ErrorMessage += " (retries exhausted: failed.retry.max.attempts reached; re-add the topic to try again)"
			p.RetryAttempt = -1
		}
	})
	step := Step{Persist: st, Actions: stopIf(m.local.Copying)}
	if st.RetryAttempt > 0 {
		step.RetryAt = m.now.Add(m.policy.Backoff(st.RetryAttempt))
		step.Actions = append(step.Actions, ActScheduleRetry)
	}
	return step
}

// failover drives a partition the operator removed from the mirror to STOPPED.
func (m *transition) failover() Step {
	switch m.state {
	case protocol.MirrorStateStopped:
		return Step{}
	case protocol.MirrorStateStopping:
		return Step{Actions: []Action{ActStopCopy}}
	}
	return Step{Persist: m.to(protocol.MirrorStateStopping, nil), Actions: []Action{ActStopCopy}}
}

// pause drives a paused topic's partition to PAUSED, through MIRRORING if it
// never copied: PAUSED means the destination is aligned and fenced.
func (m *transition) pause() Step {
	switch m.state {
	case protocol.MirrorStateMirroring:
		return Step{Persist: m.to(protocol.MirrorStatePaused, nil), Actions: stopIf(m.local.Copying)}
	case protocol.MirrorStatePaused:
		return Step{Actions: stopIf(m.local.Copying)}
	case protocol.MirrorStateUnknown, protocol.MirrorStateStopped:
		// Never copied (or failed over): prepare, then pause once MIRRORING.
		return Step{Persist: m.to(protocol.MirrorStatePreparing, clearLMO), Actions: []Action{ActPrepare}}
	case protocol.MirrorStatePreparing:
		if !m.local.Prepared {
			return Step{Actions: []Action{ActPrepare}}
		}
		return Step{Persist: m.to(protocol.MirrorStateMirroring, nil)}
	}
	return Step{} // FAILED stays until resumed or removed; STOPPING finishes
}

// mirror drives a mirrored topic's partition to MIRRORING with a copy running.
func (m *transition) mirror() Step {
	switch m.state {
	case protocol.MirrorStateUnknown, protocol.MirrorStateStopped:
		return Step{Persist: m.to(protocol.MirrorStatePreparing, clearLMO), Actions: []Action{ActPrepare}}
	case protocol.MirrorStatePreparing:
		if !m.local.Prepared {
			return Step{Actions: []Action{ActPrepare}}
		}
		return Step{Persist: m.to(protocol.MirrorStateMirroring, nil), Actions: []Action{ActStartCopy}}
	case protocol.MirrorStateMirroring:
		switch {
		case m.local.Copying:
			return Step{}
		case !m.local.Prepared:
			return Step{Actions: []Action{ActPrepare}}
		default:
			return Step{Actions: []Action{ActStartCopy}}
		}
	case protocol.MirrorStatePaused:
		if !m.local.Prepared {
			return Step{Persist: m.to(protocol.MirrorStateMirroring, nil), Actions: []Action{ActPrepare}}
		}
		return Step{Persist: m.to(protocol.MirrorStateMirroring, nil), Actions: []Action{ActStartCopy}}
	case protocol.MirrorStateStopping:
		return Step{Actions: []Action{ActStopCopy}} // failover cannot be undone halfway
	case protocol.MirrorStateFailed:
		return m.retry()
	}
	return Step{} // a state this version does not know: leave it to its writer
}

// retry prepares a FAILED partition again once its backoff has passed.
func (m *transition) retry() Step {
	if m.cur.RetryAttempt < 0 {
		return Step{} // needs the operator: remove, or re-add after removing
	}
	if m.local.RetryDueAt.IsZero() {
		// A new owner does not know when the retry is due: wait one backoff.
		return Step{RetryAt: m.now.Add(m.policy.Backoff(max(m.cur.RetryAttempt, 1))), Actions: []Action{ActScheduleRetry}}
	}
	if m.now.Before(m.local.RetryDueAt) {
		return Step{}
	}
	return Step{Persist: m.to(protocol.MirrorStatePreparing, func(p *statetopic.PartitionState) {
		p.RetryAttempt = m.cur.RetryAttempt // keep counting across the retry
	}), Actions: []Action{ActPrepare}}
}

// clearLMO forgets the last mirrored offset of an earlier failover when a
// partition mirrors again: it would read as current.
func clearLMO(p *statetopic.PartitionState) { p.LastMirroredOffset = -1 }

// maxNotes bounds the notes kept per partition state record.
const maxNotes = 10

func stopIf(copying bool) []Action {
	if copying {
		return []Action{ActStopCopy}
	}
	return nil
}
