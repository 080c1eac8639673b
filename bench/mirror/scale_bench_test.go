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
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/metricstest"
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
	e := &env{src: kafkatest.Start(b), dst: kafkatest.Start(b, destinationProps()...), kmirror: instancetest.Binary(b), work: work}
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
	figs = append(figs, scaleLoad(ctx, b, e, names)...)

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
	req0 := make([]map[string]float64, len(ks))
	for i, k := range ks {
		cpu0[i], _ = cpuOf(k.pid())
		req0[i] = clientRequests(b, k)
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
		req := clientRequests(b, k)
		for _, cluster := range []string{"source", "destination"} {
			out = append(out, scaleFigure{fmt.Sprintf("instance %d requests per second to the %s at idle (%s)", i+1, cluster, topAPIs(req0[i], req, cluster, took)),
				fmt.Sprintf("%.1f", (req[cluster]-req0[i][cluster])/took.Seconds()), "–"})
		}
		cpu, _ := cpuOf(k.pid())
		rss, _ := statusBytes(k.pid(), "VmRSS")
		out = append(out, scaleFigure{fmt.Sprintf("instance %d CPU at idle (share of a core)", i+1), fmt.Sprintf("%.1f %%", 100*(cpu-cpu0[i]).Seconds()/took.Seconds()), "≤ 3 %"},
			scaleFigure{fmt.Sprintf("instance %d RSS at idle", i+1), fmt.Sprintf("%.0f MiB", float64(rss)/(1<<20)), fmt.Sprintf("≤ 256 MiB + copy buffer (%d MiB)", mirrorconfig.Parse(nil).BufferMaxBytes>>20)})
	}
	return out
}

// Steady load over every partition: scaleLoadBytes produced as fast as one franz-go producer
// can (raw produce, timed), copied meanwhile (timed from the first produce until every
// destination partition has caught up), then half the raw rate for scaleLoadFor with every
// record's lag measured on the destination (its CreateTime to the moment a consumer of the
// destination has it: produce → readable, the same clock).
const (
	scaleLoadRecord = 512
	scaleLoadFor    = 15 * time.Second
)

// scaleLoadBytes is the steady load's size: 256 MB in the full case, where 32 MB took 1.4-4 s
// to produce and one late catch-up poll (every 0.5 s) moved the ratio to raw produce by a
// third (0.48-0.96 over six runs; 0.99 over 256 MB: bench/README.md, Scale, 2026-12-07).
func scaleLoadBytes() int64 {
	def := int64(32)
	if os.Getenv("KMIRROR_BENCH_SCALE") == "full" {
		def = 256
	}
	return envInt("KMIRROR_BENCH_SCALE_LOAD_MB", def) << 20
}

// loadPartition is a partition the steady load writes to.
type loadPartition struct {
	Topic     string
	Partition int32
}

func scaleLoad(ctx context.Context, b *testing.B, e *env, names []string) []scaleFigure {
	b.Helper()
	var parts []loadPartition
	for _, t := range names {
		for p := range int32(scalePartsPerTopic) {
			parts = append(parts, loadPartition{t, p})
		}
	}
	prod := e.src.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	n := int(scaleLoadBytes() / scaleLoadRecord)
	recs := make([]*kgo.Record, n)
	value := make([]byte, scaleLoadRecord)
	for i := range recs {
		tp := parts[i%len(parts)]
		recs[i] = &kgo.Record{Topic: tp.Topic, Partition: tp.Partition, Value: value}
	}
	began := time.Now()
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatalf("load: %v", err)
	}
	raw := time.Since(began)
	waitCaughtUp(ctx, b, e, names)
	copied := time.Since(began)
	mb := float64(n*scaleLoadRecord) / 1e6
	rawRate, copyRate := mb/raw.Seconds(), mb/copied.Seconds()
	h := halfRate{e: e, names: names, parts: parts, prod: prod, perTick: max(1, int(rawRate/2*1e6/scaleLoadRecord/100))}
	h.run(ctx, b)
	pct := func(ds []time.Duration, q int) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[(len(ds)*q+99)/100-1]
	}
	return []scaleFigure{
		{fmt.Sprintf("steady load over every partition (%.0f MB of %d-byte records): raw produce", mb, scaleLoadRecord), fmt.Sprintf("%.1f MB/s", rawRate), "–"},
		{"steady load: copied (first produce → every destination partition caught up)", fmt.Sprintf("%.1f MB/s = %.2f× raw", copyRate, copyRate/rawRate), "≥ 0.8× raw"},
		{fmt.Sprintf("lag of %d probes under half the raw rate (%d load records over %s), p50 / p99", len(h.probeLags), h.sent.Load(), scaleLoadFor),
			fmt.Sprintf("%d / %d ms", pct(h.probeLags, 50).Milliseconds(), pct(h.probeLags, 99).Milliseconds()), "p99 ≤ 250 ms"},
		{"baseline: the same probes read on the source itself by a consumer of it (produce → readable, no copy), p50 / p99",
			fmt.Sprintf("%d / %d ms", pct(h.srcProbeLags, 50).Milliseconds(), pct(h.srcProbeLags, 99).Milliseconds()), "–"},
		{"the load records' own lag (CreateTime → read on the destination, the load producer's queueing included), p50 / p99",
			fmt.Sprintf("%d / %d ms", pct(h.loadLags, 50).Milliseconds(), pct(h.loadLags, 99).Milliseconds()), "–"},
	}
}

// halfRate is the second half of the steady load: half the raw rate, paced every 10 ms by
// one producer, consumed on the destination from its end; meanwhile probes, one at a time
// from a producer of their own (acks=all, no linger), are timed from their produce call
// until the destination consumer has them (probeLag's method): the lag of a record that
// waits for nothing but the copy. A consumer of the source reads the same probes meanwhile:
// the lag of one hop, produce → readable, with no copy, under the same load on the same
// machine. Its p99 is what any program that reads the source starts from (the machine's
// baseline for the lag target).
type halfRate struct {
	e       *env
	names   []string
	parts   []loadPartition
	prod    *kgo.Client
	perTick int

	probesSeen   chan string // probes read on the destination
	srcSeen      chan string // probes read on the source
	read, sent   atomic.Int64
	loadLags     []time.Duration // the load records' CreateTime → read (the consumer goroutine's until done)
	probeLags    []time.Duration
	srcProbeLags []time.Duration
}

func (h *halfRate) run(ctx context.Context, b *testing.B) {
	b.Helper()
	cons := h.e.dst.Client(b, kgo.ConsumeTopics(h.names...), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	defer cons.Close()
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	srcCons := h.e.src.Client(b, kgo.ConsumeTopics(h.names...), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	defer srcCons.Close()
	h.probesSeen, h.srcSeen = make(chan string, 16), make(chan string, 16)
	ready, consumed := make(chan struct{}), make(chan struct{})
	srcReady, srcConsumed := make(chan struct{}), make(chan struct{})
	go h.consume(cctx, cons, h.probesSeen, true, ready, consumed)
	go h.consume(cctx, srcCons, h.srcSeen, false, srcReady, srcConsumed)
	// The consumers' first polls have their positions; records before them would be missed.
	for _, r := range []chan struct{}{ready, srcReady} {
		select {
		case <-r:
		case <-time.After(30 * time.Second):
		}
	}
	end := time.Now().Add(scaleLoadFor)
	loaded := make(chan struct{})
	go h.load(ctx, b, end, loaded)
	h.probe(ctx, b, end)
	<-loaded
	if err := h.prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	waitCaughtUp(ctx, b, h.e, h.names)
	polltest.Eventually(b, time.Minute, "the destination consumer read the half-rate load", func() (bool, string) {
		return h.read.Load() >= h.sent.Load(), fmt.Sprintf("%d of %d read", h.read.Load(), h.sent.Load())
	})
	stop()
	<-consumed
	<-srcConsumed
	if len(h.probeLags) == 0 {
		b.Fatal("no probe was timed under the half-rate load")
	}
}

// consume reads a cluster: probes go to seen; on the destination (load), the load records'
// lags to loadLags.
func (h *halfRate) consume(ctx context.Context, cons *kgo.Client, seen chan string, load bool, ready, consumed chan struct{}) {
	defer close(consumed)
	once := false
	for ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		if !once {
			once = true
			close(ready)
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			if v := string(r.Value); strings.HasPrefix(v, "probe-") {
				seen <- v
				return
			}
			if load {
				h.loadLags = append(h.loadLags, now.Sub(r.Timestamp))
			}
		})
		if load {
			h.read.Store(int64(len(h.loadLags)))
		}
	}
}

// load produces perTick records every 10 ms until end.
func (h *halfRate) load(ctx context.Context, b *testing.B, end time.Time, loaded chan struct{}) {
	defer close(loaded)
	value := make([]byte, scaleLoadRecord)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; time.Now().Before(end); {
		<-tick.C
		for range h.perTick {
			tp := h.parts[i%len(h.parts)]
			i++
			h.prod.Produce(ctx, &kgo.Record{Topic: tp.Topic, Partition: tp.Partition, Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Errorf("load at half rate: %v", err)
				}
			})
			h.sent.Add(1)
		}
	}
}

// probe times single records, one at a time, until end or probes of them.
func (h *halfRate) probe(ctx context.Context, b *testing.B, end time.Time) {
	b.Helper()
	probeProd := h.e.src.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	defer probeProd.Close()
	for i := 0; time.Now().Before(end) && i < probes; i++ {
		val := fmt.Sprintf("probe-%d", i)
		tp := h.parts[(i*7919)%len(h.parts)]
		began := time.Now()
		if err := probeProd.ProduceSync(ctx, &kgo.Record{Topic: tp.Topic, Partition: tp.Partition, Value: []byte(val)}).FirstErr(); err != nil {
			b.Fatalf("probe %d: %v", i, err)
		}
		// Both consumers have it: the source's first, as a rule, but either order is timed.
		var onSrc, onDst time.Duration
		for onSrc == 0 || onDst == 0 {
			select {
			case seen := <-h.probesSeen:
				if seen == val {
					onDst = time.Since(began)
				}
			case seen := <-h.srcSeen:
				if seen == val {
					onSrc = time.Since(began)
				}
			case <-time.After(time.Minute):
				b.Fatalf("probe %d not read on both clusters within a minute under the half-rate load (source %s, destination %s)", i, onSrc, onDst)
			}
		}
		h.probeLags, h.srcProbeLags = append(h.probeLags, onDst), append(h.srcProbeLags, onSrc)
	}
}

// clientRequests reads an instance's kmirror_client_requests_total: the sum per cluster
// under "source" and "destination", and per "cluster/api".
func clientRequests(b *testing.B, k *kmirrorProc) map[string]float64 {
	b.Helper()
	body, err := metricstest.Scrape(k.metrics)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, "kmirror_client_requests_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		cluster, api := label(labels, "cluster"), label(labels, "api")
		out[cluster] += v
		out[cluster+"/"+api] += v
	}
	return out
}

// label reads one label's value from a Prometheus label list.
func label(labels, name string) string {
	_, rest, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// topAPIs names the APIs that sent most requests to cluster between two reads, with their rates.
func topAPIs(before, after map[string]float64, cluster string, took time.Duration) string {
	type rate struct {
		api string
		n   float64
	}
	var rs []rate
	for k, v := range after {
		if api, ok := strings.CutPrefix(k, cluster+"/"); ok && v > before[k] {
			rs = append(rs, rate{api, (v - before[k]) / took.Seconds()})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n })
	var parts []string
	for _, r := range rs[:min(3, len(rs))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", r.api, r.n))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
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
