package instance

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/polltest"
)

// refused reports whether the guard refuses a Produce to topic partition 0.
func refused(t *testing.T, g *enforcement.Guard, topic string) bool {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks = -1
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: []byte("batch")}}}}
	d, err := g.FilterProduce(context.Background(), 9, req.AppendTo(nil))
	if err != nil {
		t.Fatal(err)
	}
	return d.Refused != nil
}

// The read-only set of a starting instance is built only from a view read to its end: a view
// that holds some of the state (here: the mirror, not yet its topic "orders") must not make
// "orders" writable. Until the view is caught up every write is refused; afterwards the mirror
// topic is refused and an ordinary topic passes. A regression test for the 1,000-fault soak's
// seed 2, which saw seven client writes land in a mirror topic through a restarting instance.
func TestReadOnlyFollowerWaitsForTheWholeState(t *testing.T) {
	g, err := enforcement.New(enforcement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g.Update(enforcement.Loading("starting"))
	view := newFakeRouteView()
	view.put(coordinator.Record{Key: statetopic.Key{Type: statetopic.TypeMirrorConfig, Mirror: "dr"}, Value: &statetopic.MirrorConfig{}})
	var caughtUp atomic.Bool
	var asked atomic.Int64
	f := &readOnlyFollower{guard: g, view: view, log: slog.New(slog.DiscardHandler), retry: 5 * time.Millisecond,
		lost: func() map[string]string { return nil },
		caughtUp: func(context.Context) error {
			asked.Add(1)
			if !caughtUp.Load() {
				return errors.New("catching up with __mirror_state: partition 3 read to offset 10 of 12")
			}
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	polltest.Until(t, 10*time.Second, "the follower asked three times", func() bool { return asked.Load() >= 3 })
	if !refused(t, g, "orders") || !refused(t, g, "payments") {
		t.Fatal("a write passed before the state was read to its end")
	}
	view.put(coordinator.Record{Key: statetopic.Key{Type: statetopic.TypeMirrorTopic, Mirror: "dr", Topic: "orders"},
		Value: &statetopic.MirrorTopic{SourceTopicID: statetopic.UUID{1}, Partitions: 1}})
	caughtUp.Store(true)
	polltest.Until(t, 10*time.Second, "ordinary writes pass once the state is read", func() bool { return !refused(t, g, "payments") })
	if !refused(t, g, "orders") {
		t.Fatal("a write to the mirror topic passed")
	}
}
