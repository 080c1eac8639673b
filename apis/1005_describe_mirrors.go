package apis

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// DescribeMirrors (key 1005) describes the named mirrors, or all of them:
// per mirror partition, the recorded state, the live high watermarks of
// both clusters and the recovery point (what a failover right now would
// lose: records and the age of the oldest of them, 1005_rpo.go); per
// mirror, what its sync jobs and consumer group offset sync last achieved.
// RPOSampler publishes the recovery point as metrics (1005_rpo_sampler.go).
func (b *Backend) DescribeMirrors(ctx context.Context, req *protocol.DescribeMirrorsRequest) *protocol.DescribeMirrorsResponse {
	resp := protocol.NewPtrDescribeMirrorsResponse()
	if err := b.catchUp(ctx); err != nil {
		resp.ErrorCode, resp.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		return resp
	}
	names, all := req.MirrorNames, len(req.MirrorNames) == 0
	if all {
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
		resp.Mirrors = append(resp.Mirrors, b.describeMirror(ctx, name))
	}
	resp.Routes = b.describeRoutes(names, all)
	return resp
}

func (b *Backend) describeMirror(ctx context.Context, name string) protocol.DescribeMirrorsResponseMirror {
	out := protocol.DescribeMirrorsResponseMirror{Name: name}
	m, err := b.Mirror(ctx, name)
	if err != nil {
		out.ErrorCode, out.ErrorMessage = protocol.ErrorCodeAndMessage(err)
		return out
	}
	topics := m.TopicNames()
	dstEnds := endOffsets(ctx, b.Destination, topics)
	var srcEnds map[string]map[int32]int64
	src, srcErr := b.sourceClient(m)
	if srcErr == nil {
		srcEnds = endOffsets(ctx, kadm.NewClient(src), topics)
	}
	// Only lagging partitions cost a source fetch: a caught-up one has
	// nothing at risk, whatever its records' age.
	behind := map[string]map[int32]int64{}
	for _, t := range topics {
		for p, s := range m.TopicStates(t) {
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
	now := b.now()
	quota := throttleNote(b, name)
	for _, t := range topics {
		dt := protocol.DescribeMirrorsResponseTopic{Name: t}
		for p, s := range m.TopicStates(t) {
			part := int32(p)
			dp := protocol.DescribeMirrorsResponsePartition{Partition: part, State: protocol.MirrorStateUnknown.String(),
				SourceHighWatermark: lookup(srcEnds, t, part), DestinationHighWatermark: lookup(dstEnds, t, part), Lag: -1, LastMirroredOffset: -1}
			if dp.SourceHighWatermark >= 0 && dp.DestinationHighWatermark >= 0 {
				dp.Lag = max(0, dp.SourceHighWatermark-dp.DestinationHighWatermark)
			}
			dp.RecordsAtRisk, dp.AtRiskAgeMs = atRisk(s, dp.SourceHighWatermark, dp.DestinationHighWatermark, oldest[t][part], now)
			if s != nil {
				dp.State, dp.RetryAttempt, dp.LastMirroredOffset = s.State.String(), s.RetryAttempt, s.LastMirroredOffset
				notes := m.Topics[t].Notes
				if quota != "" && dp.Lag > 0 {
					notes = append(slices.Clip(notes), quota)
				}
				if msg := message(s, notes); msg != "" {
					dp.ErrorMessage = &msg
				}
			}
			dt.Partitions = append(dt.Partitions, dp)
		}
		out.Topics = append(out.Topics, dt)
	}
	out.Groups, out.Syncs = syncs(m, now)
	if srcErr == nil {
		out.Clusters = b.compat.Describe(ctx, name, src, b.Destination)
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

// throttleNote says, when the mirror's source brokers throttled this
// instance's client lately (a source quota on its client id), by how much:
// the reason a copy lags that nothing else on the partition shows. It is
// this instance's view: the instances that copy the mirror share its quota
// on each broker, so one that copies is throttled like the others.
func throttleNote(b *Backend, mirror string) string {
	if b.Sources == nil {
		return ""
	}
	th, ok := b.Sources.Throttles().Recent(mirror, b.now())
	if !ok {
		return ""
	}
	return fmt.Sprintf("the source throttles this mirror's client id %s (a source quota): %.1f s of throttle in the last %s, summed over its connections to the source brokers",
		th.ClientID, th.Recent.Seconds(), sourceclient.ThrottleWindow)
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
