package mirrorbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/fetcher"
	"github.com/kmirror/kmirror/internal/freeport"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// runRaw times the raw producer child writing the case's records into a
// fresh destination topic, watched from here like the mirrors.
func runRaw(ctx context.Context, b *testing.B, e *env, s spec) result {
	r := result{spec: s, path: "raw-produce"}
	topic := s.topic + "-raw"
	createTopic(ctx, b, e.dst, topic, s.partitions)
	child := startRawChild(b, e.dst.BootstrapString(), topic, s.partitions, s.codec)
	if _, err := child.expect("ready"); err != nil {
		b.Fatal(err)
	}
	pid := child.cmd.Process.Pid
	reqs := e.destinationRequests(b)
	reqsFrom := reqs.snapshot(ctx, b)
	rec := startBrokerRecording(b, e, r.path, s.topic)
	began := time.Now()
	if _, err := child.stdin.Write([]byte("go\n")); err != nil {
		b.Fatalf("start raw producer: %v", err)
	}
	w, err := watchCopy(ctx, e, e.dst.Client(b), topic, s.partitions, pid, child.exited)
	rec.stop(b)
	if err != nil {
		b.Fatalf("raw produce: %v", err)
	}
	logRequests(b, "raw-produce", reqsFrom, reqs.snapshot(ctx, b), s.bytes)
	ns, err := child.expect("done")
	if err != nil {
		b.Fatal(err)
	}
	if r.rss, err = peakRSS(pid); err != nil {
		b.Fatal(err)
	}
	if err := child.finish(); err != nil {
		b.Fatal(err)
	}
	r.setWindow(began, w)
	n, _ := strconv.ParseInt(ns, 10, 64)
	b.Logf("raw-produce: produce to acknowledgement of the last record %s (inside the producer); %s", time.Duration(n).Round(time.Millisecond), w.describe(s.bytes))
	r.p50, r.p99 = probeLag(ctx, b, e.dst, topic, e.dst, topic, s)
	return r
}

// runKmirror starts a fresh kmirror process in front of the destination,
// mirrors the case's topic through the mirror RPCs and times the copy. The
// mirror is failed over and deleted afterwards, so the next kmirror process
// finds nothing left to copy.
func runKmirror(ctx context.Context, b *testing.B, e *env, s spec) result {
	return runKmirrorBinary(ctx, b, e, s, e.kmirror, "kmirror")
}

// runKmirrorBinary is runKmirror with the kmirror binary bin, reported as path.
func runKmirrorBinary(ctx context.Context, b *testing.B, e *env, s spec, bin, path string) result {
	return copyKmirror(ctx, b, e, s, bin, path, true)
}

// runKmirrorLag is runKmirror with the lag probes only if lag is set.
func runKmirrorLag(ctx context.Context, b *testing.B, e *env, s spec, lag bool) result {
	return copyKmirror(ctx, b, e, s, e.kmirror, "kmirror", lag)
}

func copyKmirror(ctx context.Context, b *testing.B, e *env, s spec, bin, path string, lag bool) result {
	r := result{spec: s, path: path}
	k := startKmirror(b, e, bin, s.topic)
	adm := kafkatest.NewClient(b, []string{k.addr}, kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	mirror := s.topic
	create := protocol.NewPtrCreateMirrorRequest()
	create.MirrorName = mirror
	create.Configs = []protocol.CreateMirrorRequestConfig{{Name: "bootstrap.servers", Value: kmsg.StringPtr(e.srcBootstrap())}}
	for name, value := range benchMirrorConfigs() {
		create.Configs = append(create.Configs, protocol.CreateMirrorRequestConfig{Name: name, Value: kmsg.StringPtr(value)})
	}
	if cr := request[*protocol.CreateMirrorResponse](ctx, b, adm, create); cr.ErrorCode != 0 {
		b.Fatalf("create mirror %s: %s", mirror, deref(cr.ErrorMessage))
	}
	add := protocol.NewPtrAddTopicsToMirrorRequest()
	add.MirrorName = mirror
	add.Topics = []protocol.AddTopicsToMirrorRequestTopic{{Name: s.topic, NumPartitions: -1}}
	rec := startBrokerRecording(b, e, path, s.topic)
	reqs := e.destinationRequests(b)
	reqsFrom := reqs.snapshot(ctx, b)
	warmFor(s.bytes)
	began := time.Now()
	cpuAdd, err := cpuOf(k.pid())
	if err != nil {
		b.Fatal(err)
	}
	if ar := request[*protocol.AddTopicsToMirrorResponse](ctx, b, adm, add); ar.ErrorCode != 0 || len(ar.Topics) != 1 || ar.Topics[0].ErrorCode != 0 {
		b.Fatalf("add %s to mirror: %s %+v", s.topic, deref(ar.ErrorMessage), ar.Topics)
	}
	dstCl := e.dst.Client(b)
	w, err := watchCopy(ctx, e, dstCl, s.topic, s.partitions, k.pid(), k.exited)
	rec.stop(b)
	logRequests(b, path, reqsFrom, reqs.snapshot(ctx, b), s.bytes)
	r.copiedRec = w.copied
	if err != nil {
		r.failure = fmt.Sprintf("%v; kmirror says: %s", err, describe(ctx, adm, mirror))
		b.Errorf("%s, %s: %s (log %s)", path, s.topic, r.failure, k.log)
		return r
	}
	r.setWindow(began, w)
	r.cpuFromAdd = w.cpuDone - cpuAdd
	b.Logf("%s: %s", path, w.describe(s.bytes))
	if lag {
		r.p50, r.p99 = probeLag(ctx, b, e.src, s.topic, e.dst, s.topic, s)
	}
	if r.rss, err = peakRSS(k.pid()); err != nil {
		b.Fatal(err)
	}
	retire(ctx, b, adm, mirror, s.topic)
	if err := k.stop(); err != nil {
		b.Error(err)
	}
	return r
}

// mm2ResponseBytes is MirrorMaker 2's fetch.max.bytes here: kmirror's response size
// until 2026-12-07.
const mm2ResponseBytes = 10 << 20

// mm2Tuning is the benchmark's MirrorMaker 2 client tuning (bench/README.md
// lists it): fetch sizes equal to kmirror's for the case, batches equal to the
// source's, the source's codec (MirrorMaker 2 must recompress), acks=all and
// idempotent with 5 requests in flight like franz-go's producer, a Connect
// group and internal topics of its own per run.
func mm2Tuning(s spec) map[string]string {
	// kmirror's fetch sizes for this case (one source broker holds every partition), for
	// one Fetch in flight, as a consumer keeps: the settings MirrorMaker 2 has always run
	// with here (kmirror's own share grew with its Fetches in flight on 2026-12-07).
	kc := mirrorconfig.Parse(benchMirrorConfigs())
	resp := kc.FetchResponseMaxBytes
	if resp == 0 {
		// kmirror derives its response size from its copy buffer since 2026-12-07
		// (fetcher.ResponseBytes); MirrorMaker 2 keeps the 10 MiB it has always run
		// with here, so that its figures stay comparable run to run.
		resp = mm2ResponseBytes
	}
	perPartition := fetcher.PartitionFetchBytes(kc.FetchMaxBytes, resp, kc.BufferMaxBytes, int(s.partitions), 1)
	return map[string]string{
		"tasks.max":                                             "2", // two cores
		"source.consumer.fetch.max.bytes":                       strconv.Itoa(int(resp)),
		"source.consumer.max.partition.fetch.bytes":             strconv.Itoa(int(perPartition)),
		"source.consumer.max.poll.records":                      "10000",
		"target.producer.batch.size":                            strconv.Itoa(batchBytes),
		"target.producer.linger.ms":                             strconv.Itoa(lingerMs),
		"target.producer.buffer.memory":                         strconv.Itoa(128 << 20),
		"target.producer.compression.type":                      s.codec.name,
		"target.producer.acks":                                  "all",
		"target.producer.enable.idempotence":                    "true",
		"target.producer.max.in.flight.requests.per.connection": "5",
		"target.group.id":                                       "mm2-" + s.topic,
		"target.config.storage.topic":                           "mm2-configs." + s.topic + ".internal",
		"target.offset.storage.topic":                           "mm2-offsets." + s.topic + ".internal",
		"target.status.storage.topic":                           "mm2-status." + s.topic + ".internal",
	}
}

// benchMirrorConfigs are the mirror configs the benchmark adds to bootstrap.servers:
// KMIRROR_BENCH_MIRROR_CONFIGS=name=value,... tries other settings (the figures in
// bench/README.md are the defaults').
func benchMirrorConfigs() map[string]string { return envPairs("KMIRROR_BENCH_MIRROR_CONFIGS") }

// envPairs reads "name=value,..." from the environment variable name (empty: none).
func envPairs(name string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(os.Getenv(name), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// runMM2 starts MirrorMaker 2 in dedicated mode for the case's topic and
// times the copy into "source.<topic>" (default replication policy).
func runMM2(ctx context.Context, b *testing.B, e *env, s spec) result {
	r := result{spec: s, path: "mirrormaker2"}
	topic := "source." + s.topic
	reqs := e.destinationRequests(b)
	reqsFrom := reqs.snapshot(ctx, b)
	began := time.Now()
	m, err := kafkatest.StartMirrorMaker2(ctx, kafkatest.MirrorMaker2Config{Source: e.srcBootstrap(), Target: e.dst.BootstrapString(),
		Topics: []string{s.topic}, Props: mm2Tuning(s), Dir: filepath.Join(e.work, "mm2-"+s.topic)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Stop() })
	dstCl := e.dst.Client(b)
	w, err := watchCopy(ctx, e, dstCl, topic, s.partitions, m.Pid(), m.Exited())
	logRequests(b, "mirrormaker2", reqsFrom, reqs.snapshot(ctx, b), s.bytes)
	r.copiedRec = w.copied
	if err != nil {
		r.failure = err.Error()
		b.Errorf("MirrorMaker 2, %s: %v (logs in %s)\n%s", s.topic, err, m.Dir(), m.LogTail())
		return r
	}
	r.setWindow(began, w)
	b.Logf("mirrormaker2: %s", w.describe(s.bytes))
	r.p50, r.p99 = probeLag(ctx, b, e.src, s.topic, e.dst, topic, s)
	if r.rss, err = peakRSS(m.Pid()); err != nil {
		b.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		b.Error(err)
	}
	return r
}

// watched is what watchCopy saw.
type watched struct {
	first, done       time.Time     // first record readable, every record readable
	cpuFirst, cpuDone time.Duration // the copier's CPU at those moments
	copied            int64
	samples           []sample // every poll from the first record on
	notReady          int      // polls before the first sample that found the topic not ready
	notReadyErr       error    // the last reason
	// The brokers' CPU over the window: the copy's cost on each side, and what
	// the copier left of the machine's two cores.
	srcBrokerCPU, dstBrokerCPU time.Duration
	// This process's CPU over the window: the WAN cases' Toxiproxy hop (it runs
	// here) and this poll. Not from the start of the path: settle's page warming,
	// seconds of system time before the window, is not the hop's.
	benchCPU time.Duration
	// The destination broker's CPU over the window by kind of thread (-v): how
	// much of it served requests and how much went to its JIT and GC.
	dstThreads map[string]time.Duration
}

// clusterCPU is the CPU time the cluster's broker processes have used.
func clusterCPU(c *kafkatest.Cluster) time.Duration {
	var sum time.Duration
	for _, pid := range c.Real().PIDs() {
		if cpu, err := cpuOf(pid); err == nil {
			sum += cpu
		}
	}
	return sum
}

type sample struct {
	at       time.Time
	copied   int64
	cpu      time.Duration
	src, dst time.Duration // the brokers' CPU
}

// secondHalf is the stretch from the first sample with half the records
// readable to the end: the steady state, after a JVM's JIT has warmed up
// and a mirror's partitions have all started.
func (w watched) secondHalf() (records int64, d, cpu time.Duration) {
	h, ok := w.half()
	if !ok {
		return 0, 0, 0
	}
	last := w.samples[len(w.samples)-1]
	return last.copied - h.copied, last.at.Sub(h.at), last.cpu - h.cpu
}

// half is the first sample with half the records readable.
func (w watched) half() (sample, bool) {
	if len(w.samples) < 2 {
		return sample{}, false
	}
	for _, s := range w.samples {
		if s.copied >= totalRecords/2 {
			return s, true
		}
	}
	return sample{}, false
}

// describe says where the window started and how the halves compared.
func (w watched) describe(bytes int64) string {
	n2, d2, cpu2 := w.secondHalf()
	n1 := totalRecords - w.samples[0].copied - n2
	d1, cpu1 := w.done.Sub(w.first)-d2, w.cpuDone-w.cpuFirst-cpu2
	gb := func(n int64) float64 { return float64(n) / float64(totalRecords) * float64(bytes) / 1e9 }
	// When each tenth of the records had become readable, from the first: where a slow
	// stretch sits (start-up, steady state, a tail).
	var tenths strings.Builder
	next := int64(1)
	for _, s := range w.samples {
		for next <= 10 && s.copied >= totalRecords*next/10 {
			fmt.Fprintf(&tenths, " %d0%%@%dms", next, s.at.Sub(w.first).Milliseconds())
			next++
		}
	}
	all := gb(totalRecords - w.samples[0].copied)
	var src2, dst2 time.Duration
	if h, ok := w.half(); ok {
		last := w.samples[len(w.samples)-1]
		src2, dst2 = last.src-h.src, last.dst-h.dst
	}
	var threads []string
	for _, kind := range threadKindNames {
		threads = append(threads, fmt.Sprintf("%s %d", kind, w.dstThreads[kind].Milliseconds()))
	}
	return fmt.Sprintf("%d polls (%d before them not ready: %v), first readable at %d records; first half %.1f MB/s %.1f CPU s/GB; second half %.1f MB/s %.1f CPU s/GB; brokers' CPU s/GB: source %.1f (2nd half %.1f), destination %.1f (2nd half %.1f); the benchmark process (a WAN case's Toxiproxy hop, this poll) %.2f CPU s/GB; destination broker CPU ms by thread: %s; readable:%s",
		len(w.samples), w.notReady, w.notReadyErr, w.samples[0].copied, gb(n1)*1e3/d1.Seconds(), cpu1.Seconds()/gb(n1), gb(n2)*1e3/d2.Seconds(), cpu2.Seconds()/gb(n2),
		w.srcBrokerCPU.Seconds()/all, src2.Seconds()/gb(n2), w.dstBrokerCPU.Seconds()/all, dst2.Seconds()/gb(n2), w.benchCPU.Seconds()/all, strings.Join(threads, ", "), tenths.String())
}

// watchCopy polls the destination topic's end offsets every 10 ms until all
// totalRecords are readable, sampling the copying process's CPU at each poll
// from the first readable record on.
func watchCopy(ctx context.Context, e *env, cl *kgo.Client, topic string, parts int32, pid int, exited <-chan struct{}) (watched, error) {
	var w watched
	watch := &copyWatch{topic: topic, parts: parts}
	deadline := time.Now().Add(copyLimit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-exited:
			return w, fmt.Errorf("the copying process exited with %d of %d records on %s", w.copied, totalRecords, topic)
		case <-ctx.Done():
			return w, ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return w, fmt.Errorf("%d of %d records on %s after %s (last error: %v)", w.copied, totalRecords, topic, copyLimit, lastErr)
		}
		n, ready, err := watch.readable(ctx, cl)
		if !ready {
			lastErr = err
			if len(w.samples) == 0 {
				w.notReady++
				w.notReadyErr = err
			}
			continue
		}
		if err != nil {
			lastErr = err // some partitions not readable yet
		}
		// The time and CPU of the moment the offsets were read.
		now := time.Now()
		cpu, err := cpuOf(pid)
		if err != nil {
			return w, err
		}
		w.copied = n
		if n == 0 {
			continue
		}
		w.samples = append(w.samples, sample{at: now, copied: n, cpu: cpu, src: clusterCPU(e.src), dst: clusterCPU(e.dst)})
		if w.first.IsZero() {
			w.first, w.cpuFirst = now, cpu
			w.benchCPU, _ = cpuOf(os.Getpid()) // at the start; the window's is this subtracted from the end's, below
			w.dstThreads = threadsCPU(e.dst.Real().PIDs())
		}
		if n >= totalRecords {
			w.done, w.cpuDone = now, cpu
			for kind, cpu := range threadsCPU(e.dst.Real().PIDs()) {
				w.dstThreads[kind] = cpu - w.dstThreads[kind]
			}
			first, last := w.samples[0], w.samples[len(w.samples)-1]
			w.srcBrokerCPU, w.dstBrokerCPU = last.src-first.src, last.dst-first.dst
			if self, err := cpuOf(os.Getpid()); err == nil {
				w.benchCPU = self - w.benchCPU
			}
			return w, nil
		}
	}
}

// readable is the sum of the topic's high watermarks (records readable), or
// ready=false while the topic is missing. It asks the brokers directly, a
// fresh Metadata request and one ListOffsets per leader: a ListOffsets routed
// by the client's metadata cache can wait seconds for a refresh of a
// just-created topic, and the progress made meanwhile would go unseen. A
// partition without a leader yet, or whose leader has not loaded it yet
// (NOT_LEADER for a while after creation), counts as empty: nothing can have
// been appended to it. The topic is never auto-created (MirrorMaker 2 would
// find a one-partition topic in its way).
func readable(ctx context.Context, cl *kgo.Client, topic string, parts int32) (n int64, ready bool, err error) {
	return (&copyWatch{topic: topic, parts: parts}).readable(ctx, cl)
}

// leadersOf is the topic's partitions by leader, from a fresh Metadata request;
// nil while the topic is missing, with why. A partition with no leader yet is
// left out, and err says so.
func leadersOf(ctx context.Context, cl *kgo.Client, topic string, parts int32) (byLeader map[int32][]int32, err error) {
	md := kmsg.NewPtrMetadataRequest()
	md.AllowAutoTopicCreation = false
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	mresp, err := md.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	if len(mresp.Topics) != 1 {
		return nil, fmt.Errorf("metadata of %s: %d topics", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	if got := int32(len(mresp.Topics[0].Partitions)); got != parts {
		return nil, fmt.Errorf("%s has %d partitions, want %d", topic, got, parts)
	}
	byLeader = map[int32][]int32{}
	for _, p := range mresp.Topics[0].Partitions {
		if p.Leader < 0 {
			err = fmt.Errorf("%s/%d: no leader yet", topic, p.Partition)
			continue
		}
		byLeader[p.Leader] = append(byLeader[p.Leader], p.Partition)
	}
	return byLeader, err
}

// endOffsets is the sum of the partitions' high watermarks, asking each leader
// directly; a partition whose answer is an error counts as empty, and err says
// why.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string, byLeader map[int32][]int32) (n int64, err error) {
	for leader, ps := range byLeader {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range ps {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, rerr := req.RequestWith(ctx, cl.Broker(int(leader)))
		if rerr != nil {
			return 0, fmt.Errorf("list offsets of %s on broker %d: %w", topic, leader, rerr)
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					err = fmt.Errorf("list offsets of %s/%d: %w", topic, p.Partition, perr)
					continue
				}
				n += p.Offset
			}
		}
	}
	return n, err
}

// copyWatch is readable for watchCopy's polls, every 10 ms: once a Metadata
// answer named a leader for every partition and their ListOffsets all
// answered, it asks those leaders alone, with no Metadata request, until an
// answer is an error (a leader that moved answers NOT_LEADER). Half the
// requests, and the Metadata ones were the dearer for the destination broker
// and this process, which share the two cores with the copy being timed.
type copyWatch struct {
	topic    string
	parts    int32
	byLeader map[int32][]int32 // nil: read the Metadata
}

func (w *copyWatch) readable(ctx context.Context, cl *kgo.Client) (n int64, ready bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	byLeader := w.byLeader
	if byLeader == nil {
		if byLeader, err = leadersOf(ctx, cl, w.topic, w.parts); byLeader == nil {
			return 0, false, err
		}
	}
	n, lerr := endOffsets(ctx, cl, w.topic, byLeader)
	if err == nil && lerr == nil {
		w.byLeader = byLeader
	} else {
		w.byLeader = nil
	}
	if lerr != nil {
		err = lerr
	}
	return n, true, err
}

// probeLag measures end-to-end lag on the caught-up copier: probes records,
// one at a time, each produced (acks=all) to originTopic on origin and timed
// from the produce call until a consumer of dstTopic on dst has it. The
// first probe warms the consumer up and is not counted.
func probeLag(ctx context.Context, b *testing.B, origin *kafkatest.Cluster, originTopic string, dst *kafkatest.Cluster, dstTopic string, s spec) (p50, p99 time.Duration) {
	b.Helper()
	prod := origin.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	from := map[int32]kgo.Offset{}
	for p := int32(0); p < s.partitions; p++ {
		from[p] = kgo.NewOffset().At(s.perPartition())
	}
	cons := dst.Client(b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{dstTopic: from}))
	var lags []time.Duration
	for i := 0; i <= probes; i++ {
		val := fmt.Sprintf("probe-%d", i)
		began := time.Now()
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: originTopic, Partition: int32(i) % s.partitions, Value: []byte(val)}).FirstErr(); err != nil {
			b.Fatalf("probe %d: %v", i, err)
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for seen := false; !seen; {
			fs := cons.PollFetches(pctx)
			if pctx.Err() != nil {
				cancel()
				b.Fatalf("probe %d not on %s within 30s", i, dstTopic)
			}
			fs.EachError(func(t string, p int32, err error) { b.Fatalf("consume %s/%d: %v", t, p, err) })
			fs.EachRecord(func(r *kgo.Record) { seen = seen || string(r.Value) == val })
		}
		cancel()
		if i > 0 {
			lags = append(lags, time.Since(began))
		}
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	return lags[len(lags)/2], lags[(len(lags)*99+99)/100-1]
}

// kmirrorProc is a `kmirror proxy` process in front of the destination.
type kmirrorProc struct {
	cmd     *exec.Cmd
	addr    string
	metrics string // its /metrics address
	log     string
	exited  chan struct{}
}

func startKmirror(b *testing.B, e *env, bin, name string) *kmirrorProc {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	metrics, err := freeport.Addr()
	if err != nil {
		b.Fatal(err)
	}
	k := &kmirrorProc{addr: addr, metrics: metrics, log: filepath.Join(e.work, "kmirror-"+name+".log"), exited: make(chan struct{})}
	k.cmd = exec.Command(bin, "proxy", "--upstream", e.dst.BootstrapString(), "--listen", addr, "--broker-ports", "0", "--metrics-addr", metrics,
		"--state-partitions", "10", "--state-replication-factor", "1", "--session-timeout", "6s", "--log-level", logLevel())
	logf, err := os.Create(k.log)
	if err != nil {
		b.Fatal(err)
	}
	k.cmd.Stdout, k.cmd.Stderr = logf, logf
	if dir := os.Getenv("KMIRROR_BENCH_CPUPROFILE"); dir != "" {
		// The copier's CPU profile over its whole life (cmd/kmirror/cpuprofile.go), one
		// file per binary and case: `go tool pprof -diff_base` compares two builds.
		k.cmd.Env = append(os.Environ(), "KMIRROR_CPUPROFILE="+filepath.Join(dir, filepath.Base(bin)+"-"+name+".pprof"))
	}
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := k.cmd.Start(); err != nil {
		logf.Close()
		b.Fatalf("start kmirror: %v", err)
	}
	go func() {
		_ = k.cmd.Wait()
		logf.Close()
		close(k.exited)
	}()
	b.Cleanup(func() {
		_ = k.cmd.Process.Kill()
		<-k.exited
	})
	polltest.Eventually(b, 30*time.Second, "kmirror listens on "+addr, func() (bool, string) {
		select {
		case <-k.exited:
			out, _ := os.ReadFile(k.log)
			b.Fatalf("kmirror exited at start:\n%s", out)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	return k
}

// logLevel is kmirror's log level in the benchmark: warn, or KMIRROR_BENCH_LOG_LEVEL (info
// shows when each partition's copy started, with KMIRROR_KEEP_KAFKA_LOGS to keep the log).
func logLevel() string {
	if l := os.Getenv("KMIRROR_BENCH_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}

func (k *kmirrorProc) pid() int { return k.cmd.Process.Pid }

// stop shuts kmirror down gracefully, so that it leaves the coordinators'
// group at once and the next process owns the state without waiting.
func (k *kmirrorProc) stop() error {
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.exited
		return errors.New("kmirror did not stop on SIGTERM within 30s; killed")
	}
}

func request[R kmsg.Response](ctx context.Context, b *testing.B, cl *kgo.Client, req kmsg.Request) R {
	b.Helper()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := cl.Request(rctx, req)
	if err != nil {
		b.Fatalf("%T: %v", req, err)
	}
	return resp.(R)
}

// mirrorState is what DescribeMirrors says of a mirror's partitions.
type mirrorState struct {
	states map[string]int // partitions per state
	copied int64          // records on the destination
	errors map[string]bool
}

func describeMirror(ctx context.Context, cl *kgo.Client, mirror string) (mirrorState, error) {
	st := mirrorState{states: map[string]int{}, errors: map[string]bool{}}
	req := protocol.NewPtrDescribeMirrorsRequest()
	req.MirrorNames = []string{mirror}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cl.Request(rctx, req)
	if err != nil {
		return st, fmt.Errorf("DescribeMirrors: %w", err)
	}
	for _, m := range resp.(*protocol.DescribeMirrorsResponse).Mirrors {
		if m.ErrorCode != 0 {
			return st, fmt.Errorf("DescribeMirrors %s: %w %s", mirror, kerr.ErrorForCode(m.ErrorCode), deref(m.ErrorMessage))
		}
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				st.states[p.State]++
				st.copied += max(0, p.DestinationHighWatermark)
				if msg := deref(p.ErrorMessage); msg != "" {
					st.errors[msg] = true
				}
			}
		}
	}
	return st, nil
}

func (st mirrorState) String() string {
	var parts []string
	for s, n := range st.states {
		parts = append(parts, fmt.Sprintf("%d %s", n, s))
	}
	sort.Strings(parts)
	out := fmt.Sprintf("partitions %s, %d records on the destination", strings.Join(parts, ", "), st.copied)
	for m := range st.errors {
		out += "; error: " + m
	}
	return out
}

// describe summarises the mirror's partitions for a report.
func describe(ctx context.Context, cl *kgo.Client, mirror string) string {
	st, err := describeMirror(ctx, cl, mirror)
	if err != nil {
		return err.Error()
	}
	return st.String()
}

// retire fails the mirror over (all partitions STOPPED) and deletes it.
func retire(ctx context.Context, b *testing.B, cl *kgo.Client, mirror, topic string) {
	b.Helper()
	rm := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	rm.MirrorName = mirror
	rm.Topics = []protocol.TopicName{{Name: topic}}
	if rr := request[*protocol.RemoveTopicsFromMirrorResponse](ctx, b, cl, rm); rr.ErrorCode != 0 || len(rr.Topics) != 1 || rr.Topics[0].ErrorCode != 0 {
		b.Fatalf("remove %s from mirror %s: %s %+v", topic, mirror, deref(rr.ErrorMessage), rr.Topics)
	}
	polltest.Eventually(b, time.Minute, "mirror "+mirror+" stopped", func() (bool, string) {
		st, err := describeMirror(ctx, cl, mirror)
		if err != nil {
			return false, err.Error()
		}
		return len(st.states) == 1 && st.states["STOPPED"] > 0, st.String()
	})
	del := protocol.NewPtrDeleteMirrorRequest()
	del.MirrorName = mirror
	if dr := request[*protocol.DeleteMirrorResponse](ctx, b, cl, del); dr.ErrorCode != 0 {
		b.Fatalf("delete mirror %s: %s", mirror, deref(dr.ErrorMessage))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
