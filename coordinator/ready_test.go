package coordinator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/internal/syncbuf"
)

// Ready: ready with no state topic (nothing to join or read); not ready while the view has
// not read the state written before (a coordinator whose Run has not started), with the
// reason; ready once it runs.
func TestReadyMeansJoinedAndCaughtUp(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Fake())
	var epochs int16
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	newCoord := func() *Coordinator {
		c, err := New(ctx, Config{Client: []kgo.Opt{kgo.SeedBrokers(cluster.Bootstrap()...)}, StatePartitions: 3,
			DataPath: newFakeDataPath(&epochs), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SessionTimeout: 6 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	idle := newCoord()
	defer idle.Close()
	if err := idle.Ready(ctx); err != nil {
		t.Fatalf("no state topic yet: %v, want ready", err)
	}

	a := startInstance(t, cluster, &epochs, "a")
	if err := a.c.EnsureStateTopic(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.c.Write(ctx, Record{statetopic.MirrorConfigKey("dr"), &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "src:9092"}}}); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "the running coordinator ready", func() (bool, string) {
		err := a.c.Ready(ctx)
		return err == nil, fmt.Sprint(err)
	})
	// idle joins the group (its group client runs on its own) but never reads the state.
	polltest.Eventually(t, time.Minute, "the coordinator that does not run: joined, behind", func() (bool, string) {
		err := idle.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "catching up with "+statetopic.TopicName+": partition"), fmt.Sprint(err)
	})
	// Membership lost (what kgo reports when the session expires): not ready until assigned again.
	idle.lost(ctx, nil, nil)
	if err := idle.Ready(ctx); err == nil || !strings.Contains(err.Error(), "not yet a member of the coordinator group") {
		t.Fatalf("after losing membership: %v, want not a member", err)
	}
}

// New does not wait for the view to catch up with the state topic: only Run reads it, so a
// restart with state in the topic waited out the whole start-up check (15 s) before the
// instance served. The loss check's marks are Run's to write.
func TestNewWithStateDoesNotWaitForTheView(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.Fake())
	var epochs int16
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startInstance(t, cluster, &epochs, "a")
	if err := a.c.EnsureStateTopic(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.c.Write(ctx, Record{statetopic.MirrorConfigKey("dr"), &statetopic.MirrorConfig{Configs: map[string]string{"bootstrap.servers": "src:9092"}}}); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	c, err := New(ctx, Config{Client: []kgo.Opt{kgo.SeedBrokers(cluster.Bootstrap()...)}, StatePartitions: 3,
		DataPath: newFakeDataPath(&epochs), Logger: slog.New(slog.NewTextHandler(&logs, nil)), SessionTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if strings.Contains(logs.String(), "at start-up") {
		t.Fatalf("New's state check failed with state in the topic:\n%s", logs.String())
	}
}
