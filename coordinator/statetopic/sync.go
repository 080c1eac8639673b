package statetopic

import "time"

// The mirror's periodic sync jobs (topic refresh, consumer group offsets,
// topic configs, ACLs) record what they last achieved, so that `describe` on
// any instance, and a new owner after a hand-over, see it.
//
// A MirrorSync record (one per mirror, written by every refresh) says when
// each job last completed. A MirrorGroupSync record (one per consumer group
// the mirror tracks) is written only when the group's outcome changes: a
// group still SYNCED at the end of a completed groups run is not rewritten,
// its last sync is that run's time (GroupLastSynced). So an idle cluster
// with many groups costs one record per refresh, not one per group.

// Sync job names, as shown by describe and in metrics.
const (
	JobTopics       = "topics"        // new topics matching patterns, partition growth
	JobGroups       = "groups"        // consumer group committed offsets
	JobTopicConfigs = "topic-configs" // destination topic configs follow the source's
	JobACLs         = "acls"          // source ACLs selected by acls.include
)

// GroupSyncState is the outcome of a group's last sync attempt.
type GroupSyncState string

const (
	// GroupSynced: every MIRRORING partition the group committed on the
	// source has the same offset on the destination (raised to the
	// destination's log start where the source's is below it): a consumer
	// started on the destination resumes exactly where it stopped.
	GroupSynced GroupSyncState = "SYNCED"
	// GroupBehind: the group committed, on some MIRRORING partition, past
	// what the copy has reached. Those partitions are committed at the
	// destination's high watermark for now (never past the mirrored data),
	// so a consumer started there now would read some records again; the
	// group is SYNCED once the copy reaches its offsets.
	GroupBehind GroupSyncState = "BEHIND"
	// GroupActive: the group has members on the destination; its offsets
	// there are left alone.
	GroupActive GroupSyncState = "ACTIVE"
	// GroupIdle: none of the group's committed partitions is MIRRORING
	// (stopped after failover, paused, preparing or failed).
	GroupIdle GroupSyncState = "IDLE"
	// GroupFailed: reading or committing the group's offsets failed.
	GroupFailed GroupSyncState = "FAILED"
)

// GroupSync is the value of a TypeGroupSync record.
type GroupSync struct {
	State GroupSyncState `json:"state"`
	// SyncedAt is when the group was last known to be in sync when this
	// record was written (zero: never); see GroupLastSynced.
	SyncedAt time.Time `json:"synced_at,omitzero"`
	// Partitions counts the group's partitions kept in sync.
	Partitions int32  `json:"partitions"`
	Message    string `json:"message,omitempty"`
	// SourceMembers: the group had members on the source at the last run
	// (its state was neither Empty nor Dead). A forced route switch, whose
	// primary is gone, holds the fetches of the groups that had members and
	// not of those nobody consumed with (docs/cutover.md, "Unplanned switch").
	SourceMembers bool `json:"source_members,omitempty"`
}

// MirrorSync is the value of a TypeMirrorSync record.
type MirrorSync struct {
	Jobs map[string]*SyncJob `json:"jobs"`
}

// SyncJob is one job's record.
type SyncJob struct {
	// LastSuccessAt is when the job last completed without error (zero:
	// never).
	LastSuccessAt time.Time `json:"last_success_at,omitzero"`
	// AttemptedAt is when it last ran.
	AttemptedAt time.Time `json:"attempted_at"`
	// Error is why the last run failed ("" when it succeeded).
	Error string `json:"error,omitempty"`
	// Message says what the last run did or why it had nothing to do.
	Message string `json:"message,omitempty"`
}

// GroupSyncKey names a group's sync record.
func GroupSyncKey(mirror, group string) Key {
	return Key{Type: TypeGroupSync, Mirror: mirror, Group: group}
}

// MirrorSyncKey names a mirror's sync record.
func MirrorSyncKey(mirror string) Key { return Key{Type: TypeMirrorSync, Mirror: mirror} }

// Job returns a job's record, or nil.
func (s *MirrorSync) Job(name string) *SyncJob {
	if s == nil {
		return nil
	}
	return s.Jobs[name]
}

// GroupLastSynced is when a group was last known to be in sync (zero:
// never): a group SYNCED in its record stayed so through the last completed
// groups run, because any change would have been recorded.
func (m *Mirror) GroupLastSynced(group string) time.Time {
	g := m.Groups[group]
	if g == nil {
		return time.Time{}
	}
	if j := m.Sync.Job(JobGroups); g.State == GroupSynced && j != nil && j.LastSuccessAt.After(g.SyncedAt) {
		return j.LastSuccessAt
	}
	return g.SyncedAt
}
