package apis

// CreateMirror with RecoverState: recovering a mirror whose state was lost (coordinator/stateloss.go).
// kmirror still knows the mirror's read-only topics and their source topic
// ids (the marks, or the last known view of a running instance); the
// operator gives the mirror's configs again. The mirror is recorded anew,
// each of its topics desired "mirror" with no partition state, so each
// partition's new owner does what any new owner does: it fences the
// partition's transactional id, takes a new data writer and continues from
// the destination log end, adopting the destination transactions a former
// owner left open (fetcher/resume.go). The destination log came from the
// source at identical offsets and was kept read-only, so it is a prefix of
// the source's: nothing is copied twice and nothing is skipped. A
// destination that went past the source's high watermark stops the
// partition (ErrDiverged, FAILED) instead of copying.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// configs are the operator's, stored their sealed form (secrets encrypted or
// references, as CreateMirror stores them) and resolved what this instance
// connects with.
func (b *Backend) recoverState(ctx context.Context, name string, configs, stored, resolved map[string]string) error {
	lost := b.Coord.Loss().Mirrors[name]
	if lost == nil {
		return protocol.ErrInvalidRequest.WithMessage("mirror %q has no lost state to recover; `kmirror mirrors --list` names the mirrors whose state was lost", name)
	}
	src, clusterID, err := checkedSource(ctx, configs, resolved)
	if err != nil {
		return err
	}
	defer src.Close()
	topics := slices.Sorted(maps.Keys(lost))
	for _, t := range topics {
		if was := lost[t].SourceClusterID; was != "" && was != clusterID {
			return protocol.ErrInvalidConfig.WithMessage("mirror %q copied topic %q from cluster %s, but the cluster at %s is %s; give the mirror's own bootstrap.servers",
				name, t, was, configs["bootstrap.servers"], clusterID)
		}
	}
	source, err := sourceTopics(ctx, resolved)
	if err != nil {
		return err
	}
	var problems []string
	for _, t := range topics {
		st, ok := source[t]
		switch {
		case !ok || st.Err != nil:
			problems = append(problems, fmt.Sprintf("%q no longer exists on the source", t))
		case statetopic.UUID(st.ID) != lost[t].SourceTopicID:
			problems = append(problems, fmt.Sprintf("%q was re-created on the source (id %s, mirrored from %s)", t, statetopic.UUID(st.ID), lost[t].SourceTopicID))
		}
	}
	if len(problems) > 0 {
		return protocol.ErrInvalidRequest.WithMessage("cannot recover mirror %q: its topic %s; nothing was recorded. "+
			"Fail such topics over or delete them on the destination first (docs/SECURITY.md, \"When __mirror_state is lost\")", name, strings.Join(problems, "; "))
	}

	if err := b.Coord.EnsureStateTopic(ctx); err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("cannot create the mirror state topic: %v; retry", err)
	}
	// Start reading the (re-)created state topic before writing to it.
	if err := b.Coord.CheckState(ctx); err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("reading the mirror state topic: %v; retry", err)
	}
	if err := b.catchUp(ctx); err != nil {
		return err
	}
	exists := false
	b.Coord.Store().Read(func(v *statetopic.View) { exists = v.RawMirror(name) != nil })
	if exists {
		return protocol.ErrMirrorAlreadyExists.WithMessage("mirror %q is already recorded again (recovered by another request?); describe it", name)
	}
	now := b.now()
	note := now.UTC().Format(time.RFC3339) + " recovered after the mirror state was lost: mirroring continues from the destination log end (no record copied twice)"
	recs := []coordinator.Record{{Key: statetopic.MirrorConfigKey(name),
		Value: &statetopic.MirrorConfig{Configs: stored, CreatedAt: now, SourceClusterID: clusterID}}}
	for _, t := range topics {
		recs = append(recs, coordinator.Record{Key: statetopic.MirrorTopicKey(name, t), Value: &statetopic.MirrorTopic{
			SourceTopicID: lost[t].SourceTopicID, Desired: statetopic.DesireMirror,
			Partitions: int32(len(source[t].Partitions)), UpdatedAt: now, Notes: []string{note}}})
	}
	if err := b.Coord.Write(ctx, recs...); err != nil {
		return protocol.ErrCoordinatorNotAvailable.WithMessage("recording the recovered mirror: %v; retry", err)
	}
	if err := b.Coord.CheckState(ctx); err != nil && !errors.Is(err, context.Canceled) {
		b.Log.Warn("updating the marks after recovery; the next check retries", "mirror", name, "err", err)
	}
	b.Log.Warn("mirror recovered after its state was lost", "mirror", name, "topics", strings.Join(topics, ","), "source_cluster_id", clusterID)
	return nil
}

func sourceTopics(ctx context.Context, configs map[string]string) (kadm.TopicDetails, error) {
	cl, err := oneOffSourceClient(configs)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	td, err := listTopics(ctx, cl)
	if err != nil {
		return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("listing the source's topics: %v; retry", err)
	}
	return td, nil
}
