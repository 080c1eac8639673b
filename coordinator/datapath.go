package coordinator

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// PartitionRef names one mirror partition and carries what the data path
// needs to copy it.
type PartitionRef struct {
	Mirror        string
	Topic         string
	Partition     int32
	SourceTopicID statetopic.UUID
	Config        *statetopic.MirrorConfig
}

// TransactionalID is the fencing identity of the partition's writer: one per
// mirror partition, so a new owner's InitProducerId fences exactly the old
// owner of that partition.
func (p PartitionRef) TransactionalID() string {
	return "kmirror-" + p.Mirror + "-" + p.SourceTopicID.String() + "-" + strconv.Itoa(int(p.Partition))
}

// Writer is a fenced-in destination writer (InitProducerId result).
type Writer struct {
	ProducerID int64
	Epoch      int16
}

// Progress is a partition's copy progress as the data path sees it.
type Progress struct {
	SourceLogStart      int64
	SourceHighWatermark int64
	DestinationLogEnd   int64
	RecordsCopied       int64
	BytesCopied         int64
	LastCopiedTimestamp time.Time
	UpdatedAt           time.Time
}

// DataPath is what the coordinator needs from the copy pipeline. Errors it
// returns are retriable unless marked with Permanent.
type DataPath interface {
	// Prepare fences in a writer for the partition (bumping the epoch of any
	// previous one), makes sure the destination topic exists and aligns the
	// destination log with the source. notes describe anything that changed
	// what the destination holds (such as filled retention gaps).
	Prepare(ctx context.Context, p PartitionRef) (w Writer, notes []string, err error)
	// Start copies from the destination log end on, with the writer from
	// Prepare, until Stop; asynchronous outcomes arrive through events
	// (EvCopyFailed, EvFenced, EvRetentionGap).
	Start(ctx context.Context, p PartitionRef, w Writer, events func(Event)) error
	// Stop stops copying (if it runs) and returns the destination log end.
	Stop(ctx context.Context, p PartitionRef) (end int64, err error)
	// Progress reports the running copy's progress, if this instance runs it.
	Progress(p PartitionRef) (Progress, bool)
	// Forget drops anything held for a partition this instance no longer owns.
	Forget(p PartitionRef)
}

// permanentError marks an error retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not retriable: the partition goes to FAILED with
// retry attempt -1 and waits for the operator.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
