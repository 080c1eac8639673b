package coordinator

import (
	"context"
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
}

func newFakeDataPath(epochs *int16) *fakeDataPath {
	return &fakeDataPath{epochs: epochs, running: map[int32]bool{}, started: map[int32]int{}}
}

var epochMu sync.Mutex

func (f *fakeDataPath) Prepare(_ context.Context, p PartitionRef, _ *statetopic.Producer) (Writer, []string, error) {
	epochMu.Lock()
	defer epochMu.Unlock()
	*f.epochs++
	return Writer{ProducerID: 1000, Epoch: *f.epochs}, nil, nil
}

func (f *fakeDataPath) Start(_ context.Context, p PartitionRef, _ Writer, _ func(datapath.Event)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[p.Partition] = true
	f.started[p.Partition]++
	return nil
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
	dp := newFakeDataPath(epochs)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("instance", name)
	c, err := New(context.Background(), Config{
		Client:          []kgo.Opt{kgo.SeedBrokers(cluster.Bootstrap()...)},
		StatePartitions: 10, DataPath: dp, Logger: log, SessionTimeout: 6 * time.Second,
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
