package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// fakeDataPath records what the coordinator asks of the copy pipeline.
type fakeDataPath struct {
	mu      sync.Mutex
	epochs  *int16 // shared between instances: InitProducerId bumps one epoch per partition
	running map[int32]bool
	started map[int32]int
	fence   map[int32]int // copies of a partition that report EventFenced right after they start
}

func newFakeDataPath(epochs *int16) *fakeDataPath {
	return &fakeDataPath{epochs: epochs, running: map[int32]bool{}, started: map[int32]int{}, fence: map[int32]int{}}
}

var epochMu sync.Mutex

func (f *fakeDataPath) Prepare(_ context.Context, p PartitionRef, _ *statetopic.Producer) (Writer, []string, error) {
	epochMu.Lock()
	defer epochMu.Unlock()
	*f.epochs++
	return Writer{ProducerID: 1000, Epoch: *f.epochs}, nil, nil
}

func (f *fakeDataPath) Start(_ context.Context, p PartitionRef, _ Writer, events func(datapath.Event)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[p.Partition] = true
	f.started[p.Partition]++
	if f.fence[p.Partition] > 0 {
		f.fence[p.Partition]--
		// Later than the partition's MIRRORING record is read back, as a real copy's
		// first refused write is: then no record of the worker changes after the fence.
		time.AfterFunc(500*time.Millisecond, func() {
			f.mu.Lock()
			delete(f.running, p.Partition)
			f.mu.Unlock()
			events(datapath.Event{Kind: datapath.EventFenced, Topic: p.Topic, Partition: p.Partition, Err: errors.New("fake: fenced")})
		})
	}
	return nil
}

func (f *fakeDataPath) startedCount(p int32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started[p]
}

func (f *fakeDataPath) Stop(_ context.Context, p PartitionRef, _ datapath.StopHow) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.running, p.Partition)
	return 100 + int64(p.Partition), nil
}

func (f *fakeDataPath) Progress(PartitionRef) (datapath.Progress, bool) {
	return datapath.Progress{}, false
}
func (f *fakeDataPath) Forget(p PartitionRef) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.running, p.Partition)
}

func (f *fakeDataPath) runningSet() map[int32]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int32]bool{}
	for p := range f.running {
		out[p] = true
	}
	return out
}

type instance struct {
	c      *Coordinator
	dp     *fakeDataPath
	cancel context.CancelFunc
	done   chan struct{}
}

func startInstance(t *testing.T, cluster *kafkatest.Cluster, epochs *int16, name string) *instance {
	t.Helper()
	return startInstanceWith(t, cluster, epochs, name, 0)
}

// startInstanceWith is startInstance with Config.ResyncEvery (0: the default).
func startInstanceWith(t *testing.T, cluster *kafkatest.Cluster, epochs *int16, name string, resync time.Duration) *instance {
	t.Helper()
	dp := newFakeDataPath(epochs)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("instance", name)
	c, err := New(context.Background(), Config{
		Client:          []kgo.Opt{kgo.SeedBrokers(cluster.Bootstrap()...)},
		StatePartitions: 10, DataPath: dp, Logger: log, SessionTimeout: 6 * time.Second, ResyncEvery: resync,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{c: c, dp: dp, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(in.stop)
	return in
}

func (in *instance) stop() {
	in.cancel()
	<-in.done
}

func partitionStates(c *Coordinator, mirror, topic string, n int32) map[int32]statetopic.PartitionState {
	out := map[int32]statetopic.PartitionState{}
	c.Store().Read(func(v *statetopic.View) {
		m := v.Mirror(mirror)
		if m == nil {
			return
		}
		for p := int32(0); p < n; p++ {
			if s := m.Partition(topic, p); s != nil {
				out[p] = *s
			}
		}
	})
	return out
}

func TestCoordinatorsSplitTakeOverAndFailOver(t *testing.T) {
	for _, kind := range []struct {
		name string
		opt  kafkatest.Option
	}{{"kfake", kafkatest.Fake()}, {"real", kafkatest.Real()}} {
		t.Run(kind.name, func(t *testing.T) { testSplitTakeOverFailOver(t, kafkatest.Start(t, kind.opt)) })
	}
}

func testSplitTakeOverFailOver(t *testing.T, cluster *kafkatest.Cluster) {
	const parts = 8
	var epochs int16
	a := startInstance(t, cluster, &epochs, "a")
	b := startInstance(t, cluster, &epochs, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.c.EnsureStateTopic(ctx); err != nil {
		t.Fatal(err)
	}
	topicID := statetopic.UUID{9, 9, 9}
	if err := a.c.Write(ctx,
		Record{statetopic.MirrorConfigKey("dr"), &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "src:9092"}}},
		Record{statetopic.MirrorTopicKey("dr", "orders"), &statetopic.MirrorTopic{SourceTopicID: topicID, Desired: statetopic.DesireMirror, Partitions: parts}},
	); err != nil {
		t.Fatal(err)
	}

	polltest.Eventually(t, time.Minute, "every partition MIRRORING, split between both instances, none on both", func() (bool, string) {
		states := partitionStates(b.c, "dr", "orders", parts)
		ra, rb := a.dp.runningSet(), b.dp.runningSet()
		for p := range ra {
			if rb[p] {
				return false, fmt.Sprintf("partition %d copied by both", p)
			}
		}
		mirroring := 0
		for _, s := range states {
			if s.State == protocol.MirrorStateMirroring {
				mirroring++
			}
		}
		return mirroring == parts && len(ra)+len(rb) == parts && len(ra) > 0 && len(rb) > 0,
			fmt.Sprintf("%d mirroring; a runs %v, b runs %v", mirroring, ra, rb)
	})

	b.stop()
	polltest.Eventually(t, time.Minute, "the surviving instance runs every partition", func() (bool, string) {
		ra := a.dp.runningSet()
		return len(ra) == parts, fmt.Sprintf("a runs %v", ra)
	})
	// Every takeover fenced in a new writer and recorded it.
	for p, s := range partitionStates(a.c, "dr", "orders", parts) {
		if s.WriterEpoch == 0 || s.State != protocol.MirrorStateMirroring {
			t.Fatalf("partition %d after takeover: %+v", p, s)
		}
	}

	if err := a.c.Write(ctx, Record{statetopic.MirrorTopicKey("dr", "orders"),
		&statetopic.MirrorTopic{SourceTopicID: topicID, Desired: statetopic.DesireStop, Partitions: parts}}); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "every partition STOPPED with its last mirrored offset", func() (bool, string) {
		states := partitionStates(a.c, "dr", "orders", parts)
		for p := int32(0); p < parts; p++ {
			s := states[p]
			if s.State != protocol.MirrorStateStopped || s.LastMirroredOffset != 100+int64(p) {
				return false, fmt.Sprintf("partition %d: %s lmo %d", p, s.State, s.LastMirroredOffset)
			}
		}
		return len(a.dp.runningSet()) == 0, fmt.Sprintf("still running %v", a.dp.runningSet())
	})
}

// A worker is woken when one of its records changes, not at every record
// applied nor every second: an idle instance of 2,000 partitions spent most
// of its CPU, and a start-up of 4,000 partitions most of its time, taking
// every worker's decision again for nothing (bench/README.md, "Scale").
// Here, after every partition is MIRRORING, unrelated records (group syncs)
// are applied one batch at a time and then one topic is stopped: its
// partition stops (its worker was woken), and the other topic's 40 workers
// took no decision (each batch used to wake all 41, the ticker every second
// too).
func TestReconcileWakesOnlyTheWorkersWhoseRecordsChanged(t *testing.T) {
	const big = 40
	var epochs int16
	in := startInstanceWith(t, kafkatest.Start(t, kafkatest.Fake()), &epochs, "a", time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := in.c.EnsureStateTopic(ctx); err != nil {
		t.Fatal(err)
	}
	bigID, oneID := statetopic.UUID{1}, statetopic.UUID{2}
	if err := in.c.Write(ctx,
		Record{statetopic.MirrorConfigKey("dr"), &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "src:9092"}}},
		Record{statetopic.MirrorTopicKey("dr", "big"), &statetopic.MirrorTopic{SourceTopicID: bigID, Desired: statetopic.DesireMirror, Partitions: big}},
		Record{statetopic.MirrorTopicKey("dr", "one"), &statetopic.MirrorTopic{SourceTopicID: oneID, Desired: statetopic.DesireMirror, Partitions: 1}},
	); err != nil {
		t.Fatal(err)
	}
	mirroring := func(topic string, n int32) int {
		k := 0
		for _, s := range partitionStates(in.c, "dr", topic, n) {
			if s.State == protocol.MirrorStateMirroring {
				k++
			}
		}
		return k
	}
	polltest.Eventually(t, time.Minute, "every partition MIRRORING", func() (bool, string) {
		b, o := mirroring("big", big), mirroring("one", 1)
		return b == big && o == 1, fmt.Sprintf("big %d, one %d", b, o)
	})
	// The last MIRRORING records are still being read back: each wakes its worker
	// once more. Counting starts when nothing is left to read or decide.
	polltest.Eventually(t, time.Minute, "every applied record reconciled and every worker idle", func() (bool, string) {
		return in.c.settled(), fmt.Sprintf("store generation %d, reconciled %d", in.c.store.Generation(), in.c.reconciledGen.Load())
	})
	before := in.c.evaluations.Load()
	for i := range 5 {
		if err := in.c.Write(ctx, Record{statetopic.GroupSyncKey("dr", fmt.Sprintf("g%d", i)), &statetopic.GroupSync{Partitions: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.c.Write(ctx, Record{statetopic.MirrorTopicKey("dr", "one"),
		&statetopic.MirrorTopic{SourceTopicID: oneID, Desired: statetopic.DesireStop, Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "the stopped topic's partition STOPPED", func() (bool, string) {
		s := partitionStates(in.c, "dr", "one", 1)[0]
		return s.State == protocol.MirrorStateStopped, s.State.String()
	})
	if took := in.c.evaluations.Load() - before; took >= big {
		t.Fatalf("%d decisions for 5 unrelated records and one topic's stop: the %d untouched workers were woken", took, big)
	}
	if got := mirroring("big", big); got != big {
		t.Fatalf("%d of the untouched topic's %d partitions MIRRORING", got, big)
	}
}

// settled: the last reconcile pass read the Store as it is, and no worker has
// an event to handle.
func (c *Coordinator) settled() bool {
	if c.reconciledGen.Load() != c.store.Generation() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		if w.pending.Load() != 0 {
			return false
		}
	}
	return true
}

// A copy fenced while this instance still owns its state partition is
// prepared and started again promptly: nothing of the worker's records
// changes, so without a timer of its own it waited for the 30 s resync (the
// soak's soak.tx/2 restarted only every 30 s). Here the resync is an hour.
func TestFencedCopyRestartsWhileStillOwned(t *testing.T) {
	var epochs int16
	in := startInstanceWith(t, kafkatest.Start(t, kafkatest.Fake()), &epochs, "a", time.Hour)
	in.dp.mu.Lock()
	in.dp.fence[0] = 2 // the first two copies are fenced at once
	in.dp.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := in.c.EnsureStateTopic(ctx); err != nil {
		t.Fatal(err)
	}
	if err := in.c.Write(ctx,
		Record{statetopic.MirrorConfigKey("dr"), &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "src:9092"}}},
		Record{statetopic.MirrorTopicKey("dr", "orders"), &statetopic.MirrorTopic{SourceTopicID: statetopic.UUID{3}, Desired: statetopic.DesireMirror, Partitions: 1}},
	); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 20*time.Second, "the partition copying after two fences", func() (bool, string) {
		n := in.dp.startedCount(0)
		return n == 3 && in.dp.runningSet()[0], fmt.Sprintf("started %d times", n)
	})
}
