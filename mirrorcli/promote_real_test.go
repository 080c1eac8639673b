package mirrorcli

// The recovery point report and the graceful promote (--wait-for-sync) on
// real Apache Kafka: two clusters, a real kmirror instance (copy pipeline
// included) in front of the destination, the CLI run in-process against it.
// One pair of clusters and one instance serve every subtest; each subtest
// has its own topics.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/metricstest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/internal/syncbuf"
)

// promoteWait bounds how long a subtest waits for the copy, on a machine
// shared with other builds.
const promoteWait = 2 * time.Minute

type promoteEnv struct {
	t        *testing.T
	src, dst *kafkatest.Cluster
	in       *instance.Instance
	srcAdm   *kadm.Client
	srcCl    *kgo.Client
}

func startPromoteEnv(t *testing.T) *promoteEnv {
	e := &promoteEnv{t: t, src: kafkatest.Start(t), dst: kafkatest.Start(t)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("KMIRROR_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	in := instancetest.Start(t, e.dst, log)
	e.in = in
	e.srcCl = e.src.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	e.srcAdm = kadm.NewClient(e.srcCl)
	cfg := writeFile(t, "dr.properties", "bootstrap.servers="+e.src.BootstrapString()+"\nfetch.wait.max.ms=100\nmetadata.refresh.interval.ms=1000\n")
	mustRun(t, 0, e.run("--create", "--mirror", "dr", "--mirror-config", cfg))
	return e
}

func (e *promoteEnv) run(args ...string) result {
	e.t.Helper()
	return runMirrors(e.t, append([]string{"--bootstrap-server", e.in.Proxy.Addr()}, args...)...)
}

func (e *promoteEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// topic creates a source topic that keeps its records (the tests write old
// timestamps) and adds it to the mirror.
func (e *promoteEnv) topic(name string, partitions int32) {
	e.t.Helper()
	e.src.CreateKeptTopic(e.t, name, partitions)
	mustRun(e.t, 0, e.run("--add", "--mirror", "dr", "--topics", name))
}

// produce writes n records to one partition, stamped at, at+1ms, ...
func (e *promoteEnv) produce(topic string, partition int32, n int, at time.Time) {
	e.t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "%s/%d #%d", topic, partition, i),
			Timestamp: at.Add(time.Duration(i) * time.Millisecond)})
	}
	if err := e.srcCl.ProduceSync(e.ctx(), recs...).FirstErr(); err != nil {
		e.t.Fatalf("produce to %s: %v", topic, err)
	}
}

// describe runs --describe --json for the mirror, keeping the named topic.
func (e *promoteEnv) describe(topic string) (*TopicJSON, *MirrorJSON, string) {
	e.t.Helper()
	r := e.run("--describe", "--mirror", "dr", "--json")
	if r.code != 0 {
		return nil, nil, r.String()
	}
	var d DescribeJSON
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		e.t.Fatalf("--json is not JSON: %v\n%s", err, r.stdout)
	}
	for i := range d.Mirrors[0].Topics {
		if d.Mirrors[0].Topics[i].Name == topic {
			return &d.Mirrors[0].Topics[i], &d.Mirrors[0], r.stdout
		}
	}
	return nil, &d.Mirrors[0], r.stdout
}

func show(p PartitionJSON) string {
	v := func(x *int64) string {
		if x == nil {
			return "null"
		}
		return strconv.FormatInt(*x, 10)
	}
	s := "null"
	if p.SecondsAtRisk != nil {
		s = strconv.FormatFloat(*p.SecondsAtRisk, 'f', 3, 64)
	}
	return fmt.Sprintf("%d %s src %s dst %s at-risk %s/%ss", p.Partition, p.State, v(p.SourceHighWatermark), v(p.DestinationHighWatermark), v(p.RecordsAtRisk), s)
}

// waitPartitions polls describe until every partition of topic satisfies ok.
func (e *promoteEnv) waitPartitions(topic, what string, ok func(p PartitionJSON) bool) *TopicJSON {
	e.t.Helper()
	var last *TopicJSON
	polltest.Eventually(e.t, promoteWait, topic+": "+what, func() (bool, string) {
		tj, _, out := e.describe(topic)
		if tj == nil {
			return false, out
		}
		last = tj
		var seen []string
		all := len(tj.Partitions) > 0
		for _, p := range tj.Partitions {
			seen = append(seen, show(p))
			all = all && ok(p)
		}
		return all, strings.Join(seen, "; ")
	})
	return last
}

func caughtUp(p PartitionJSON) bool {
	return p.State == "MIRRORING" && p.RecordsAtRisk != nil && *p.RecordsAtRisk == 0 &&
		p.SecondsAtRisk != nil && *p.SecondsAtRisk == 0
}

// metric returns the value of a kmirror_mirror_* series for a partition of
// the mirror dr, if the instance exports it.
func (e *promoteEnv) metric(name, topic string, partition int32) (float64, bool, string) {
	body, err := metricstest.Scrape(e.in.Proxy.MetricsAddr())
	if err != nil {
		return 0, false, err.Error()
	}
	re := regexp.MustCompile(`(?m)^` + name + `\{[^}]*mirror="dr"[^}]*partition="` + strconv.Itoa(int(partition)) + `"[^}]*topic="` + topic + `"[^}]*\} ([0-9.e+-]+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if strings.Contains(l, "at_risk") {
				lines = append(lines, l)
			}
		}
		return 0, false, "no " + name + " for " + topic + " in:\n" + strings.Join(lines, "\n")
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil, m[0]
}

func TestRecoveryPointRealKafka(t *testing.T) {
	e := startPromoteEnv(t)
	t.Run("RecordsAndAgeWhileLagging", e.recoveryPoint)
	t.Run("PromoteWaitsUntilProducersStopAndCopyCatchesUp", e.promoteAfterCatchUp)
	t.Run("PromoteTimesOutOnOpenSourceTransaction", e.promoteRefusedWithOpenTransaction)
}

// rpoAtRisk is how many records recoveryPoint writes to rpo-0 while the
// mirror is paused, so how many it expects at risk.
const rpoAtRisk = 7

// While a paused mirror lags, the report shows exactly the records written
// since, aged by their own timestamps; once the copy catches up, 0 and 0.
func (e *promoteEnv) recoveryPoint(t *testing.T) {
	e.t = t
	e.rpoCaughtUpWithGroup(t)

	mustRun(t, 0, e.run("--pause", "--mirror", "dr", "--topics", "rpo"))
	e.waitPartitions("rpo", "PAUSED", func(p PartitionJSON) bool { return p.State == "PAUSED" })
	stamped := time.Now().Add(-90 * time.Second).Truncate(time.Millisecond)
	e.produce("rpo", 0, rpoAtRisk, stamped)
	e.rpoReportWhilePaused(t, stamped)
	e.rpoTableWhilePaused(t)
	e.rpoGaugesWhilePaused(t, stamped)
	e.rpoCaughtUpAfterResume(t)
}

// rpoCaughtUpWithGroup creates rpo with five records in each partition and
// a consumer group on the source, and waits until the copy caught up and
// the summary shows the group.
func (e *promoteEnv) rpoCaughtUpWithGroup(t *testing.T) {
	t.Helper()
	e.topic("rpo", 2)
	e.produce("rpo", 0, 5, time.Now())
	e.produce("rpo", 1, 5, time.Now())
	// A consumer group on the source, for the summary's group row.
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "rpo", Partition: 0, At: 3})
	if _, err := e.srcAdm.CommitOffsets(e.ctx(), "rpo-readers", offs); err != nil {
		t.Fatal(err)
	}
	e.waitPartitions("rpo", "MIRRORING, caught up, nothing at risk", func(p PartitionJSON) bool {
		return caughtUp(p) && *p.SourceHighWatermark == 5
	})
	// The summary's group row: how old the group's synced offsets are.
	polltest.Eventually(t, promoteWait, "the summary shows rpo-readers' synced offsets", func() (bool, string) {
		r := e.run("--describe", "--mirror", "dr")
		return regexp.MustCompile(`(?m)^dr\s+group rpo-readers\s+-\s+\d+\.\d\s+offsets synced \d+s ago \(SYNCED\)$`).MatchString(r.stdout), r.String()
	})
}

// rpoReportWhilePaused waits until describe --json counts the records
// written to rpo-0 while paused (stamped at stamped), then checks every
// figure of both partitions and of the topic.
func (e *promoteEnv) rpoReportWhilePaused(t *testing.T, stamped time.Time) {
	t.Helper()
	const n = rpoAtRisk
	tj := e.waitPartitions("rpo", fmt.Sprintf("partition 0 has %d records at risk", n), func(p PartitionJSON) bool {
		return p.Partition != 0 || (p.RecordsAtRisk != nil && *p.RecordsAtRisk == n)
	})
	checked := time.Now()
	p0, p1 := tj.Partitions[0], tj.Partitions[1]
	// The oldest at risk is the first record written while paused: its age
	// is measured after it was stamped and before describe answered.
	if p0.SecondsAtRisk == nil || *p0.SecondsAtRisk < 90 || *p0.SecondsAtRisk > checked.Sub(stamped).Seconds()+1 {
		t.Fatalf("partition 0: seconds at risk %v, want the age of a record stamped %s (90s to %.1fs)", show(p0), stamped, checked.Sub(stamped).Seconds())
	}
	if *p0.DestinationHighWatermark != 5 || *p0.SourceHighWatermark != 5+n {
		t.Fatalf("partition 0: %s, want source 12, destination 5", show(p0))
	}
	if !(p1.RecordsAtRisk != nil && *p1.RecordsAtRisk == 0 && *p1.SecondsAtRisk == 0) {
		t.Fatalf("partition 1 (nothing written while paused): %s, want 0 records and 0 seconds at risk", show(p1))
	}
	if tj.AtRisk.Records != n || tj.AtRisk.PartitionsBehind != 1 || tj.AtRisk.Seconds < 90 || tj.AtRisk.PartitionsUnknown != 0 {
		t.Fatalf("topic total %+v, want %d records on 1 partition, >= 90 s", tj.AtRisk, n)
	}
}

// rpoTableWhilePaused checks the partition rows and the summary's topic and
// mirror rows of the describe table while rpo lags.
func (e *promoteEnv) rpoTableWhilePaused(t *testing.T) {
	t.Helper()
	table := mustRun(t, 0, e.run("--describe", "--mirror", "dr"))
	for _, re := range []string{
		`(?m)^dr\s+rpo\s+0\s+PAUSED\s+12\s+5\s+7\s+-\s+7\s+(9\d|1\d\d)\.\d$`,
		`(?m)^dr\s+rpo\s+1\s+PAUSED\s+5\s+5\s+0\s+-\s+0\s+0\.0$`,
		`(?m)^dr\s+topic rpo\s+7\s+(9\d|1\d\d)\.\d\s+1 of 2 partitions behind$`,
		`(?m)^dr\s+mirror dr\s+7\s+(9\d|1\d\d)\.\d\s+1 of 2 partitions behind$`,
	} {
		if !regexp.MustCompile(re).MatchString(table.stdout) {
			t.Fatalf("--describe does not match %s:\n%s", re, table)
		}
	}
}

// rpoGaugesWhilePaused waits for the at-risk gauges of rpo, from the
// instance coordinating the mirror (the only one), to show what the report
// shows.
func (e *promoteEnv) rpoGaugesWhilePaused(t *testing.T, stamped time.Time) {
	t.Helper()
	const n = rpoAtRisk
	polltest.Eventually(t, promoteWait, "at-risk gauges of rpo-0", func() (bool, string) {
		records, ok, detail := e.metric("kmirror_mirror_at_risk_records", "rpo", 0)
		if !ok || records != n {
			return false, detail
		}
		secs, ok, detail := e.metric("kmirror_mirror_at_risk_seconds", "rpo", 0)
		if !ok || secs < 90 || secs > time.Since(stamped).Seconds()+1 {
			return false, fmt.Sprintf("%s (want %.0f..%.1f)", detail, 90.0, time.Since(stamped).Seconds())
		}
		other, ok, detail := e.metric("kmirror_mirror_at_risk_records", "rpo", 1)
		return ok && other == 0, detail
	})
}

// rpoCaughtUpAfterResume resumes rpo and waits until nothing is at risk,
// in the report and the gauges.
func (e *promoteEnv) rpoCaughtUpAfterResume(t *testing.T) {
	t.Helper()
	mustRun(t, 0, e.run("--resume", "--mirror", "dr", "--topics", "rpo"))
	tj := e.waitPartitions("rpo", "caught up after resume", func(p PartitionJSON) bool {
		return caughtUp(p) && *p.DestinationHighWatermark == *p.SourceHighWatermark
	})
	if tj.AtRisk.Records != 0 || tj.AtRisk.Seconds != 0 || tj.AtRisk.PartitionsBehind != 0 {
		t.Fatalf("topic total after catching up: %+v", tj.AtRisk)
	}
	polltest.Eventually(t, promoteWait, "at-risk gauges of rpo-0 back to 0", func() (bool, string) {
		records, ok, detail := e.metric("kmirror_mirror_at_risk_records", "rpo", 0)
		if !ok || records != 0 {
			return false, detail
		}
		secs, ok, detail := e.metric("kmirror_mirror_at_risk_seconds", "rpo", 0)
		return ok && secs == 0, detail
	})
}

// --wait-for-sync waits while producers write and the copy lags, sends the
// failover once they stopped and the copy caught up, and every partition's
// LMO is then the source's end: nothing lost.
func (e *promoteEnv) promoteAfterCatchUp(t *testing.T) {
	e.t = t
	e.topic("promote", 2)
	e.produce("promote", 0, 20, time.Now())
	e.produce("promote", 1, 20, time.Now())
	e.waitPartitions("promote", "caught up", caughtUp)
	// Paused, the copy lags behind a producer that keeps writing.
	mustRun(t, 0, e.run("--pause", "--mirror", "dr", "--topics", "promote"))
	e.waitPartitions("promote", "PAUSED", func(p PartitionJSON) bool { return p.State == "PAUSED" })
	stop, produced := e.startLiveProducer()
	cmd := e.startPromoteWaitForSync()
	e.promoteWaitsWhilePaused(t, cmd)

	close(stop)
	if err := <-produced; err != nil {
		t.Fatalf("live producer: %v", err)
	}
	ends, err := e.srcAdm.ListEndOffsets(e.ctx(), "promote")
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, 0, e.run("--resume", "--mirror", "dr", "--topics", "promote"))
	e.promotedAtSourceEnd(t, cmd, ends)
	e.promoteWritable(t)
}

// startLiveProducer writes to both partitions of promote, one record at a
// time, until stop is closed or a write fails; the last error (nil after a
// stop) then comes on produced.
func (e *promoteEnv) startLiveProducer() (stop chan struct{}, produced chan error) {
	stop = make(chan struct{})
	produced = make(chan error, 1)
	go func() {
		var err error
		defer func() { produced <- err }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = e.srcCl.ProduceSync(ctx, &kgo.Record{Topic: "promote", Partition: int32(i % 2), Value: fmt.Appendf(nil, "live %d", i)}).FirstErr()
			cancel()
			if err != nil {
				return
			}
		}
	}()
	return stop, produced
}

// backgroundMirrors is a kmirror mirrors command run in the background, so
// that the test can watch its output while it waits.
type backgroundMirrors struct {
	out, errOut syncbuf.Buffer
	done        chan error
}

// startPromoteWaitForSync starts --remove --wait-for-sync of promote.
func (e *promoteEnv) startPromoteWaitForSync() *backgroundMirrors {
	c := &backgroundMirrors{done: make(chan error, 1)}
	go func() {
		c.done <- Mirrors(context.Background(), []string{"--bootstrap-server", e.in.Proxy.Addr(),
			"--remove", "--mirror", "dr", "--topics", "promote", "--wait-for-sync", "--timeout", "3m"}, &c.out, &c.errOut)
	}()
	return c
}

// notFinished fails the test if --wait-for-sync has returned: it must wait
// while the copy lags.
func (c *backgroundMirrors) notFinished(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		t.Fatalf("--wait-for-sync returned (%v) while the copy lags:\n%s\n%s", err, c.out.String(), c.errOut.String())
	default:
	}
}

// promoteWaitsWhilePaused checks that --wait-for-sync reports that it
// waits, and sends nothing, while promote is paused.
func (e *promoteEnv) promoteWaitsWhilePaused(t *testing.T, cmd *backgroundMirrors) {
	t.Helper()
	polltest.Eventually(t, promoteWait, "--wait-for-sync reports it waits", func() (bool, string) {
		cmd.notFinished(t)
		return strings.Contains(cmd.out.String(), "Waiting for sync: 0 of 2 partitions in sync; pending: promote-0 PAUSED, "), cmd.out.String()
	})
	// Still waiting and nothing sent: the topic has not begun to fail over.
	tj, _, _ := e.describe("promote")
	for _, p := range tj.Partitions {
		if p.State != "PAUSED" {
			t.Fatalf("while --wait-for-sync waits, %s", show(p))
		}
	}
	cmd.notFinished(t)
}

// promotedAtSourceEnd waits for --wait-for-sync to finish once the copy
// can catch up, and checks that every partition of promote is STOPPED with
// its LMO at the source's end, ends, read after the producer stopped.
func (e *promoteEnv) promotedAtSourceEnd(t *testing.T, cmd *backgroundMirrors, ends kadm.ListedOffsets) {
	t.Helper()
	var err error
	select {
	case err = <-cmd.done:
	case <-time.After(promoteWait):
		t.Fatalf("--wait-for-sync did not finish after the copy could catch up:\n%s\n%s", cmd.out.String(), cmd.errOut.String())
	}
	t.Logf("--wait-for-sync:\n%s%s", cmd.out.String(), cmd.errOut.String())
	if err != nil {
		t.Fatalf("--wait-for-sync failed: %v\n%s\n%s", err, cmd.out.String(), cmd.errOut.String())
	}
	mustContain(t, "--wait-for-sync", cmd.out.String(), "All 2 partitions of promote in sync (nothing at risk)", "Topic promote: failover requested",
		"All 2 partitions of promote STOPPED")
	if strings.Contains(cmd.errOut.String(), "warning") {
		t.Fatalf("--wait-for-sync warns although the producers had stopped:\n%s", cmd.errOut.String())
	}
	for p := int32(0); p < 2; p++ {
		end, _ := ends.Lookup("promote", p)
		if end.Offset <= 20 {
			t.Fatalf("promote-%d: the live producer wrote nothing (end %d): the test proves nothing", p, end.Offset)
		}
		row := fmt.Sprintf(`(?m)^dr\s+promote\s+%d\s+STOPPED\s+%d\s+%d\s+0\s+%d\s+-\s+-$`, p, end.Offset, end.Offset, end.Offset)
		if !regexp.MustCompile(row).MatchString(cmd.out.String()) {
			t.Fatalf("promote-%d: no STOPPED row with LMO = source end %d:\n%s", p, end.Offset, cmd.out.String())
		}
	}
}

// promoteWritable checks that promote takes writes through kmirror after
// the promote.
func (e *promoteEnv) promoteWritable(t *testing.T) {
	t.Helper()
	// Writable now, once kmirror has rebuilt its read-only set from the STOPPED state (it
	// does so in the background, a moment after DescribeMirrors shows it): retried while
	// refused as read-only, any other error fails.
	viaProxy := kafkatest.NewClient(t, []string{e.in.Proxy.Addr()}, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := e.ctx()
	polltest.Eventually(t, 30*time.Second, "produce to promote let through after the promote", func() (bool, string) {
		err := viaProxy.ProduceSync(ctx, &kgo.Record{Topic: "promote", Partition: 0, Value: []byte("after promote")}).FirstErr()
		if err != nil && !errors.Is(err, kerr.PolicyViolation) {
			t.Fatalf("produce after the promote: %v", err)
		}
		return err == nil, fmt.Sprint(err)
	})
}

// A source transaction left open keeps records at risk (the copy stops at
// the last stable offset): --wait-for-sync gives up at --timeout, says what
// would be lost, and sends nothing. Once the transaction commits, it
// promotes.
func (e *promoteEnv) promoteRefusedWithOpenTransaction(t *testing.T) {
	e.t = t
	e.topic("txn", 1)
	e.produce("txn", 0, 3, time.Now())
	e.waitPartitions("txn", "caught up", caughtUp)

	txn := e.src.Client(t, kgo.TransactionalID("rpo-open-txn"), kgo.TransactionTimeout(5*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	stamped := time.Now().Add(-30 * time.Second).Truncate(time.Millisecond)
	for i := range 2 {
		if err := txn.ProduceSync(e.ctx(), &kgo.Record{Topic: "txn", Partition: 0, Value: fmt.Appendf(nil, "open %d", i), Timestamp: stamped}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	e.waitPartitions("txn", "the open transaction's 2 records at risk", func(p PartitionJSON) bool {
		return p.State == "MIRRORING" && p.RecordsAtRisk != nil && *p.RecordsAtRisk == 2 && *p.DestinationHighWatermark == 3
	})

	// Long enough for a describe or two on a slow machine (the progress line comes from a
	// complete one), short against the transaction's 5 minutes: the wait must time out.
	const timeout = "15s"
	r := mustRun(t, 1, e.run("--remove", "--mirror", "dr", "--topics", "txn", "--wait-for-sync", "--timeout", timeout))
	t.Logf("--wait-for-sync with an open source transaction:\n%s", r)
	mustContain(t, "timeout output", r.stdout, "Waiting for sync: 0 of 1 partition in sync; pending: txn-0 MIRRORING, 2 records at risk",
		"Not failing over: after --timeout "+timeout)
	m := regexp.MustCompile(`(?m)^txn\s+0\s+MIRRORING\s+2\s+(\d+\.\d)$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no per-partition row with 2 records at risk:\n%s", r)
	}
	if secs, _ := strconv.ParseFloat(m[1], 64); secs < 30 || secs > time.Since(stamped).Seconds()+1 || math.IsNaN(secs) {
		t.Fatalf("txn-0 seconds at risk %s, want the age of records stamped %s", m[1], stamped)
	}
	if !regexp.MustCompile(`(?m)^TOTAL\s+-\s+-\s+2\s+\d+\.\d$`).MatchString(r.stdout) {
		t.Fatalf("no total row:\n%s", r)
	}
	mustContain(t, "timeout error", r.stderr, "timed out after --timeout "+timeout+" waiting for txn to be in sync: a failover now would lose 2 records",
		"nothing was sent, the topics still mirror and stay read-only", "end (commit or abort) open transactions on the source")
	if strings.Contains(r.stdout, "failover requested") {
		t.Fatalf("the failover was sent:\n%s", r)
	}
	// Nothing sent: still MIRRORING, still read-only.
	tj, _, _ := e.describe("txn")
	if p := tj.Partitions[0]; p.State != "MIRRORING" {
		t.Fatalf("after the timeout: %s", show(p))
	}
	viaProxy := kafkatest.NewClient(t, []string{e.in.Proxy.Addr()}, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := viaProxy.ProduceSync(e.ctx(), &kgo.Record{Topic: "txn", Partition: 0, Value: []byte("must not land")}).FirstErr(); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to txn through kmirror after the timeout: %v, want POLICY_VIOLATION (read-only)", err)
	}

	// The transaction ends: the copy reaches the source's end (records and
	// marker) and the promote goes through.
	if err := txn.EndTransaction(e.ctx(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, 0, e.run("--remove", "--mirror", "dr", "--topics", "txn", "--wait-for-sync", "--timeout", "2m"))
	t.Logf("--wait-for-sync after the commit:\n%s", r)
	if !regexp.MustCompile(`(?m)^dr\s+txn\s+0\s+STOPPED\s+6\s+6\s+0\s+6\s+-\s+-$`).MatchString(r.stdout) {
		t.Fatalf("txn-0 not STOPPED with LMO 6 (3 records, 2 committed in a transaction, its marker):\n%s", r)
	}
}
