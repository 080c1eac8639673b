package routeswitch

import (
	"context"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// Actions is a driver's I/O for the actions of the machine that are not
// applied by every instance: reads of the primary (the mirror's source)
// and the standby (its destination), the group copy and the failover. Each
// call is one attempt; the machine decides about retries from the error
// (coordinator/datapath.Retriable: unmarked errors are retriable).
type Actions interface {
	// OpenTransactions counts the transactions open on the topics'
	// partitions of the primary (DescribeProducers).
	OpenTransactions(ctx context.Context, mirror string, topics []string) (int, error)
	// AbortTransactions aborts the transactions open there.
	AbortTransactions(ctx context.Context, mirror string, topics []string) error
	// LogEnds reads the primary's log end of every partition of the topics.
	LogEnds(ctx context.Context, mirror string, topics []string) ([]statetopic.DrainTarget, error)
	// CopiedEnds reads how far the copy has come in every partition of the
	// topics: the standby's log ends, since the copy keeps source offsets (a
	// partition at its drain target has everything up to it, whichever
	// instance copies it; the owners' progress is in their memory only).
	CopiedEnds(ctx context.Context, mirror string, topics []string) (map[TopicPartition]int64, error)
	// Groups reads the committed offsets of every group consuming the topics
	// on the primary: whether they are the targets' log ends, and a
	// fingerprint of them that changes when they do.
	Groups(ctx context.Context, mirror string, topics []string, targets []statetopic.DrainTarget) ([]GroupCommits, error)
	// CopyGroups commits every group's offsets of the topics on the standby
	// and returns those that had members on the primary, with their counts.
	CopyGroups(ctx context.Context, mirror string, topics []string) (map[string]int, error)
	// StandbyGroups lists the groups that have committed offsets of the
	// topics on the standby (the group sync's copies), each with one member:
	// a forced switch holds fetches for them until they rejoin there, the
	// primary that knew their members being gone.
	StandbyGroups(ctx context.Context, mirror string, topics []string) (map[string]int, error)
	// FailOver asks for the mirror's topics to stop (a failover) and reports
	// whether every partition is STOPPED.
	FailOver(ctx context.Context, mirror string, topics []string) (bool, error)
	// RecordsAtRisk is what describe reports a failover of the mirror right
	// now would lose (a forced switch records it as its RPO); an error when
	// any partition's figure is unknown (the primary does not answer).
	RecordsAtRisk(ctx context.Context, mirror string) (int64, error)
}

// GroupCommits is what Actions.Groups read of one group.
type GroupCommits struct {
	Name     string
	AtLogEnd bool
	// Fingerprint changes when the group's committed offsets do (Kafka keeps
	// no commit time; the driver sees a change by polling).
	Fingerprint string
}
