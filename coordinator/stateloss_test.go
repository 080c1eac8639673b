package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// The state topic deleted, then re-created, behind the coordinators' back
// (kfake; e2e.TestStateLoss proves the same on real Kafka with the proxy):
// the view freezes and no copy runs, nothing is written, and the mirror
// stays lost through the re-creation and for a coordinator started
// afterwards, until it is recorded again.
func TestStateLossIsRememberedUntilRecovered(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Fake())
	var epochs int16
	a := startInstance(t, cluster, &epochs, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := a.c.EnsureStateTopic(ctx); err != nil {
		t.Fatal(err)
	}
	const parts = 4
	topicID := statetopic.UUID{4, 2}
	recs := []Record{
		{statetopic.MirrorConfigKey("dr"), &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "src:9092"}, SourceClusterID: "src-id"}},
		{statetopic.MirrorTopicKey("dr", "orders"), &statetopic.MirrorTopic{SourceTopicID: topicID, Desired: statetopic.DesireMirror, Partitions: parts}},
	}
	if err := a.c.Write(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "every partition copied and the topic marked", func() (bool, string) {
		id, _ := a.c.Store().ID()
		a.c.loss.mu.Lock()
		mk, ok := a.c.loss.loaded[MarkKey{"dr", "orders"}]
		a.c.loss.mu.Unlock()
		return len(a.dp.runningSet()) == parts && ok && mk.StateTopicID == id && mk.SourceTopicID == topicID && mk.SourceClusterID == "src-id",
			fmt.Sprintf("running %v, mark %+v (state topic %s)", a.dp.runningSet(), mk, id)
	})
	if l := a.c.Loss(); l.Lost() {
		t.Fatalf("state reported lost while sound: %+v", l)
	}

	adm := kadm.NewClient(cluster.Client(t))
	if _, err := adm.DeleteTopics(ctx, statetopic.TopicName); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "the view frozen, the mirror lost, no copy running", func() (bool, string) {
		l := a.c.Loss()
		return l.Frozen && l.Mirrors["dr"]["orders"].SourceTopicID == topicID && len(a.dp.runningSet()) == 0,
			fmt.Sprintf("loss %+v, running %v", l, a.dp.runningSet())
	})
	if err := a.c.Write(ctx, recs...); !errors.Is(err, ErrStateLost) {
		t.Fatalf("write with the state topic gone: %v, want ErrStateLost", err)
	}
	var inView bool
	a.c.Store().Read(func(v *statetopic.View) { inView = v.Mirror("dr") != nil })
	if !inView {
		t.Fatal("the frozen view dropped the mirror")
	}

	// Re-created empty (as a tool would, straight at the broker).
	if _, err := adm.CreateTopic(ctx, 10, 1, nil, statetopic.TopicName); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "reading the new state topic, the mirror still lost", func() (bool, string) {
		l := a.c.Loss()
		id, frozen := a.c.Store().ID()
		return !frozen && !id.IsZero() && l.Mirrors["dr"] != nil && len(a.dp.runningSet()) == 0, fmt.Sprintf("loss %+v, frozen %v", l, frozen)
	})
	// A coordinator started now knows from the marks alone.
	b := startInstance(t, cluster, &epochs, "b")
	if l := b.c.Loss(); l.Mirrors["dr"]["orders"].SourceTopicID != topicID {
		t.Fatalf("a coordinator started after the loss does not know it: %+v", l)
	}

	// Recorded again (what recovery writes): no longer lost anywhere, copied
	// again, marks now name the new state topic.
	if err := b.c.Write(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	awaitRecovered(t, a, b, parts)
}

// awaitRecovered waits until neither a nor b reports dr/orders lost, the two copy its parts
// partitions between them, and either has marked it with b's state topic.
func awaitRecovered(t *testing.T, a, b *instance, parts int) {
	t.Helper()
	polltest.Eventually(t, time.Minute, "recovered on both, copied, re-marked", func() (bool, string) {
		la, lb := a.c.Loss(), b.c.Loss()
		id, _ := b.c.Store().ID()
		b.c.loss.mu.Lock()
		mk := b.c.loss.loaded[MarkKey{"dr", "orders"}]
		b.c.loss.mu.Unlock()
		a.c.loss.mu.Lock()
		mka := a.c.loss.loaded[MarkKey{"dr", "orders"}]
		a.c.loss.mu.Unlock()
		running := len(a.dp.runningSet()) + len(b.dp.runningSet())
		return !la.Lost() && !lb.Lost() && running == parts && (mk.StateTopicID == id || mka.StateTopicID == id),
			fmt.Sprintf("a %+v b %+v running %d marks %s/%s state %s", la, lb, running, mk.StateTopicID, mka.StateTopicID, id)
	})
}
