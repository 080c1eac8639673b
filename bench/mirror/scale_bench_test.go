package mirrorbench

// The scale case (issue 18): many source partitions added to one mirror by
// one pattern and mirrored by 2 kmirror instances on this machine. It times
// AddTopicsToMirror → every partition MIRRORING, one DescribeMirrors, an
// instance killed → its partitions copying on the other, failover of all of
// them by the same pattern → every partition STOPPED, and measures each
// instance's CPU and RSS and the `__mirror_state` records written while
// idle.
//
//	go test -run '^$' -bench Scale -benchtime 1x -timeout 30m ./bench/mirror/
//
// Quick by default (20 topics × 20 partitions); KMIRROR_BENCH_SCALE=full is
// 200 × 20 = 4,000 partitions.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

const scalePartsPerTopic = 20

func scaleTopics() int {
	if os.Getenv("KMIRROR_BENCH_SCALE") == "full" {
		return 200
	}
	return int(envInt("KMIRROR_BENCH_SCALE_TOPICS", 20))
}

// scaleFigure is one line of the scale table: what, measured, target.
type scaleFigure struct{ what, got, target string }

func BenchmarkScale(b *testing.B) {
	loadBefore := uptime()
	topics := scaleTopics()
	total := topics * scalePartsPerTopic
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	work := b.TempDir()
	e := &env{src: kafkatest.Start(b), dst: kafkatest.Start(b), kmirror: instancetest.Binary(b), work: work}
	names := scaleFill(ctx, b, e.src, topics)
	warmTransactions(ctx, b, e.dst)
	k1, k2 := startKmirror(b, e, e.kmirror, "scale-1"), startKmirror(b, e, e.kmirror, "scale-2")
	adm := kafkatest.NewClient(b, []string{k1.addr}, kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	var figs []scaleFigure
	add := func(what, got, target string) { figs = append(figs, scaleFigure{what, got, target}) }

	const mirror = "scale"
	create := protocol.NewPtrCreateMirrorRequest()
	create.MirrorName = mirror
	create.Configs = []protocol.CreateMirrorRequestConfig{{Name: "bootstrap.servers", Value: kmsg.StringPtr(e.src.BootstrapString())}}
	if cr := request[*protocol.CreateMirrorResponse](ctx, b, adm, create); cr.ErrorCode != 0 {
		b.Fatalf("create mirror: %s", deref(cr.ErrorMessage))
	}
	began := time.Now()
	addReq := protocol.NewPtrAddTopicsToMirrorRequest()
	addReq.MirrorName, addReq.IncludePatterns = mirror, []string{"scale-.*"}
	if ar := request[*protocol.AddTopicsToMirrorResponse](ctx, b, adm, addReq); ar.ErrorCode != 0 {
		b.Fatalf("add by pattern: %s", deref(ar.ErrorMessage))
	}
	waitStates(ctx, b, adm, mirror, "MIRRORING", total, 10*time.Minute)
	add(fmt.Sprintf("AddTopicsToMirror → %d partitions MIRRORING", total), secs(time.Since(began)), "≤ 60 s")
	waitCaughtUp(ctx, b, e, names)

	began = time.Now()
	if _, err := describeMirror(ctx, adm, mirror); err != nil {
		b.Fatal(err)
	}
	add("DescribeMirrors (the RPC behind --describe)", secs(time.Since(began)), "≤ 2 s")
	for _, format := range [][]string{nil, {"--json"}} {
		took, out := cliDescribe(ctx, b, e.kmirror, k1.addr, mirror, format...)
		add(fmt.Sprintf("`kmirror mirrors --describe %s` (the CLI, %d bytes printed)", strings.Join(format, " "), out), secs(took), "≤ 2 s")
	}

	idle := scaleIdle(ctx, b, e, []*kmirrorProc{k1, k2}, envDuration("KMIRROR_BENCH_SCALE_IDLE", 20*time.Second))
	figs = append(figs, idle...)

	// An instance killed: its partitions copy again on the other.
	_ = k2.cmd.Process.Kill()
	<-k2.exited
	began = time.Now()
	scaleProduce(ctx, b, e.src, names, 1)
	waitCaughtUp(ctx, b, e, names)
	add("instance killed → every partition copied again (one new record each)", secs(time.Since(began)), "≤ session timeout 6 s + 10 s")

	began = time.Now()
	rm := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	rm.MirrorName, rm.Patterns = mirror, []string{"scale-.*"}
	if rr := request[*protocol.RemoveTopicsFromMirrorResponse](ctx, b, adm, rm); rr.ErrorCode != 0 {
		b.Fatalf("remove by pattern: %s", deref(rr.ErrorMessage))
	}
	waitStates(ctx, b, adm, mirror, "STOPPED", total, 5*time.Minute)
	add("failover of all by one pattern → every partition STOPPED", secs(time.Since(began)), "≤ 30 s")

	var sb strings.Builder
	fmt.Fprintf(&sb, "\nscale: %d topics × %d partitions = %d, 2 instances\nscale: machine load before: %s\nscale: machine load after:  %s\n\n| figure | measured | target |\n|---|---:|---|\n",
		topics, scalePartsPerTopic, total, loadBefore, uptime())
	for _, f := range figs {
		fmt.Fprintf(&sb, "| %s | %s | %s |\n", f.what, f.got, f.target)
	}
	fmt.Print(sb.String())
}

// cliDescribe runs the kmirror CLI's describe of the mirror, as an operator would, and
// returns how long it took and how many bytes it printed.
func cliDescribe(ctx context.Context, b *testing.B, bin, addr, mirror string, extra ...string) (time.Duration, int) {
	b.Helper()
	args := append([]string{"mirrors", "--bootstrap-server", addr, "--describe", "--mirror", mirror}, extra...)
	began := time.Now()
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	took := time.Since(began)
	if err != nil {
		b.Fatalf("kmirror %s: %v", strings.Join(args, " "), err)
	}
	return took, len(out)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// scaleFill creates the topics in one CreateTopics and writes a few records
// to every partition.
func scaleFill(ctx context.Context, b *testing.B, c *kafkatest.Cluster, topics int) []string {
	b.Helper()
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("scale-%03d", i)
	}
	adm := kadm.NewClient(c.Client(b))
	resp, err := adm.CreateTopics(ctx, scalePartsPerTopic, 1, nil, names...)
	if err != nil {
		b.Fatal(err)
	}
	if err := resp.Error(); err != nil {
		b.Fatal(err)
	}
	polltest.Eventually(b, 5*time.Minute, "every source partition led", func() (bool, string) {
		ends, err := adm.ListEndOffsets(ctx, names...)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				n++
			}
		})
		return n == topics*scalePartsPerTopic, fmt.Sprintf("%d led", n)
	})
	scaleProduce(ctx, b, c, names, 10)
	return names
}

// scaleProduce writes n records to every partition of the topics.
func scaleProduce(ctx context.Context, b *testing.B, c *kafkatest.Cluster, names []string, n int) {
	b.Helper()
	cl := c.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	var recs []*kgo.Record
	for _, t := range names {
		for p := range int32(scalePartsPerTopic) {
			for i := range n {
				recs = append(recs, &kgo.Record{Topic: t, Partition: p, Value: fmt.Appendf(nil, "%s-%d-%d", t, p, i)})
			}
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatalf("produce: %v", err)
	}
}

// waitStates polls DescribeMirrors until n partitions are in state.
func waitStates(ctx context.Context, b *testing.B, cl *kgo.Client, mirror, state string, n int, limit time.Duration) {
	b.Helper()
	polltest.Eventually(b, limit, fmt.Sprintf("%d partitions %s", n, state), func() (bool, string) {
		st, err := describeMirror(ctx, cl, mirror)
		if err != nil {
			return false, err.Error()
		}
		return st.states[state] == n, st.String()
	})
}

// waitCaughtUp waits until every destination partition's end equals the source's.
func waitCaughtUp(ctx context.Context, b *testing.B, e *env, names []string) {
	b.Helper()
	src, dst := kadm.NewClient(e.src.Client(b)), kadm.NewClient(e.dst.Client(b))
	polltest.Eventually(b, 5*time.Minute, "destination caught up", func() (bool, string) {
		s, err := src.ListEndOffsets(ctx, names...)
		if err != nil {
			return false, err.Error()
		}
		d, err := dst.ListEndOffsets(ctx, names...)
		if err != nil {
			return false, err.Error()
		}
		behind := 0
		s.Each(func(o kadm.ListedOffset) {
			if got, ok := d.Lookup(o.Topic, o.Partition); !ok || got.Err != nil || got.Offset < o.Offset {
				behind++
			}
		})
		return behind == 0, fmt.Sprintf("%d partitions behind", behind)
	})
}

// scaleIdle measures the caught-up instances over d: CPU per instance (share
// of one core), RSS, and the records written to __mirror_state.
func scaleIdle(ctx context.Context, b *testing.B, e *env, ks []*kmirrorProc, d time.Duration) []scaleFigure {
	b.Helper()
	dst := kadm.NewClient(e.dst.Client(b))
	stateEnd := func() int64 {
		ends, err := dst.ListEndOffsets(ctx, "__mirror_state")
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += max(o.Offset, 0) })
		return n
	}
	cpu0 := make([]time.Duration, len(ks))
	for i, k := range ks {
		cpu0[i], _ = cpuOf(k.pid())
	}
	state0, began := stateEnd(), time.Now()
	// Said at once, not at the end as b.Log is: a profiler attaches to these
	// processes for the window (perf record -p; bench/README.md, "Scale").
	fmt.Fprintf(os.Stderr, "scale: idle window of %s begins: kmirror pids %d %d\n", d, ks[0].pid(), ks[len(ks)-1].pid())
	time.Sleep(d) // a measurement window, not a wait for a condition
	took := time.Since(began)
	var out []scaleFigure
	out = append(out, scaleFigure{"`__mirror_state` records written per second at idle", fmt.Sprintf("%.2f", float64(stateEnd()-state0)/took.Seconds()), "≈ 0"})
	for i, k := range ks {
		cpu, _ := cpuOf(k.pid())
		rss, _ := statusBytes(k.pid(), "VmRSS")
		out = append(out, scaleFigure{fmt.Sprintf("instance %d CPU at idle (share of a core)", i+1), fmt.Sprintf("%.1f %%", 100*(cpu-cpu0[i]).Seconds()/took.Seconds()), "≤ 3 %"},
			scaleFigure{fmt.Sprintf("instance %d RSS at idle", i+1), fmt.Sprintf("%.0f MiB", float64(rss)/(1<<20)), "≤ 256 MiB + copy buffer (64 MiB)"})
	}
	return out
}

// warmTransactions makes the destination create its transaction state topic before anything is
// timed: a fresh cluster creates __transaction_state (50 partitions) at the first
// InitProducerId, and until it is led every coordinator lookup answers COORDINATOR_NOT_AVAILABLE.
// On a loaded machine that took 10–30 s of the first start-up figure, a cost no destination in
// service pays (it has the topic since its first transactional producer).
func warmTransactions(ctx context.Context, b *testing.B, c *kafkatest.Cluster) {
	b.Helper()
	cl := c.Client(b)
	polltest.Eventually(b, 3*time.Minute, "the destination's transaction coordinator answers", func() (bool, string) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr("bench-warm-up"), 60_000
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return false, err.Error()
		}
		if resp.ErrorCode != 0 {
			return false, fmt.Sprintf("error code %d", resp.ErrorCode)
		}
		return true, ""
	})
}
