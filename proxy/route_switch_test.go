package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, stopLoad := startSwitchRun(t, ctx, primary, standby, topic)
	p, primaryIDs := s.p, s.primaryIDs

	// 1. Freeze writes; 2. the consumer commits the log end; 3. freeze commits too.
	ends := freezeForSwitch(t, ctx, p, s.primAdm, "g", topic, 30*time.Second, func() string { return "" })

	// 4. The mirror's part, done by hand: the records at the same offsets, the group's offsets.
	copyTopic(t, ctx, primary.ListenAddrs(), standby.ListenAddrs(), topic, ends)
	offs := copyGroup(t, ctx, s.primAdm, s.standAdm, "g")

	// 5. Switch; the clients go on by themselves.
	s.switchUnderLoad(t, ctx)
	stopLoad()
	s.wg.Wait()
	if len(s.errs) > 0 {
		t.Fatalf("the producer saw %d errors (first: %v): a switch must only delay writes", len(s.errs), s.errs[0])
	}
	assertEndsUnchanged(t, ctx, s.primAdm, topic, ends)
	s.checkStandby(t, ctx, standby.ListenAddrs(), offs, primaryIDs)
}

// TestKfakeRouteSwitchesBack: a route switched to the standby is switched back to its primary
// the same way (docs/cutover.md, "Switching back"), with the clients running throughout: the
// freeze on the switched route, the standby's records copied back to the primary at the same
// offsets and the group's offsets with them, then SwitchRouteBack. Every record the producer
// was acknowledged across both switches is on the primary once; the group read each once; the
// route's topic id stayed the primary's; and the route learns the primary's broker addresses
// again though the first switch had retired them.
func TestKfakeRouteSwitchesBack(t *testing.T) {
	const topic = "orders"
	primary := startKfakeTopics(t, 2, 2, topic)
	standby := startKfakeTopics(t, 2, 2, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The member left on the primary at the first switch is gone by the switch back.
	s, stopLoad := startSwitchRun(t, ctx, primary, standby, topic, kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond))
	p, r, primaryIDs := s.p, s.r, s.primaryIDs

	// To the standby.
	ends := freezeForSwitch(t, ctx, p, s.primAdm, "g", topic, 30*time.Second, func() string { return "" })
	copyTopic(t, ctx, primary.ListenAddrs(), standby.ListenAddrs(), topic, ends)
	copyGroup(t, ctx, s.primAdm, s.standAdm, "g")
	s.switchUnderLoad(t, ctx)

	// And back, once the group's member left behind on the primary at the first switch is gone
	// (a commit with no generation is refused while a group has members; kmirror's switch
	// rolls back naming it): the primary's log still ends where the first freeze left it.
	polltest.Until(t, 30*time.Second, "the primary's group has no members left", func() bool {
		described, err := s.primAdm.DescribeGroups(ctx, "g")
		return err == nil && described["g"].Err == nil && len(described["g"].Members) == 0
	})
	back := freezeForSwitch(t, ctx, p, s.standAdm, "g", topic, 30*time.Second, func() string { return "" })
	copyTopicFrom(t, ctx, standby.ListenAddrs(), primary.ListenAddrs(), topic, ends, back)
	offs := copyGroup(t, ctx, s.standAdm, s.primAdm, "g")
	s.switchTo(t, ctx, "primary", s.standAdm, p.SwitchRouteBack)
	stopLoad()
	s.wg.Wait()
	if len(s.errs) > 0 {
		t.Fatalf("the producer saw %d errors (first: %v): a switch must only delay writes", len(s.errs), s.errs[0])
	}
	assertEndsUnchanged(t, ctx, s.standAdm, topic, back)
	s.checkStandby(t, ctx, primary.ListenAddrs(), offs, primaryIDs)
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, b := range r.brokers {
		if b.addr != "" && !slices.Contains(primary.ListenAddrs(), b.addr) {
			t.Errorf("after the switch back, node %d leads to %s, not a primary broker", id, b.addr)
		}
	}
}

// startSwitchRun starts route app from primary to standby and the application through it, a
// producer and a consumer group (consumerOpts added), and returns once records flow; the
// returned function stops the load.
func startSwitchRun(t *testing.T, ctx context.Context, primary, standby *kfake.Cluster, topic string, consumerOpts ...kgo.Opt) (*switchRun, context.CancelFunc) {
	t.Helper()
	p, r := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	s := &switchRun{topic: topic, p: p, r: r, acked: map[string]bool{}, seen: map[string]int{}}
	s.primAdm, s.standAdm = adminFor(t, primary.ListenAddrs()), adminFor(t, standby.ListenAddrs())
	s.primaryIDs = topicIDs(t, ctx, r.Addr(), topic)
	var err error
	s.prod, err = kgo.NewClient(kgo.SeedBrokers(r.Addr()), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.prod.Close)
	s.cons, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(r.Addr()), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, consumerOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cons.Close)
	loadCtx, stopLoad := context.WithCancel(ctx)
	s.startLoad(ctx, loadCtx)
	polltest.Until(t, 30*time.Second, "records produced and consumed through the route", func() bool {
		a, seen := s.count()
		return a > 100 && seen > 50
	})
	return s, stopLoad
}

// switchRun is what TestKfakeRouteSwitchKeepsClients's steps share: the proxy and its route,
// admin clients of both clusters, the application's producer and consumer, and what those
// two were acknowledged and read. mu guards the maps and slices while the load runs.
type switchRun struct {
	topic             string
	p, r              *Proxy
	primaryIDs        [16]byte // the topic's id as the route's clients saw it first
	primAdm, standAdm *kadm.Client
	prod, cons        *kgo.Client
	wg                sync.WaitGroup

	mu    sync.Mutex
	acked map[string]bool
	seen  map[string]int
	again []*kgo.Record // read a second time by the application's consumer
	errs  []error
}

// count is how many records were acknowledged and how many different ones were read.
func (s *switchRun) count() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked), len(s.seen)
}

// startLoad runs the application's producer and consumer until loadCtx ends; s.wg waits for
// both.
func (s *switchRun) startLoad(ctx, loadCtx context.Context) {
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			v := "v" + strconv.Itoa(i)
			err := s.prod.ProduceSync(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i % 5)), Value: []byte(v)}).FirstErr()
			s.mu.Lock()
			if err != nil {
				s.errs = append(s.errs, fmt.Errorf("produce %s: %w", v, err))
			} else {
				s.acked[v] = true
			}
			s.mu.Unlock()
		}
	}()
	go func() {
		defer s.wg.Done()
		for loadCtx.Err() == nil {
			fs := s.cons.PollFetches(loadCtx)
			fs.EachRecord(func(rec *kgo.Record) {
				s.mu.Lock()
				s.seen[string(rec.Value)]++
				if s.seen[string(rec.Value)] > 1 {
					s.again = append(s.again, rec)
				}
				s.mu.Unlock()
			})
			// Commit after processing, as an application does; a refused commit (the freeze)
			// is retried by the next one.
			_ = s.cons.CommitUncommittedOffsets(loadCtx)
		}
	}()
}

// switchUnderLoad switches the route to the standby, holding the group's fetches until its
// members rejoin there, and waits until the producer has gone on through the switched route.
func (s *switchRun) switchUnderLoad(t *testing.T, ctx context.Context) {
	t.Helper()
	s.switchTo(t, ctx, "standby", s.primAdm, s.p.SwitchRoute)
}

// switchTo is switchUnderLoad towards upstream (the cluster adm reaches is left) with switch.
func (s *switchRun) switchTo(t *testing.T, ctx context.Context, upstream string, adm *kadm.Client, switchFn func(context.Context, string, FetchHold) error) {
	t.Helper()
	before, _ := s.count()
	hold := FetchHold{Topics: map[string]bool{s.topic: true}, Groups: membersAt(t, ctx, adm, "g")}
	if err := switchFn(ctx, "app", hold); err != nil {
		t.Fatal(err)
	}
	if st := s.p.Routes(); len(st) != 1 || st[0].Upstream != upstream {
		t.Errorf("route status after the switch: %+v", st)
	}
	polltest.Until(t, 60*time.Second, "the producer goes on through the switched route", func() bool {
		a, _ := s.count()
		return a > before+100
	})
}

// checkStandby runs once the load has stopped. Every acknowledged record is on the standby
// once; the consumer finishes reading it and has then seen each record exactly once; the
// route's topic id is still the primary's.
func (s *switchRun) checkStandby(t *testing.T, ctx context.Context, standby []string, offs kadm.OffsetResponses, primaryIDs [16]byte) {
	t.Helper()
	topic := s.topic
	onStandby := readAll(t, ctx, standby, topic) // the cluster switched to
	for v := range s.acked {
		if onStandby[v] != 1 {
			t.Errorf("acknowledged %s is %d times on the standby", v, onStandby[v])
		}
	}
	tail, err := kgo.NewClient(kgo.SeedBrokers(s.r.Addr()), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	// The first consumer's last commits may not have landed: what it saw after its last
	// commit is read again here; count only what it had not seen.
	_ = s.cons.CommitUncommittedOffsets(ctx)
	s.cons.Close()
	polltest.Until(t, 30*time.Second, "the group read everything on the standby", func() bool {
		fs := tail.PollRecords(ctx, 1000)
		fs.EachRecord(func(rec *kgo.Record) {
			s.mu.Lock()
			if s.seen[string(rec.Value)] == 0 {
				s.seen[string(rec.Value)]++
			}
			s.mu.Unlock()
		})
		_, seen := s.count()
		return seen >= len(onStandby)
	})
	for v := range s.seen {
		if onStandby[v] != 1 {
			t.Errorf("the consumer saw %s; the standby has it %d times", v, onStandby[v])
		}
	}
	// Nothing read twice: the fetch hold kept the member from reading on the standby before it
	// rejoined there and resumed at the offsets copied at the switch.
	for _, rec := range s.again {
		c, _ := offs.Lookup(topic, rec.Partition)
		t.Errorf("the consumer read %s (%s/%d offset %d) twice (offset %d committed at the switch)", rec.Value, topic, rec.Partition, rec.Offset, c.At)
	}
	if got := topicIDs(t, ctx, s.r.Addr(), topic); got != primaryIDs {
		t.Errorf("the route's topic id changed at the switch: %x, was %x", got, primaryIDs)
	}
}

// freezeForSwitch does a planned switch's freeze on route app: it freezes writes to topic,
// waits up to wait for group to commit the frozen log ends (detail adds to the message of a
// wait that fails), then freezes commits too, and returns those log ends.
func freezeForSwitch(t *testing.T, ctx context.Context, p *Proxy, adm *kadm.Client, group, topic string, wait time.Duration, detail func() string) kadm.ListedOffsets {
	t.Helper()
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{topic: true}}); err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	waitCommittedEnds(t, ctx, adm, group, topic, ends, wait, detail)
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{topic: true}, Commits: true}); err != nil {
		t.Fatal(err)
	}
	return ends
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
	copyTopicFrom(t, ctx, from, to, topic, nil, ends)
}

// copyTopicFrom is copyTopic of the records from start (nil: the beginning) to ends, to a
// topic whose log ends at start.
func copyTopicFrom(t *testing.T, ctx context.Context, from, to []string, topic string, start, ends kadm.ListedOffsets) {
	t.Helper()
	at := map[int32]kgo.Offset{}
	for _, ps := range ends {
		for p := range ps {
			at[p] = kgo.NewOffset().AtStart()
			if o, ok := start.Lookup(topic, p); ok {
				at[p] = kgo.NewOffset().At(o.Offset)
			}
		}
	}
	src, err := kgo.NewClient(kgo.SeedBrokers(from...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}))
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
	start.Each(func(o kadm.ListedOffset) { want -= o.Offset })
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
	resp, err := to.CommitOffsets(ctx, group, commits)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("copying group %s's offsets: %v", group, err)
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

	began := time.Now()
	if err := fetchPartitionErr(routeFetch(t, r.Addr(), topic, -1)); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("a held topic's Fetch got %v, want NOT_LEADER_OR_FOLLOWER", err)
	}
	if waited := time.Since(began); waited < 250*time.Millisecond {
		t.Errorf("the held Fetch was answered after %v: it should wait out its MaxWait (300 ms) as a long poll", waited)
	}
	if resp := routeFetch(t, r.Addr(), topic, 3); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Errorf("an incremental Fetch got error code %d, want FETCH_SESSION_ID_NOT_FOUND", resp.ErrorCode)
	}
	if err := fetchPartitionErr(routeFetch(t, r.Addr(), other, -1)); err != nil {
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
	if err := fetchPartitionErr(routeFetch(t, r.Addr(), topic, -1)); err != nil {
		t.Fatalf("after the group rejoined, a Fetch of the switched topic got %v", err)
	}

	// A hold whose group never rejoins ends at its bound (a second route on a fresh proxy).
	p2, r2 := routedProxyTo(t, primary.ListenAddrs(), standby.ListenAddrs(), nil)
	if err := p2.SwitchRoute(ctx, "app", FetchHold{Topics: map[string]bool{topic: true}, Groups: map[string]int{"gone": 1}, Max: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := fetchPartitionErr(routeFetch(t, r2.Addr(), topic, -1)); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("within its bound, the hold answered %v", err)
	}
	polltest.Until(t, 10*time.Second, "the hold ends at its bound", func() bool {
		return fetchPartitionErr(routeFetch(t, r2.Addr(), topic, -1)) == nil
	})
}

// routeFetch sends a Fetch v12 of partition 0 of tp to addr on a connection of its own, with a
// MaxWait of 300 ms; a sessionEpoch above 0 makes it an incremental Fetch of session 7.
func routeFetch(t *testing.T, addr, tp string, sessionEpoch int32) *kmsg.FetchResponse {
	t.Helper()
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
	return rawConn(t, addr, req).(*kmsg.FetchResponse)
}

// fetchPartitionErr is the error of the one partition routeFetch asked for, or an error
// describing an answer of some other shape.
func fetchPartitionErr(resp *kmsg.FetchResponse) error {
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("answer %+v", resp)
	}
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
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
