// Package groupsync copies consumer groups' committed offsets from a
// mirror's source cluster to its destination, so that consumers moved to the
// destination resume where they were. A mirror copies records at identical
// offsets, so offsets are copied, never translated.
//
// One run (every metadata.refresh.interval.ms, on the instance that owns the
// mirror's config record):
//
//  1. list the source's consumer groups (classic and KIP-848 consumer
//     groups; share and streams groups are not synced) that groups.include
//     selects and groups.exclude does not;
//  2. fetch their committed offsets; a group is tracked when it committed a
//     partition of one of the mirror's topics;
//  3. list the destination's groups: a group with members there (any state
//     but Empty or Dead) is never written, its offsets belong to the
//     consumers running on the destination;
//  4. for each committed partition that is MIRRORING (its topic desired
//     "mirror"), clamp the source offset into the destination partition's
//     [log start, high watermark] and commit it on the destination with
//     leader epoch -1 (a source epoch can make destination consumers loop on
//     offset validation) and the source's metadata, unless the destination
//     already holds exactly that.
//
// A group is SYNCED only when no offset had to be lowered to the
// destination's high watermark: operators move a consumer once describe
// shows SYNCED (docs/versions.md's migration), and a lowered offset would
// make it read records again. Until the copy reaches the source's offsets
// the group is BEHIND, committed at the high watermark all the same (a
// consumer moved in a disaster re-reads rather than finds nothing).
//
// STOPPED partitions (failed over) are never written: their destination
// offsets are the destination's own progress now. PAUSED, PREPARING,
// STOPPING and FAILED partitions are not written either: a paused topic
// freezes everything the mirror does to it (as in the Cluster Mirroring
// proposal), and the others have no settled destination log to clamp to.
//
// The commit is an OffsetCommit with generation -1 and no member id, which
// the broker itself refuses (UNKNOWN_MEMBER_ID) for a group that has
// members: a consumer joining between step 3 and the commit is safe too.
package groupsync

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// Job is one run's inputs.
type Job struct {
	Mirror      *statetopic.Mirror // a copy of the mirror's recorded state
	Source      *kadm.Client
	Destination *kadm.Client // reached directly, not through the proxy
	Groups      *mirrorconfig.Matcher
}

// Outcome is what a run did for one group.
type Outcome struct {
	State      statetopic.GroupSyncState
	Partitions int32 // partitions in sync on the destination after the run
	Message    string
	// SourceMembers: the group had members on the source in this run (see
	// HasMembers).
	SourceMembers bool
}

// HasMembers reports whether a listed group may have members: its state is
// neither Empty nor Dead. A state the source does not report (Kafka before
// 2.6) counts as members, which errs towards holding a forced switch's
// consumers (statetopic.GroupSync.SourceMembers).
func HasMembers(g kadm.ListedGroup) bool {
	switch strings.ToLower(g.State) {
	case "empty", "dead":
		return false
	}
	return true
}

// Result is what a run did.
type Result struct {
	Groups    map[string]Outcome // every tracked group
	Committed int                // partitions committed on the destination
}

// Run syncs once. An error means the run could not decide for all groups
// (a listing failed) and changed nothing; per-group failures are outcomes.
func (j Job) Run(ctx context.Context) (Result, error) {
	res := Result{Groups: map[string]Outcome{}}
	topics := SyncablePartitions(j.Mirror)
	listed, err := j.Source.ListGroups(ctx)
	if err != nil {
		return res, fmt.Errorf("listing the source's consumer groups: %w (the source credentials need Describe on the groups)", err)
	}
	names := SelectSourceGroups(listed, j.Groups)
	if len(names) == 0 {
		return res, nil
	}
	srcOffsets := j.Source.FetchManyOffsets(ctx, names...)
	var tracked []string
	for _, g := range names {
		// A group whose offsets could not be read is reported only if it was
		// tracked before: a hiccup on an unrelated group is no news.
		if r := srcOffsets[g]; (r.Err == nil && committedOn(r.Fetched, topics)) || (r.Err != nil && j.Mirror.Groups[g] != nil) {
			tracked = append(tracked, g)
		}
	}
	if len(tracked) == 0 {
		return res, nil
	}
	dstListed, err := j.Destination.ListGroups(ctx)
	if err != nil {
		return res, fmt.Errorf("listing the destination's consumer groups, needed to leave groups with members alone: %w", err)
	}
	logs, err := logBounds(ctx, j.Destination, topics.Topics())
	if err != nil {
		return res, err
	}
	var writable []string
	for _, g := range tracked {
		if r := srcOffsets[g]; r.Err != nil {
			res.Groups[g] = Outcome{State: statetopic.GroupFailed, Message: fmt.Sprintf("fetching its committed offsets on the source: %v", r.Err)}
			continue
		}
		if out, blocked := DestinationBlock(dstListed, g); blocked {
			res.Groups[g] = out
			continue
		}
		writable = append(writable, g)
	}
	dstOffsets := j.Destination.FetchManyOffsets(ctx, writable...)
	for _, g := range writable {
		d := dstOffsets[g]
		if d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) {
			res.Groups[g] = Outcome{State: statetopic.GroupFailed, Message: fmt.Sprintf("fetching its committed offsets on the destination: %v", d.Err)}
			continue
		}
		p := Plan(srcOffsets[g].Fetched, d.Fetched, topics, logs)
		committed := 0
		var commitErr error
		if len(p.Commit) > 0 {
			committed, commitErr = commit(ctx, j.Destination, g, p.Commit)
		}
		res.Committed += committed
		res.Groups[g] = p.outcome(committed, commitErr)
	}
	for g, out := range res.Groups {
		out.SourceMembers = HasMembers(listed[g])
		res.Groups[g] = out
	}
	return res, nil
}

// Syncable lists a mirror's topics, each with the partitions whose
// destination offsets the sync may write: MIRRORING partitions of a topic
// desired "mirror".
type Syncable map[string]map[int32]bool

// SyncablePartitions reads Syncable from a mirror's recorded state.
func SyncablePartitions(m *statetopic.Mirror) Syncable {
	out := make(Syncable, len(m.Topics))
	for name, t := range m.Topics {
		ps := map[int32]bool{}
		for p := int32(0); p < t.Partitions; p++ {
			s := m.Partitions[statetopic.PartitionID{SourceTopicID: t.SourceTopicID, Partition: p}]
			if t.Desired == statetopic.DesireMirror && s != nil && s.State == protocol.MirrorStateMirroring {
				ps[p] = true
			}
		}
		out[name] = ps
	}
	return out
}

// Topics lists the topics with a syncable partition, sorted.
func (s Syncable) Topics() []string {
	var out []string
	for name, ps := range s {
		if len(ps) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func committedOn(fetched kadm.OffsetResponses, topics Syncable) bool {
	for t, ps := range fetched {
		if _, ok := topics[t]; !ok {
			continue
		}
		for _, o := range ps {
			if o.Err == nil && o.At >= 0 {
				return true
			}
		}
	}
	return false
}

// SelectSourceGroups picks the source groups whose offsets are synced:
// consumer groups (classic groups of protocol type "consumer" or none,
// which is how assign-and-commit consumers show, and KIP-848 consumer
// groups) that the mirror's groups.include/exclude select, sorted.
func SelectSourceGroups(listed kadm.ListedGroups, match *mirrorconfig.Matcher) []string {
	var out []string
	for name, g := range listed {
		switch strings.ToLower(g.GroupType) {
		case "", "classic":
			if g.ProtocolType != "" && g.ProtocolType != "consumer" {
				continue // e.g. Kafka Connect workers: no offsets of their own
			}
		case "consumer":
		default:
			continue // share and streams groups
		}
		if match.Match(name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// DestinationBlock says whether a group's destination offsets must be left
// alone, and the outcome if so: the group has members on the destination,
// its state is unknown, or a group of another type has the name there.
func DestinationBlock(listed kadm.ListedGroups, group string) (Outcome, bool) {
	g, ok := listed[group]
	if !ok {
		return Outcome{}, false
	}
	switch strings.ToLower(g.GroupType) {
	case "", "classic", "consumer":
	default:
		return Outcome{State: statetopic.GroupFailed, Message: fmt.Sprintf(
			"a %s group of that name exists on the destination, so consumer offsets cannot be committed for it; exclude the group with groups.exclude or rename one of them", g.GroupType)}, true
	}
	switch strings.ToLower(g.State) {
	case "empty", "dead":
		return Outcome{}, false
	case "":
		return Outcome{State: statetopic.GroupActive, Message: "the destination does not report the group's state (Kafka before 2.6?), so it may have members; left alone"}, true
	}
	return Outcome{State: statetopic.GroupActive, Message: fmt.Sprintf(
		"has members on the destination (state %s): its offsets there belong to those consumers and are left alone", g.State)}, true
}

// Bounds is a destination partition's log start and high watermark.
type Bounds struct{ Start, End int64 }

// Clamp moves an offset into [Start, End]: a consumer cannot resume below
// the destination's log start, and the destination has nothing at or
// beyond its high watermark yet (the copy lags the source).
func (b Bounds) Clamp(o int64) int64 { return min(max(o, b.Start), b.End) }

// logBounds reads the destination log start and high watermark of topics.
// A partition it could not read is missing from the result (skipped this
// run); only a failure to read any is an error.
func logBounds(ctx context.Context, dst *kadm.Client, topics []string) (map[string]map[int32]Bounds, error) {
	out := map[string]map[int32]Bounds{}
	if len(topics) == 0 {
		return out, nil
	}
	starts, err := dst.ListStartOffsets(ctx, topics...)
	if err := partial(err); err != nil {
		return nil, fmt.Errorf("reading the destination log start offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	ends, err := dst.ListEndOffsets(ctx, topics...)
	if err := partial(err); err != nil {
		return nil, fmt.Errorf("reading the destination high watermarks of %s: %w", strings.Join(topics, ", "), err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(e.Topic, e.Partition)
		if e.Err != nil || !ok || s.Err != nil {
			return
		}
		if out[e.Topic] == nil {
			out[e.Topic] = map[int32]Bounds{}
		}
		out[e.Topic][e.Partition] = Bounds{Start: s.Offset, End: e.Offset}
	})
	return out, nil
}

// partial drops an error that only some brokers returned: the partitions
// they lead are missing from the answer and skipped.
func partial(err error) error {
	var se *kadm.ShardErrors
	if errors.As(err, &se) && !se.AllFailed {
		return nil
	}
	return err
}

// GroupPlan is what one group needs on the destination.
type GroupPlan struct {
	Commit      kadm.Offsets // partitions whose destination offset differs
	InSync      int32        // partitions already equal on the destination
	NotSyncable int32        // committed partitions that are not MIRRORING
	NoBounds    int32        // MIRRORING partitions whose log offsets are unknown
	// Behind counts the partitions (in Commit or InSync) whose source
	// offset is past the destination's high watermark: clamped down to it.
	Behind int32
}

// Plan compares a group's source offsets with its destination offsets.
// Only the offset and the metadata are compared: a destination consumer's
// commit carries a destination leader epoch, ours -1, and both are right.
func Plan(src, dst kadm.OffsetResponses, topics Syncable, logs map[string]map[int32]Bounds) GroupPlan {
	p := GroupPlan{Commit: kadm.Offsets{}}
	for topic, ps := range src {
		syncable, ok := topics[topic]
		if !ok {
			continue
		}
		for part, o := range ps {
			if o.Err != nil || o.At < 0 {
				continue
			}
			if !syncable[part] {
				p.NotSyncable++
				continue
			}
			b, ok := logs[topic][part]
			if !ok {
				p.NoBounds++
				continue
			}
			want := b.Clamp(o.At)
			if want < o.At {
				p.Behind++
			}
			if cur, ok := dst.Lookup(topic, part); ok && cur.Err == nil && cur.At == want && cur.Metadata == o.Metadata {
				p.InSync++
				continue
			}
			p.Commit.Add(kadm.Offset{Topic: topic, Partition: part, At: want, LeaderEpoch: -1, Metadata: o.Metadata})
		}
	}
	return p
}

// commit commits offsets for a group on the destination and returns how
// many partitions landed, and the first error.
func commit(ctx context.Context, dst *kadm.Client, group string, offsets kadm.Offsets) (int, error) {
	resp, err := dst.CommitOffsets(ctx, group, offsets)
	if err != nil {
		return 0, err
	}
	n := 0
	var first error
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil {
			n++
		} else if first == nil {
			first = fmt.Errorf("%s/%d: %w", o.Topic, o.Partition, o.Err)
		}
	})
	return n, first
}

// joinedMeanwhile reports a commit refused because the group got members
// on the destination after it was listed as empty.
func joinedMeanwhile(err error) bool {
	for _, e := range []error{kerr.UnknownMemberID, kerr.IllegalGeneration, kerr.RebalanceInProgress, kerr.FencedMemberEpoch, kerr.StaleMemberEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (p GroupPlan) outcome(committed int, commitErr error) Outcome {
	synced := p.InSync + int32(committed)
	switch {
	case commitErr != nil && joinedMeanwhile(commitErr):
		return Outcome{State: statetopic.GroupActive, Partitions: synced,
			Message: fmt.Sprintf("got members on the destination while its offsets were being committed (%v): left alone", commitErr)}
	case commitErr != nil:
		return Outcome{State: statetopic.GroupFailed, Partitions: synced,
			Message: fmt.Sprintf("committing its offsets on the destination: %v; kmirror's destination credentials need Read on the group and its topics", commitErr)}
	case synced == 0 && p.NoBounds == 0:
		return Outcome{State: statetopic.GroupIdle, Message: fmt.Sprintf(
			"none of its %d committed partitions of this mirror is MIRRORING (stopped after failover, paused or not ready); destination offsets left alone", p.NotSyncable)}
	}
	out := Outcome{State: statetopic.GroupSynced, Partitions: synced}
	var notes []string
	if p.Behind > 0 {
		out.State, out.Partitions = statetopic.GroupBehind, max(0, synced-p.Behind)
		notes = append(notes, fmt.Sprintf("%d committed partitions are past what the copy has reached: committed at the destination's high watermark for now, so a consumer started on the destination would read some records again; SYNCED once the copy reaches them", p.Behind))
	}
	if p.NotSyncable > 0 {
		notes = append(notes, fmt.Sprintf("%d committed partitions are not MIRRORING (stopped, paused or not ready) and are left alone", p.NotSyncable))
	}
	if p.NoBounds > 0 {
		notes = append(notes, fmt.Sprintf("%d partitions skipped this time: their destination log offsets could not be read", p.NoBounds))
		if synced == 0 {
			out.State = statetopic.GroupFailed
		}
	}
	out.Message = strings.Join(notes, "; ")
	return out
}
