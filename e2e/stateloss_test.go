package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/mirrortest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/internal/syncbuf"
	"github.com/kmirror/kmirror/mirrorcli"
	"github.com/kmirror/kmirror/protocol"
)

// logBuffer collects an instance's log lines (and copies warnings to stderr).
type logBuffer struct{ syncbuf.Buffer }

func (l *logBuffer) Write(p []byte) (int, error) {
	os.Stderr.Write(p) //nolint:errcheck // a copy for the reader of a failed test
	return l.Buffer.Write(p)
}

// lines returns the log lines that contain every one of substrs.
func (l *logBuffer) lines(substrs ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		all := line != ""
		for _, s := range substrs {
			all = all && strings.Contains(line, s)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

func capturedLogger() (*slog.Logger, *logBuffer) {
	buf := &logBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelWarn})), buf
}

// metricValue reads one series (name, labels ignored) from an instance's metrics; -1 if absent.
func metricValue(t *testing.T, in *instance.Instance, name string) float64 {
	t.Helper()
	body := scrape(t, in.Proxy.MetricsAddr())
	m := regexp.MustCompile(`(?m)^` + name + `(?:\{[^}]*\})? ([0-9.e+-]+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// refusedThroughProxy produces one record to topic through kmirror and returns the error.
func refusedThroughProxy(t *testing.T, in *instance.Instance, topic string) error {
	t.Helper()
	cl := kafkatest.NewClient(t, []string{in.Proxy.Addr()}, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(0))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("must not land")}).FirstErr()
}

func destinationEnds(t *testing.T, c *kafkatest.Cluster, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := kadm.NewClient(c.Client(t)).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// waitMarked waits until the mirror's owner has written the mark that
// survives the state topic, read straight at the destination broker.
func waitMarked(t *testing.T, ctx context.Context, directAdm *kadm.Client) {
	t.Helper()
	polltest.Eventually(t, time.Minute, "the mirror topic marked in "+statetopic.MarksTopicName, func() (bool, string) {
		ends, err := directAdm.ListEndOffsets(ctx, statetopic.MarksTopicName)
		if err != nil {
			return false, err.Error()
		}
		e, _ := ends.Lookup(statetopic.MarksTopicName, 0)
		return e.Err == nil && e.Offset > 0, fmt.Sprintf("end %d err %v", e.Offset, e.Err)
	})
}

// TestStateLoss: records in __mirror_state that do not decode, and the
// topic itself deleted, both straight at the broker (bypassing kmirror).
// A junk record is logged, counted and not applied, and mirroring goes on.
// A deleted state topic keeps the mirror topic read-only (also after a
// restart), stops the copy, is logged at ERROR and reported by list,
// describe and metrics; `kmirror mirrors --recover-state` continues the copy
// from the destination log end, and the destination ends identical to the
// source, offset by offset (a plain topic record by record; a transactional
// one with every commit and abort marker, written before, during and after
// the loss).
func TestStateLoss(t *testing.T) {
	r := startStateLossRun(t)
	r.junkRecordsAreSkipped()
	r.deletedStateIsReported()
	r.restartRemembersTheLoss()
	r.recoverState()
}

// stateLossRun is TestStateLoss's world: a mirror dr of a plain topic
// (orders) and a transactional one (payments), one kmirror in front of the
// destination (replaced by a second one on restart) and a client straight
// at the destination broker, bypassing kmirror.
type stateLossRun struct {
	t         *testing.T
	ctx       context.Context
	src, dst  *kafkatest.Cluster
	km        *instance.Instance
	cl        *kgo.Client // admin through km
	logs      *logBuffer  // km's log
	stop      func()      // stops km
	direct    *kgo.Client
	directAdm *kadm.Client
}

func startStateLossRun(t *testing.T) *stateLossRun {
	r := &stateLossRun{t: t, src: kafkatest.Start(t), dst: kafkatest.Start(t)}
	log1, logs1 := capturedLogger()
	r.km, r.stop = instancetest.StartStoppable(t, r.dst, log1)
	r.logs = logs1
	r.cl = admin(t, r.km.Proxy.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	r.ctx = ctx
	r.src.CreateKeptTopic(t, "orders", 2)
	produce(t, r.src, "orders", 2, 500, kgo.Lz4Compression())
	// A transactional topic too: its markers must land at the source's offsets
	// across the loss and the recovery.
	r.src.CreateKeptTopic(t, "payments", 2)
	r.txns("before", 6)
	createMirror(t, r.cl, "dr", "bootstrap.servers", r.src.BootstrapString())
	addTopics(t, r.cl, "dr", "orders", "payments")
	waitMirrored(t, r.cl, "dr", map[string]int64{"orders": 1000})
	r.direct = r.dst.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r.directAdm = kadm.NewClient(r.direct)
	return r
}

// txns commits and aborts rounds of transactions on the source's payments.
func (r *stateLossRun) txns(tag string, rounds int) {
	r.t.Helper()
	if _, _, err := txnRounds(r.t, r.ctx, r.src, "payments-app", "payments", 2, rounds, tag); err != nil {
		r.t.Fatal(err)
	}
}

// junkRecordsAreSkipped writes junk straight into __mirror_state: a key
// that is no key, and the key of the mirror topic's own record with a value
// that does not decode (applied, it would drop or change the topic).
func (r *stateLossRun) junkRecordsAreSkipped() {
	t, ctx, km := r.t, r.ctx, r.km
	topicKey := statetopic.MirrorTopicKey("dr", "orders")
	parts, err := km.Coord.StatePartitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	junk := []*kgo.Record{
		{Topic: statetopic.TopicName, Partition: 0, Key: []byte("junk"), Value: []byte("junk")},
		{Topic: statetopic.TopicName, Partition: topicKey.StatePartition(parts), Key: topicKey.Bytes(), Value: []byte{0, 0, '{', 'x'}},
	}
	if err := r.direct.ProduceSync(ctx, junk...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "both junk records logged at ERROR with partition and offset, and counted", func() (bool, string) {
		var found int
		for _, rec := range junk {
			want := fmt.Sprintf("partition=%d offset=%d", rec.Partition, rec.Offset)
			if len(r.logs.lines("level=ERROR", "undecodable mirror state record", want)) == 1 {
				found++
			}
		}
		n := metricValue(t, km, "kmirror_state_undecodable_records(?:_total)?")
		return found == 2 && n == 2, fmt.Sprintf("%d of 2 logged, counter %v", found, n)
	})
	produce(t, r.src, "orders", 2, 100, kgo.Lz4Compression())
	waitMirrored(t, r.cl, "dr", map[string]int64{"orders": 1200}) // the topic record was not touched
	if err := refusedThroughProxy(t, km, "orders"); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to the mirror topic after junk state records: %v, want POLICY_VIOLATION", err)
	}
	if v := metricValue(t, km, "kmirror_state_lost"); v != 0 {
		t.Fatalf("kmirror_state_lost = %v after junk records, want 0", v)
	}
}

// deletedStateIsReported deletes __mirror_state at the broker: the running
// instance reports the loss, keeps the topic read-only and copies nothing.
func (r *stateLossRun) deletedStateIsReported() {
	t, ctx, km, cl := r.t, r.ctx, r.km, r.cl
	waitMarked(t, ctx, r.directAdm) // the mark that survives the state topic
	if resps, err := r.directAdm.DeleteTopics(ctx, statetopic.TopicName); err != nil || resps.Error() != nil {
		t.Fatalf("deleting %s at the broker: %v %v", statetopic.TopicName, err, resps.Error())
	}
	polltest.Eventually(t, time.Minute, "the running instance reports the state lost", func() (bool, string) {
		errs := r.logs.lines("level=ERROR", "MIRROR STATE LOST")
		list := request[*protocol.ListMirrorsResponse](t, cl, protocol.NewPtrListMirrorsRequest())
		desc := request[*protocol.DescribeMirrorsResponse](t, cl, protocol.NewPtrDescribeMirrorsRequest())
		lost := metricValue(t, km, "kmirror_state_lost")
		ok := len(errs) > 0 && strings.Contains(errs[0], "mirror=dr") &&
			list.ErrorCode == protocol.ErrInvalidMirrorState.Code && strings.Contains(deref(list.ErrorMessage), "MIRROR STATE LOST") &&
			desc.ErrorCode == protocol.ErrInvalidMirrorState.Code && strings.Contains(deref(desc.ErrorMessage), "dr (topics orders,payments)") && lost == 1
		return ok, fmt.Sprintf("error lines %q; list %d %q; describe %d %q; gauge %v", errs, list.ErrorCode, deref(list.ErrorMessage), desc.ErrorCode, deref(desc.ErrorMessage), lost)
	})
	if n := len(r.logs.lines("level=ERROR", "MIRROR STATE LOST")); n != 1 {
		t.Fatalf("the loss was logged %d times, want once", n)
	}
	if err := refusedThroughProxy(t, km, "orders"); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to the mirror topic with the state topic deleted: %v, want POLICY_VIOLATION", err)
	}
	// Nothing is copied without state: records produced now stay on the source.
	produce(t, r.src, "orders", 2, 150, kgo.Lz4Compression())
	r.txns("during", 6)
	before := destinationEnds(t, r.dst, "orders")
	r.stop()
	if got := destinationEnds(t, r.dst, "orders"); got[0]+got[1] != 1200 || before[0]+before[1] != 1200 {
		t.Fatalf("the destination moved without state: %v, then %v, want 1200 records", before, got)
	}
	md, err := r.directAdm.Metadata(kadm.WithAuthorizedOps(ctx), statetopic.TopicName) // uncached
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := md.Topics[statetopic.TopicName]; ok && st.Err == nil {
		t.Fatalf("kmirror re-created %s on its own: an empty state would forget the mirror", statetopic.TopicName)
	}
}

// restartRemembersTheLoss starts a new instance: the marks keep the topic
// read-only, and list, describe, metrics and the CLI report the loss.
func (r *stateLossRun) restartRemembersTheLoss() {
	t := r.t
	log2, logs2 := capturedLogger()
	r.km, r.stop = instancetest.StartStoppable(t, r.dst, log2)
	r.logs, r.cl = logs2, admin(t, r.km.Proxy.Addr())
	km2, cl2 := r.km, r.cl
	if err := refusedThroughProxy(t, km2, "orders"); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to the mirror topic after a restart without state: %v, want POLICY_VIOLATION", err)
	}
	polltest.Eventually(t, time.Minute, "the restarted instance reports the state lost", func() (bool, string) {
		errs := logs2.lines("level=ERROR", "MIRROR STATE LOST")
		list := request[*protocol.ListMirrorsResponse](t, cl2, &protocol.ListMirrorsRequest{IncludeTopicNames: true})
		desc := request[*protocol.DescribeMirrorsResponse](t, cl2, protocol.NewPtrDescribeMirrorsRequest())
		lost := metricValue(t, km2, "kmirror_state_lost")
		descOK := len(desc.Mirrors) == 1 && desc.Mirrors[0].Name == "dr" && desc.Mirrors[0].ErrorCode == protocol.ErrInvalidMirrorState.Code &&
			strings.Contains(deref(desc.Mirrors[0].ErrorMessage), "MIRROR STATE LOST")
		listOK := list.ErrorCode == protocol.ErrInvalidMirrorState.Code && len(list.Mirrors) == 1 && list.Mirrors[0].Name == "dr" &&
			strings.Join(list.Mirrors[0].TopicNames, ",") == "orders,payments"
		ok := len(errs) == 1 && strings.Contains(errs[0], "topics=orders,payments") && listOK && descOK && lost == 1
		return ok, fmt.Sprintf("error lines %q; list %+v %q; describe %+v; gauge %v", errs, list.Mirrors, deref(list.ErrorMessage), desc.Mirrors, lost)
	})
	var out, errw bytes.Buffer
	if err := mirrorcli.Mirrors(r.ctx, []string{"--bootstrap-server", km2.Proxy.Addr(), "--list"}, &out, &errw); err == nil ||
		!strings.Contains(err.Error()+errw.String(), "MIRROR STATE LOST") {
		t.Fatalf("kmirror mirrors --list with the state lost: err %v, stdout %q, stderr %q", err, out.String(), errw.String())
	}
}

// recoverState runs the documented recovery (kmirror mirrors
// --recover-state): the copy continues from the destination log end and the
// destination ends identical to the source.
func (r *stateLossRun) recoverState() {
	t, ctx, km2, cl2 := r.t, r.ctx, r.km, r.cl
	conf := filepath.Join(t.TempDir(), "dr.properties")
	if err := os.WriteFile(conf, []byte("bootstrap.servers="+r.src.BootstrapString()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	if err := mirrorcli.Mirrors(ctx, []string{"--bootstrap-server", km2.Proxy.Addr(), "--recover-state", "--mirror", "dr", "--mirror-config", conf}, &out, &errw); err != nil {
		t.Fatalf("kmirror mirrors --recover-state: %v\n%s%s", err, out.String(), errw.String())
	}
	produce(t, r.src, "orders", 2, 200, kgo.Lz4Compression())
	r.txns("after", 3)
	var payments int64
	stableEnds(t, r.src.Client(t), "payments").Each(func(o kadm.ListedOffset) { payments += o.Offset })
	waitMirrored(t, cl2, "dr", map[string]int64{"orders": 1900, "payments": payments})
	mirrortest.VerifyIdentical(t, r.src.Client(t), r.direct, "orders")
	mirrortest.VerifyLog(t, r.src.Client(t), r.direct, false, "payments")
	if err := refusedThroughProxy(t, km2, "orders"); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to the recovered mirror topic: %v, want POLICY_VIOLATION", err)
	}
	polltest.Eventually(t, time.Minute, "the state no longer reported lost", func() (bool, string) {
		lost := metricValue(t, km2, "kmirror_state_lost")
		list := request[*protocol.ListMirrorsResponse](t, cl2, protocol.NewPtrListMirrorsRequest())
		return lost == 0 && list.ErrorCode == 0 && len(list.Mirrors) == 1, fmt.Sprintf("gauge %v, list %d %q", lost, list.ErrorCode, deref(list.ErrorMessage))
	})
	// And it goes on.
	produce(t, r.src, "orders", 2, 50, kgo.Lz4Compression())
	waitMirrored(t, cl2, "dr", map[string]int64{"orders": 2000})
	mirrortest.VerifyIdentical(t, r.src.Client(t), r.direct, "orders")
}
