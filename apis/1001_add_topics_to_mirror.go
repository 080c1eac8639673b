package apis

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/compat"
	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/protocol"
)

// ErrTopicExistsOnDestination is Kafka's TOPIC_ALREADY_EXISTS (36), used when
// the destination already has a non-empty topic of that name.
var ErrTopicExistsOnDestination = &protocol.Error{Code: 36, Name: "TOPIC_ALREADY_EXISTS",
	Message: "The topic already exists on the destination with records kmirror did not copy."}

// AddTopicsToMirror (key 1001) records topics named explicitly, and source
// topics matching include patterns (minus exclude patterns), with their
// source topic id and partition count and the desire to mirror; the
// partitions' owners take it from there. Each topic gets its own result.
// The patterns are stored with the mirror so that matching source topics
// created later are added by the mirror's topics job (topicsjob.go). A
// topic whose destination log already holds records is a failback
// (1001_failback.go).
func (b *Backend) AddTopicsToMirror(ctx context.Context, req *protocol.AddTopicsToMirrorRequest) *protocol.AddTopicsToMirrorResponse {
	resp := protocol.NewPtrAddTopicsToMirrorResponse()
	resp.Topics, resp.ErrorCode, resp.ErrorMessage = topicResults(b.addTopics(ctx, req))
	return resp
}

func (b *Backend) addTopics(ctx context.Context, req *protocol.AddTopicsToMirrorRequest) ([]protocol.TopicResult, error) {
	if err := checkPatterns(req.IncludePatterns, req.ExcludePatterns); err != nil {
		return nil, err
	}
	if len(req.Topics) == 0 && len(req.IncludePatterns) == 0 {
		return nil, protocol.ErrInvalidRequest.WithMessage("name at least one topic or include pattern")
	}
	m, err := b.Mirror(ctx, req.MirrorName)
	if err != nil {
		return nil, err
	}
	src, err := b.sourceClient(m)
	if err != nil {
		return nil, err
	}
	if err := b.compat.Refuse(ctx, b.Log, m.Name, false, src, b.Destination); err != nil {
		return nil, err
	}
	source, err := listTopics(ctx, src)
	if err != nil {
		return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("listing topics of the source cluster %s: %v; retry", m.Config.Configs["bootstrap.servers"], err)
	}
	a := b.newAdder(m, src, source, true)
	explicit, names := map[string]bool{}, make([]string, 0, len(req.Topics))
	for _, t := range req.Topics {
		explicit[t.Name], names = true, append(names, t.Name)
	}
	// Topics already in the mirror are left out: re-adding a failed-over
	// topic is explicit.
	var matched []string
	if len(req.IncludePatterns) > 0 {
		for _, name := range a.matching(req.IncludePatterns, req.ExcludePatterns) {
			if !explicit[name] {
				matched = append(matched, name)
			}
		}
	}
	a.readFormats(ctx, append(names, matched...))
	var results []protocol.TopicResult
	for _, t := range req.Topics {
		results = append(results, topicResult(t.Name, a.addOne(ctx, t.Name, t.TopicID, t.NumPartitions)))
	}
	for _, name := range matched {
		results = append(results, topicResult(name, a.addOne(ctx, name, [16]byte{}, -1)))
	}
	if len(req.IncludePatterns) > 0 {
		conf := *m.Config
		conf.IncludePatterns = mirrorconfig.AppendNew(conf.IncludePatterns, req.IncludePatterns)
		conf.ExcludePatterns = mirrorconfig.AppendNew(conf.ExcludePatterns, req.ExcludePatterns)
		a.recs = append(a.recs, coordinator.Record{Key: statetopic.MirrorConfigKey(m.Name), Value: &conf})
	}
	if len(a.recs) > 0 {
		if err := b.Coord.Write(ctx, a.recs...); err != nil {
			return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("recording the topics: %v; retry", err)
		}
	}
	sort.SliceStable(results, func(i, j int) bool { return results[i].Name < results[j].Name })
	for _, r := range results {
		if r.ErrorCode == 0 {
			b.Log.Info("topic added to mirror", "mirror", m.Name, "topic", r.Name)
		}
	}
	return results, nil
}

// adder adds topics to one mirror, collecting the records to write.
type adder struct {
	b           *Backend
	m           *statetopic.Mirror
	src         *kgo.Client // the mirror's source
	source      kadm.TopicDetails
	otherMirror map[string]string // topic -> the other mirror that has it
	now         time.Time
	clusterID   string           // the destination's, once asked
	refused     map[string]error // source topics in v0/v1 message sets (readFormats)
	recs        []coordinator.Record
}

// readFormats reads the message formats of the topics among names the source has, all
// in one request (compat.RefuseTopics), for addOne to refuse those in v0/v1 message sets.
func (a *adder) readFormats(ctx context.Context, names []string) {
	var onSource []string
	for _, name := range names {
		if _, ok := a.source[name]; ok {
			onSource = append(onSource, name)
		}
	}
	a.refused = compat.RefuseTopics(ctx, a.src, onSource)
}

// newAdder adds source topics to m, knowing which topics other mirrors
// have: those that are not all STOPPED when activeOnly, else all of them.
func (b *Backend) newAdder(m *statetopic.Mirror, src *kgo.Client, source kadm.TopicDetails, activeOnly bool) *adder {
	a := &adder{b: b, m: m, src: src, source: source, now: b.now(), otherMirror: map[string]string{}}
	b.Coord.Store().Read(func(v *statetopic.View) {
		for _, name := range v.MirrorNames() {
			if name == m.Name {
				continue
			}
			om := v.Mirror(name)
			for t := range om.Topics {
				if !activeOnly || !om.AllStopped(t) {
					a.otherMirror[t] = name
				}
			}
		}
	})
	return a
}

// matching lists the source topics that match include minus exclude (and
// the mirror's topics.exclude, by default every name starting with __),
// leaving out internal topics, the mirror's own and other mirrors' (a
// pattern never steals a topic from another mirror).
func (a *adder) matching(include, exclude []string) []string {
	configs := a.m.Config.Configs
	exclude = append(mirrorconfig.List(configs["topics.exclude"]), exclude...)
	if _, set := configs["topics.exclude"]; !set {
		exclude = append(exclude, "__.*")
	}
	match := mirrorconfig.NewMatcher(include, exclude)
	var out []string
	for _, name := range a.source.Names() {
		_, in := a.m.Topics[name]
		_, taken := a.otherMirror[name]
		if !in && !taken && !a.source[name].IsInternal && match.Match(name) {
			out = append(out, name)
		}
	}
	return out
}

// addOne adds one topic (wantID and wantPartitions are checked unless zero
// and -1) or says why not.
func (a *adder) addOne(ctx context.Context, name string, wantID [16]byte, wantPartitions int32) error {
	st, err := a.sourceTopic(name, wantID, wantPartitions)
	if err != nil {
		return err
	}
	if err := a.refused[name]; err != nil {
		return err
	}
	if other, taken := a.otherMirror[name]; taken {
		return protocol.ErrTopicAlreadyInMirror.WithMessage("topic %q is mirrored by mirror %q; remove it there first", name, other)
	}
	ends, err := a.destinationEnds(ctx, name)
	if err != nil {
		return err
	}
	if cur, in := a.m.Topics[name]; in {
		return a.readd(ctx, name, cur, st, ends)
	}
	t := statetopic.MirrorTopic{SourceTopicID: statetopic.UUID(st.ID), Desired: statetopic.DesireMirror, Partitions: int32(len(st.Partitions)), UpdatedAt: a.now}
	var records int64
	for _, e := range ends {
		records += e
	}
	if records > 0 {
		src, err := a.askSource(ctx, name, t.Partitions)
		if err != nil {
			return err
		}
		plan, err := planFailback(name, ends, nil, src)
		if err != nil {
			return err
		}
		if !src.known {
			return ErrTopicExistsOnDestination.WithMessage("topic %q already exists on the destination with %d records that did not come from the source; "+
				"kmirror keeps source offsets and will not append after them: delete the destination topic or mirror into a cluster without it", name, records)
		}
		if err := a.applyFailback(ctx, name, plan, &t); err != nil {
			return err
		}
	}
	a.recs = append(a.recs, coordinator.Record{Key: statetopic.MirrorTopicKey(a.m.Name, name), Value: &t})
	return nil
}

// sourceTopic is the source's topic of that name, if it may be mirrored and
// has the id and partition count asked for.
func (a *adder) sourceTopic(name string, wantID [16]byte, wantPartitions int32) (kadm.TopicDetail, error) {
	st, ok := a.source[name]
	if ok && (st.IsInternal || strings.HasPrefix(name, "__")) {
		return st, protocol.ErrInvalidRequest.WithMessage("topic %q is internal to its cluster (names starting with __ are Kafka's and kmirror's own) and is never mirrored", name)
	}
	if !ok || st.Err != nil {
		return st, protocol.ErrUnknownTopicOrPartition.WithMessage("topic %q does not exist on the source cluster %s; check the name",
			name, a.m.Config.Configs["bootstrap.servers"])
	}
	if wantID != ([16]byte{}) && wantID != st.ID {
		return st, protocol.ErrInvalidRequest.WithMessage("topic %q has id %s on the source, not %s", name, statetopic.UUID(st.ID), statetopic.UUID(wantID))
	}
	if parts := int32(len(st.Partitions)); wantPartitions >= 0 && wantPartitions != parts {
		return st, protocol.ErrInvalidRequest.WithMessage("topic %q has %d partitions on the source, not %d", name, parts, wantPartitions)
	}
	return st, nil
}

// readd re-adds a failed-over topic: it continues from the destination's
// end if that is a prefix of the source's log (1001_failback.go).
func (a *adder) readd(ctx context.Context, name string, cur *statetopic.MirrorTopic, st kadm.TopicDetail, ends map[int32]int64) error {
	if !a.m.AllStopped(name) {
		return protocol.ErrMirrorTopicNotStopped.WithMessage("topic %q is already in mirror %q (desired %s); remove it and wait for STOPPED before adding it again",
			name, a.m.Name, cur.Desired)
	}
	parts := int32(len(st.Partitions))
	t := *cur
	t.Desired, t.UpdatedAt, t.Partitions = statetopic.DesireMirror, a.now, parts
	t.Notes = append([]string(nil), cur.Notes...)
	own := a.m.LastMirroredOffsets(name)
	sameSource := t.SourceTopicID == statetopic.UUID(st.ID)
	if !sameSource {
		own = nil
	}
	var src sourceMirrorOf
	if !sameSource || !withinPrefix(ends, own) {
		var err error
		if src, err = a.askSource(ctx, name, parts); err != nil {
			return err
		}
	}
	if !sameSource && !src.known {
		return protocol.ErrInvalidRequest.WithMessage("topic %q was re-created on the source (id %s, mirrored as %s); delete the destination topic and the mirror's record of it by deleting and re-creating the mirror",
			name, statetopic.UUID(st.ID), t.SourceTopicID)
	}
	plan, err := planFailback(name, ends, own, src)
	if err != nil {
		return err
	}
	if !sameSource {
		// The source's topic is a mirror of this cluster's: its offsets are
		// ours. Its partitions get new state records; the old ones go.
		for p := range cur.Partitions {
			a.recs = append(a.recs, coordinator.Record{Key: statetopic.PartitionStateKey(a.m.Name, cur.SourceTopicID, p)})
		}
		t.SourceTopicID = statetopic.UUID(st.ID)
	}
	if err := a.applyFailback(ctx, name, plan, &t); err != nil {
		return err
	}
	a.recs = append(a.recs, coordinator.Record{Key: statetopic.MirrorTopicKey(a.m.Name, name), Value: &t})
	return nil
}

// withinPrefix reports whether every destination log ends at or before the
// mirror's own last mirrored offset (nothing was written here since).
func withinPrefix(ends, own map[int32]int64) bool {
	if own == nil {
		return false
	}
	for p, e := range ends {
		if o, ok := own[p]; !ok || e > o {
			return false
		}
	}
	return true
}

// applyFailback re-creates the destination topic if the plan says so and
// records the plan's note on the topic.
func (a *adder) applyFailback(ctx context.Context, name string, plan failbackPlan, t *statetopic.MirrorTopic) error {
	if plan.recreate {
		if err := a.recreate(ctx, name); err != nil {
			return err
		}
	}
	if plan.note != "" {
		a.b.Log.Info(plan.note, "mirror", a.m.Name)
		t.Notes = append(t.Notes, a.now.UTC().Format(time.RFC3339)+" "+plan.note)
		if len(t.Notes) > 10 {
			t.Notes = t.Notes[len(t.Notes)-10:]
		}
	}
	return nil
}
