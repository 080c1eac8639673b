package apis

import (
	"context"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// RemoveTopicsFromMirror (key 1002) is the failover: each named topic (and
// each mirror topic matching Patterns) is set to stop; its partitions go
// STOPPING → STOPPED with the last mirrored offset recorded, and the topic
// becomes writable. It returns once the desire is recorded; describe shows
// the partitions reach STOPPED.
func (b *Backend) RemoveTopicsFromMirror(ctx context.Context, req *protocol.RemoveTopicsFromMirrorRequest) *protocol.RemoveTopicsFromMirrorResponse {
	resp := protocol.NewPtrRemoveTopicsFromMirrorResponse()
	resp.Topics, resp.ErrorCode, resp.ErrorMessage = topicResults(b.removeTopics(ctx, req))
	return resp
}

func (b *Backend) removeTopics(ctx context.Context, req *protocol.RemoveTopicsFromMirrorRequest) ([]protocol.TopicResult, error) {
	if err := checkPatterns(req.Patterns); err != nil {
		return nil, err
	}
	m, err := b.Mirror(ctx, req.MirrorName)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(req.Topics))
	for _, t := range req.Topics {
		names = append(names, t.Name)
	}
	if len(req.Patterns) > 0 {
		match := mirrorconfig.NewMatcher(req.Patterns, nil)
		for _, t := range m.TopicNames() {
			if match.Match(t) && m.Topics[t].Desired != statetopic.DesireStop {
				names = append(names, t)
			}
		}
	}
	var results []protocol.TopicResult
	var stop []string
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		t, in := m.Topics[name]
		switch {
		case !in:
			results = append(results, topicResult(name, protocol.ErrTopicNotInMirror.WithMessage(
				"topic %q is not in mirror %q; `kmirror mirrors --describe --mirror %s` lists its topics", name, m.Name, m.Name)))
		case t.Desired == statetopic.DesireStop:
			results = append(results, topicResult(name, nil)) // already failing over: idempotent
		default:
			stop = append(stop, name)
			results = append(results, topicResult(name, nil))
		}
	}
	if err := b.setDesire(ctx, m, stop, statetopic.DesireStop); err != nil {
		return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("%v; retry", err)
	}
	if len(req.Patterns) > 0 {
		// Removing by pattern also ends the pattern's claim on topics the
		// source creates later; otherwise the refresh would mirror them again.
		conf := *m.Config
		conf.IncludePatterns = without(conf.IncludePatterns, req.Patterns)
		conf.ExcludePatterns = withAll(conf.ExcludePatterns, req.Patterns)
		if err := b.Coord.Write(ctx, coordinator.Record{Key: statetopic.MirrorConfigKey(m.Name), Value: &conf}); err != nil {
			return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("recording the removed patterns: %v; retry", err)
		}
	}
	for _, n := range stop {
		b.Log.Info("failover requested", "mirror", m.Name, "topic", n)
	}
	return results, nil
}

func without(list, drop []string) []string {
	out := list[:0:0]
	for _, v := range list {
		keep := true
		for _, d := range drop {
			keep = keep && v != d
		}
		if keep {
			out = append(out, v)
		}
	}
	return out
}

func withAll(list, add []string) []string {
	out := append([]string(nil), list...)
	for _, a := range add {
		if len(without(out, []string{a})) == len(out) {
			out = append(out, a)
		}
	}
	return out
}
