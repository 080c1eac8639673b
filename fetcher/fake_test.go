package fetcher

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestFakeRetriesAndLeaderMoves injects faults that real Kafka cannot be
// made to produce on demand (kfake): every fourth destination Produce is
// answered NOT_LEADER_OR_FOLLOWER without being appended, and leaders move on
// both clusters during the copy. The copier must resend a refused batch with
// exactly the same bytes (same producer sequence, so a resend of an append
// that did land is deduplicated by the broker), also when later batches of
// the partition were in flight behind it, and still end with identical
// offsets.
func TestFakeRetriesAndLeaderMoves(t *testing.T) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake(), kafkatest.Brokers(3)), dst: kafkatest.Start(t, kafkatest.Fake(), kafkatest.Brokers(3))}
	e := newEnv(t, p)
	e.createSource("faults", 4, nil)
	for part := int32(0); part < 4; part++ {
		e.produce("faults", part, 400, 10, kgo.ZstdCompression(), "f")
	}
	e.ensureDestination("faults")

	fake := p.dst.Fake()
	rp := &refusingProduce{failed: map[[2]int32][]byte{}, refused: map[[2]int32]bool{}}
	fake.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		return rp.control(kr.(*kmsg.ProduceRequest))
	})

	c := e.newCopier(Config{FetchMaxBytes: 2 << 10, MaxBufferedBytes: 16 << 10})
	defer c.Close()
	var evs events
	for part := int32(0); part < 4; part++ {
		if err := c.Start(e.ctx, Task{Topic: "faults", Partition: part, TransactionalID: fmt.Sprintf("mirror-faults-%d", part)}, evs.on); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		polltest.Eventually(t, 30*time.Second, "some progress", func() (bool, string) {
			pr, _ := c.Progress("faults", int32(i))
			return pr.DestinationLogEnd > int64(100*(i+1)), ""
		})
		p.src.Fake().ShufflePartitionLeaders()
		fake.ShufflePartitionLeaders()
	}
	for part := int32(0); part < 4; part++ {
		e.waitCopied(c, "faults", part)
		if _, err := c.Stop("faults", part); err != nil {
			t.Fatal(err)
		}
	}
	if f := evs.failures(); len(f) > 0 {
		t.Fatalf("events: %+v", f)
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if len(rp.changed) > 0 {
		t.Fatalf("resends changed bytes: %v", rp.changed)
	}
	if rp.resent == 0 {
		t.Fatal("no resend happened; the test did not test anything")
	}
	for part := int32(0); part < 4; part++ {
		e.verifyPartition("faults", part)
	}
	t.Logf("%d produce requests, %d refused and resent byte-identical, leaders moved 3 times on both clusters", rp.requests, rp.resent)
}

// refusingProduce answers every fourth destination Produce with
// NOT_LEADER_OR_FOLLOWER, without appending, and checks that what it refused
// comes back byte for byte.
type refusingProduce struct {
	mu       sync.Mutex
	requests int
	failed   map[[2]int32][]byte // (partition, base sequence) refused
	// refused once: never refused again. A copy resends a partition's
	// whole window after a refusal; with every 4th request refused and
	// 4 batches queued, the head would be the 4th each time, forever.
	refused map[[2]int32]bool
	resent  int
	changed []string
}

func seqOf(rp kmsg.ProduceRequestTopicPartition) [2]int32 {
	var b Batch
	NewBatchIterator(rp.Records).Next(&b)
	return [2]int32{rp.Partition, b.BaseSequence}
}

func (f *refusingProduce) control(req *kmsg.ProduceRequest) (kmsg.Response, error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if prev, ok := f.failed[seqOf(rp)]; ok {
				if !bytes.Equal(prev, rp.Records) {
					f.changed = append(f.changed, fmt.Sprintf("partition %d sequence %d", rp.Partition, seqOf(rp)[1]))
				}
				f.resent++
				delete(f.failed, seqOf(rp))
			}
		}
	}
	if f.requests%4 != 0 {
		return nil, nil, false
	}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if f.refused[seqOf(rp)] {
				return nil, nil, false
			}
		}
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = 6 // NOT_LEADER_OR_FOLLOWER
			st.Partitions = append(st.Partitions, sp)
			f.failed[seqOf(rp)] = append([]byte(nil), rp.Records...)
			f.refused[seqOf(rp)] = true
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil, true
}

// A fresh instance is given its partitions before its first heartbeat
// confirms the membership: a start waits for the write lease instead of
// failing (and waiting out the retry back-off); a lease that never comes
// still fails it, with the lease's reason.
func TestFakeStartWaitsForLease(t *testing.T) {
	_, e := fakeLonePartition(t, "lease")

	granted := time.Now().Add(300 * time.Millisecond)
	c := e.newCopier(Config{Lease: func() error {
		if time.Now().Before(granted) {
			return errors.New("membership not confirmed yet")
		}
		return nil
	}})
	defer c.Close()
	var evs events
	if err := c.Start(e.ctx, Task{Topic: "lease", Partition: 0, TransactionalID: "mirror-lease-0"}, evs.on); err != nil {
		t.Fatalf("start 300 ms before the lease is granted: %v", err)
	}
	e.waitCopied(c, "lease", 0)
	if f := evs.failures(); len(f) > 0 {
		t.Fatalf("events: %+v", f)
	}

	never := e.newCopier(Config{Lease: func() error { return errors.New("membership not confirmed yet") }})
	defer never.Close()
	err := never.Start(e.ctx, Task{Topic: "lease", Partition: 0, TransactionalID: "mirror-lease-0"}, evs.on)
	if err == nil || !strings.Contains(err.Error(), "membership not confirmed yet") {
		t.Fatalf("start without a lease: %v, want the lease's refusal", err)
	}
}

// TestFakeIdleFetchConnectionsAreOpenedAhead: a lone partition leaves all but
// one of its source's Fetch goroutines idle until its first answer is in, and
// then they read ahead over connections never used before; each one setting
// its connection up then cost 2-4 round trips (a half-second stall across a
// 150 ms link). Each idle goroutine sends the broker an empty Fetch at once,
// so that its connection is open before it is needed.
func TestFakeIdleFetchConnectionsAreOpenedAhead(t *testing.T) {
	p, e := fakeLonePartition(t, "lone")
	var mu sync.Mutex
	empty, named := 0, 0
	fake := p.src.Fake()
	fake.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if len(kr.(*kmsg.FetchRequest).Topics) == 0 {
			empty++
		} else {
			named++
		}
		return nil, nil, false
	})
	c := e.newCopier(Config{FetchesInFlight: 4})
	defer c.Close()
	e.copyToEnd(c, Task{Topic: "lone", Partition: 0, TransactionalID: "mirror-lone-0"}).noFailures()
	polltest.Eventually(t, 10*time.Second, "the three idle goroutines' empty Fetches", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return empty >= 3, fmt.Sprintf("%d empty Fetches, %d naming partitions", empty, named)
	})
}

// TestFakeNoEmptyFetchesToABrokerThatLeadsNothing: once the copier runs no
// partition the source broker leads (here, its one task stopped), its idle
// goroutines stop sending the empty Fetches that keep their connections open:
// those would be requests for nothing, forever.
func TestFakeNoEmptyFetchesToABrokerThatLeadsNothing(t *testing.T) {
	defer func(d time.Duration) { warmEvery = d }(warmEvery)
	warmEvery = 20 * time.Millisecond
	_, e := fakeLonePartition(t, "lone")
	c := e.newCopier(Config{FetchesInFlight: 4, hooks: newHolds()})
	defer c.Close()
	e.copyToEnd(c, Task{Topic: "lone", Partition: 0, TransactionalID: "mirror-lone-0"}).noFailures()
	polltest.Until(t, 10*time.Second, "idle goroutines keep their connections open", func() bool {
		warm, _ := c.warmDecisions()
		return warm >= 10
	})
	if _, err := c.Stop("lone", 0); err != nil {
		t.Fatal(err)
	}
	warmBefore, coldBefore := c.warmDecisions()
	polltest.Until(t, 10*time.Second, "every idle goroutine decides again, twice", func() bool {
		_, cold := c.warmDecisions()
		return cold >= coldBefore+8
	})
	if warm, _ := c.warmDecisions(); warm != warmBefore {
		t.Fatalf("%d empty Fetches decided on for a broker that leads none of the copier's partitions", warm-warmBefore)
	}
}

// fakeLonePartition starts a kfake pair with a one-partition source topic of
// 20 records and its destination topic.
func fakeLonePartition(t *testing.T, topic string) (*pair, *env) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	e := newEnv(t, p)
	e.createSource(topic, 1, nil)
	e.produce(topic, 0, 20, 10, kgo.NoCompression(), "l")
	e.ensureDestination(topic)
	return p, e
}

// TestFakeIdlePolls: once its partitions are caught up, a source long-polls
// them in idle polls (idleFetchWait), at most FetchesInFlight-1 at once, and
// keeps one Fetch at FetchMaxWait; a record on an idle-polled partition and a
// partition started meanwhile are copied at once all the same (well within
// idleFetchWait, which is what either would wait if it were not so).
func TestFakeIdlePolls(t *testing.T) {
	p := &pair{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	e := newEnv(t, p)
	const parts, inFlight = 8, 4
	e.createSource("idle", parts, nil)
	e.createSource("late", 1, nil)
	for part := range int32(parts) {
		e.produce("idle", part, 5, 5, kgo.NoCompression(), "i")
	}
	e.produce("late", 0, 5, 5, kgo.NoCompression(), "l")
	e.ensureDestination("idle")
	e.ensureDestination("late")

	var mu sync.Mutex
	idlePolls, shortPolls := 0, 0
	shortNamed := map[int32]bool{} // "idle" partitions named by Fetches at FetchMaxWait
	fake := p.src.Fake()
	fake.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		req := kr.(*kmsg.FetchRequest)
		if len(req.Topics) == 0 {
			return nil, nil, false // an empty Fetch that keeps a connection open
		}
		mu.Lock()
		defer mu.Unlock()
		if req.MaxWaitMillis == int32(idleFetchWait/time.Millisecond) {
			idlePolls++
			return nil, nil, false
		}
		shortPolls++
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == "idle" {
					shortNamed[rp.Partition] = true
				}
			}
		}
		return nil, nil, false
	})
	c := e.newCopier(Config{FetchesInFlight: inFlight, FetchMaxWait: 100 * time.Millisecond})
	defer c.Close()
	for part := range int32(parts) {
		e.copyToEnd(c, Task{Topic: "idle", Partition: part, TransactionalID: fmt.Sprintf("mirror-idle-%d", part)}).noFailures()
	}
	polltest.Eventually(t, 10*time.Second, "idle polls of the caught-up partitions", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return idlePolls >= inFlight-1, fmt.Sprintf("%d idle polls, %d at FetchMaxWait", idlePolls, shortPolls)
	})
	// From here on, every FetchMaxWait one Fetch names the partitions that no
	// idle poll holds; the others wait in their idle polls.
	mu.Lock()
	shortPolls, shortNamed = 0, map[int32]bool{}
	mu.Unlock()
	polltest.Eventually(t, 10*time.Second, "ten Fetches at FetchMaxWait", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return shortPolls >= 10, fmt.Sprint(shortPolls)
	})
	mu.Lock()
	named := len(shortNamed)
	var polled int32 = -1 // a partition that only idle polls name
	for part := range int32(parts) {
		if !shortNamed[part] {
			polled = part
		}
	}
	mu.Unlock()
	if named == parts {
		t.Fatalf("ten Fetches at FetchMaxWait named all %d partitions: no idle poll held any", parts)
	}

	began := time.Now()
	e.produce("idle", polled, 1, 1, kgo.NoCompression(), "j")
	e.waitCopied(c, "idle", polled)
	if took := time.Since(began); took >= idleFetchWait {
		t.Fatalf("a record on idle-polled partition %d took %s to copy: the idle poll was not answered at once", polled, took)
	}
	began = time.Now()
	e.copyToEnd(c, Task{Topic: "late", Partition: 0, TransactionalID: "mirror-late-0"}).noFailures()
	if took := time.Since(began); took >= idleFetchWait {
		t.Fatalf("a partition started among idle polls took %s to copy: no Fetch was left at FetchMaxWait", took)
	}
}
