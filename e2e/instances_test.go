package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/freeport"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/metricstest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// process is a kmirror binary running `kmirror proxy` in front of dst.
type process struct {
	t           *testing.T
	bin, name   string
	addr, mAddr string
	args        []string
	env         []string // added to the test's environment
	logPath     string
	cmd         *exec.Cmd
	exited      chan struct{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func startProcess(t *testing.T, bin, name string, dst *kafkatest.Cluster) *process {
	t.Helper()
	return startProcessWith(t, bin, name, dst, nil, nil)
}

// startProcessWith is startProcess with more arguments (e.g. --config) and environment.
func startProcessWith(t *testing.T, bin, name string, dst *kafkatest.Cluster, args, env []string) *process {
	t.Helper()
	p := &process{t: t, bin: bin, name: name, addr: freeAddr(t), mAddr: freeAddr(t), env: env}
	p.args = append([]string{"proxy", "--upstream", dst.BootstrapString(), "--listen", p.addr, "--broker-ports", "0",
		"--metrics-addr", p.mAddr, "--state-partitions", "10", "--session-timeout", "6s", "--log-level", "warn"}, args...)
	p.start()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *process) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.bin, p.args...)
	if len(p.env) > 0 {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	logf, err := os.Create(filepath.Join(p.t.TempDir(), p.name+".log"))
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.logPath = logf.Name()
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	p.t.Cleanup(func() {
		// The process's own account of a failure: its last lines here, and the whole log
		// kept outside the test's temporary directory (removed when the test ends), as the
		// brokers' logs are: a CI failure of TestFrozenInstanceWakesUpAsZombie could not be
		// explained from the last lines alone.
		if !p.t.Failed() {
			return
		}
		b, _ := os.ReadFile(logf.Name())
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		p.t.Logf("kmirror %s, last %d log lines:\n%s", p.name, min(len(lines), 80), strings.Join(lines[max(0, len(lines)-80):], "\n"))
		if dir, err := os.MkdirTemp("", "kmirror-e2e-"+p.name+"-"); err == nil {
			kept := filepath.Join(dir, p.name+".log")
			if os.WriteFile(kept, b, 0o644) == nil {
				p.t.Logf("kmirror %s: whole log kept in %s", p.name, kept)
			}
		}
	})
	polltest.Eventually(p.t, 30*time.Second, "kmirror "+p.name+" listens on "+p.addr, func() (bool, string) {
		select {
		case <-p.exited:
			b, _ := os.ReadFile(logf.Name())
			p.t.Fatalf("kmirror %s exited at start:\n%s", p.name, b)
		default:
		}
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

func (p *process) signal(sig syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	if p.exited != nil {
		<-p.exited
	}
}

func (p *process) stop() {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("kmirror %s did not stop on SIGTERM within 30s", p.name)
	}
}

var lagSeries = regexp.MustCompile(`(?m)^kmirror_mirror_lag_records\{[^}]*partition="(\d+)"[^}]*topic="([^"]+)"`)

func disjoint(a, b map[string]bool) bool {
	for k := range a {
		if b[k] {
			return false
		}
	}
	return true
}

// copying lists the partitions an instance copies, from its metrics (nil when its metrics
// do not answer).
func (p *process) copying() map[string]bool {
	body, err := metricstest.Scrape(p.mAddr)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, m := range lagSeries.FindAllStringSubmatch(body, -1) {
		out[m[2]+"/"+m[1]] = true
	}
	return out
}

func destinationTotal(t *testing.T, cl *kgo.Client, mirror string) (dst, src int64) {
	for _, p := range partitionProgress(t, cl, mirror) {
		dst += max(0, p.DestinationHighWatermark)
		src += max(0, p.SourceHighWatermark)
	}
	return dst, src
}

// partitionProgress is each mirror partition's DescribeMirrors entry by "topic/partition".
func partitionProgress(t *testing.T, cl *kgo.Client, mirror string) map[string]protocol.DescribeMirrorsResponsePartition {
	req := protocol.NewPtrDescribeMirrorsRequest()
	req.MirrorNames = []string{mirror}
	resp := request[*protocol.DescribeMirrorsResponse](t, cl, req)
	out := map[string]protocol.DescribeMirrorsResponsePartition{}
	for _, m := range resp.Mirrors {
		for _, tp := range m.Topics {
			for _, p := range tp.Partitions {
				out[fmt.Sprintf("%s/%d", tp.Name, p.Partition)] = p
			}
		}
	}
	return out
}

// setThrottle sets the mirror's byte-rate limit ("" lifts it).
func setThrottle(t *testing.T, cl *kgo.Client, mirror, rate string) {
	t.Helper()
	op := configOp(kmsg.IncrementalAlterConfigOpDelete, "replication.throttled.rate", nil)
	if rate != "" {
		op = configOp(kmsg.IncrementalAlterConfigOpSet, "replication.throttled.rate", kmsg.StringPtr(rate))
	}
	if r := alterMirror(t, cl, false, mirrorResource(mirror, op)); r.Resources[0].ErrorCode != 0 {
		t.Fatalf("set %s's limit to %q: %s", mirror, rate, deref(r.Resources[0].ErrorMessage))
	}
}

// Two kmirror processes split the mirror partitions; SIGKILL one in the
// middle of a copy and the other finishes it; restart it and stop the other
// gracefully: the copy stays exact throughout.
func TestInstancesSplitSurviveKillAndRestart(t *testing.T) {
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t)
	bin := instancetest.Binary(t)
	// Partitions are spread by their state records' hash over 10 state partitions, 5 per
	// instance: with 12 of them, all on one instance happens about once in 2000 runs (with
	// 8 it was once in 130).
	const parts = 12
	const perPartition = 27_000
	src.CreateKeptTopic(t, "events", parts)
	produce(t, src, "events", parts, perPartition, kgo.Lz4Compression())

	a := startProcess(t, bin, "a", dst)
	b := startProcess(t, bin, "b", dst)
	cl := admin(t, b.addr)
	// A byte-rate limit holds the copy in its middle however fast or slow the machine is
	// (on a slow one, the instances could otherwise finish before the group has split the
	// partitions); it is lifted once an instance is killed.
	createMirror(t, cl, "dr", "bootstrap.servers", src.BootstrapString(), "fetch.max.bytes", "16384",
		"replication.throttled.rate", "100000")
	addTopics(t, cl, "dr", "events")

	// Both instances copy, disjoint shares, and some of a's partitions are not copied yet.
	var ca, cb, open map[string]bool
	polltest.Eventually(t, 3*time.Minute, "partitions split between the instances, a's in the middle of their copy", func() (bool, string) {
		ca, cb = a.copying(), b.copying()
		// The two scrapes are moments apart and partitions may move between the
		// instances meanwhile: an overlap here is no proof of a double copy
		// (VerifyIdentical checks the copy later), so wait for a disjoint split.
		if !disjoint(ca, cb) {
			return false, fmt.Sprintf("a partition shows in both instances' metrics: a %v, b %v", ca, cb)
		}
		open = map[string]bool{}
		for k, p := range partitionProgress(t, cl, "dr") {
			if ca[k] && p.DestinationHighWatermark > 0 && p.DestinationHighWatermark < p.SourceHighWatermark {
				open[k] = true
			}
		}
		return len(ca) > 0 && len(cb) > 0 && len(ca)+len(cb) == parts && len(open) > 0,
			fmt.Sprintf("a %v, b %v, a's begun and unfinished %v", ca, cb, open)
	})
	done, total := destinationTotal(t, cl, "dr")
	t.Logf("split: a copies %d partitions (%d begun and unfinished), b %d; %d of %d records copied: killing a",
		len(ca), len(open), len(cb), done, total)
	a.kill()
	setThrottle(t, cl, "dr", "")
	// b must take over a's partitions, each from where a left it.
	polltest.Eventually(t, time.Minute, "b took over a's partitions", func() (bool, string) {
		c := b.copying()
		return len(c) == parts, fmt.Sprintf("b copies %v", c)
	})
	waitMirrored(t, cl, "dr", map[string]int64{"events": parts * perPartition})
	mirrortest.VerifyIdentical(t, src.Client(t), dst.Client(t), "events")

	// a comes back; more records arrive; b leaves gracefully; a finishes alone.
	a.start()
	setThrottle(t, cl, "dr", "100000")
	produce(t, src, "events", parts, 1000, kgo.ZstdCompression())
	b.stop()
	cl = admin(t, a.addr)
	polltest.Eventually(t, time.Minute, "a took over b's partitions", func() (bool, string) {
		c := a.copying()
		return len(c) == parts, fmt.Sprintf("a copies %v", c)
	})
	setThrottle(t, cl, "dr", "")
	waitMirrored(t, cl, "dr", map[string]int64{"events": parts * (perPartition + 1000)})
	mirrortest.VerifyIdentical(t, src.Client(t), dst.Client(t), "events")
	t.Logf("exact after SIGKILL, restart and graceful hand-over: %d records", parts*(perPartition+1000))
}

// Acceptance of issue 5's fencing: an instance frozen (SIGSTOP) in the
// middle of a copy, for longer than its session, loses its partitions to
// the other instance; when it wakes up (SIGCONT) it must not write anything
// that breaks the copy. Records and transactions keep arriving throughout;
// at the end every record and marker is at its source offset exactly once.
func TestFrozenInstanceWakesUpAsZombie(t *testing.T) {
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t)
	bin := instancetest.Binary(t)
	const parts = 4
	src.CreateKeptTopic(t, "ledger", parts)
	produce(t, src, "ledger", parts, 5000, kgo.Lz4Compression())

	// At info (the flag's last value wins): this test failed twice in CI with an ABORT
	// marker of the copy's own transactional id where a committed record belongs, and
	// warn-level logs could not say which instance's request wrote it. With them and the
	// destination broker's log, a run that failed here on 2026-12-05 showed the new
	// owner's transaction aborted 26 ms after the woken instance, its lease lapsed, came
	// back: by a request decided before it froze (docs/DESIGN.md, "Owners and zombies";
	// fetcher's TestFakeLapsedLeaseSendsNoTransactionWrite).
	a := startProcessWith(t, bin, "a", dst, []string{"--log-level", "info"}, nil)
	b := startProcessWith(t, bin, "b", dst, []string{"--log-level", "info"}, nil)
	cl := admin(t, b.addr)
	createMirror(t, cl, "dr", "bootstrap.servers", src.BootstrapString(), "fetch.max.bytes", "8192")
	addTopics(t, cl, "dr", "ledger")

	// Writers run until the end: plain records and transactions.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	writeLedger(t, ctx, src, parts, &wg)

	// Which instance copies what depends on where the partitions' state records hash
	// (the source topic id is random) and on the group's assignment: sometimes one instance
	// gets them all. The one copying more is frozen; the other must take over.
	polltest.Eventually(t, 2*time.Minute, "the instances copy every partition between them", func() (bool, string) {
		ca, cb := a.copying(), b.copying()
		return len(ca)+len(cb) == parts && disjoint(ca, cb), fmt.Sprintf("a %v, b %v", ca, cb)
	})
	zombie, other := a, b
	if len(b.copying()) > len(a.copying()) {
		zombie, other = b, a
	}
	frozen := zombie.copying()
	zombie.signal(syscall.SIGSTOP)
	t.Logf("%s froze while copying %v (%s copied %v)", zombie.name, frozen, other.name, other.copying())
	// From here on the mirror RPCs go to the instance that is awake: a frozen proxy
	// answers nothing.
	cl = admin(t, other.addr)
	polltest.Eventually(t, time.Minute, other.name+" took over the frozen instance's partitions", func() (bool, string) {
		c := other.copying()
		return len(c) == parts, fmt.Sprintf("%s copies %v", other.name, c)
	})
	done0, _ := destinationTotal(t, cl, "dr")
	polltest.Eventually(t, time.Minute, other.name+" copied on while the other is frozen", func() (bool, string) {
		d, _ := destinationTotal(t, cl, "dr")
		return d > done0+200, fmt.Sprintf("%d copied", d)
	})
	zombie.signal(syscall.SIGCONT)
	t.Logf("%s woke up after %s had taken over and copied on", zombie.name, other.name)
	// The woken instance answers again and nothing is copied twice; whether it gets
	// partitions back depends on the assignment, as above.
	polltest.Eventually(t, time.Minute, "the instances share the work again", func() (bool, string) {
		cz, co := zombie.copying(), other.copying()
		return cz != nil && len(cz)+len(co) == parts && disjoint(cz, co), fmt.Sprintf("%s %v, %s %v", zombie.name, cz, other.name, co)
	})
	cancel()
	wg.Wait()
	var total int64
	stableEnds(t, src.Client(t), "ledger").Each(func(o kadm.ListedOffset) { total += o.Offset })
	waitMirrored(t, cl, "dr", map[string]int64{"ledger": total})
	n := mirrortest.VerifyLog(t, src.Client(t), dst.Client(t), false, "ledger")
	t.Logf("after the freeze and the wake-up: %d records and markers at identical offsets, none twice", n)
}

// writeLedger starts the ledger's writers on src, which run until ctx ends: in each round a
// transaction across the parts partitions (every fourth aborted) and a plain record to each
// partition beside it. wg is done once they have stopped.
func writeLedger(t *testing.T, ctx context.Context, src *kafkatest.Cluster, parts int32, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		tx := src.Client(t, kgo.TransactionalID("ledger-app"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		plain := src.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
		for i := 0; ctx.Err() == nil; i++ {
			if err := tx.BeginTransaction(); err != nil {
				return
			}
			for p := range parts {
				_ = tx.ProduceSync(ctx, &kgo.Record{Topic: "ledger", Partition: p, Key: fmt.Appendf(nil, "tx-%d", i), Value: []byte("in a transaction")})
				_ = plain.ProduceSync(ctx, &kgo.Record{Topic: "ledger", Partition: p, Key: fmt.Appendf(nil, "plain-%d", i), Value: []byte("plain")})
			}
			if ctx.Err() != nil {
				_ = tx.EndTransaction(context.Background(), kgo.TryAbort)
				return
			}
			if err := tx.EndTransaction(context.Background(), kgo.TransactionEndTry(i%4 != 3)); err != nil {
				t.Errorf("end transaction %d: %v", i, err)
				return
			}
		}
	}()
}
