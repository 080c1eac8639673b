package coordinator

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

var (
	t0     = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	policy = RetryPolicy{InitialBackoff: time.Second, MaxBackoff: 8 * time.Second, MaxAttempts: 5}
)

func st(s protocol.MirrorState) *statetopic.PartitionState {
	return &statetopic.PartitionState{Topic: "t", State: s, LastMirroredOffset: -1}
}

func TestNextTransitions(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		cur     *statetopic.PartitionState
		desired statetopic.TopicDesire
		local   Local
		ev      Event
		state   protocol.MirrorState // expected persisted state; Unknown = nothing persisted
		actions []Action
	}{
		{"new partition prepares", nil, statetopic.DesireMirror, Local{}, Event{}, protocol.MirrorStatePreparing, []Action{ActPrepare}},
		{"prepared starts copying", st(protocol.MirrorStatePreparing), statetopic.DesireMirror, Local{Prepared: true}, Event{Kind: EvPrepared}, protocol.MirrorStateMirroring, []Action{ActStartCopy}},
		{"prepared while pause wanted does not copy", st(protocol.MirrorStatePreparing), statetopic.DesirePause, Local{Prepared: true}, Event{Kind: EvPrepared}, protocol.MirrorStateMirroring, nil},
		{"mirroring then pause", st(protocol.MirrorStateMirroring), statetopic.DesirePause, Local{Prepared: true, Copying: true}, Event{}, protocol.MirrorStatePaused, []Action{ActStopCopy}},
		{"paused resumes on a new owner: prepare first", st(protocol.MirrorStatePaused), statetopic.DesireMirror, Local{}, Event{}, protocol.MirrorStateMirroring, []Action{ActPrepare}},
		{"takeover of mirroring re-fences without a state change", st(protocol.MirrorStateMirroring), statetopic.DesireMirror, Local{}, Event{}, protocol.MirrorStateUnknown, []Action{ActPrepare}},
		{"takeover prepared records the new writer", st(protocol.MirrorStateMirroring), statetopic.DesireMirror, Local{Prepared: true}, Event{Kind: EvPrepared}, protocol.MirrorStateMirroring, []Action{ActStartCopy}},
		{"failover from mirroring", st(protocol.MirrorStateMirroring), statetopic.DesireStop, Local{Copying: true, Prepared: true}, Event{}, protocol.MirrorStateStopping, []Action{ActStopCopy}},
		{"failover from failed", &statetopic.PartitionState{State: protocol.MirrorStateFailed, RetryAttempt: -1}, statetopic.DesireStop, Local{}, Event{}, protocol.MirrorStateStopping, []Action{ActStopCopy}},
		{"stopping finishes on a new owner", st(protocol.MirrorStateStopping), statetopic.DesireStop, Local{}, Event{}, protocol.MirrorStateUnknown, []Action{ActStopCopy}},
		{"stopped after stop", st(protocol.MirrorStateStopping), statetopic.DesireStop, Local{}, Event{Kind: EvStopped, End: 42}, protocol.MirrorStateStopped, nil},
		{"stopping is not undone by resume", st(protocol.MirrorStateStopping), statetopic.DesireMirror, Local{}, Event{}, protocol.MirrorStateUnknown, []Action{ActStopCopy}},
		{"re-added after failover prepares again", st(protocol.MirrorStateStopped), statetopic.DesireMirror, Local{}, Event{}, protocol.MirrorStatePreparing, []Action{ActPrepare}},
		{"retriable copy failure", st(protocol.MirrorStateMirroring), statetopic.DesireMirror, Local{Copying: true, Prepared: true}, Event{Kind: EvCopyFailed, Err: boom, Retriable: true}, protocol.MirrorStateFailed, []Action{ActStopCopy, ActScheduleRetry}},
		{"non-retriable failure waits for the operator", st(protocol.MirrorStateMirroring), statetopic.DesireMirror, Local{}, Event{Kind: EvCopyFailed, Err: boom}, protocol.MirrorStateFailed, nil},
		{"fenced relinquishes silently", st(protocol.MirrorStateMirroring), statetopic.DesireMirror, Local{Copying: true}, Event{Kind: EvFenced}, protocol.MirrorStateUnknown, []Action{ActRelinquish}},
		{"busy waits", st(protocol.MirrorStatePreparing), statetopic.DesireMirror, Local{Busy: true}, Event{}, protocol.MirrorStateUnknown, nil},
		{"failure during stopping does not undo failover", st(protocol.MirrorStateStopping), statetopic.DesireStop, Local{}, Event{Kind: EvCopyFailed, Err: boom, Retriable: true}, protocol.MirrorStateUnknown, nil},
		{"stopped copy of a pause records nothing", st(protocol.MirrorStatePaused), statetopic.DesirePause, Local{}, Event{Kind: EvStopped, End: 5}, protocol.MirrorStateUnknown, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step := Next(tc.cur, "t", tc.desired, tc.local, tc.ev, policy, t0)
			got := protocol.MirrorStateUnknown
			if step.Persist != nil {
				got = step.Persist.State
			}
			if got != tc.state {
				t.Errorf("persisted %s, want %s", got, tc.state)
			}
			if !reflect.DeepEqual(step.Actions, tc.actions) {
				t.Errorf("actions %v, want %v", step.Actions, tc.actions)
			}
		})
	}
}

func TestFailedRetriesWithBackoffThenGivesUp(t *testing.T) {
	cur := st(protocol.MirrorStateMirroring)
	now := t0
	for attempt := int16(1); attempt <= policy.MaxAttempts; attempt++ {
		step := Next(cur, "t", statetopic.DesireMirror, Local{Prepared: true}, Event{Kind: EvCopyFailed, Err: errors.New("leader moved"), Retriable: true}, policy, now)
		cur = step.Persist
		if cur.State != protocol.MirrorStateFailed {
			t.Fatalf("attempt %d: state %s", attempt, cur.State)
		}
		if attempt == policy.MaxAttempts {
			if cur.RetryAttempt != -1 || step.RetryAt != (time.Time{}) {
				t.Fatalf("after %d attempts: retry %d at %v, want given up", attempt, cur.RetryAttempt, step.RetryAt)
			}
			return
		}
		if cur.RetryAttempt != attempt {
			t.Fatalf("retry attempt %d, want %d", cur.RetryAttempt, attempt)
		}
		if want := now.Add(policy.Backoff(attempt)); !step.RetryAt.Equal(want) {
			t.Fatalf("attempt %d: retry at %v, want %v", attempt, step.RetryAt, want)
		}
		// Before the retry is due nothing happens; after, it prepares again.
		if s := Next(cur, "t", statetopic.DesireMirror, Local{RetryDueAt: step.RetryAt}, Event{}, policy, now); s.Persist != nil {
			t.Fatalf("retried before due: %+v", s.Persist)
		}
		now = step.RetryAt
		retry := Next(cur, "t", statetopic.DesireMirror, Local{RetryDueAt: step.RetryAt}, Event{}, policy, now)
		if retry.Persist == nil || retry.Persist.State != protocol.MirrorStatePreparing || retry.Persist.RetryAttempt != attempt {
			t.Fatalf("retry step %+v", retry.Persist)
		}
		cur = retry.Persist
	}
}

func TestBackoffCaps(t *testing.T) {
	for attempt, want := range map[int16]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 30: 8 * time.Second} {
		if got := policy.Backoff(attempt); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", attempt, got, want)
		}
	}
}

func TestStoppedRecordsLastMirroredOffset(t *testing.T) {
	step := Next(st(protocol.MirrorStateStopping), "t", statetopic.DesireStop, Local{}, Event{Kind: EvStopped, End: 1234}, policy, t0)
	if step.Persist.LastMirroredOffset != 1234 || step.Persist.PreviousState != protocol.MirrorStateStopping {
		t.Fatalf("stopped record %+v", step.Persist)
	}
}

func TestReaddClearsLastMirroredOffset(t *testing.T) {
	cur := st(protocol.MirrorStateStopped)
	cur.LastMirroredOffset = 40
	step := Next(cur, "t", statetopic.DesireMirror, Local{}, Event{}, policy, t0)
	if step.Persist.State != protocol.MirrorStatePreparing || step.Persist.LastMirroredOffset != -1 {
		t.Fatalf("re-added partition %+v: the old LMO must not look current", step.Persist)
	}
}
