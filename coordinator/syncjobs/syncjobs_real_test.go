package syncjobs_test

// The mirror's sync jobs on real Apache Kafka: consumer group offsets,
// topic configs, partition growth and ACLs, each proven by reading both
// clusters. One pair of clusters (with an authorizer, for the ACL test) and
// one kmirror instance serve every subtest; each subtest has its own mirror,
// topics and groups, so their sync runs never touch each other's.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/metricstest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/mirrorcli"
	"github.com/kmirror/kmirror/protocol"
)

// refreshMs is the tests' metadata.refresh.interval.ms.
const refreshMs = 1000

// syncWait bounds how long a test waits for a sync to show: a few refresh
// intervals on a machine shared with other builds.
const syncWait = 90 * time.Second

type syncEnv struct {
	t        *testing.T
	src, dst *kafkatest.Cluster
	in       *instance.Instance
	proxy    *kgo.Client // mirror RPCs, through kmirror
	srcAdm   *kadm.Client
	dstAdm   *kadm.Client // the destination brokers, directly
}

func startSyncEnv(t *testing.T) *syncEnv {
	authz := []kafkatest.Option{
		kafkatest.ServerProperty("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
		kafkatest.ServerProperty("super.users", "User:ANONYMOUS"),
	}
	e := &syncEnv{t: t, src: kafkatest.Start(t, authz...), dst: kafkatest.Start(t, authz...)}
	in := instancetest.Start(t, e.dst, nil)
	e.in = in
	e.proxy = kafkatest.NewClient(t, []string{in.Proxy.Addr()}, kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	e.srcAdm = kadm.NewClient(e.src.Client(t))
	e.dstAdm = kadm.NewClient(e.dst.Client(t))
	return e
}

func (e *syncEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *syncEnv) request(req kmsg.Request) kmsg.Response {
	e.t.Helper()
	resp, err := e.proxy.Request(e.ctx(), req)
	if err != nil {
		e.t.Fatalf("%T: %v", req, err)
	}
	return resp
}

// topic creates a source topic that keeps its records and writes n
// records to each partition.
func (e *syncEnv) topic(name string, partitions int32, n int) {
	e.t.Helper()
	e.src.CreateKeptTopic(e.t, name, partitions)
	e.produce(name, 0, partitions, n)
}

func (e *syncEnv) produce(topic string, from, to int32, n int) {
	e.t.Helper()
	cl := e.src.Client(e.t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := from; p < to; p++ {
		for i := 0; i < n; i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("%s/%d #%d", topic, p, i))})
		}
	}
	if err := cl.ProduceSync(e.ctx(), recs...).FirstErr(); err != nil {
		e.t.Fatalf("produce to %s: %v", topic, err)
	}
}

// mirror creates a mirror of topics with the tests' refresh interval.
func (e *syncEnv) mirror(name string, configs map[string]string, topics ...string) {
	e.t.Helper()
	create := protocol.NewPtrCreateMirrorRequest()
	create.MirrorName = name
	all := map[string]string{"bootstrap.servers": e.src.BootstrapString(), "metadata.refresh.interval.ms": fmt.Sprint(refreshMs)}
	for k, v := range configs {
		all[k] = v
	}
	for k, v := range all {
		create.Configs = append(create.Configs, protocol.CreateMirrorRequestConfig{Name: k, Value: kmsg.StringPtr(v)})
	}
	if r := e.request(create).(*protocol.CreateMirrorResponse); r.ErrorCode != 0 {
		e.t.Fatalf("create mirror %s: %d %s", name, r.ErrorCode, deref(r.ErrorMessage))
	}
	if len(topics) == 0 {
		return
	}
	add := protocol.NewPtrAddTopicsToMirrorRequest()
	add.MirrorName = name
	for _, tp := range topics {
		add.Topics = append(add.Topics, protocol.AddTopicsToMirrorRequestTopic{Name: tp, NumPartitions: -1})
	}
	r := e.request(add).(*protocol.AddTopicsToMirrorResponse)
	for _, tr := range r.Topics {
		if r.ErrorCode != 0 || tr.ErrorCode != 0 {
			e.t.Fatalf("add %s to %s: %s %s", tr.Name, name, deref(r.ErrorMessage), deref(tr.ErrorMessage))
		}
	}
}

func (e *syncEnv) describe(mirror string) protocol.DescribeMirrorsResponseMirror {
	e.t.Helper()
	req := protocol.NewPtrDescribeMirrorsRequest()
	req.MirrorNames = []string{mirror}
	resp := e.request(req).(*protocol.DescribeMirrorsResponse)
	if len(resp.Mirrors) != 1 || resp.Mirrors[0].ErrorCode != 0 {
		e.t.Fatalf("describe %s: %+v", mirror, resp)
	}
	return resp.Mirrors[0]
}

// waitMirroring waits until every partition of the mirror's topics is
// MIRRORING with the destination at the source's high watermark, and the
// topics have the given partition counts.
func (e *syncEnv) waitMirroring(mirror string, partitions map[string]int) {
	e.t.Helper()
	polltest.Eventually(e.t, 3*time.Minute, mirror+" mirroring and caught up", func() (bool, string) {
		m := e.describe(mirror)
		var b strings.Builder
		ok := len(m.Topics) == len(partitions)
		for _, tp := range m.Topics {
			if len(tp.Partitions) != partitions[tp.Name] {
				ok = false
				fmt.Fprintf(&b, "%s has %d partitions; ", tp.Name, len(tp.Partitions))
			}
			for _, p := range tp.Partitions {
				if p.State != "MIRRORING" || p.Lag != 0 || p.SourceHighWatermark < 0 {
					ok = false
					fmt.Fprintf(&b, "%s/%d %s lag %d %s; ", tp.Name, p.Partition, p.State, p.Lag, deref(p.ErrorMessage))
				}
			}
		}
		return ok, b.String()
	})
}

// syncRunAfter waits until a groups run of the mirror has completed that
// started after t (the instance and the test share a clock).
func (e *syncEnv) syncRunAfter(mirror, job string, t time.Time) {
	e.t.Helper()
	polltest.Eventually(e.t, syncWait, mirror+" "+job+" sync run after "+t.Format(time.StampMilli), func() (bool, string) {
		asked := time.Now()
		for _, s := range e.describe(mirror).Syncs {
			if s.Job == job && s.LastSuccessAgeMs >= 0 && asked.Add(-time.Duration(s.LastSuccessAgeMs)*time.Millisecond).After(t) {
				return true, ""
			} else if s.Job == job {
				return false, fmt.Sprintf("last success %d ms ago, error %s", s.LastSuccessAgeMs, deref(s.ErrorMessage))
			}
		}
		return false, "no " + job + " job reported"
	})
}

func (e *syncEnv) commit(adm *kadm.Client, group string, offsets ...kadm.Offset) {
	e.t.Helper()
	os := kadm.Offsets{}
	for _, o := range offsets {
		if o.LeaderEpoch == 0 {
			o.LeaderEpoch = 3 // a source epoch, which must not reach the destination
		}
		os.Add(o)
	}
	if err := adm.CommitAllOffsets(e.ctx(), group, os); err != nil {
		e.t.Fatalf("commit %s: %v", group, err)
	}
}

// committed reads a group's committed offsets ("" if none) on a cluster.
func (e *syncEnv) committed(adm *kadm.Client, group string) kadm.OffsetResponses {
	e.t.Helper()
	r, err := adm.FetchOffsets(e.ctx(), group)
	if err != nil {
		e.t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	return r
}

// offsetIs reports whether a group's destination offset of a partition is
// at, with the detail of what it is.
func (e *syncEnv) offsetIs(group, topic string, p int32, at int64) (bool, string) {
	o, ok := e.committed(e.dstAdm, group).Lookup(topic, p)
	if !ok {
		return false, fmt.Sprintf("%s has no offset for %s/%d on the destination", group, topic, p)
	}
	return o.At == at, fmt.Sprintf("%s %s/%d at %d (epoch %d, metadata %q), want %d", group, topic, p, o.At, o.LeaderEpoch, o.Metadata, at)
}

func group(m protocol.DescribeMirrorsResponseMirror, name string) *protocol.DescribeMirrorsResponseGroup {
	for i := range m.Groups {
		if m.Groups[i].Name == name {
			return &m.Groups[i]
		}
	}
	return nil
}

func TestSyncJobsOnRealKafka(t *testing.T) {
	e := startSyncEnv(t)
	t.Run("GroupOffsets", e.groupOffsets)
	t.Run("ActiveDestinationGroupUntouched", e.activeGroupUntouched)
	t.Run("StoppedPartitionUntouched", e.stoppedPartitionUntouched)
	t.Run("TopicConfigs", e.topicConfigs)
	t.Run("PartitionGrowth", e.partitionGrowth)
	t.Run("ACLs", e.acls)
}

// Committed source offsets reach the destination: clamped into the
// destination log, leader epoch -1, the source's metadata; later source
// commits follow; excluded groups never appear; describe and metrics date
// the last sync.
func (e *syncEnv) groupOffsets(t *testing.T) {
	e.t = t
	e.topic("gs-orders", 2, 100)
	e.mirror("gs", map[string]string{"groups.exclude": "gs-skip.*"}, "gs-orders")
	e.waitMirroring("gs", map[string]int{"gs-orders": 2})
	// The destination's own retention moved partition 1's log start to 30.
	trim := kadm.Offsets{}
	trim.Add(kadm.Offset{Topic: "gs-orders", Partition: 1, At: 30})
	if _, err := e.dstAdm.DeleteRecords(e.ctx(), trim); err != nil {
		t.Fatal(err)
	}

	e.commit(e.srcAdm, "gs-billing", kadm.Offset{Topic: "gs-orders", Partition: 0, At: 40, Metadata: "m1"},
		kadm.Offset{Topic: "gs-orders", Partition: 1, At: 100})
	e.commit(e.srcAdm, "gs-ahead", kadm.Offset{Topic: "gs-orders", Partition: 0, At: 5000}) // beyond the copy
	e.commit(e.srcAdm, "gs-low", kadm.Offset{Topic: "gs-orders", Partition: 1, At: 10})     // below the destination log start
	e.commit(e.srcAdm, "gs-skip-me", kadm.Offset{Topic: "gs-orders", Partition: 0, At: 7})
	committedAt := time.Now()

	polltest.Eventually(t, syncWait, "source offsets synced to the destination", func() (bool, string) {
		for _, c := range []struct {
			group string
			p     int32
			at    int64
		}{{"gs-billing", 0, 40}, {"gs-billing", 1, 100}, {"gs-ahead", 0, 100}, {"gs-low", 1, 30}} {
			if ok, detail := e.offsetIs(c.group, "gs-orders", c.p, c.at); !ok {
				return false, detail
			}
		}
		return true, ""
	})
	for _, o := range []kadm.OffsetResponse{e.committed(e.dstAdm, "gs-billing")["gs-orders"][0], e.committed(e.dstAdm, "gs-ahead")["gs-orders"][0]} {
		if o.LeaderEpoch != -1 {
			t.Errorf("%s/%d committed with leader epoch %d on the destination, want -1", o.Topic, o.Partition, o.LeaderEpoch)
		}
	}
	if o := e.committed(e.dstAdm, "gs-billing")["gs-orders"][0]; o.Metadata != "m1" {
		t.Errorf("metadata %q on the destination, want the source's m1", o.Metadata)
	}
	e.syncRunAfter("gs", "groups", committedAt)
	if got := e.committed(e.dstAdm, "gs-skip-me"); len(got) != 0 {
		t.Errorf("excluded group gs-skip-me synced: %v", got)
	}

	// The source consumer moves on; the destination follows.
	e.commit(e.srcAdm, "gs-billing", kadm.Offset{Topic: "gs-orders", Partition: 0, At: 60, Metadata: "m2"})
	polltest.Eventually(t, syncWait, "new source commit synced", func() (bool, string) { return e.offsetIs("gs-billing", "gs-orders", 0, 60) })

	e.groupSyncShown(t)
}

// groupSyncShown checks how describe, `kmirror mirrors --describe [--json]` and the metrics
// show the group sync of groupOffsets' mirror gs: gs-billing SYNCED, gs-ahead BEHIND, the
// excluded gs-skip-me not at all, and the groups job healthy.
func (e *syncEnv) groupSyncShown(t *testing.T) {
	t.Helper()
	m := e.describe("gs")
	g := group(m, "gs-billing")
	if g == nil || g.State != "SYNCED" || g.Partitions != 2 || g.LastSyncAgeMs < 0 || g.LastSyncAgeMs > syncWait.Milliseconds() {
		t.Fatalf("describe shows gs-billing as %+v, want SYNCED, 2 partitions, a recent last sync", g)
	}
	if group(m, "gs-skip-me") != nil {
		t.Fatalf("describe lists the excluded group: %+v", m.Groups)
	}
	// Committed past the copy: held at the destination's end, and not SYNCED
	// (a consumer moved now would re-read).
	if g := group(m, "gs-ahead"); g == nil || g.State != "BEHIND" || g.Partitions != 0 || !strings.Contains(deref(g.Message), "past what the copy has reached") {
		t.Fatalf("describe shows gs-ahead, committed at 5000 with the copy at 100, as %+v, want BEHIND with 0 partitions in sync", g)
	}
	// What `kmirror mirrors --describe [--json]` prints of it.
	var table strings.Builder
	if err := mirrorcli.RenderDescribeTable(&table, &protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{m}}, false); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^gs\s+gs-billing\s+SYNCED\s+\d+s ago\s+2$`).MatchString(table.String()) ||
		!regexp.MustCompile(`(?m)^gs\s+groups\s+OK\s+\d+s ago`).MatchString(table.String()) {
		t.Fatalf("--describe does not show gs-billing's sync:\n%s", table.String())
	}
	js := mirrorcli.DescribeToJSON(&protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{m}}, false)
	var jsonAge *int64
	for _, g := range js.Mirrors[0].Groups {
		if g.Group == "gs-billing" {
			jsonAge = g.LastSyncAgeMs
		}
	}
	if jsonAge == nil {
		t.Fatalf("--json has no last_sync_age_ms for gs-billing: %+v", js.Mirrors[0].Groups)
	}
	body, err := metricstest.Scrape(e.in.Proxy.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`(?m)^kmirror_mirror_group_sync_age_seconds\{[^}]*group="gs-billing"[^}]*mirror="gs"[^}]*\} ([0-9.e+-]+)$`)
	if s := series.FindStringSubmatch(body); s == nil {
		t.Fatalf("no group sync age metric for gs-billing in:\n%s", grep(body, "kmirror_mirror_"))
	}
	if !regexp.MustCompile(`(?m)^kmirror_mirror_sync_failing\{[^}]*mirror="gs"[^}]*sync_job="groups"[^}]*\} 0$`).MatchString(body) {
		t.Fatalf("no healthy groups job metric in:\n%s", grep(body, "kmirror_mirror_sync"))
	}
}

func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A group with members on the destination is never written, however its
// source offsets change; once its members leave, the sync takes over.
func (e *syncEnv) activeGroupUntouched(t *testing.T) {
	e.t = t
	e.topic("ga-orders", 1, 50)
	e.mirror("ga", nil, "ga-orders")
	e.waitMirroring("ga", map[string]int{"ga-orders": 1})

	consumer := kafkatest.NewClient(t, e.dst.Bootstrap(), kgo.ConsumerGroup("ga-live"), kgo.ConsumeTopics("ga-orders"),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond))
	polltest.Eventually(t, time.Minute, "destination consumer joined ga-live", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		consumer.PollFetches(ctx)
		described, err := e.dstAdm.DescribeGroups(e.ctx(), "ga-live")
		if err != nil {
			return false, err.Error()
		}
		g := described["ga-live"]
		return g.State == "Stable" && len(g.Members) == 1, fmt.Sprintf("state %s, %d members", g.State, len(g.Members))
	})
	var commitErr error
	consumer.CommitOffsetsSync(e.ctx(), map[string]map[int32]kgo.EpochOffset{"ga-orders": {0: {Epoch: -1, Offset: 20}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			if err == nil {
				commitErr = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
			}
		})
	if commitErr != nil {
		t.Fatalf("the destination consumer's commit: %v", commitErr)
	}

	e.commit(e.srcAdm, "ga-live", kadm.Offset{Topic: "ga-orders", Partition: 0, At: 45})
	// Found by listing the destination's groups, before any commit: the
	// broker would refuse an admin commit to a group with members too
	// (UNKNOWN_MEMBER_ID), which is the fallback for one that joins later.
	polltest.Eventually(t, syncWait, "ga-live reported ACTIVE", func() (bool, string) {
		g := group(e.describe("ga"), "ga-live")
		return g != nil && g.State == "ACTIVE" && strings.Contains(deref(g.Message), "has members on the destination (state Stable)"), fmt.Sprintf("%+v", g)
	})
	e.syncRunAfter("ga", "groups", time.Now()) // one more run with the group active
	if ok, detail := e.offsetIs("ga-live", "ga-orders", 0, 20); !ok {
		t.Fatalf("a group with members on the destination was overwritten: %s", detail)
	}

	// Without members the group is the sync's again.
	consumer.Close()
	polltest.Eventually(t, syncWait, "ga-live synced after its members left", func() (bool, string) {
		return e.offsetIs("ga-live", "ga-orders", 0, 45)
	})
}

// After failover a partition's destination offsets are the destination's
// own: the sync never writes them, while it still syncs the group's other,
// MIRRORING partitions in the same run.
func (e *syncEnv) stoppedPartitionUntouched(t *testing.T) {
	e.t = t
	e.topic("gf-orders", 1, 50)
	e.topic("gf-other", 1, 50)
	e.mirror("gf", nil, "gf-orders", "gf-other")
	e.waitMirroring("gf", map[string]int{"gf-orders": 1, "gf-other": 1})
	e.commit(e.srcAdm, "gf-app", kadm.Offset{Topic: "gf-orders", Partition: 0, At: 10}, kadm.Offset{Topic: "gf-other", Partition: 0, At: 10})
	polltest.Eventually(t, syncWait, "gf-app synced", func() (bool, string) {
		if ok, d := e.offsetIs("gf-app", "gf-orders", 0, 10); !ok {
			return false, d
		}
		return e.offsetIs("gf-app", "gf-other", 0, 10)
	})

	remove := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	remove.MirrorName = "gf"
	remove.Topics = []protocol.TopicName{{Name: "gf-orders"}}
	if r := e.request(remove).(*protocol.RemoveTopicsFromMirrorResponse); r.ErrorCode != 0 || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("remove gf-orders: %+v", r)
	}
	polltest.Eventually(t, 2*time.Minute, "gf-orders STOPPED", func() (bool, string) {
		for _, tp := range e.describe("gf").Topics {
			if tp.Name == "gf-orders" {
				return tp.Partitions[0].State == "STOPPED", tp.Partitions[0].State
			}
		}
		return false, "gf-orders not described"
	})
	// Consumers moved to the destination and progressed there.
	e.commit(e.dstAdm, "gf-app", kadm.Offset{Topic: "gf-orders", Partition: 0, At: 50, LeaderEpoch: -1})
	// The old source consumers commit once more.
	e.commit(e.srcAdm, "gf-app", kadm.Offset{Topic: "gf-orders", Partition: 0, At: 30}, kadm.Offset{Topic: "gf-other", Partition: 0, At: 40})

	polltest.Eventually(t, syncWait, "gf-other still synced", func() (bool, string) { return e.offsetIs("gf-app", "gf-other", 0, 40) })
	if ok, detail := e.offsetIs("gf-app", "gf-orders", 0, 50); !ok {
		t.Fatalf("a STOPPED partition's destination offset was overwritten: %s", detail)
	}
	// The run's record of the group lands after its commits: poll for it.
	polltest.Eventually(t, syncWait, "describe shows gf-app SYNCED on 1 partition, the other not MIRRORING", func() (bool, string) {
		g := group(e.describe("gf"), "gf-app")
		return g != nil && g.State == "SYNCED" && g.Partitions == 1 && strings.Contains(deref(g.Message), "not MIRRORING"), fmt.Sprintf("%+v", g)
	})
}

// Destination topic configs follow the source's: set, changed and deleted,
// except excluded and forced configs.
func (e *syncEnv) topicConfigs(t *testing.T) {
	e.t = t
	e.topic("gc-orders", 1, 10)
	e.mirror("gc", map[string]string{"topic.properties.exclude": "segment.ms"}, "gc-orders")
	e.waitMirroring("gc", map[string]int{"gc-orders": 1})

	alter := func(ops ...kadm.AlterConfig) {
		t.Helper()
		resps, err := e.srcAdm.AlterTopicConfigs(e.ctx(), ops, "gc-orders")
		if err == nil {
			for _, r := range resps {
				err = r.Err
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	dstConfigs := func() map[string]string {
		rcs, err := e.dstAdm.DescribeTopicConfigs(e.ctx(), "gc-orders")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range rcs[0].Configs {
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				out[c.Key] = c.MaybeValue()
			}
		}
		return out
	}
	alter(kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("2000000")},
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "delete.retention.ms", Value: kadm.StringPtr("4321")},
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "segment.ms", Value: kadm.StringPtr("3600000")},    // the mirror's exclusion
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: kadm.StringPtr("1")}, // a default exclusion
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "compression.type", Value: kadm.StringPtr("gzip")}) // forced to producer
	polltest.Eventually(t, syncWait, "source configs on the destination", func() (bool, string) {
		c := dstConfigs()
		return c["max.message.bytes"] == "2000000" && c["delete.retention.ms"] == "4321", fmt.Sprint(c)
	})
	c := dstConfigs()
	if _, ok := c["segment.ms"]; ok {
		t.Errorf("excluded segment.ms copied: %v", c)
	}
	if _, ok := c["min.insync.replicas"]; ok {
		t.Errorf("min.insync.replicas copied: %v", c)
	}
	if c["compression.type"] != "producer" || c["retention.ms"] != "-1" {
		t.Errorf("forced or copied configs lost: %v", c)
	}

	alter(kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "delete.retention.ms"},
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("3000000")})
	polltest.Eventually(t, syncWait, "source config change and deletion on the destination", func() (bool, string) {
		c := dstConfigs()
		_, still := c["delete.retention.ms"]
		return c["max.message.bytes"] == "3000000" && !still, fmt.Sprint(c)
	})
}

// A source topic that grows partitions grows on the destination, and the
// new partitions mirror at identical offsets.
func (e *syncEnv) partitionGrowth(t *testing.T) {
	e.t = t
	e.topic("gp-orders", 2, 20)
	e.mirror("gp", nil, "gp-orders")
	e.waitMirroring("gp", map[string]int{"gp-orders": 2})
	resps, err := e.srcAdm.UpdatePartitions(e.ctx(), 4, "gp-orders")
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	// The broker learns the new partitions a moment after the controller committed them:
	// a producer asking it sooner cannot write to partitions 2 and 3.
	ctx := e.ctx()
	polltest.Eventually(t, 50*time.Second, "gp-orders has 4 partitions with leaders on the source", func() (bool, string) {
		td, err := e.srcAdm.ListTopics(ctx, "gp-orders")
		if err != nil {
			return false, err.Error()
		}
		d := td["gp-orders"]
		for _, pd := range d.Partitions {
			if pd.Leader < 0 || pd.Err != nil {
				return false, fmt.Sprintf("partition %d: leader %d (%v)", pd.Partition, pd.Leader, pd.Err)
			}
		}
		return len(d.Partitions) == 4, fmt.Sprintf("%d partitions (%v)", len(d.Partitions), d.Err)
	})
	e.produce("gp-orders", 0, 4, 30)
	e.waitMirroring("gp", map[string]int{"gp-orders": 4})
	got := mirrortest.VerifyIdentical(t, e.src.Client(t), e.dst.Client(t), "gp-orders")
	if got["gp-orders"][3].Records != 30 || got["gp-orders"][0].Records != 50 {
		t.Fatalf("compared %+v", got)
	}
}

// Source ACLs selected by acls.include are created on the destination; the
// destination's own ACLs and ACLs deleted on the source stay; cluster ACLs
// and unselected principals are never copied.
func (e *syncEnv) acls(t *testing.T) {
	e.t = t
	create := func(adm *kadm.Client, b *kadm.ACLBuilder) {
		t.Helper()
		rs, err := adm.CreateACLs(e.ctx(), b)
		if err == nil {
			for _, r := range rs {
				err = r.Err
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	lit := kadm.ACLPatternLiteral
	create(e.srcAdm, kadm.NewACLs().Topics("acl-orders").ResourcePatternType(lit).Operations(kadm.OpRead).Allow("User:alice"))
	create(e.srcAdm, kadm.NewACLs().Topics("acl-").ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpDescribe).Deny("User:alice"))
	create(e.srcAdm, kadm.NewACLs().Groups("acl-g1").ResourcePatternType(lit).Operations(kadm.OpRead).Allow("User:alice"))
	create(e.srcAdm, kadm.NewACLs().Topics("acl-orders").ResourcePatternType(lit).Operations(kadm.OpWrite).Allow("User:bob"))
	create(e.srcAdm, kadm.NewACLs().Clusters().ResourcePatternType(lit).Operations(kadm.OpAlter).Allow("User:alice"))
	create(e.dstAdm, kadm.NewACLs().Topics("local").ResourcePatternType(lit).Operations(kadm.OpDescribe).Allow("User:carol"))

	e.mirror("acl", map[string]string{"acls.include": "TOPIC;acl-.*;*;*;User:alice,GROUP;acl-g.*"})
	dstACLs := func() map[string]bool {
		rs, err := e.dstAdm.DescribeACLs(e.ctx(), kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).
			Operations().Allow().AllowHosts().Deny().DenyHosts())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, r := range rs {
			for _, d := range r.Described {
				out[fmt.Sprintf("%s:%s:%s:%s:%s:%s", d.Type, d.Pattern, d.Name, d.Operation, d.Permission, d.Principal)] = true
			}
		}
		return out
	}
	const (
		aliceReads   = "TOPIC:LITERAL:acl-orders:READ:ALLOW:User:alice"
		aliceDenied  = "TOPIC:PREFIXED:acl-:DESCRIBE:DENY:User:alice"
		aliceGroup   = "GROUP:LITERAL:acl-g1:READ:ALLOW:User:alice"
		bobWrites    = "TOPIC:LITERAL:acl-orders:WRITE:ALLOW:User:bob"
		clusterAlter = "CLUSTER:LITERAL:kafka-cluster:ALTER:ALLOW:User:alice"
		carolOwn     = "TOPIC:LITERAL:local:DESCRIBE:ALLOW:User:carol"
		aliceNew     = "TOPIC:LITERAL:acl-new:READ:ALLOW:User:alice"
	)
	polltest.Eventually(t, syncWait, "selected source ACLs on the destination", func() (bool, string) {
		got := dstACLs()
		return got[aliceReads] && got[aliceDenied] && got[aliceGroup], fmt.Sprint(got)
	})
	got := dstACLs()
	if got[bobWrites] || got[clusterAlter] {
		t.Fatalf("unselected ACLs copied: %v", got)
	}
	if !got[carolOwn] {
		t.Fatalf("the destination's own ACL is gone: %v", got)
	}

	// An ACL deleted on the source stays; a new one arrives.
	if _, err := e.srcAdm.DeleteACLs(e.ctx(), kadm.NewACLs().Topics("acl-orders").ResourcePatternType(lit).Operations(kadm.OpRead).Allow("User:alice").AllowHosts("*")); err != nil {
		t.Fatal(err)
	}
	create(e.srcAdm, kadm.NewACLs().Topics("acl-new").ResourcePatternType(lit).Operations(kadm.OpRead).Allow("User:alice"))
	polltest.Eventually(t, syncWait, "new source ACL on the destination", func() (bool, string) {
		got := dstACLs()
		return got[aliceNew], fmt.Sprint(got)
	})
	if got := dstACLs(); !got[aliceReads] || !got[carolOwn] {
		t.Fatalf("the sync deleted destination ACLs: %v", got)
	}
	for _, s := range e.describe("acl").Syncs {
		if s.Job == "acls" && (s.ErrorMessage != nil || !strings.Contains(deref(s.Message), "created")) {
			t.Fatalf("acls job reported as %+v", s)
		}
	}
}

// deref reads an optional response string, "" when absent.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
