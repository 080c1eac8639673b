package addtopics

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// Refresh is a mirror's periodic look at its source: topics created since the
// last look that match the mirror's include patterns are added, and mirror
// topics whose source grew partitions are grown (their new partitions then
// get owners and mirror like the others). It returns the topics it added.
func Refresh(ctx context.Context, b *apicore.Backend, mirror string) ([]string, error) {
	m, err := b.Mirror(ctx, mirror)
	if err != nil {
		return nil, err
	}
	src, err := b.SourceClient(m)
	if err != nil {
		return nil, err
	}
	if want := m.Config.SourceClusterID; want != "" {
		// bootstrap.servers may come to point at another cluster (DNS, a
		// rebuilt cluster): never mirror from a cluster the mirror was not made for.
		got, err := sourceclient.ClusterID(ctx, src)
		if err != nil {
			return nil, fmt.Errorf("reaching the source of mirror %s: %w", mirror, err)
		}
		if got != want {
			return nil, fmt.Errorf("the source of mirror %s at %s is now cluster %s, not %s; its partitions fail when they next prepare: fix bootstrap.servers or delete and re-create the mirror",
				mirror, m.Config.Configs["bootstrap.servers"], got, want)
		}
	}
	sourceTopics, err := apicore.ListTopics(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("listing source topics of mirror %s: %w", mirror, err)
	}
	a := &adder{b: b, m: m, src: src, source: sourceTopics, now: b.NowTime(), otherMirror: map[string]string{}}
	b.Coord.Store().Read(func(v *statetopic.View) {
		for _, name := range v.MirrorNames() {
			if name == m.Name {
				continue
			}
			for t := range v.Mirror(name).Topics {
				a.otherMirror[t] = name
			}
		}
	})
	for _, name := range m.TopicNames() {
		t := m.Topics[name]
		st, ok := sourceTopics[name]
		if !ok || st.Err != nil || statetopic.UUID(st.ID) != t.SourceTopicID || t.Desired == statetopic.DesireStop {
			continue // deletion and re-creation are reported by the partitions' data path
		}
		if n := int32(len(st.Partitions)); n > t.Partitions {
			if err := growDestination(ctx, b.Destination, name, n); err != nil {
				return nil, fmt.Errorf("growing destination topic %s of mirror %s to the source's %d partitions: %w", name, mirror, n, err)
			}
			grown := *t
			grown.Partitions, grown.UpdatedAt = n, a.now
			a.recs = append(a.recs, coordinator.Record{Key: statetopic.MirrorTopicKey(m.Name, name), Value: &grown})
			b.Log.Info("source topic grew; mirroring the new partitions", "mirror", m.Name, "topic", name, "from", t.Partitions, "to", n)
		}
	}
	include := append(mirrorconfig.List(m.Config.Configs["topics.include"]), m.Config.IncludePatterns...)
	var added []string
	if len(include) > 0 {
		exclude := append(mirrorconfig.List(m.Config.Configs["topics.exclude"]), m.Config.ExcludePatterns...)
		if _, set := m.Config.Configs["topics.exclude"]; !set {
			exclude = append(exclude, "__.*")
		}
		match := mirrorconfig.NewMatcher(include, exclude)
		for _, name := range sourceTopics.Names() {
			if _, in := m.Topics[name]; in || sourceTopics[name].IsInternal || !match.Match(name) {
				continue
			}
			if _, taken := a.otherMirror[name]; taken {
				continue
			}
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
