// Package datapath is the contract between the control plane (package
// coordinator) and the data path (package fetcher): how a copy is stopped,
// what it reports (events, progress), which writer identity it writes with
// and whether an error it returns is worth retrying. The coordinator owns it
// (as etcd raft owns Ready); the data path imports it and speaks it
// directly, so no layer translates between the two. It is a leaf: it
// imports nothing of kmirror, so fetcher does not pull in the coordinator.
//
// docs/DESIGN.md ("Data path") shows where the contract sits.
package datapath

import (
	"errors"
	"fmt"
	"time"

	"github.com/kmirror/kmirror/internal/enumname"
)

// StopHow says why a partition's copy stops.
type StopHow int8

const (
	// StopHandover: another owner continues (or this one later); open
	// destination transactions stay open for it, which adopts them.
	StopHandover StopHow = iota
	// StopPause: the partition rests; the copy goes on to a point with no
	// destination transaction open first (bounded), so none times out.
	StopPause
	// StopFailover: the topic becomes writable; open destination
	// transactions are aborted (their markers land after the last mirrored
	// offset).
	StopFailover
)

var stopHowNames = []string{
	StopHandover: "handover",
	StopPause:    "pause",
	StopFailover: "failover",
}

func (h StopHow) String() string { return enumname.Of(h, "StopHow", stopHowNames) }

// Producer is a destination producer id and epoch: the writer identity of
// the data path (a partition's idempotent data writer, the owner's fencing
// identity). The state topic stores it as is (statetopic.Producer), hence
// the JSON names.
type Producer struct {
	ID    int64 `json:"id"`
	Epoch int16 `json:"epoch"`
}

// EventKind says what happened to a running copy.
type EventKind int8

const (
	// EventFailed: the copy stopped after an error; Retriable(Err) says
	// whether a later start may get past it (the coordinator retries with
	// backoff) or the partition waits for the operator.
	EventFailed EventKind = iota + 1
	// EventFenced: another owner took over the partition; the copy stopped.
	EventFenced
	// EventGapFilled: destination offsets [From, To) were filled because the
	// source no longer has them (retention or DeleteRecords on the source);
	// the copy keeps running.
	EventGapFilled
)

var eventKindNames = []string{
	EventFailed:    "failed",
	EventFenced:    "fenced",
	EventGapFilled: "retention gap filled",
}

func (k EventKind) String() string { return enumname.Of(k, "EventKind", eventKindNames) }

// Event reports a change of a running copy to whoever started it.
type Event struct {
	Kind      EventKind
	Topic     string
	Partition int32
	Err       error // EventFailed, EventFenced
	From, To  int64 // EventGapFilled: filled destination offsets [From, To)
	Progress  Progress
}

// Note describes an EventGapFilled for the partition's state record (it
// changed what the destination holds); "" for other events.
func (e Event) Note() string {
	if e.Kind != EventGapFilled {
		return ""
	}
	return fmt.Sprintf("source offsets %d..%d were gone (source retention) before they were copied; the destination holds filler there, below its log start",
		e.From, e.To-1)
}

// Progress is where a partition's copy stands.
type Progress struct {
	SourceTopicID       [16]byte
	SourceLogStart      int64
	SourceHighWatermark int64
	// SourceLastStable is the source's last stable offset: the copy goes up
	// to it (batches above it belong to transactions not yet decided).
	SourceLastStable int64
	// DestinationLogEnd is the next offset the destination will assign,
	// which is also the next source offset to copy.
	DestinationLogEnd int64
	RecordsCopied     int64 // source records appended (filler not counted)
	BytesCopied       int64 // source batch bytes appended
	FillerRecords     int64 // filler offsets appended to close retention gaps
	// FillerMarkers counts offsets filled with markers of empty aborted
	// transactions (source offsets with no record, left by compaction).
	FillerMarkers int64
	// Transactions counts source transaction markers replayed.
	Transactions int64
	// OpenTransactions is how many destination transactions are open now.
	OpenTransactions int
	// AbortedAtFailover counts open destination transactions that a
	// failover aborted (their markers follow DestinationLogEnd).
	AbortedAtFailover int
	// ReadAheadAnswers counts Fetch answers read ahead of the partition's
	// cursor and applied (fetcher/ahead.go); ReadAheadGaps those that came
	// past where the answer before them ended and waited for the cursor's
	// own Fetch; RereadBytes the fetched bytes of batches already planned
	// (a read-ahead that started short of the answer before it).
	ReadAheadAnswers, ReadAheadGaps, RereadBytes int64
	// LastCopiedTimestamp is the max timestamp of the last copied batch.
	LastCopiedTimestamp time.Time
	UpdatedAt           time.Time
	ProducerID          int64
	ProducerEpoch       int16
}

// Error is an error that knows whether retrying can help, as kerr.Error
// does: the data path marks what it returns and reports, and the
// coordinator reads the mark (Retriable) instead of keeping a list of the
// data path's errors.
type Error struct {
	Err error
	// Retriable: a later attempt may get past it (a leader moving, a broker
	// away); false: the partition goes to FAILED and waits for the operator.
	Retriable bool
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as one retrying cannot fix (nil stays nil).
func Permanent(err error) error { return mark(err, false) }

// Transient marks err as one a later attempt may get past, whatever it
// wraps (nil stays nil).
func Transient(err error) error { return mark(err, true) }

func mark(err error, retriable bool) error {
	if err == nil {
		return nil
	}
	return &Error{Err: err, Retriable: retriable}
}

// NewPermanent is errors.New for a sentinel error retrying cannot fix.
func NewPermanent(text string) error { return Permanent(errors.New(text)) }

// Retriable reports whether retrying err may help: the outermost Error in
// its chain decides; an error nobody marked is retriable (the network, a
// broker's answer).
func Retriable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable
	}
	return true
}
