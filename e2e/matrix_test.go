package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/compat"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// kafkaRelease is one Apache Kafka cluster of the version matrix.
type kafkaRelease struct {
	version string
	zk      bool
}

func (r kafkaRelease) String() string {
	if r.zk {
		return r.version + " (ZooKeeper)"
	}
	return r.version + " (KRaft)"
}

// tag names the release in topic and mirror names: k440, z362.
func (r kafkaRelease) tag() string {
	mode := "k"
	if r.zk {
		mode = "z"
	}
	return mode + strings.ReplaceAll(r.version, ".", "")
}

func (r kafkaRelease) start(t *testing.T) *kafkatest.Cluster {
	t.Helper()
	opts := []kafkatest.Option{kafkatest.WithVersion(r.version), kafkatest.ServerProperty("log.cleaner.backoff.ms", "100")}
	if r.zk {
		opts = append(opts, kafkatest.WithZooKeeper())
	}
	return kafkatest.Start(t, opts...)
}

// The version matrix of issue 22 (docs/versions.md). make test runs the reduced one: the newest
// release on both sides, and a ZooKeeper 3.x source. KMIRROR_MATRIX=full (make matrix) runs
// every pair.
var (
	matrixSources = []kafkaRelease{{"2.8.2", true}, {"3.6.2", true}, {"3.9.1", false}, {"4.0.0", false}, {"4.4.0", false}}
	matrixDests   = []kafkaRelease{{"3.9.1", false}, {"4.0.0", false}, {"4.4.0", false}}
	reducedSrcs   = []kafkaRelease{{"4.4.0", false}, {"3.6.2", true}}
	reducedDests  = []kafkaRelease{{"4.4.0", false}}
	// walkDest is where the ZooKeeper sources also run docs/versions.md's migration
	// walk-through: the newest destination, the one both matrices have.
	walkDest = kafkaRelease{"4.4.0", false}
)

// walkRepeat is KMIRROR_WALK_REPEAT: run only the ZooKeeper 3.6.2 → 4.4.0 pair, and its
// migration walk-through that many times (each on topics, a group and a mirror of its own),
// to show the walk-through does not flake (docs/versions.md). 0: the matrix as it is.
func walkRepeat(t *testing.T) int {
	v := os.Getenv("KMIRROR_WALK_REPEAT")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("KMIRROR_WALK_REPEAT=%q: want a number of runs, 1 or more", v)
	}
	return n
}

// matrixChecks are the columns of the table, in order.
var matrixChecks = []string{"plain", "log start", "compacted", "transactional", "patterns", "group offsets", "read-only", "failover"}

// pairResult is one row of the table.
type pairResult struct {
	src, dst kafkaRelease
	mode     string
	passed   map[string]bool
	took     time.Duration
}

// TestVersionMatrix mirrors from each source release to each destination release and checks
// the e2e essentials record by record, with the helpers the other e2e tests use. Sources are
// started once and shared by the destinations (each destination gets topics, a group and a
// mirror of its own on them); each destination runs its own kmirror.
func TestVersionMatrix(t *testing.T) {
	srcs, dsts := reducedSrcs, reducedDests
	if os.Getenv("KMIRROR_MATRIX") == "full" {
		srcs, dsts = matrixSources, matrixDests
	}
	walks := walkRepeat(t)
	if walks > 0 {
		srcs, dsts = []kafkaRelease{{"3.6.2", true}}, []kafkaRelease{walkDest}
	} else {
		walks = 1
	}
	// The walk-through's binary builds while the clusters start.
	var binary func(testing.TB) string
	if slices.ContainsFunc(srcs, func(s kafkaRelease) bool { return s.zk }) && slices.Contains(dsts, walkDest) {
		binary = instancetest.BinaryLater(t)
	}
	// The sources live as long as the whole test (started here, on its goroutine).
	sources := map[kafkaRelease]*kafkatest.Cluster{}
	for _, s := range srcs {
		sources[s] = s.start(t)
	}
	var rows []pairResult
	t.Cleanup(func() { reportMatrix(t, rows) })
	for _, d := range dsts {
		t.Run("to-"+d.tag(), func(t *testing.T) {
			dst := d.start(t)
			cl := admin(t, kmirror(t, dst).Proxy.Addr())
			for _, s := range srcs {
				t.Run("from-"+s.tag(), func(t *testing.T) {
					began := time.Now()
					p := &matrixPair{src: sources[s], dst: dst, admin: cl, prefix: s.tag() + "-" + d.tag() + "-", mirror: "m-" + s.tag(),
						binary: binary}
					if s.zk && d == walkDest {
						p.walks = walks
					}
					row := pairResult{src: s, dst: d, passed: p.run(t)}
					row.mode, row.took = p.mode, time.Since(began)
					rows = append(rows, row)
				})
			}
		})
	}
}

// matrixPair runs the checks of one source/destination pair.
type matrixPair struct {
	src, dst *kafkatest.Cluster
	admin    *kgo.Client // kmirror in front of dst
	prefix   string      // of the pair's topics and group on the shared source
	mirror   string
	mode     string
	txnEnd   map[int32]int64 // sentinel offsets of the transactional topic
	walks    int             // runs of the migration walk-through after the checks
	binary   func(testing.TB) string
}

func (p *matrixPair) topic(name string) string { return p.prefix + name }

// run sets the pair up and runs each check as a subtest of its own, so that one failure
// leaves the others their say; it returns which passed.
func (p *matrixPair) run(t *testing.T) map[string]bool {
	passed := map[string]bool{}
	if !t.Run("setup", p.setup) {
		return passed
	}
	checks := map[string]func(*testing.T){
		"plain": p.checkPlain, "log start": p.checkLogStart, "compacted": p.checkCompacted,
		"transactional": p.checkTransactional, "patterns": p.checkPatterns, "group offsets": p.checkGroupOffsets,
		"read-only": p.checkReadOnly, "failover": p.checkFailover,
	}
	for _, name := range matrixChecks {
		passed[name] = t.Run(name, checks[name])
	}
	for i := range p.walks {
		w := *p
		if i > 0 {
			w.prefix = fmt.Sprintf("%sw%d-", p.prefix, i)
		}
		t.Run("migration walk-through", w.checkWalkthrough)
	}
	return passed
}

const matrixPartitions = 2

// setup writes the pair's topics on the source, mirrors them, and waits until the
// destination has caught up.
func (p *matrixPair) setup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p.src.CreateKeptTopic(t, p.topic("plain"), matrixPartitions)
	produce(t, p.src, p.topic("plain"), matrixPartitions, 150, kgo.ZstdCompression())
	p.src.CreateKeptTopic(t, p.topic("trimmed"), 1)
	produce(t, p.src, p.topic("trimmed"), 1, 100, kgo.Lz4Compression())
	trim := kadm.Offsets{}
	trim.Add(kadm.Offset{Topic: p.topic("trimmed"), Partition: 0, At: 37})
	if _, err := kadm.NewClient(p.src.Client(t)).DeleteRecords(ctx, trim); err != nil {
		t.Fatal(err)
	}
	p.compact(t, ctx)
	p.src.CreateKeptTopic(t, p.topic("txn"), matrixPartitions)
	if _, _, err := txnRounds(t, ctx, p.src, p.prefix+"app-tx", p.topic("txn"), matrixPartitions, 6, "before"); err != nil {
		t.Fatal(err)
	}
	stableEnds(t, p.src.Client(t), p.topic("txn"))
	p.txnEnd = sentinels(t, ctx, p.src, p.topic("txn"), matrixPartitions)
	p.src.CreateKeptTopic(t, p.topic("pat-a"), 1)
	produce(t, p.src, p.topic("pat-a"), 1, 20, kgo.NoCompression())
	p.commitGroup(t, ctx)

	// The mode is what CreateMirror and AddTopicsToMirror found (they log it).
	pair, err := compat.CheckClusters(ctx, kadm.NewClient(p.src.Client(t)), kadm.NewClient(p.dst.Client(t)))
	if err != nil {
		t.Fatal(err)
	}
	p.mode = string(pair.Mode)
	createMirror(t, p.admin, p.mirror, "bootstrap.servers", p.src.BootstrapString(), "metadata.refresh.interval.ms", "1000")
	p.add(t)
	// A topic created after AddTopicsToMirror: discovery by the pattern.
	p.src.CreateKeptTopic(t, p.topic("pat-b"), 1)
	produce(t, p.src, p.topic("pat-b"), 1, 20, kgo.NoCompression())
	waitMirrored(t, p.admin, p.mirror, p.sourceTotals(t, ctx))
	p.describedMode(t)
}

// describedMode checks that DescribeMirrors shows both clusters' releases and the mode.
func (p *matrixPair) describedMode(t *testing.T) {
	req := protocol.NewPtrDescribeMirrorsRequest()
	req.MirrorNames = []string{p.mirror}
	resp := request[*protocol.DescribeMirrorsResponse](t, p.admin, req)
	if len(resp.Mirrors) != 1 {
		t.Fatalf("describe %s: %+v", p.mirror, resp.Mirrors)
	}
	if got := deref(resp.Mirrors[0].Clusters); !strings.HasSuffix(got, ": "+p.mode) {
		t.Fatalf("describe %s: clusters %q, want the releases and mode %q", p.mirror, got, p.mode)
	}
	t.Logf("describe %s: %s", p.mirror, deref(resp.Mirrors[0].Clusters))
}

// compact writes a compacted topic until the source has compacted some of it away.
func (p *matrixPair) compact(t *testing.T, ctx context.Context) {
	topic := p.topic("compacted")
	compactedTopic(t, p.src, topic, 1)
	cl := p.src.Client(t)
	round := 0
	polltest.Eventually(t, 2*time.Minute, "the source compacted "+topic, func() (bool, string) {
		round++
		var recs []*kgo.Record
		for k := range 6 {
			recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "v%d@%d", k, round)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		h := compactedHoles(t, ctx, cl, topic, 1)
		return h >= 6, fmt.Sprintf("%d offsets compacted away", h)
	})
}

// commitGroup commits the pair's consumer group on the source, as a consumer that read part
// of the plain topic would have.
func (p *matrixPair) commitGroup(t *testing.T, ctx context.Context) {
	offs := kadm.Offsets{}
	for part := range int32(matrixPartitions) {
		offs.Add(kadm.Offset{Topic: p.topic("plain"), Partition: part, At: 40 + 30*int64(part), LeaderEpoch: -1})
	}
	resp, err := kadm.NewClient(p.src.Client(t)).CommitOffsets(ctx, p.prefix+"app", offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit group offsets on the source: %v", err)
	}
}

// add adds the topics by name and the pattern; the answer says the mode kmirror chose.
func (p *matrixPair) add(t *testing.T) {
	add := protocol.NewPtrAddTopicsToMirrorRequest()
	add.MirrorName = p.mirror
	for _, n := range []string{"plain", "trimmed", "compacted", "txn"} {
		add.Topics = append(add.Topics, protocol.AddTopicsToMirrorRequestTopic{Name: p.topic(n), NumPartitions: -1})
	}
	add.IncludePatterns = []string{p.prefix + "pat-.*"}
	r := request[*protocol.AddTopicsToMirrorResponse](t, p.admin, add)
	if r.ErrorCode != 0 {
		t.Fatalf("add topics to %s: %s", p.mirror, deref(r.ErrorMessage))
	}
	for _, tr := range r.Topics {
		if tr.ErrorCode != 0 {
			t.Fatalf("add %s to %s: %s", tr.Name, p.mirror, deref(tr.ErrorMessage))
		}
	}
}

// sourceTotals sums the source's end offsets per topic, as waitMirrored wants them.
func (p *matrixPair) sourceTotals(t *testing.T, ctx context.Context) map[string]int64 {
	topics := []string{p.topic("plain"), p.topic("trimmed"), p.topic("compacted"), p.topic("txn"), p.topic("pat-a"), p.topic("pat-b")}
	ends, err := kadm.NewClient(p.src.Client(t)).ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Topic] += o.Offset })
	return want
}

func (p *matrixPair) checkPlain(t *testing.T) {
	mirrortest.VerifyIdentical(t, p.src.Client(t), p.dst.Client(t), p.topic("plain"))
}

func (p *matrixPair) checkLogStart(t *testing.T) {
	got := mirrortest.VerifyIdentical(t, p.src.Client(t), p.dst.Client(t), p.topic("trimmed"))
	if ls := got[p.topic("trimmed")][0].LogStart; ls != 37 {
		t.Fatalf("trimmed/0 log start %d on both clusters, want 37", ls)
	}
}

func (p *matrixPair) checkCompacted(t *testing.T) {
	mirrortest.VerifyLog(t, p.src.Client(t), p.dst.Client(t), true, p.topic("compacted"))
}

// checkTransactional compares the log with its markers, then what consumers read at both
// isolation levels on the source and through kmirror.
func (p *matrixPair) checkTransactional(t *testing.T) {
	topic := p.topic("txn")
	mirrortest.VerifyLog(t, p.src.Client(t), p.dst.Client(t), false, topic)
	proxy := p.admin.OptValue(kgo.SeedBrokers).([]string)
	for part := range int32(matrixPartitions) {
		for _, committed := range []bool{false, true} {
			s := readUpTo(t, p.src.Bootstrap(), topic, part, committed, p.txnEnd[part])
			d := readUpTo(t, proxy, topic, part, committed, p.txnEnd[part])
			if strings.Join(s, "\n") != strings.Join(d, "\n") {
				t.Fatalf("%s/%d read_committed=%v: the source consumer saw %d records, the destination's %d", topic, part, committed, len(s), len(d))
			}
		}
	}
}

func (p *matrixPair) checkPatterns(t *testing.T) {
	mirrortest.VerifyIdentical(t, p.src.Client(t), p.dst.Client(t), p.topic("pat-a"), p.topic("pat-b"))
}

func (p *matrixPair) checkGroupOffsets(t *testing.T) {
	group, topic := p.prefix+"app", p.topic("plain")
	want := committedOffsets(t, p.src, group, topic)
	if len(want) != matrixPartitions {
		t.Fatalf("the source has offsets of %s for %d partitions, want %d", group, len(want), matrixPartitions)
	}
	polltest.Eventually(t, time.Minute, "group "+group+" synced", func() (bool, string) {
		got := committedOffsets(t, p.dst, group, topic)
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("destination %v, source %v", got, want)
	})
}

// checkReadOnly produces to a mirror topic through kmirror: refused, nothing written.
func (p *matrixPair) checkReadOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proxy := kafkatest.NewClient(t, p.admin.OptValue(kgo.SeedBrokers).([]string), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	err := proxy.ProduceSync(ctx, &kgo.Record{Topic: p.topic("plain"), Value: []byte("must not land")}).FirstErr()
	if !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to a mirror topic through kmirror: %v, want POLICY_VIOLATION", err)
	}
	mirrortest.VerifyIdentical(t, p.src.Client(t), p.dst.Client(t), p.topic("plain"))
}

// checkFailover removes the plain topic from the mirror: its last mirrored offsets are the
// source's ends, and the next record written through kmirror lands right after them.
func (p *matrixPair) checkFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := p.topic("plain")
	ends := endsOf(t, p.src, topic)
	remove := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	remove.MirrorName = p.mirror
	remove.Topics = []protocol.TopicName{{Name: topic}}
	if r := request[*protocol.RemoveTopicsFromMirrorResponse](t, p.admin, remove); r.ErrorCode != 0 || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("remove %s: %+v", topic, r)
	}
	polltest.Eventually(t, time.Minute, fmt.Sprintf("%s STOPPED at last mirrored offsets %v", topic, ends), func() (bool, string) {
		lmo := protocol.NewPtrLastMirroredOffsetsRequest()
		lmo.MirrorName = p.mirror
		lmo.Topics = []protocol.TopicPartitions{{Name: topic}}
		lr := request[*protocol.LastMirroredOffsetsResponse](t, p.admin, lmo)
		got := map[int32]int64{}
		for _, tp := range lr.Topics {
			for _, pp := range tp.Partitions {
				got[pp.Partition] = pp.LastMirroredOffset
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(ends), fmt.Sprintf("%v", got)
	})
	proxy := kafkatest.NewClient(t, p.admin.OptValue(kgo.SeedBrokers).([]string), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	rec := &kgo.Record{Topic: topic, Partition: 1, Value: []byte("after failover")}
	produceWhenWritable(t, ctx, proxy, rec)
	if rec.Offset != ends[1] {
		t.Fatalf("the first record after failover is at %s/1 offset %d, want %d (the last mirrored offset)", topic, rec.Offset, ends[1])
	}
}

// reportMatrix logs the table, and writes it to $KMIRROR_MATRIX_OUT for make matrix.
func reportMatrix(t *testing.T, rows []pairResult) {
	var b strings.Builder
	fmt.Fprintf(&b, "| source | destination | mode | %s | time |\n", strings.Join(matrixChecks, " | "))
	fmt.Fprintf(&b, "|%s\n", strings.Repeat("---|", len(matrixChecks)+4))
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |", r.src, r.dst, r.mode)
		for _, c := range matrixChecks {
			mark := "✗"
			if r.passed[c] {
				mark = "✓"
			}
			fmt.Fprintf(&b, " %s |", mark)
		}
		fmt.Fprintf(&b, " %s |\n", r.took.Round(time.Second))
	}
	t.Logf("version matrix:\n%s", b.String())
	if out := os.Getenv("KMIRROR_MATRIX_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write %s: %v", out, err)
		}
	}
}
