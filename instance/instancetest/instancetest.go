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

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/proxy"
)

// Start runs an instance in front of dst until the test ends. It logs warnings to stderr;
// a nil log is the default. In front of a SASL cluster (kafkatest.WithSASL) kmirror
// authenticates as the harness's kmirror user (upstream_sasl, SCRAM-SHA-512), as an operator
// would configure it. configure, if given, changes the instance's config before it starts
// (e.g. a secrets key file).
func Start(t testing.TB, dst *kafkatest.Cluster, log *slog.Logger, configure ...func(*instance.Config)) *instance.Instance {
	t.Helper()
	in, err := StartWith(t, dst, log, func(cfg *instance.Config) {
		for _, c := range configure {
			c(cfg)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// StartWith is Start with the test's changes to the instance's configuration (edit may be
// nil); an instance that cannot be built is returned as an error, for tests of start-up
// checks.
func StartWith(t testing.TB, dst *kafkatest.Cluster, log *slog.Logger, edit func(*instance.Config)) (*instance.Instance, error) {
	t.Helper()
	in, _, err := start(t, dst, log, edit)
	return in, err
}

// StartStoppable is Start with a function that stops the instance before the test ends
// (a restart in the test); calling it again, or not at all, is fine.
func StartStoppable(t testing.TB, dst *kafkatest.Cluster, log *slog.Logger) (*instance.Instance, func()) {
	t.Helper()
	in, stop, err := start(t, dst, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in, stop
}

func start(t testing.TB, dst *kafkatest.Cluster, log *slog.Logger, edit func(*instance.Config)) (*instance.Instance, func(), error) {
	t.Helper()
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	pcfg := proxy.Config{Upstream: dst.Bootstrap(), Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"}
	if dst.IsReal() && dst.Real().SASL() {
		pcfg.UpstreamSASL = proxy.UpstreamSASL{Mechanism: kafkatest.MechanismSCRAM,
			Username: kafkatest.KmirrorUser, Password: dst.Password(kafkatest.KmirrorUser)}
	}
	cfg := instance.Config{
		Proxy:     pcfg,
		Mirroring: true, StatePartitions: 10, SessionTimeout: 6 * time.Second, Logger: log,
	}
	if edit != nil {
		edit(&cfg)
	}
	in, err := instance.New(context.Background(), cfg)
	if err != nil {
		return nil, nil, err
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
	return in, stop, nil
}
