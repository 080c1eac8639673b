package proxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestKfakeRouteSwitchKeepsClients: a planned switch done by hand around SwitchRoute — freeze
// writes, let the consumer commit the log end, freeze commits, copy the topic at the same
// offsets and the group's offsets to the standby, switch — while a franz-go idempotent
// producer and a consumer group run through the route, neither reconfigured nor restarted.
// Afterwards every acknowledged record is on the standby exactly once, nothing reached the
// primary after the freeze, the consumer saw every record exactly once (the fetch hold), and the route's
// clients still see the primary's cluster id and topic id.
func TestKfakeRouteSwitchKeepsClients(t *testing.T) {
	const topic = "orders"
	primary := startKfakeTopics(t, 2, 2, topic)
	standby := startKfakeTopics(t, 2, 2, topic)
	p, r := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primAdm, standAdm := adminFor(t, primary.ListenAddrs()), adminFor(t, standby.ListenAddrs())
	primaryIDs := topicIDs(t, ctx, r.Addr(), topic)

	// The applications: a producer and a consumer group, through the route only.
	prod, err := kgo.NewClient(kgo.SeedBrokers(r.Addr()), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(r.Addr()), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		seen  = map[string]int{}
		again []*kgo.Record // read a second time by the application's consumer
		errs  []error
	)
	count := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(acked), len(seen) }
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			v := "v" + strconv.Itoa(i)
			err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i % 5)), Value: []byte(v)}).FirstErr()
			mu.Lock()
			if err != nil {
				errs = append(errs, fmt.Errorf("produce %s: %w", v, err))
			} else {
				acked[v] = true
			}
			mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		for loadCtx.Err() == nil {
			fs := cons.PollFetches(loadCtx)
			fs.EachRecord(func(rec *kgo.Record) {
				mu.Lock()
				seen[string(rec.Value)]++
				if seen[string(rec.Value)] > 1 {
					again = append(again, rec)
				}
				mu.Unlock()
			})
			// Commit after processing, as an application does; a refused commit (the freeze)
			// is retried by the next one.
			_ = cons.CommitUncommittedOffsets(loadCtx)
		}
	}()
	polltest.Until(t, 30*time.Second, "records produced and consumed through the route", func() bool {
		a, s := count()
		return a > 100 && s > 50
	})

	// 1. Freeze writes; 2. the consumer commits the log end; 3. freeze commits too.
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{topic: true}}); err != nil {
		t.Fatal(err)
	}
	ends, err := primAdm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	waitCommittedEnds(t, ctx, primAdm, "g", topic, ends, 30*time.Second, func() string { return "" })
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{topic: true}, Commits: true}); err != nil {
		t.Fatal(err)
	}

	// 4. The mirror's part, done by hand: the records at the same offsets, the group's offsets.
	copyTopic(t, ctx, primary.ListenAddrs(), standby.ListenAddrs(), topic, ends)
	offs := copyGroup(t, ctx, primAdm, standAdm, "g")

	// 5. Switch; the clients go on by themselves.
	before, _ := count()
	hold := FetchHold{Topics: map[string]bool{topic: true}, Groups: membersAt(t, ctx, primAdm, "g")}
	if err := p.SwitchRoute(ctx, "app", hold); err != nil {
		t.Fatal(err)
	}
	if st := p.Routes(); len(st) != 1 || st[0].Upstream != "standby" {
		t.Errorf("route status after the switch: %+v", st)
	}
	polltest.Until(t, 60*time.Second, "the producer goes on through the switched route", func() bool {
		a, _ := count()
		return a > before+100
	})
	stopLoad()
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("the producer saw %d errors (first: %v): a switch must only delay writes", len(errs), errs[0])
	}
	assertEndsUnchanged(t, ctx, primAdm, topic, ends)

	// Every acknowledged record is on the standby once; the consumer finishes reading it
	// and has then seen each record exactly once.
	onStandby := readAll(t, ctx, standby.ListenAddrs(), topic)
	for v := range acked {
		if onStandby[v] != 1 {
			t.Errorf("acknowledged %s is %d times on the standby", v, onStandby[v])
		}
	}
	tail, err := kgo.NewClient(kgo.SeedBrokers(r.Addr()), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	// The first consumer's last commits may not have landed: what it saw after its last
	// commit is read again here; count only what it had not seen.
	_ = cons.CommitUncommittedOffsets(ctx)
	cons.Close()
	polltest.Until(t, 30*time.Second, "the group read everything on the standby", func() bool {
		fs := tail.PollRecords(ctx, 1000)
		fs.EachRecord(func(rec *kgo.Record) {
			mu.Lock()
			if seen[string(rec.Value)] == 0 {
				seen[string(rec.Value)]++
			}
			mu.Unlock()
		})
		_, s := count()
		return s >= len(onStandby)
	})
	for v := range seen {
		if onStandby[v] != 1 {
			t.Errorf("the consumer saw %s; the standby has it %d times", v, onStandby[v])
		}
	}
	// Nothing read twice: the fetch hold kept the member from reading on the standby before it
	// rejoined there and resumed at the offsets copied at the switch.
	for _, rec := range again {
		c, _ := offs.Lookup(topic, rec.Partition)
		t.Errorf("the consumer read %s (%s/%d offset %d) twice (offset %d committed at the switch)", rec.Value, topic, rec.Partition, rec.Offset, c.At)
	}
	if got := topicIDs(t, ctx, r.Addr(), topic); got != primaryIDs {
		t.Errorf("the route's topic id changed at the switch: %x, was %x", got, primaryIDs)
	}
}

// topicIDs is topic's id as Metadata v12 through bootstrap answers it.
func topicIDs(t *testing.T, ctx context.Context, bootstrap, topic string) [16]byte {
	t.Helper()
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(topic)}}
	resp := rawConn(t, bootstrap, md).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("Metadata of %s: %+v", topic, resp.Topics)
	}
	return resp.Topics[0].TopicID
}

// copyTopic copies topic's records below ends from one cluster to the other's empty topic,
// partition by partition in order, so each lands at its source offset (what kmirror's copy
// does for real in the e2e tests).
func copyTopic(t *testing.T, ctx context.Context, from, to []string, topic string, ends kadm.ListedOffsets) {
	t.Helper()
	src, err := kgo.NewClient(kgo.SeedBrokers(from...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := kgo.NewClient(kgo.SeedBrokers(to...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(1))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	for n := int64(0); n < want; {
		fs := src.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("copying %s: %v", topic, err)
		}
		for _, rec := range fs.Records() {
			if e, _ := ends.Lookup(topic, rec.Partition); rec.Offset >= e.Offset {
				continue
			}
			r, err := dst.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value}).First()
			if err != nil || r.Offset != rec.Offset {
				t.Fatalf("copying %s/%d offset %d: landed at %v, %v", topic, rec.Partition, rec.Offset, r, err)
			}
			n++
		}
	}
}

// readAll counts each value of topic's records on a cluster.
func readAll(t *testing.T, ctx context.Context, addrs []string, topic string) map[string]int {
	t.Helper()
	want := endOffsets(t, ctx, adminFor(t, addrs), topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]int{}
	for n := int64(0); n < want; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		fs.EachRecord(func(rec *kgo.Record) { out[string(rec.Value)]++; n++ })
	}
	return out
}

// TestKfakeRouteApiVersionsAfterSwitch: an ApiVersions v5 naming the route's cluster id (the
// primary's, pinned) reaches the primary as sent, and after a switch reaches the standby with
// the cluster id and node id cleared, as a bootstrapping client sends them: a Kafka 4 broker
// answers a cluster id not its own with REBOOTSTRAP_REQUIRED (KIP-1102), and the Java clients
// rebootstrapped forever (TestRealRouteSwitchJavaClients).
func TestKfakeRouteApiVersionsAfterSwitch(t *testing.T) {
	cluster := func(id string) *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID(id))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	primary, standby := cluster("primary-cluster"), cluster("standby-cluster")
	p, r := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	seen := func(c *kfake.Cluster) chan *kmsg.ApiVersionsRequest {
		ch := make(chan *kmsg.ApiVersionsRequest, 16)
		c.ControlKey(18, func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if av := req.(*kmsg.ApiVersionsRequest); av.Version >= 5 && av.ClientSoftwareName == "route-test" { // not kmirror's own clients
				ch <- av
			}
			return nil, nil, false
		})
		return ch
	}
	fromPrimary, fromStandby := seen(primary), seen(standby)
	pinned := r.appRoute.clusterID.Load()
	if pinned == nil {
		t.Fatal("the route did not learn the primary's cluster id")
	}
	send := func() {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version, req.ClientSoftwareName, req.ClientSoftwareVersion = 5, "route-test", "1"
		req.ClusterID, req.NodeID = pinned, 0
		rawConn(t, r.Addr(), req)
	}
	send()
	if got := <-fromPrimary; got.ClusterID == nil || *got.ClusterID != *pinned || got.NodeID != 0 {
		t.Fatalf("before the switch the primary got cluster id %v node %d, want %q and 0", got.ClusterID, got.NodeID, *pinned)
	}
	if err := p.SwitchRoute(context.Background(), "app", FetchHold{}); err != nil {
		t.Fatal(err)
	}
	send()
	if got := <-fromStandby; got.ClusterID != nil || got.NodeID != -1 {
		t.Fatalf("after the switch the standby got cluster id %v node %d, want null and -1", got.ClusterID, got.NodeID)
	}
}

// membersAt is group's member count on the cluster of adm: what the fetch hold waits for on
// the standby.
func membersAt(t *testing.T, ctx context.Context, adm *kadm.Client, group string) map[string]int {
	t.Helper()
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := described[group]
	if !ok || d.Err != nil || len(d.Members) == 0 {
		t.Fatalf("group %s on the primary: %+v", group, d)
	}
	return map[string]int{group: len(d.Members)}
}

// adminFor is an admin client of the cluster at addrs, closed with the test.
func adminFor(t *testing.T, addrs []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// holdFirstProduce holds the first Produce the cluster gets until release is closed; held is
// closed once it is held.
func holdFirstProduce(c *kfake.Cluster) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() {
			close(held)
			c.SleepControl(func() { <-release })
		})
		return nil, nil, false
	})
	return held, release
}

// startKfakeTopics is a kfake cluster of brokers brokers with topics of partitions partitions.
func startKfakeTopics(t *testing.T, brokers int, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitCommittedEnds waits until group has committed ends on every partition of topic (a
// partition never committed counts as 0); detail adds to the message of a wait that fails.
func waitCommittedEnds(t *testing.T, ctx context.Context, adm *kadm.Client, group, topic string, ends kadm.ListedOffsets, d time.Duration, detail func() string) {
	t.Helper()
	polltest.Eventually(t, d, "the group committed the frozen log ends", func() (bool, string) {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false, err.Error()
		}
		done, state := true, ""
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := offs.Lookup(topic, o.Partition)
			if !ok {
				c.At = 0 // never committed: the group starts at the beginning
			}
			done = done && c.At == o.Offset
			state += fmt.Sprintf(" p%d committed %d end %d;", o.Partition, c.At, o.Offset)
		})
		return done, state + " " + detail()
	})
}

// copyGroup commits group's offsets on from to to, as the switch's group copy does (leader
// epoch -1: the standby's epochs are its own, KAFKA-FACTS.md), and returns them.
func copyGroup(t *testing.T, ctx context.Context, from, to *kadm.Client, group string) kadm.OffsetResponses {
	t.Helper()
	offs, err := from.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	commits := offs.Offsets()
	for _, ps := range commits {
		for p, o := range ps {
			o.LeaderEpoch = -1
			ps[p] = o
		}
	}
	if _, err := to.CommitOffsets(ctx, group, commits); err != nil {
		t.Fatal(err)
	}
	return offs
}

// assertEndsUnchanged fails the test if topic's log ends moved from ends (nothing reached the
// primary after the freeze).
func assertEndsUnchanged(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, ends kadm.ListedOffsets) {
	t.Helper()
	after, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	after.Each(func(o kadm.ListedOffset) {
		if e, _ := ends.Lookup(topic, o.Partition); e.Offset != o.Offset {
			t.Errorf("primary %s/%d grew from %d to %d after the freeze", topic, o.Partition, e.Offset, o.Offset)
		}
	})
}

// TestKfakeRouteFetchHold: after a switch with a fetch hold, a Fetch naming a switched topic is
// answered NOT_LEADER_OR_FOLLOWER after its MaxWait, an incremental one
// FETCH_SESSION_ID_NOT_FOUND, and one naming only other topics is forwarded, until the held
// group is Stable on the standby with its members; then the same Fetch gets the standby's
// records. A second switch's hold whose group never rejoins ends at its bound.
func TestKfakeRouteFetchHold(t *testing.T) {
	const topic, other = "held", "free"
	primary := startKfakeTopics(t, 1, 1, topic, other)
	standby := startKfakeTopics(t, 1, 1, topic, other)
	p, r := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seed, err := kgo.NewClient(kgo.SeedBrokers(standby.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	for _, tp := range []string{topic, other} {
		if err := seed.ProduceSync(ctx, &kgo.Record{Topic: tp, Value: []byte("on the standby")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SwitchRoute(ctx, "app", FetchHold{Topics: map[string]bool{topic: true}, Groups: map[string]int{"g": 1}}); err != nil {
		t.Fatal(err)
	}

	fetch := func(tp string, sessionEpoch int32) *kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = 12, 300, 1<<20, sessionEpoch
		if sessionEpoch > 0 {
			req.SessionID = 7
		}
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = tp
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LastFetchedEpoch = 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rawConn(t, r.Addr(), req).(*kmsg.FetchResponse)
	}
	partitionErr := func(resp *kmsg.FetchResponse) error {
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return fmt.Errorf("answer %+v", resp)
		}
		return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	}

	began := time.Now()
	if err := partitionErr(fetch(topic, -1)); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("a held topic's Fetch got %v, want NOT_LEADER_OR_FOLLOWER", err)
	}
	if waited := time.Since(began); waited < 250*time.Millisecond {
		t.Errorf("the held Fetch was answered after %v: it should wait out its MaxWait (300 ms) as a long poll", waited)
	}
	if resp := fetch(topic, 3); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Errorf("an incremental Fetch got error code %d, want FETCH_SESSION_ID_NOT_FOUND", resp.ErrorCode)
	}
	if err := partitionErr(fetch(other, -1)); err != nil {
		t.Errorf("a Fetch of a topic not switched was held or refused: %v", err)
	}

	// The member rejoins on the standby (through the route, as after a switch).
	cons, err := kgo.NewClient(kgo.SeedBrokers(r.Addr()), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := 0
	polltest.Until(t, 30*time.Second, "the rejoined member reads the standby's record", func() bool {
		fs := cons.PollFetches(ctx)
		got += fs.NumRecords()
		return got > 0
	})
	if err := partitionErr(fetch(topic, -1)); err != nil {
		t.Fatalf("after the group rejoined, a Fetch of the switched topic got %v", err)
	}

	// A hold whose group never rejoins ends at its bound (a second route on a fresh proxy).
	p2, r2 := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	if err := p2.SwitchRoute(ctx, "app", FetchHold{Topics: map[string]bool{topic: true}, Groups: map[string]int{"gone": 1}, Max: time.Second}); err != nil {
		t.Fatal(err)
	}
	r = r2
	if err := partitionErr(fetch(topic, -1)); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("within its bound, the hold answered %v", err)
	}
	polltest.Until(t, 10*time.Second, "the hold ends at its bound", func() bool {
		return partitionErr(fetch(topic, -1)) == nil
	})
}

// TestKfakeRouteCommitHold is a forced switch's commit hold (route_hold.go): a held group's
// commit of a held topic is answered COORDINATOR_LOAD_IN_PROGRESS until the standby has
// answered that member's heartbeat that it is not a member; other members' commits, other
// groups', commits without a member id and commits of other topics pass, and a planned
// switch's hold holds no commit.
func TestKfakeRouteCommitHold(t *testing.T) {
	const topic, other = "held", "free"
	primary := startKfakeTopics(t, 1, 1, topic, other)
	standby := startKfakeTopics(t, 1, 1, topic, other)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	commit := func(addr, group, member, tp string) error {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version, req.Group, req.MemberID, req.Generation = 8, group, member, 3
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = tp
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Offset, rp.LeaderEpoch = 5, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := rawConn(t, addr, req).(*kmsg.OffsetCommitResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("OffsetCommit answer %+v", resp)
		}
		return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	}
	heartbeat := func(addr, group, member string) error {
		t.Helper()
		req := kmsg.NewPtrHeartbeatRequest()
		req.Version, req.Group, req.MemberID, req.Generation = 4, group, member, 3
		return kerr.ErrorForCode(rawConn(t, addr, req).(*kmsg.HeartbeatResponse).ErrorCode)
	}
	held := func(err error) bool { return errors.Is(err, kerr.CoordinatorLoadInProgress) }

	// The standby has the group's offsets, as the group sync leaves them: the group exists there,
	// Empty, and answers members it never saw UNKNOWN_MEMBER_ID.
	cl, err := kgo.NewClient(kgo.SeedBrokers(standby.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := adm.CommitAllOffsets(ctx, "g", kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 1, LeaderEpoch: -1}}}); err != nil {
		t.Fatal(err)
	}
	p, r := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	if err := p.SwitchRoute(ctx, "app", FetchHold{Topics: map[string]bool{topic: true}, Groups: map[string]int{"g": 1}, Commits: true}); err != nil {
		t.Fatal(err)
	}
	addr := r.Addr()
	if err := commit(addr, "g", "m1", topic); !held(err) {
		t.Fatalf("a held group's commit before its member's heartbeat got %v, want COORDINATOR_LOAD_IN_PROGRESS", err)
	}
	for _, c := range []struct{ what, group, member, topic string }{
		{"another group's", "h", "m1", topic},
		{"a commit without a member id", "g", "", topic},
		{"a commit of a topic not switched", "g", "m1", other},
	} {
		if err := commit(addr, c.group, c.member, c.topic); held(err) {
			t.Errorf("%s was held", c.what)
		}
	}
	if err := heartbeat(addr, "g", "m1"); !errors.Is(err, kerr.UnknownMemberID) {
		t.Fatalf("the standby answered the pre-switch member's heartbeat %v, want UNKNOWN_MEMBER_ID", err)
	}
	if err := commit(addr, "g", "m1", topic); held(err) {
		t.Fatalf("the member's commit after the standby told it that it is not a member was still held")
	}
	if err := commit(addr, "g", "m2", topic); !held(err) {
		t.Fatalf("another member's commit got %v before its heartbeat, want it held", err)
	}

	// A planned switch holds fetches only: its members' positions are the copied offsets.
	p2, r2 := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	if err := p2.SwitchRoute(ctx, "app", FetchHold{Topics: map[string]bool{topic: true}, Groups: map[string]int{"g": 1}}); err != nil {
		t.Fatal(err)
	}
	if err := commit(r2.Addr(), "g", "m3", topic); held(err) {
		t.Fatalf("a planned switch's hold held a commit")
	}
}
