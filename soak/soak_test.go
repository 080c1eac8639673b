// Package soak is kmirror's seeded fault-injection soak (issue 17,
// docs/RELIABILITY.md): real source and destination clusters of three
// brokers, three kmirror processes, Toxiproxy between kmirror and the
// source, a load of every kind of writer, faults drawn from a seed, and a
// checker that counts every lost, duplicated, mismatched or reordered record
// and every write that got through to a read-only mirror topic.
//
// make soak runs it (KMIRROR_SOAK=long; MODE=short for 54 faults), make test runs the short
// mode with seed 1 (SOAK_SEED) after every other test, and make soak SEED=N replays a run's
// fault schedule.
package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kmirror/kmirror/fetcher"
	"github.com/kmirror/kmirror/internal/leaktest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// lightJVM are the brokers' JVM options unless KMIRROR_KAFKA_JVM_OPTS says
// otherwise: six brokers share two cores with everything else make test
// runs, and C2's compiler threads and G1's parallel workers at start-up are
// most of what makes a cluster start time out there. C1 only and the serial
// collector start faster and cost less CPU; the soak needs no broker speed.
const lightJVM = "-Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true"

func TestMain(m *testing.M) {
	if os.Getenv("KMIRROR_KAFKA_JVM_OPTS") == "" {
		os.Setenv("KMIRROR_KAFKA_JVM_OPTS", lightJVM)
	}
	// Toxiproxy's toxics log through zerolog's global logger, at trace level
	// for every interrupted pipe: thousands of lines that bury the fault log.
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	goleak.VerifyTestMain(m, leaktest.Join(leaktest.ZstdDecoders(), leaktest.GnetPool(), leaktest.Toxiproxy())...)
}

// settings are a run's size, from the environment (the Makefile's soak
// target sets them).
type settings struct {
	seed    uint64
	long    bool
	faults  int
	workers int
	report  string
}

func soakSettings(t *testing.T) settings {
	s := settings{seed: uint64(time.Now().UnixNano()), faults: 54, workers: 4}
	if v := os.Getenv("KMIRROR_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KMIRROR_SOAK_SEED=%q: %v", v, err)
		}
		s.seed = n
	}
	if os.Getenv("KMIRROR_SOAK") == "long" {
		s.long, s.faults = true, 1000
	}
	if v := os.Getenv("KMIRROR_SOAK_FAULTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KMIRROR_SOAK_FAULTS=%q: want a positive number", v)
		}
		s.faults = n
	}
	s.report = os.Getenv("KMIRROR_SOAK_REPORT")
	return s
}

// TestSoak runs the soak: faults from the seed while every writer writes,
// then the checks. Every count of the report must be 0.
func TestSoak(t *testing.T) {
	s := soakSettings(t)
	mode := map[bool]string{false: "short", true: "long"}[s.long]
	t.Logf("soak seed %d (%s, %d faults): replay with make soak SEED=%d MODE=%s", s.seed, mode, s.faults, s.seed, mode)
	logDir, err := os.MkdirTemp("", fmt.Sprintf("kmirror-soak-%d-", s.seed))
	if err != nil {
		t.Fatal(err)
	}
	r := &report{Seed: s.seed, Mode: mode, Started: time.Now().UTC()}
	w := newWorld(t, logDir)
	defer func() { finish(t, w, r, s, logDir) }()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	if err := createTopics(ctx, w.srcAdm); err != nil {
		t.Fatal(err)
	}
	setupMirror(t, ctx, w, logDir)

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	ld := &load{w: w, t: t, ledger: &ledger{}, seed: s.seed}
	ld.start(loadCtx)
	tr := newTracker(w, func() []string { return mirroredTopics(ld) })
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); tr.run(loadCtx) }()

	faults := schedule(s.seed, s.faults, s.long)
	lastEnd := runFaults(t, ctx, w, ld, tr, faults, s.workers, r)
	stopLoad()
	ld.wg.Wait()
	bg.Wait()
	r.tallyFaults(faults)
	r.ToxiproxyWedged = w.front.Wedged()

	catchUp(t, ctx, w, ld, r, lastEnd)
	check(t, ctx, w, ld, r)
	r.RecoveryP50Ms, r.RecoveryP99Ms, r.RecoveryMaxMs = percentiles(tr.recoveries)
	r.Recoveries, r.Unrecovered, r.MaxLagRecords = len(tr.recoveries), len(tr.pending), tr.maxLag
	r.PeakRSSMiB, r.PeakThreads = map[string]int64{}, tr.peakThr
	for k, v := range tr.peakRSS {
		r.PeakRSSMiB[k] = v / 1024
	}
}

// setupMirror creates the mirror, adds the pattern and the failover topic,
// and waits until the copy runs.
func setupMirror(t *testing.T, ctx context.Context, w *world, dir string) {
	t.Helper()
	if err := w.createMirror(ctx, dir); err != nil {
		t.Fatal(err)
	}
	for _, topics := range []string{pattern, topicFailover} {
		if _, err := w.cli(ctx, "--add", "--mirror", mirrorName, "--topics", topics); err != nil {
			t.Fatal(err)
		}
	}
	polltest.Eventually(t, 3*time.Minute, "every partition of the mirror MIRRORING", func() (bool, string) {
		m, err := w.describe(ctx)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, tp := range m.Topics {
			for _, p := range tp.Partitions {
				if p.State != "MIRRORING" {
					return false, fmt.Sprintf("%s/%d is %s", tp.Name, p.Partition, p.State)
				}
				n++
			}
		}
		return n == 3*7, fmt.Sprintf("%d partitions MIRRORING", n)
	})
}

// mirroredTopics are the topics still mirrored (soak.late once created).
func mirroredTopics(ld *load) []string {
	out := append([]string(nil), mirroredNames...)
	if ld.lateStarted.Load() {
		out = append(out, topicLate)
	}
	return out
}

// runFaults runs the schedule and, as it goes, the run's one-off events: a
// topic created for the pattern at a third, a partition count grown at a
// half, the failover at 60%. It returns when the last fault ended.
func runFaults(t *testing.T, ctx context.Context, w *world, ld *load, tr *tracker, faults []*fault, workers int, r *report) time.Time {
	t.Helper()
	ended := make(chan *fault, len(faults))
	in := newInjector(w, t.Logf, func(f *fault) { ended <- f })
	injCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() { defer close(done); in.run(injCtx, faults, workers) }()
	// A partition that went FAILED for a reason that is not Kafka's known
	// halt fails the run at once: the 1,000-fault run's first such partition
	// failed two minutes in and the faults went on for 110 minutes.
	watch := time.NewTicker(failedWatchEvery)
	defer watch.Stop()
	var last time.Time
	n := 0
	for {
		select {
		case f := <-ended:
			n++
			last = f.Ended
			tr.faultEnded(ctx, f.Ended)
			midRunEvent(t, ctx, w, ld, r, n, len(faults))
			continue
		case <-watch.C:
			if err := findHalts(t, ctx, w, r); err != nil {
				stop()
				<-done
				r.tallyFaults(faults) // the fault log of what ran, for the report
				t.Fatalf("after %d of %d faults: %v", n, len(faults), err)
			}
			continue
		case <-done:
		}
		break
	}
	for len(ended) > 0 {
		f := <-ended
		last = f.Ended
		tr.faultEnded(ctx, f.Ended)
	}
	return last
}

func midRunEvent(t *testing.T, ctx context.Context, w *world, ld *load, r *report, n, total int) {
	t.Helper()
	var err error
	switch n {
	case total / 3:
		t.Logf("event: create %s (mirrored by pattern %s)", topicLate, pattern)
		err = retry(ctx, func() error { return ld.late(ctx, w.srcAdm) })
	case total / 2:
		t.Logf("event: grow %s to 5 partitions", topicLz4)
		err = retry(ctx, func() error { return grow(ctx, w.srcAdm) })
	case total * 6 / 10:
		t.Logf("event: fail over %s", topicFailover)
		r.Failover, err = failover(ctx, w)
	}
	if err != nil {
		t.Errorf("event after fault %d: %v", n, err)
	}
}

// retry runs an event's admin step until it succeeds or 3 minutes pass:
// creating a topic or partitions of replication factor 3 fails while a
// broker is down for a fault.
func retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		hold(ctx, 2*time.Second)
	}
}

// failover reads what describe puts at risk, fails fo.failover over and
// reads its LMOs.
func failover(ctx context.Context, w *world) (*failoverCheck, error) {
	f := &failoverCheck{Began: time.Now(), SourceHW: map[int32]int64{}, AtRisk: map[int32]int64{}, LMO: map[int32]int64{}}
	// At risk is unknown while a partition's figures are (a broker fault, a
	// partition between owners): ask again for up to a minute, as an operator
	// would before failing over.
	deadline := time.Now().Add(time.Minute)
	for len(f.AtRisk) < 3 && time.Now().Before(deadline) {
		m, err := w.describe(ctx)
		if err != nil {
			hold(ctx, time.Second)
			continue
		}
		for _, tp := range m.Topics {
			for _, p := range tp.Partitions {
				if tp.Name == topicFailover && p.SourceHighWatermark != nil && p.RecordsAtRisk != nil {
					f.SourceHW[p.Partition], f.AtRisk[p.Partition] = *p.SourceHighWatermark, *p.RecordsAtRisk
				}
			}
		}
		if len(f.AtRisk) < 3 {
			hold(ctx, time.Second)
		}
	}
	if _, err := w.cli(ctx, "--remove", "--mirror", mirrorName, "--topics", topicFailover, "--wait"); err != nil {
		return nil, err
	}
	m, err := w.describe(ctx)
	if err != nil {
		return nil, err
	}
	for _, tp := range m.Topics {
		for _, p := range tp.Partitions {
			if tp.Name == topicFailover && p.LastMirroredOffset != nil {
				f.LMO[p.Partition] = *p.LastMirroredOffset
			}
		}
	}
	if len(f.LMO) != 3 {
		return f, fmt.Errorf("failover of %s: LMOs of %d partitions known, want 3", topicFailover, len(f.LMO))
	}
	return f, nil
}

// catchUp writes a sentinel record at the end of every mirrored partition
// and waits until the destination's log ends equal the source's.
func catchUp(t *testing.T, ctx context.Context, w *world, ld *load, r *report, lastEnd time.Time) {
	t.Helper()
	topics := mirroredTopics(ld)
	parts, err := partitions(ctx, w.srcAdm, topics...)
	if err != nil {
		t.Fatal(err)
	}
	cl := w.srcClient(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for topic, ps := range parts {
		for p := range ps {
			v := fmt.Appendf(nil, "sentinel#%s#%d", topic, p)
			// Keyed: the compacted topic refuses a record without a key.
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: v, Value: v}).FirstErr(); err != nil {
				t.Fatalf("sentinel on %s/%d: %v", topic, p, err)
			}
		}
	}
	var described time.Time
	polltest.Eventually(t, 10*time.Minute, "destination log ends equal the source's", func() (bool, string) {
		src, err := ends(ctx, w.srcAdm, topics)
		if err != nil {
			return false, err.Error()
		}
		dst, err := ends(ctx, w.dstAdm, topics)
		if err != nil {
			return false, err.Error()
		}
		var behind []string
		for tp, e := range src {
			if dst[tp] != e && r.Counts.Halts[tp] == nil {
				behind = append(behind, fmt.Sprintf("%s: destination %d, source %d", tp, dst[tp], e))
			}
		}
		if len(behind) == 0 {
			return true, ""
		}
		// A partition behind may be one that will never catch up: FAILED.
		if time.Since(described) > 10*time.Second {
			described = time.Now()
			if err := findHalts(t, ctx, w, r); err != nil {
				t.Fatal(err)
			}
		}
		return false, strings.Join(behind, "; ")
	})
	r.FinalCatchUpMs = time.Since(lastEnd).Milliseconds()
}

// failedWatchEvery is how often the run looks for FAILED partitions while
// the faults go on.
const failedWatchEvery = 30 * time.Second

// findHalts reads describe for partitions FAILED for good (retry attempt -1:
// a failure kmirror does not retry; a retriable one is FAILED between its
// retries, as a fault makes it): the known Kafka one
// (halt_test.go) is recorded and no longer waited for; any other is the
// error that fails the run, with describe's reason. A describe that fails
// (a broker or instance down for a fault) is logged and tried next time.
func findHalts(t *testing.T, ctx context.Context, w *world, r *report) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := w.describe(ctx)
	if err != nil {
		t.Logf("describe, looking for FAILED partitions: %v", err)
		return nil
	}
	for _, tp := range m.Topics {
		for _, p := range tp.Partitions {
			name := fmt.Sprintf("%s/%d", tp.Name, p.Partition)
			if p.State != "FAILED" || p.RetryAttempt != -1 || r.Counts.Halts[name] != nil {
				continue // only a copy that stopped for good: a retriable failure is retried
			}
			h := &halt{Message: p.Message, Marker: -1}
			switch {
			case tp.Name == topicCompact:
				// Read at once: the destination's cleaner removes markers
				// within seconds (a seed-1 run lost the evidence that way).
				log, err := fetcher.LogEntries(ctx, w.dst.Client(t), tp.Name, p.Partition, 0)
				if err != nil {
					t.Logf("%s is FAILED (%s); its destination log could not be read for evidence, next time: %v", name, p.Message, err)
					continue
				}
				extra, evidence := compactedHalt(p.Message, log)
				if extra == nil {
					return fmt.Errorf("%s is FAILED: %s; %s", name, p.Message, evidence)
				}
				h.Marker, h.Extra, h.Evidence = extra[0], extra, evidence
			case !knownKafkaHalt(tp.Name, p.Message):
				return fmt.Errorf("%s is FAILED: %s", name, p.Message)
			default:
				// The entries around the halt as they are now, markers with their
				// producer and epoch: what the end-of-run comparison decides on, kept
				// in the report (a 1,000-fault run's halt could not be explained
				// afterwards: the brokers' data is not kept).
				h.Evidence = haltNeighbourhood(ctx, w.dst.Client(t), tp.Name, p.Partition, p.Message)
			}
			t.Logf("KNOWN KAFKA BEHAVIOUR: %s is FAILED, not waited for; the logs will say whether it is the duplicate marker: %s %s", name, p.Message, h.Evidence)
			if r.Counts.Halts == nil {
				r.Counts.Halts = map[string]*halt{}
			}
			r.Counts.Halts[name] = h
		}
	}
	return nil
}

// check runs every check of the checker into the report.
func check(t *testing.T, ctx context.Context, w *world, ld *load, r *report) {
	t.Helper()
	c := &r.Counts
	src, dst := w.srcClient(t), w.dst.Client(t)
	topics := mirroredTopics(ld)
	if err := c.checkLogs(ctx, src, dst, topics); err != nil {
		t.Fatal(err)
	}
	parts, err := partitions(ctx, w.srcAdm, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for tp := range c.Halts {
		topic, p, _ := strings.Cut(tp, "/")
		n, _ := strconv.Atoi(p)
		delete(parts[topic], int32(n)) // its sentinel never reaches the destination
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	sv, err := committedView(vctx, w.src.Bootstrap(), parts)
	if err != nil {
		t.Fatalf("source: %v", err)
	}
	dv, err := committedView(vctx, w.dst.Bootstrap(), parts)
	if err != nil {
		t.Fatalf("destination: %v", err)
	}
	c.compareCommitted(sv, dv)
	acked, kcat := ld.ledger.snapshot()
	r.Acked = len(acked) + len(kcat)
	c.checkGroundTruth(dv, acked, kcat)
	if r.Failover != nil {
		if err := c.checkFailover(ctx, src, dst, r.Failover); err != nil {
			t.Fatal(err)
		}
	}
	c.GroupViolations = int(ld.groupViolations.Load())
	c.ReadOnlyViolations += int(ld.readOnlyAccepted.Load())
	r.ReadOnlyRefused, r.GroupSamples = ld.readOnlyRefused.Load(), ld.groupSamples.Load()
	r.ProduceFailures = ld.ledger.failures.Load() + ld.ledger.kcatFailed.Load()
}

// finish writes the report, prints its line, and fails the run on any
// non-zero count, missing fault kind, panic or crash, keeping the logs and
// printing the seed and fault log.
func finish(t *testing.T, w *world, r *report, s settings, logDir string) {
	r.DurationS = time.Since(r.Started).Seconds()
	r.Panics, _ = panics(w)
	for _, p := range w.inst {
		r.Crashes += p.crashes()
	}
	var problems []string
	if !r.Counts.zero() {
		problems = append(problems, "non-zero counts")
	}
	if miss := r.missingKinds(); len(miss) > 0 && r.Faults >= len(kinds) {
		problems = append(problems, fmt.Sprintf("no fault applied of kinds %v", miss))
	}
	if r.Panics+r.Crashes > 0 {
		problems = append(problems, fmt.Sprintf("%d panics, %d unexpected exits", r.Panics, r.Crashes))
	}
	for name, kib := range r.PeakRSSMiB {
		if kib > rssBoundMiB {
			problems = append(problems, fmt.Sprintf("%s peaked at %d MiB RSS (bound %d)", name, kib, rssBoundMiB))
		}
	}
	for name, n := range r.PeakThreads {
		if n > threadBound {
			problems = append(problems, fmt.Sprintf("%s peaked at %d threads (bound %d)", name, n, threadBound))
		}
	}
	path := s.report
	if path == "" {
		path = filepath.Join(logDir, "report.json")
	}
	if err := r.write(path); err != nil {
		t.Errorf("write report: %v", err)
	}
	t.Log(r.line())
	for _, f := range r.Counts.Findings {
		t.Log(f)
	}
	if len(problems) > 0 || t.Failed() {
		keepLogs(t, w, logDir)
		t.Errorf("soak seed %d FAILED (%v); replay: make soak SEED=%d MODE=%s; report %s; logs kept in %s\nfault log:\n%s",
			r.Seed, problems, r.Seed, r.Mode, path, logDir, r.faultLog())
		return
	}
	if s.report == "" {
		os.RemoveAll(logDir)
	}
}

// Bounds of a kmirror process over the run (sampled every second).
const (
	rssBoundMiB = 1024
	threadBound = 256
)

// keepLogs copies the brokers' logs next to the instances' (the clusters'
// directories go with the test).
func keepLogs(t *testing.T, w *world, logDir string) {
	for side, dir := range map[string]string{"source": w.src.Real().Dir(), "destination": w.dst.Real().Dir()} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") || strings.Contains(path, "/data/") {
				return nil
			}
			rel, _ := filepath.Rel(dir, path)
			to := filepath.Join(logDir, side, rel)
			b, err := os.ReadFile(path)
			if err == nil {
				err = os.MkdirAll(filepath.Dir(to), 0o755)
			}
			if err == nil {
				err = os.WriteFile(to, b, 0o644)
			}
			return err
		})
		if err != nil {
			t.Logf("keep %s logs: %v", side, err)
		}
	}
}
