// Package coordinatortest runs a coordinator for tests of what sits on top of
// it (admin RPCs, CLI, enforcement) with a data path that copies nothing but
// moves partitions through their states like the real one.
package coordinatortest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// DataPath is a coordinator.DataPath that prepares instantly, "copies"
// nothing, and reports End(p) as the destination log end on Stop.
type DataPath struct {
	mu      sync.Mutex
	epoch   int16
	running map[coordinator.PartitionRef]bool
	// End is the destination log end reported by Stop (default 0).
	End func(p coordinator.PartitionRef) int64
}

func (d *DataPath) Prepare(context.Context, coordinator.PartitionRef, *statetopic.Producer) (coordinator.Writer, []string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.epoch++
	return coordinator.Writer{ProducerID: 1, Epoch: d.epoch}, nil, nil
}

func (d *DataPath) Start(_ context.Context, p coordinator.PartitionRef, _ coordinator.Writer, _ func(datapath.Event)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running == nil {
		d.running = map[coordinator.PartitionRef]bool{}
	}
	d.running[key(p)] = true
	return nil
}

func (d *DataPath) Stop(_ context.Context, p coordinator.PartitionRef, _ datapath.StopHow) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.running, key(p))
	if d.End != nil {
		return d.End(p), nil
	}
	return 0, nil
}

func (d *DataPath) Progress(coordinator.PartitionRef) (datapath.Progress, bool) {
	return datapath.Progress{}, false
}

func (d *DataPath) Forget(p coordinator.PartitionRef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.running, key(p))
}

// Running counts partitions being "copied".
func (d *DataPath) Running() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.running)
}

func key(p coordinator.PartitionRef) coordinator.PartitionRef {
	p.Config = nil
	return p
}

// Start runs a coordinator against the destination at seeds until the test
// ends.
func Start(t testing.TB, seeds []string, dp coordinator.DataPath) *coordinator.Coordinator {
	t.Helper()
	c, err := coordinator.New(context.Background(), coordinator.Config{
		Client:          []kgo.Opt{kgo.SeedBrokers(seeds...)},
		StatePartitions: 5, DataPath: dp, SessionTimeout: 6 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}
