package apis

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/coordinator/syncjobs"
)

// The scheduler of the sync jobs reads mirrors and runs the topics job
// through the Backend.
var _ syncjobs.Mirrors = (*Backend)(nil)

// RefreshTopics is the mirror's topics job (coordinator/syncjobs runs it
// with the other sync jobs): it checks that the source is still the cluster
// the mirror was made for, adds source topics created since the last look
// that match the mirror's include patterns (as AddTopicsToMirror would) and
// grows mirror topics whose source grew partitions (their new partitions
// then get owners and mirror like the others). It returns the topics it
// added.
func (b *Backend) RefreshTopics(ctx context.Context, mirror string) ([]string, error) {
	m, err := b.Mirror(ctx, mirror)
	if err != nil {
		return nil, err
	}
	src, err := b.sourceClient(m)
	if err != nil {
		return nil, err
	}
	if err := checkSourceCluster(ctx, src, m); err != nil {
		return nil, err
	}
	source, err := listTopics(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("listing source topics of mirror %s: %w", mirror, err)
	}
	a := b.newAdder(m, src, source, false)
	if err := a.growTopics(ctx); err != nil {
		return nil, err
	}
	var added []string
	if include := append(mirrorconfig.List(m.Config.Configs["topics.include"]), m.Config.IncludePatterns...); len(include) > 0 {
		for _, name := range a.matching(include, m.Config.ExcludePatterns) {
			if err := a.addOne(ctx, name, [16]byte{}, -1); err != nil {
				b.Log.Warn("not mirroring a topic that matches the mirror's patterns", "mirror", m.Name, "topic", name, "reason", err)
				continue
			}
			added = append(added, name)
		}
	}
	if len(a.recs) == 0 {
		return nil, nil
	}
	if err := b.Coord.Write(ctx, a.recs...); err != nil {
		return nil, fmt.Errorf("recording refreshed topics of mirror %s: %w", mirror, err)
	}
	for _, n := range added {
		b.Log.Info("new source topic matches the mirror's patterns; mirroring it", "mirror", m.Name, "topic", n)
	}
	return added, nil
}

// checkSourceCluster fails if the mirror's source is no longer the cluster
// it was made for: bootstrap.servers may come to point at another cluster
// (DNS, a rebuilt cluster), and nothing is mirrored from one the mirror was
// not made for.
func checkSourceCluster(ctx context.Context, src *kgo.Client, m *statetopic.Mirror) error {
	want := m.Config.SourceClusterID
	if want == "" {
		return nil
	}
	got, err := sourceclient.ClusterID(ctx, src)
	if err != nil {
		return fmt.Errorf("reaching the source of mirror %s: %w", m.Name, err)
	}
	if got != want {
		return fmt.Errorf("the source of mirror %s at %s is now cluster %s, not %s; its partitions fail when they next prepare: fix bootstrap.servers or delete and re-create the mirror",
			m.Name, m.Config.Configs["bootstrap.servers"], got, want)
	}
	return nil
}

// growTopics grows the mirror topics whose source topic has more
// partitions now. Deleted and re-created source topics are left alone:
// the partitions' data path reports them.
func (a *adder) growTopics(ctx context.Context) error {
	for _, name := range a.m.TopicNames() {
		t := a.m.Topics[name]
		st, ok := a.source[name]
		if !ok || st.Err != nil || statetopic.UUID(st.ID) != t.SourceTopicID || t.Desired == statetopic.DesireStop {
			continue
		}
		n := int32(len(st.Partitions))
		if n <= t.Partitions {
			continue
		}
		if err := growDestination(ctx, a.b.Destination, name, n); err != nil {
			return fmt.Errorf("growing destination topic %s of mirror %s to the source's %d partitions: %w", name, a.m.Name, n, err)
		}
		grown := *t
		grown.Partitions, grown.UpdatedAt = n, a.now
		a.recs = append(a.recs, coordinator.Record{Key: statetopic.MirrorTopicKey(a.m.Name, name), Value: &grown})
		a.b.Log.Info("source topic grew; mirroring the new partitions", "mirror", a.m.Name, "topic", name, "from", t.Partitions, "to", n)
	}
	return nil
}

// growDestination grows an existing destination topic to n partitions
// before the new partitions get owners: each owner's Prepare grows it too,
// and all but the first would fail on INVALID_PARTITIONS. A destination
// topic not created yet is left to Prepare.
func growDestination(ctx context.Context, dst *kadm.Client, topic string, n int32) error {
	ds, err := dst.ListTopics(kadm.WithAuthorizedOps(ctx), topic) // fresh metadata, not kgo's cache
	if err != nil {
		return err
	}
	d, ok := ds[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) || int32(len(d.Partitions)) >= n {
		return nil
	}
	if d.Err != nil {
		return d.Err
	}
	resps, err := dst.UpdatePartitions(ctx, int(n), topic)
	if err == nil {
		err = resps.Error()
	}
	if errors.Is(err, kerr.InvalidPartitions) {
		return nil // grown meanwhile (a partition owner's Prepare won)
	}
	return err
}
