package coordinator

import (
	"context"
	"strconv"

	"github.com/kmirror/kmirror/coordinator/datapath"
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

// TransactionalIDPrefix starts every destination transactional id kmirror
// uses (the partitions' writers and, in fetcher, the ids derived from them).
// The proxy refuses clients the ids with this prefix (enforcement.Internals).
const TransactionalIDPrefix = "kmirror-"

// TransactionalID is the fencing identity of the partition's writer: one per
// mirror partition, so a new owner's InitProducerId fences exactly the old
// owner of that partition.
func (p PartitionRef) TransactionalID() string {
	return TransactionalIDPrefix + p.Mirror + "-" + p.SourceTopicID.String() + "-" + strconv.Itoa(int(p.Partition))
}

// Writer is what Prepare took for a partition: the owner's fencing identity
// for state records (InitProducerId on the partition's transactional id,
// bumped by every new owner) and the partition's data writer (the same for
// every owner).
type Writer struct {
	ProducerID int64
	Epoch      int16
	Data       *datapath.Producer
}

// DataPath is what the coordinator needs from the copy pipeline; the words
// it speaks (stop modes, events, progress, writer identities, retriability)
// are package datapath's, shared with the data path itself. Errors it
// returns are retriable unless marked with datapath.Permanent.
type DataPath interface {
	// Prepare fences in this owner for the partition's state (bumping the
	// epoch of any previous one), keeps the partition's data writer (data,
	// or a new one when nil) and makes sure the destination topic exists.
	// notes describe anything that changed what the destination holds.
	Prepare(ctx context.Context, p PartitionRef, data *datapath.Producer) (w Writer, notes []string, err error)
	// Start copies from the destination log end on, with the writer from
	// Prepare, until Stop; asynchronous outcomes arrive through events
	// (datapath.EventFailed, EventFenced, EventGapFilled).
	Start(ctx context.Context, p PartitionRef, w Writer, events func(datapath.Event)) error
	// Stop stops copying (if it runs) and returns the last mirrored offset:
	// the destination log end, before any marker a failover adds.
	Stop(ctx context.Context, p PartitionRef, how datapath.StopHow) (end int64, err error)
	// Progress reports the running copy's progress, if this instance runs it.
	Progress(p PartitionRef) (datapath.Progress, bool)
	// Forget drops anything held for a partition this instance no longer owns.
	Forget(p PartitionRef)
}

// MirrorConfigurer is implemented by a DataPath that applies mirror
// configs that can change while partitions copy (the byte-rate limit): the
// coordinator calls it with every mirror's current config as it reconciles.
type MirrorConfigurer interface {
	ConfigureMirror(name string, cfg *statetopic.MirrorConfig)
}
