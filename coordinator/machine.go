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
	state := protocol.MirrorStateUnknown
	if cur != nil {
		state = cur.State
	}
	to := func(s protocol.MirrorState, edit func(*statetopic.PartitionState)) *statetopic.PartitionState {
		next := statetopic.PartitionState{Topic: topic, LastMirroredOffset: -1}
		if cur != nil {
			next = *cur
			next.Notes = append([]string(nil), cur.Notes...)
		}
		if s != next.State || cur == nil {
			next.PreviousState = state
		}
		next.State = s
		next.UpdatedAt = now
		if s != protocol.MirrorStateFailed {
			next.RetryAttempt, next.ErrorMessage = 0, ""
		}
		if edit != nil {
			edit(&next)
		}
		return &next
	}
	fail := func(err error, retriable bool) Step {
		st := to(protocol.MirrorStateFailed, func(p *statetopic.PartitionState) {
			p.ErrorMessage = err.Error()
			if cur != nil && cur.State == protocol.MirrorStateFailed {
				p.PreviousState = cur.PreviousState // FAILED→FAILED keeps where it failed from
			}
			switch {
			case !retriable:
				p.RetryAttempt = -1
			case p.RetryAttempt < 0:
				p.RetryAttempt = 1
			default:
				p.RetryAttempt++
			}
			if retriable && policy.MaxAttempts > 0 && p.RetryAttempt >= policy.MaxAttempts {
				p.ErrorMessage += " (retries exhausted: failed.retry.max.attempts reached; re-add the topic to try again)"
				p.RetryAttempt = -1
			}
		})
		step := Step{Persist: st}
		if local.Copying {
			step.Actions = append(step.Actions, ActStopCopy)
		}
		if st.RetryAttempt > 0 {
			step.RetryAt = now.Add(policy.Backoff(st.RetryAttempt))
			step.Actions = append(step.Actions, ActScheduleRetry)
		}
		return step
	}

	// Outcomes of actions come first: they are facts about the world.
	switch ev.Kind {
	case EvFenced:
		return Step{Actions: []Action{ActRelinquish}}
	case EvPrepareFailed, EvCopyFailed:
		if state == protocol.MirrorStateStopping || state == protocol.MirrorStateStopped {
			return Step{} // failover wins; the stop path reads what landed
		}
		return fail(ev.Err, ev.Retriable)
	case EvRetentionGap:
		return Step{Persist: to(state, func(p *statetopic.PartitionState) {
			p.Notes = append(p.Notes, ev.Note)
			if len(p.Notes) > maxNotes {
				p.Notes = p.Notes[len(p.Notes)-maxNotes:]
			}
		})}
	case EvStopped:
		if state == protocol.MirrorStateStopping {
			return Step{Persist: to(protocol.MirrorStateStopped, func(p *statetopic.PartitionState) {
				p.LastMirroredOffset = ev.End
			})}
		}
		return Step{} // a pause or a failure stopped the copy; nothing more to record
	case EvPrepared:
		if desired == statetopic.DesireMirror {
			switch state {
			case protocol.MirrorStatePreparing, protocol.MirrorStateFailed, protocol.MirrorStateMirroring:
				// MIRRORING too: a new owner finishing what the previous one
				// started records its writer epoch before it writes data.
				return Step{Persist: to(protocol.MirrorStateMirroring, nil), Actions: []Action{ActStartCopy}}
			}
		}
		// Otherwise the desire handling below decides (pause, stop).
	}
	if local.Busy {
		return Step{}
	}

	switch desired {
	case statetopic.DesireStop:
		switch state {
		case protocol.MirrorStateStopped:
			return Step{}
		case protocol.MirrorStateStopping:
			return Step{Actions: []Action{ActStopCopy}}
		default:
			return Step{Persist: to(protocol.MirrorStateStopping, nil), Actions: []Action{ActStopCopy}}
		}
	case statetopic.DesirePause:
		switch state {
		case protocol.MirrorStateMirroring:
			return Step{Persist: to(protocol.MirrorStatePaused, nil), Actions: stopIf(local.Copying)}
		case protocol.MirrorStatePaused:
			return Step{Actions: stopIf(local.Copying)}
		case protocol.MirrorStateUnknown, protocol.MirrorStateStopped:
			// Never copied (or failed over): prepare, then pause once MIRRORING.
			return Step{Persist: to(protocol.MirrorStatePreparing, clearLMO), Actions: []Action{ActPrepare}}
		case protocol.MirrorStatePreparing:
			if !local.Prepared {
				return Step{Actions: []Action{ActPrepare}}
			}
			return Step{Persist: to(protocol.MirrorStateMirroring, nil)}
		}
		return Step{} // FAILED stays until resumed or removed; STOPPING finishes
	}

	// desired == DesireMirror
	switch state {
	case protocol.MirrorStateUnknown, protocol.MirrorStateStopped:
		return Step{Persist: to(protocol.MirrorStatePreparing, clearLMO), Actions: []Action{ActPrepare}}
	case protocol.MirrorStatePreparing:
		if !local.Prepared {
			return Step{Actions: []Action{ActPrepare}}
		}
		return Step{Persist: to(protocol.MirrorStateMirroring, nil), Actions: []Action{ActStartCopy}}
	case protocol.MirrorStateMirroring:
		switch {
		case local.Copying:
			return Step{}
		case !local.Prepared:
			return Step{Actions: []Action{ActPrepare}}
		default:
			return Step{Actions: []Action{ActStartCopy}}
		}
	case protocol.MirrorStatePaused:
		if !local.Prepared {
			return Step{Persist: to(protocol.MirrorStateMirroring, nil), Actions: []Action{ActPrepare}}
		}
		return Step{Persist: to(protocol.MirrorStateMirroring, nil), Actions: []Action{ActStartCopy}}
	case protocol.MirrorStateStopping:
		return Step{Actions: []Action{ActStopCopy}} // failover cannot be undone halfway
	case protocol.MirrorStateFailed:
		if cur.RetryAttempt < 0 {
			return Step{} // needs the operator: remove, or re-add after removing
		}
		if local.RetryDueAt.IsZero() || now.Before(local.RetryDueAt) {
			if local.RetryDueAt.IsZero() {
				return Step{RetryAt: now.Add(policy.Backoff(max(cur.RetryAttempt, 1))), Actions: []Action{ActScheduleRetry}}
			}
			return Step{}
		}
		return Step{Persist: to(protocol.MirrorStatePreparing, func(p *statetopic.PartitionState) {
			p.RetryAttempt = cur.RetryAttempt // keep counting across the retry
		}), Actions: []Action{ActPrepare}}
	}
	return Step{}
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
