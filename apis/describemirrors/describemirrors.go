// Package describemirrors answers DescribeMirrors (API key protocol.KeyDescribeMirrors): per mirror
// partition, the recorded state, the live high watermarks of both clusters
// and the recovery point (what a failover right now would lose: records and
// the age of the oldest of them, rpo.go); per mirror, what its sync jobs and
// consumer group offset sync last achieved. Sampler publishes the recovery
// point as metrics.
package describemirrors

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/apis/apicore"
	"github.com/kmirror/kmirror/coordinator/compat"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// Handle describes the named mirrors, or all of them.
func Handle(ctx context.Context, b *apicore.Backend, req *protocol.DescribeMirrorsRequest) *protocol.DescribeMirrorsResponse {
	resp := protocol.NewPtrDescribeMirrorsResponse()
	if err := b.CatchUp(ctx); err != nil {
		resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		return resp
	}
	names := req.MirrorNames
	if len(names) == 0 {
		b.Coord.Store().Read(func(v *statetopic.View) { names = v.MirrorNames() })
		// Lost mirrors are described too, each with the error that says
		// its state was lost (Backend.Mirror).
		for name := range b.Coord.Loss().Mirrors {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
	}
	for _, name := range names {
		resp.Mirrors = append(resp.Mirrors, describe(ctx, b, name))
	}
	return resp
}

func describe(ctx context.Context, b *apicore.Backend, name string) protocol.DescribeMirrorsResponseMirror {
	out := protocol.DescribeMirrorsResponseMirror{Name: name}
	m, err := b.Mirror(ctx, name)
	if err != nil {
		out.ErrorCode, out.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		return out
	}
	topics := m.TopicNames()
	dstEnds := endOffsets(ctx, b.Destination, topics)
	var srcEnds map[string]map[int32]int64
	src, srcErr := b.SourceClient(m)
	if srcErr == nil {
		srcEnds = endOffsets(ctx, kadm.NewClient(src), topics)
	}
	// Only lagging partitions cost a source fetch: a caught-up one has
	// nothing at risk, whatever its records' age.
	behind := map[string]map[int32]int64{}
	for _, t := range topics {
		for p, s := range apicore.TopicStates(m, t) {
			srcHW, dstEnd := lookup(srcEnds, t, int32(p)), lookup(dstEnds, t, int32(p))
			if !failingOver(s) && dstEnd >= 0 && srcHW > dstEnd {
				if behind[t] == nil {
					behind[t] = map[int32]int64{}
				}
				behind[t][int32(p)] = dstEnd
			}
		}
	}
	var oldest map[string]map[int32]time.Time
	if len(behind) > 0 && srcErr == nil {
		oldest = oldestAtRisk(ctx, src, behind)
	}
	now := b.NowTime()
	for _, t := range topics {
		dt := protocol.DescribeMirrorsResponseTopic{Name: t}
		for p, s := range apicore.TopicStates(m, t) {
			part := int32(p)
			dp := protocol.DescribeMirrorsResponsePartition{Partition: part, State: protocol.MirrorStateUnknown.String(),
				SourceHighWatermark: lookup(srcEnds, t, part), DestinationHighWatermark: lookup(dstEnds, t, part), Lag: -1, LastMirroredOffset: -1}
			if dp.SourceHighWatermark >= 0 && dp.DestinationHighWatermark >= 0 {
				dp.Lag = max(0, dp.SourceHighWatermark-dp.DestinationHighWatermark)
			}
			dp.RecordsAtRisk, dp.AtRiskAgeMs = atRisk(s, dp.SourceHighWatermark, dp.DestinationHighWatermark, oldest[t][part], now)
			if s != nil {
				dp.State, dp.RetryAttempt, dp.LastMirroredOffset = s.State.String(), s.RetryAttempt, s.LastMirroredOffset
				if msg := message(s, m.Topics[t].Notes); msg != "" {
					dp.ErrorMessage = &msg
				}
			}
			dt.Partitions = append(dt.Partitions, dp)
		}
		out.Topics = append(out.Topics, dt)
	}
	out.Groups, out.Syncs = syncs(m, now)
	if srcErr == nil {
		out.Clusters = compat.Describe(ctx, src, b.Destination)
	}
	return out
}

// syncs reports the mirror's sync jobs and groups, ages measured on this
// instance's clock.
func syncs(m *statetopic.Mirror, now time.Time) ([]protocol.DescribeMirrorsResponseGroup, []protocol.DescribeMirrorsResponseSync) {
	age := func(t time.Time) int64 {
		if t.IsZero() {
			return -1
		}
		return max(0, now.Sub(t).Milliseconds())
	}
	var groups []protocol.DescribeMirrorsResponseGroup
	names := make([]string, 0, len(m.Groups))
	for g := range m.Groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		s := m.Groups[g]
		groups = append(groups, protocol.DescribeMirrorsResponseGroup{Name: g, State: string(s.State),
			LastSyncAgeMs: age(m.GroupLastSynced(g)), Partitions: s.Partitions, Message: nonEmpty(s.Message)})
	}
	var jobs []protocol.DescribeMirrorsResponseSync
	for _, name := range []string{statetopic.JobTopics, statetopic.JobGroups, statetopic.JobTopicConfigs, statetopic.JobACLs} {
		j := m.Sync.Job(name)
		if j == nil {
			continue
		}
		jobs = append(jobs, protocol.DescribeMirrorsResponseSync{Job: name, LastSuccessAgeMs: age(j.LastSuccessAt),
			LastRunAgeMs: age(j.AttemptedAt), ErrorMessage: nonEmpty(j.Error), Message: nonEmpty(j.Message)})
	}
	return groups, jobs
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// message is the failure, else the notes of events that changed what the
// destination holds (invariant 5: never silent).
func message(s *statetopic.PartitionState, topicNotes []string) string {
	if s.ErrorMessage != "" {
		return s.ErrorMessage
	}
	if notes := append(append([]string(nil), topicNotes...), s.Notes...); len(notes) > 0 {
		return "note: " + strings.Join(notes, "; ")
	}
	return ""
}

func endOffsets(ctx context.Context, adm *kadm.Client, topics []string) map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	if len(topics) == 0 {
		return out
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return out
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out
}

func lookup(m map[string]map[int32]int64, topic string, p int32) int64 {
	if o, ok := m[topic][p]; ok {
		return o
	}
	return -1
}
