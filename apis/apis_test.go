package apis_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/apis"
	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

type env struct {
	b        *apis.Backend
	src, dst *kafkatest.Cluster
	ctx      context.Context
}

func newEnv(t *testing.T) *env {
	src := kafkatest.Start(t, kafkatest.Fake())
	dst := kafkatest.Start(t, kafkatest.Fake())
	dp := &coordinatortest.DataPath{End: func(p coordinator.PartitionRef) int64 { return 1000 + int64(p.Partition) }}
	c := coordinatortest.Start(t, dst.Bootstrap(), dp)
	sources := sourceclient.NewCache()
	t.Cleanup(sources.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{b: &apis.Backend{Coord: c, Sources: sources, Destination: kadm.NewClient(dst.Client(t)), Log: slog.New(slog.DiscardHandler)},
		src: src, dst: dst, ctx: ctx}
	adm := kadm.NewClient(src.Client(t))
	for _, topic := range []string{"orders", "orders-eu", "payments", "__internal", "__consumer_offsets"} {
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *env) create(name string, configs map[string]string) (int16, string) {
	req := protocol.NewPtrCreateMirrorRequest()
	req.MirrorName = name
	for k, v := range configs {
		req.Configs = append(req.Configs, protocol.CreateMirrorRequestConfig{Name: k, Value: kadm.StringPtr(v)})
	}
	resp := e.b.CreateMirror(e.ctx, req)
	return resp.ErrorCode, deref(resp.ErrorMessage)
}

func (e *env) add(mirror string, topics []string, include ...string) *protocol.AddTopicsToMirrorResponse {
	req := protocol.NewPtrAddTopicsToMirrorRequest()
	req.MirrorName, req.IncludePatterns = mirror, include
	for _, t := range topics {
		rt := protocol.AddTopicsToMirrorRequestTopic{Name: t, NumPartitions: -1}
		req.Topics = append(req.Topics, rt)
	}
	return e.b.AddTopicsToMirror(e.ctx, req)
}

func (e *env) topicNames(names ...string) []protocol.TopicName {
	out := make([]protocol.TopicName, len(names))
	for i, n := range names {
		out[i].Name = n
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func expectCode(t *testing.T, what string, code int16, msg string, want *protocol.Error, wantMsg string) {
	t.Helper()
	if code != want.Code {
		t.Fatalf("%s: error code %d (%q), want %d %s", what, code, msg, want.Code, want.Name)
	}
	if !strings.Contains(msg, wantMsg) {
		t.Fatalf("%s: message %q does not say %q", what, msg, wantMsg)
	}
}

func topicResult(t *testing.T, results []protocol.TopicResult, name string) protocol.TopicResult {
	t.Helper()
	for _, r := range results {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no result for topic %s in %+v", name, results)
	return protocol.TopicResult{}
}

// TestMirrorRPCErrorsAndLifecycle takes mirror dr through its whole life,
// create to delete, with the errors of each RPC on the way. The steps run
// in order, each on what the earlier ones left.
func TestMirrorRPCErrorsAndLifecycle(t *testing.T) {
	e := newEnv(t)
	srcCfg := map[string]string{"bootstrap.servers": e.src.BootstrapString()}
	lifecycleCreate(t, e, srcCfg)
	lifecycleAdd(t, e, srcCfg)
	lifecyclePauseResume(t, e)
	lifecycleFailover(t, e)
	lifecycleReaddListDelete(t, e)
}

// lifecycleCreate checks CreateMirror's validation and creates mirror dr.
func lifecycleCreate(t *testing.T, e *env, srcCfg map[string]string) {
	t.Helper()
	code, msg := e.create("bad name!", srcCfg)
	expectCode(t, "invalid name", code, msg, protocol.ErrInvalidRequest, `invalid mirror name "bad name!"`)
	code, msg = e.create("dr", map[string]string{"bootstrap.servers": e.src.BootstrapString(), "fetch.max.byte": "1"})
	expectCode(t, "unknown config", code, msg, protocol.ErrInvalidConfig, `unknown mirror config "fetch.max.byte"`)
	code, msg = e.create("dr", map[string]string{"bootstrap.servers": e.src.BootstrapString(), "acls.include": "TOPIC;orders(;READ"})
	expectCode(t, "bad acls.include", code, msg, protocol.ErrInvalidConfig, `mirror config acls.include="TOPIC;orders(;READ": rule "TOPIC;orders(;READ": resource name: invalid regex`)
	code, msg = e.create("dr", map[string]string{"bootstrap.servers": e.src.BootstrapString(), "acls.include": "CLUSTER;*;ALTER"})
	expectCode(t, "cluster ACLs", code, msg, protocol.ErrInvalidConfig, "CLUSTER ACLs are never synced")
	code, msg = e.create("dr", map[string]string{"bootstrap.servers": e.src.BootstrapString(), "source.cluster.id": "nope"})
	expectCode(t, "wrong cluster id", code, msg, protocol.ErrInvalidConfig, "source.cluster.id is nope")
	if code, msg = e.create("dr", srcCfg); code != 0 {
		t.Fatalf("create: %d %s", code, msg)
	}
	// A repeat with the same configs is a client's retry of a create that succeeded: it
	// succeeds. Other configs under the same name are refused.
	if code, msg = e.create("dr", srcCfg); code != 0 {
		t.Fatalf("create repeated with the same configs: %d %s", code, msg)
	}
	code, msg = e.create("dr", map[string]string{"bootstrap.servers": e.src.BootstrapString(), "fetch.max.bytes": "2097152"})
	expectCode(t, "duplicate", code, msg, protocol.ErrMirrorAlreadyExists, `mirror "dr" already exists with other configs`)
}

// lifecycleAdd checks AddTopicsToMirror: payments, orders and orders-eu go
// into dr, and every kind of refused topic is refused. It also creates the
// mirror other.
func lifecycleAdd(t *testing.T, e *env, srcCfg map[string]string) {
	t.Helper()
	resp := e.add("nope", []string{"orders"})
	expectCode(t, "add to unknown mirror", resp.ErrorCode, deref(resp.ErrorMessage), protocol.ErrUnknownMirror, `mirror "nope" does not exist`)
	resp = e.add("dr", []string{"payments", "missing"}, "orders.*")
	if resp.ErrorCode != 0 {
		t.Fatalf("add: %s", deref(resp.ErrorMessage))
	}
	r := topicResult(t, resp.Topics, "missing")
	expectCode(t, "unknown topic", r.ErrorCode, deref(r.ErrorMessage), protocol.ErrUnknownTopicOrPartition, `topic "missing" does not exist on the source`)
	for _, name := range []string{"payments", "orders", "orders-eu"} {
		if r := topicResult(t, resp.Topics, name); r.ErrorCode != 0 {
			t.Fatalf("%s: %s", name, deref(r.ErrorMessage))
		}
	}
	for _, r := range resp.Topics {
		if r.Name == "__internal" {
			t.Fatal("the default exclude __.* did not keep __internal out of a pattern add")
		}
	}
	resp = e.add("dr", []string{"__consumer_offsets"})
	r = topicResult(t, resp.Topics, "__consumer_offsets")
	expectCode(t, "internal topic named explicitly", r.ErrorCode, deref(r.ErrorMessage), protocol.ErrInvalidRequest, "is never mirrored")
	resp = e.add("dr", []string{"payments"})
	r = topicResult(t, resp.Topics, "payments")
	expectCode(t, "re-add active", r.ErrorCode, deref(r.ErrorMessage), protocol.ErrMirrorTopicNotStopped, "remove it and wait for STOPPED")

	if code, msg := e.create("other", srcCfg); code != 0 {
		t.Fatalf("create other: %s", msg)
	}
	resp = e.add("other", []string{"payments"})
	r = topicResult(t, resp.Topics, "payments")
	expectCode(t, "topic in another mirror", r.ErrorCode, deref(r.ErrorMessage), protocol.ErrTopicAlreadyInMirror, `mirrored by mirror "dr"`)

	// A destination topic holding records that did not come from the source.
	dstAdm := kadm.NewClient(e.dst.Client(t))
	if _, err := dstAdm.CreateTopic(e.ctx, 1, 1, nil, "payments-local"); err != nil {
		t.Fatal(err)
	}
	if err := e.dst.Client(t).ProduceSync(e.ctx, &kgo.Record{Topic: "payments-local", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r, err := kadm.NewClient(e.src.Client(t)).CreateTopic(e.ctx, 1, 1, nil, "payments-local"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	resp = e.add("other", []string{"payments-local"})
	r = topicResult(t, resp.Topics, "payments-local")
	expectCode(t, "non-empty destination topic", r.ErrorCode, deref(r.ErrorMessage), apis.ErrTopicExistsOnDestination, "1 records that did not come from the source")
}

// lifecyclePauseResume waits for payments to reach MIRRORING through the
// coordinator, then pauses and resumes it, with the errors of both.
func lifecyclePauseResume(t *testing.T, e *env) {
	t.Helper()
	waitStates(t, e, "dr", "payments", 3, protocol.MirrorStateMirroring)

	pr := e.b.ResumeMirrorTopics(e.ctx, &protocol.ResumeMirrorTopicsRequest{MirrorName: "dr", Topics: e.topicNames("payments")})
	expectCode(t, "resume not paused", pr.Topics[0].ErrorCode, deref(pr.Topics[0].ErrorMessage), protocol.ErrMirrorTopicNotPaused, "not paused")
	pp := e.b.PauseMirrorTopics(e.ctx, &protocol.PauseMirrorTopicsRequest{MirrorName: "dr", Topics: e.topicNames("payments", "nope")})
	if pp.Topics[0].ErrorCode != 0 {
		t.Fatalf("pause: %s", deref(pp.Topics[0].ErrorMessage))
	}
	expectCode(t, "pause unknown", pp.Topics[1].ErrorCode, deref(pp.Topics[1].ErrorMessage), protocol.ErrTopicNotInMirror, `topic "nope" is not in mirror "dr"`)
	waitStates(t, e, "dr", "payments", 3, protocol.MirrorStatePaused)
	pr = e.b.ResumeMirrorTopics(e.ctx, &protocol.ResumeMirrorTopicsRequest{MirrorName: "dr", Topics: e.topicNames("payments")})
	if pr.Topics[0].ErrorCode != 0 {
		t.Fatalf("resume: %s", deref(pr.Topics[0].ErrorMessage))
	}
	waitStates(t, e, "dr", "payments", 3, protocol.MirrorStateMirroring)
}

// lifecycleFailover fails over every topic of dr and checks the last
// mirrored offsets and the state that follow. DeleteMirror is refused
// before, while topics mirror.
func lifecycleFailover(t *testing.T, e *env) {
	t.Helper()
	dr := e.b.DeleteMirror(e.ctx, &protocol.DeleteMirrorRequest{MirrorName: "dr"})
	expectCode(t, "delete busy mirror", dr.ErrorCode, deref(dr.ErrorMessage), protocol.ErrMirrorNotEmpty, "orders, orders-eu, payments")

	// Failover: remove everything (one by name, the others by pattern).
	rr := e.b.RemoveTopicsFromMirror(e.ctx, &protocol.RemoveTopicsFromMirrorRequest{MirrorName: "dr", Topics: e.topicNames("payments", "nope"), Patterns: []string{"orders.*"}})
	if rr.ErrorCode != 0 || topicResult(t, rr.Topics, "payments").ErrorCode != 0 || topicResult(t, rr.Topics, "orders-eu").ErrorCode != 0 {
		t.Fatalf("remove: %+v", rr)
	}
	r := topicResult(t, rr.Topics, "nope")
	expectCode(t, "remove unknown", r.ErrorCode, deref(r.ErrorMessage), protocol.ErrTopicNotInMirror, `topic "nope" is not in mirror "dr"`)
	for _, topic := range []string{"payments", "orders", "orders-eu"} {
		waitStates(t, e, "dr", topic, 3, protocol.MirrorStateStopped)
	}
	pp := e.b.PauseMirrorTopics(e.ctx, &protocol.PauseMirrorTopicsRequest{MirrorName: "dr", Topics: e.topicNames("payments")})
	expectCode(t, "pause stopped", pp.Topics[0].ErrorCode, deref(pp.Topics[0].ErrorMessage), protocol.ErrMirrorTopicBeingStopped, "stopping or stopped")

	lmo := e.b.LastMirroredOffsets(e.ctx, &protocol.LastMirroredOffsetsRequest{MirrorName: "dr",
		Topics: []protocol.TopicPartitions{{Name: "payments", Partitions: []int32{0, 2, 7}}}})
	got := lmo.Topics[0].Partitions
	if got[0].LastMirroredOffset != 1000 || got[1].LastMirroredOffset != 1002 || got[2].ErrorCode != protocol.ErrUnknownTopicOrPartition.Code {
		t.Fatalf("last mirrored offsets %+v", got)
	}
	rs := e.b.ReadMirrorState(e.ctx, &protocol.ReadMirrorStateRequest{MirrorName: "dr"})
	if len(rs.Topics) != 3 || rs.Topics[0].Partitions[0].State != protocol.MirrorStateStopped || rs.Topics[0].Partitions[0].PreviousState != protocol.MirrorStateStopping {
		t.Fatalf("read mirror state %+v", rs.Topics)
	}
}

// lifecycleReaddListDelete re-adds and fails over payments again, checks
// ListMirrors and DescribeMirrors, and deletes dr, whose topics are then
// free for another mirror.
func lifecycleReaddListDelete(t *testing.T, e *env) {
	t.Helper()
	// Re-adding a failed-over topic prepares it again.
	resp := e.add("dr", []string{"payments"})
	if r := topicResult(t, resp.Topics, "payments"); r.ErrorCode != 0 {
		t.Fatalf("re-add stopped: %s", deref(r.ErrorMessage))
	}
	waitStates(t, e, "dr", "payments", 3, protocol.MirrorStateMirroring)
	e.b.RemoveTopicsFromMirror(e.ctx, &protocol.RemoveTopicsFromMirrorRequest{MirrorName: "dr", Topics: e.topicNames("payments")})
	waitStates(t, e, "dr", "payments", 3, protocol.MirrorStateStopped)

	lm := e.b.ListMirrors(e.ctx, &protocol.ListMirrorsRequest{IncludeTopicNames: true})
	if len(lm.Mirrors) != 2 || lm.Mirrors[0].Name != "dr" || lm.Mirrors[0].TopicCount != 3 || lm.Mirrors[0].SourceClusterID == "" {
		t.Fatalf("list %+v", lm.Mirrors)
	}
	dm := e.b.DescribeMirrors(e.ctx, &protocol.DescribeMirrorsRequest{MirrorNames: []string{"dr", "nope"}})
	if len(dm.Mirrors) != 2 || dm.Mirrors[1].ErrorCode != protocol.ErrUnknownMirror.Code || len(dm.Mirrors[0].Topics) != 3 {
		t.Fatalf("describe %+v", dm.Mirrors)
	}
	if p := dm.Mirrors[0].Topics[0].Partitions[0]; p.State != "STOPPED" || p.SourceHighWatermark != 0 || p.LastMirroredOffset != 1000 {
		t.Fatalf("describe partition %+v", p)
	}

	dr := e.b.DeleteMirror(e.ctx, &protocol.DeleteMirrorRequest{MirrorName: "dr"})
	if dr.ErrorCode != 0 {
		t.Fatalf("delete: %s", deref(dr.ErrorMessage))
	}
	dr = e.b.DeleteMirror(e.ctx, &protocol.DeleteMirrorRequest{MirrorName: "dr"})
	expectCode(t, "delete twice", dr.ErrorCode, deref(dr.ErrorMessage), protocol.ErrUnknownMirror, `mirror "dr" does not exist`)
	// The topics are free for another mirror now.
	resp = e.add("other", []string{"payments"})
	if r := topicResult(t, resp.Topics, "payments"); r.ErrorCode != apis.ErrTopicExistsOnDestination.Code && r.ErrorCode != 0 {
		t.Fatalf("add after delete: %+v", r)
	}
}

func TestRefreshAddsNewMatchingTopicsAndGrowsPartitions(t *testing.T) {
	e := newEnv(t)
	if code, msg := e.create("dr", map[string]string{"bootstrap.servers": e.src.BootstrapString()}); code != 0 {
		t.Fatal(msg)
	}
	if resp := e.add("dr", nil, "orders.*"); resp.ErrorCode != 0 || len(resp.Topics) != 2 {
		t.Fatalf("pattern add: %+v", resp)
	}
	srcAdm := kadm.NewClient(e.src.Client(t))
	if _, err := srcAdm.CreateTopic(e.ctx, 2, 1, nil, "orders-us"); err != nil {
		t.Fatal(err)
	}
	if _, err := srcAdm.CreatePartitions(e.ctx, 2, "orders"); err != nil {
		t.Fatal(err)
	}
	waitTopicVisible(t, e, "orders-us")
	added, err := e.b.RefreshTopics(e.ctx, "dr")
	if err != nil {
		t.Fatal(err)
	}
	waitStates(t, e, "dr", "orders", 5, protocol.MirrorStateMirroring)
	waitStates(t, e, "dr", "orders-us", 2, protocol.MirrorStateMirroring)
	if len(added) != 1 || added[0] != "orders-us" {
		t.Fatalf("refresh added %v, want [orders-us]", added)
	}
	// Removing by pattern ends the pattern: a later matching topic stays out.
	rr := e.b.RemoveTopicsFromMirror(e.ctx, &protocol.RemoveTopicsFromMirrorRequest{MirrorName: "dr", Patterns: []string{"orders.*"}})
	if rr.ErrorCode != 0 || len(rr.Topics) != 3 {
		t.Fatalf("remove by pattern: %+v", rr)
	}
	if _, err := srcAdm.CreateTopic(e.ctx, 1, 1, nil, "orders-asia"); err != nil {
		t.Fatal(err)
	}
	waitTopicVisible(t, e, "orders-asia")
	if added, err := e.b.RefreshTopics(e.ctx, "dr"); err != nil || len(added) != 0 {
		t.Fatalf("refresh after removing the pattern added %v (%v)", added, err)
	}
}

func waitTopicVisible(t *testing.T, e *env, topic string) {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, "source topic "+topic+" listed", func() (bool, string) {
		topics, err := apis.ListTopics(e.ctx, e.src.Client(t))
		return err == nil && topics.Has(topic), fmt.Sprintf("listing: %v", err)
	})
}

func waitStates(t *testing.T, e *env, mirror, topic string, partitions int, want protocol.MirrorState) {
	t.Helper()
	polltest.Eventually(t, time.Minute, fmt.Sprintf("%s/%s reaches %s", mirror, topic, want), func() (bool, string) {
		rs := e.b.ReadMirrorState(e.ctx, &protocol.ReadMirrorStateRequest{MirrorName: mirror, Topics: []protocol.TopicPartitions{{Name: topic}}})
		ok := rs.ErrorCode == 0 && len(rs.Topics) == 1 && len(rs.Topics[0].Partitions) == partitions
		if ok {
			for _, p := range rs.Topics[0].Partitions {
				ok = ok && p.State == want
			}
		}
		return ok, fmt.Sprintf("%+v", rs.Topics)
	})
}
