// Package instancetest runs a whole kmirror instance (proxy, RPCs, mirroring) in a test, in
// front of a destination cluster, with settings that suit tests: 10 state partitions and a
// 6 s session so that take-overs happen within a test's patience.
package instancetest

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/instance"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/proxy"
)

// Start runs an instance in front of dst until the test ends. It logs warnings to stderr;
// a nil log is the default.
func Start(t testing.TB, dst *kafkatest.Cluster, log *slog.Logger) *instance.Instance {
	t.Helper()
	in, _ := StartStoppable(t, dst, log)
	return in
}

// StartStoppable is Start with a function that stops the instance before the test ends
// (a restart in the test); calling it again, or not at all, is fine.
func StartStoppable(t testing.TB, dst *kafkatest.Cluster, log *slog.Logger) (*instance.Instance, func()) {
	t.Helper()
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	in, err := instance.New(context.Background(), instance.Config{
		Proxy:     proxy.Config{Upstream: dst.Bootstrap(), Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"},
		Mirroring: true, StatePartitions: 10, SessionTimeout: 6 * time.Second, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := in.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Logf("kmirror stopped: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return in, stop
}
