package mirrorcli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/apis"
	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/leaktest"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// gnet's process-wide worker pool and kgo's shared zstd decoders.
		if err := goleak.Find(leaktest.Join(leaktest.GnetPool(), leaktest.ZstdDecoders())...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func quietLogger() *slog.Logger {
	if os.Getenv("KMIRROR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fakeDataPath stands in for the copy pipeline: preparing a topic whose name
// starts with "poison" fails permanently, everything else succeeds; Stop
// reports a destination log end of 40+partition, except for topics starting
// with "stuck", which never stop.
type fakeDataPath struct {
	mu    sync.Mutex
	epoch int16
}

func (f *fakeDataPath) Prepare(_ context.Context, p coordinator.PartitionRef, _ *statetopic.Producer) (coordinator.Writer, []string, error) {
	if strings.HasPrefix(p.Topic, "poison") {
		return coordinator.Writer{}, nil, datapath.Permanent(fmt.Errorf("source partition %s-%d is poisoned (test)", p.Topic, p.Partition))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch++
	return coordinator.Writer{ProducerID: 7, Epoch: f.epoch}, nil, nil
}

func (f *fakeDataPath) Start(context.Context, coordinator.PartitionRef, coordinator.Writer, func(datapath.Event)) error {
	return nil
}

func (f *fakeDataPath) Stop(_ context.Context, p coordinator.PartitionRef, _ datapath.StopHow) (int64, error) {
	if strings.HasPrefix(p.Topic, "stuck") {
		return 0, fmt.Errorf("destination unreachable (test)")
	}
	return 40 + int64(p.Partition), nil
}

func (f *fakeDataPath) Progress(coordinator.PartitionRef) (datapath.Progress, bool) {
	return datapath.Progress{}, false
}
func (f *fakeDataPath) Forget(coordinator.PartitionRef) {}

// server is an in-process kmirror: a kfake source, a kfake destination, a
// coordinator with a fake data path, and the real proxy in front of the
// destination with the mirror RPC handlers registered.
type server struct {
	src, dst *kafkatest.Cluster
	proxy    *proxy.Proxy
	backend  *apis.Backend
}

func (s *server) addr() string { return s.proxy.AdvertisedAddr() }

func startServer(t *testing.T) *server {
	t.Helper()
	s := &server{src: kafkatest.Start(t, kafkatest.Fake()), dst: kafkatest.Start(t, kafkatest.Fake())}
	log := quietLogger()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := coordinator.New(ctx, coordinator.Config{
		Client:          []kgo.Opt{kgo.SeedBrokers(s.dst.Bootstrap()...)},
		DataPath:        &fakeDataPath{},
		StatePartitions: 5,
		SessionTimeout:  6 * time.Second,
		Logger:          log,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	dstCl, err := kgo.NewClient(kgo.SeedBrokers(s.dst.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	backend := &apis.Backend{Coord: c, Sources: sourceclient.NewCache(), Destination: kadm.NewClient(dstCl), Log: log}
	p, err := proxy.New(proxy.Config{
		Upstream: s.dst.Bootstrap(), Listen: "127.0.0.1:0", AdvertisedHost: "127.0.0.1",
		MetadataRefresh: time.Second, EventLoops: 2,
	}, proxy.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	apis.Register(p.Handlers, backend)
	p.SetConfigResources(apis.ConfigResources(backend))
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := p.Start(sctx); err != nil {
		t.Fatal(err)
	}
	s.proxy, s.backend = p, backend
	t.Cleanup(func() {
		_ = p.Close()
		cancel()
		<-done
		backend.Sources.Close()
		dstCl.Close()
	})
	return s
}

// unavailableFirst makes the server answer its next n RemoveTopicsFromMirror requests with
// COORDINATOR_NOT_AVAILABLE, as while the state topic has no leader, and serve the rest; it
// counts them.
func (s *server) unavailableFirst(n int32) *atomic.Int32 {
	var calls atomic.Int32
	s.proxy.Handlers.Register(protocol.KeyRemoveTopicsFromMirror, func(ctx context.Context, req *proxy.MirrorRequest) (kmsg.Response, error) {
		if calls.Add(1) <= n {
			return nil, protocol.ErrCoordinatorNotAvailable.WithMessage("mirror state is not readable (test); retry shortly")
		}
		r := protocol.NewPtrRemoveTopicsFromMirrorRequest()
		r.Version = req.Version
		if err := r.ReadFrom(req.Body); err != nil {
			return nil, err
		}
		return s.backend.RemoveTopicsFromMirror(ctx, r), nil
	})
	return &calls
}

// result is one CLI run.
type result struct {
	code           int
	stdout, stderr string
	err            error
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, err %v\n--- stdout:\n%s--- stderr:\n%s", r.code, r.err, r.stdout, r.stderr)
}

// exitCode is what cmd/kmirror turns a returned error into.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case IsUsage(err):
		return 2
	}
	return 1
}

// runMirrors runs `kmirror mirrors args...` in-process.
func runMirrors(t *testing.T, args ...string) result {
	t.Helper()
	return runCommand("mirrors", Mirrors, args)
}

// runDumpState runs `kmirror dump-state args...` in-process.
func runDumpState(t *testing.T, args ...string) result {
	t.Helper()
	return runCommand("dump-state", DumpState, args)
}

// runCommand runs one kmirror subcommand in-process and prints its error
// to stderr as cmd/kmirror does.
func runCommand(name string, cmd func(context.Context, []string, io.Writer, io.Writer) error, args []string) result {
	var out, errOut bytes.Buffer
	err := cmd(context.Background(), args, &out, &errOut)
	if err != nil {
		fmt.Fprintf(&errOut, "kmirror %s: %v\n", name, err)
	}
	return result{code: exitCode(err), stdout: out.String(), stderr: errOut.String(), err: err}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mustRun fails the test unless the run exits with want.
func mustRun(t *testing.T, want int, r result) result {
	t.Helper()
	if r.code != want {
		t.Fatalf("want exit %d, got %s", want, r)
	}
	return r
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Fatalf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

// rows splits the first table of an output into rows of fields, without
// the header; tables that follow (after a blank line) are left out.
func rows(table string) [][]string {
	var out [][]string
	for i, line := range strings.Split(strings.TrimRight(table, "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			break
		}
		if i == 0 {
			continue
		}
		out = append(out, strings.Fields(line))
	}
	return out
}

// seedState creates the state topic (one partition) on the cluster at seeds
// and writes the first n of stateRecords there, with the client options
// given (TLS, SASL).
func seedState(t *testing.T, seeds []string, n int, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(statetopic.TopicName)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, statetopic.TopicName); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, stateRecords(t)[:n]...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
