package mirrorbench

// The WAN cases (issue 18): the same copies as BenchmarkMirror, but the
// copiers reach the source through a Toxiproxy proxy in front of its broker
// (internal/faultnet), advertised on a listener of its own, with a round trip
// of 0 ms (the hop alone: the baseline), 50 ms, 150 ms, and 150 ms on a link
// capped at 50 MB/s. The source fill and the probes' producer go direct.
//
//	go test -run '^$' -bench WAN -benchtime 1x -timeout 30m ./bench/mirror/
//
// Quick by default (bench/README.md, WAN); KMIRROR_BENCH_WAN=full copies
// BenchmarkMirror's record count in 5 rounds.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/faultnet"
	"github.com/kmirror/kmirror/internal/kafkatest"
)

// link is one WAN setting between the copiers and the source.
type link struct {
	name  string
	rttMs int
	capMB int // downstream cap in MB/s, 0 for none
}

var links = []link{{"0ms", 0, 0}, {"50ms", 50, 0}, {"150ms", 150, 0}, {"150ms-50MB/s", 150, 50}}

// direct is raw produce's "link": the benchmark's producer writes the same records into the
// destination, crossing no WAN. It is the destination's ceiling on this machine, which no
// copier passes, whatever its link: the figure a ratio to MirrorMaker 2 is bounded by.
var direct = link{"direct", 0, 0}

// set replaces the front's toxics with the link's.
func (l link) set(f *faultnet.Front) error {
	f.Reset()
	if l.rttMs > 0 {
		if err := f.Latency(l.rttMs, 0); err != nil {
			return err
		}
	}
	if l.capMB > 0 {
		// Toxiproxy's rate is in KB/s of 1000 bytes (bytes per millisecond); one
		// cap for all of the proxy's connections, as a link has.
		return f.SharedBandwidth(l.capMB * 1000)
	}
	return nil
}

// wanResult is one copy through one link.
type wanResult struct {
	result
	link link
}

func wanSizes() (records int64, rounds int) {
	if os.Getenv("KMIRROR_BENCH_WAN") == "full" {
		// 1 GB copies: at 150 ms a 128 MB copy at 300 MB/s lasts three round trips,
		// and its ratios were the ramp's (bench/README.md, "WAN", 2026-12-07 11:30).
		return 2_000_000, 3
	}
	// 64 MB of values: long enough at 0 ms for a window of many polls.
	return envInt("KMIRROR_BENCH_WAN_RECORDS", 128_000), int(envInt("KMIRROR_BENCH_WAN_ROUNDS", 3))
}

func BenchmarkWAN(b *testing.B) {
	loadBefore := uptime()
	records, rounds := wanSizes()
	defer func(n int64) { totalRecords = n }(totalRecords)
	totalRecords = records
	work, err := os.MkdirTemp("", "kmirror-wan-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if !b.Failed() {
			_ = os.RemoveAll(work)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	if _, err := kafkatest.MirrorMakerJars(ctx); err != nil {
		b.Fatal(err)
	}
	front := faultnet.New(b, "WAN", 1)
	e := &env{src: kafkatest.Start(b, kafkatest.Real(), front.Listener()), dst: kafkatest.Start(b, destinationProps()...), kmirror: instancetest.Binary(b), work: work}
	front.Connect(b, e.src)
	e.srcVia = strings.Join(front.Addrs(), ",")
	warmUp(ctx, b, e)
	// kmirror's path once through the hop, unmeasured (warmPaths without
	// MirrorMaker 2, whose one run per partition count is its 150 ms case).
	wanRun(ctx, b, e, front, links[0], 64, 0, "kmirror")
	var results []wanResult
	turn := 0
	for round := 1; round <= rounds; round++ {
		for _, parts := range partitionCounts {
			if !benchCase(codecs[0].name, parts) { // KMIRROR_BENCH_CASES=none/1: the lone partition alone
				continue
			}
			for _, l := range rotate(links, turn) {
				results = append(results, wanRun(ctx, b, e, front, l, parts, round, "kmirror"))
			}
			turn++
			if round == 1 {
				results = append(results, wanRun(ctx, b, e, front, links[2], parts, round, "mirrormaker2"))
				results = append(results, wanRun(ctx, b, e, front, direct, parts, round, "raw-produce"))
			}
		}
	}
	fmt.Print(wanTable(results, rounds, loadBefore, uptime()))
}

// wanRun fills a source topic of its own (direct) and copies it through the link.
func wanRun(ctx context.Context, b *testing.B, e *env, front *faultnet.Front, l link, parts int32, round int, path string) wanResult {
	s := spec{codec: codecs[0], partitions: parts, round: round,
		topic: fmt.Sprintf("wan-%s-p%d-r%d-%s", strings.NewReplacer("/", "", "-", "").Replace(l.name), parts, round, path)}
	createTopic(ctx, b, e.src, s.topic, parts)
	if err := produceAll(ctx, producer(b, e.src, s.codec.codec), records(s.topic, parts)); err != nil {
		b.Fatalf("fill %s: %v", s.topic, err)
	}
	s.bytes = logBytes(ctx, b, e.src, s.topic)
	if err := l.set(front); err != nil {
		b.Fatal(err)
	}
	defer front.Reset()
	var r result
	b.Run(fmt.Sprintf("%s/p%d/r%d/%s", l.name, parts, round, path), func(b *testing.B) {
		settle(s.bytes)
		self0, _ := cpuOf(os.Getpid())
		defer func() {
			// Toxiproxy runs in this process: its CPU beside the copier's is the
			// hop's price on the two cores (raw produce, which crosses no hop, shows
			// the pollers' share alone). Over the whole run, start-up and lag probes
			// included.
			if self, err := cpuOf(os.Getpid()); err == nil && s.bytes > 0 {
				b.Logf("the benchmark process (Toxiproxy's hop, the pollers): %.2f CPU s/GB over the run", (self-self0).Seconds()/(float64(s.bytes)/1e9))
			}
		}()
		load := loadAvg()
		switch path {
		case "mirrormaker2":
			r = runMM2(ctx, b, e, s)
		case "raw-produce":
			r = runRaw(ctx, b, e, s)
		default:
			// Lag probes (100, one at a time) take a while through a WAN: round 1 only.
			r = runKmirrorLag(ctx, b, e, s, round == 1)
		}
		r.load = load
		report(b, r)
	})
	return wanResult{r, l}
}

func rotate[T any](xs []T, k int) []T {
	k %= len(xs)
	return append(slices.Clone(xs[k:]), xs[:k]...)
}

// wanTable prints every run and, per partition count, the acceptance figures:
// medians (with ranges) of the rounds' paired ratios to the 0 ms copy.
func wanTable(results []wanResult, rounds int, before, after string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nWAN: machine load before: %s\nWAN: machine load after:  %s\n\n", before, after)
	sb.WriteString("| partitions | link | round | path | MB/s | lag p50 ms | lag p99 ms | CPU s/GB | peak RSS MiB | load |\n|---:|---|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		if r.failure != "" {
			fmt.Fprintf(&sb, "| %d | %s | %d | %s | did not finish: %s ||||| %s |\n", r.partitions, r.link.name, r.round, r.path, r.failure, r.load)
			continue
		}
		lag := "– | –"
		if r.p99 > 0 {
			lag = fmt.Sprintf("%.1f | %.1f", ms(r.p50), ms(r.p99))
		}
		fmt.Fprintf(&sb, "| %d | %s | %d | %s | %.1f | %s | %.1f | %.0f | %s |\n", r.partitions, r.link.name, r.round, r.path, r.mbps(), lag, r.cpuPerGB(), float64(r.rss)/(1<<20), r.load)
	}
	sb.WriteString("\n")
	for _, parts := range partitionCounts {
		sb.WriteString(wanRatios(results, parts, rounds))
	}
	return sb.String()
}

func wanRatios(results []wanResult, parts int32, rounds int) string {
	get := func(l link, round int, path string) *wanResult {
		for i := range results {
			r := &results[i]
			if r.partitions == parts && r.link == l && r.round == round && r.path == path && r.failure == "" {
				return r
			}
		}
		return nil
	}
	var figs []string
	for _, l := range links[1:] {
		var xs []float64
		for round := 1; round <= rounds; round++ {
			if base, r := get(links[0], round, "kmirror"), get(l, round, "kmirror"); base != nil && r != nil {
				xs = append(xs, r.mbps()/base.mbps())
			}
		}
		if len(xs) == 0 {
			continue
		}
		fig := fmt.Sprintf("%s/0ms %.2f of %s", l.name, median(xs), list(xs))
		if l.capMB > 0 {
			var used []float64
			for round := 1; round <= rounds; round++ {
				if r := get(l, round, "kmirror"); r != nil {
					used = append(used, r.mbps()/float64(l.capMB))
				}
			}
			fig += fmt.Sprintf(", cap used %.2f of %s (target ≥ 0.90)", median(used), list(used))
		} else if l.rttMs == 150 {
			fig += " (target ≥ 0.80)"
		}
		figs = append(figs, fig)
	}
	var km []float64
	for round := 1; round <= rounds; round++ {
		if r := get(links[2], round, "kmirror"); r != nil {
			km = append(km, r.mbps())
		}
	}
	mm, raw := get(links[2], 1, "mirrormaker2"), get(direct, 1, "raw-produce")
	if mm != nil && len(km) > 0 {
		figs = append(figs, fmt.Sprintf("kmirror/MM2 at 150ms %.2f× (kmirror's median %.1f MB/s, MM2 %.1f; target ≥ 5)", median(km)/mm.mbps(), median(km), mm.mbps()))
	}
	if raw != nil && len(km) > 0 {
		fig := fmt.Sprintf("raw produce into the destination (no WAN, the ceiling of any copier here) %.1f MB/s: kmirror at 150ms %.2f of it", raw.mbps(), median(km)/raw.mbps())
		if mm != nil {
			fig += fmt.Sprintf(", so no copier reaches more than %.2f× MM2 on this machine", raw.mbps()/mm.mbps())
		}
		figs = append(figs, fig)
	}
	for _, l := range links[:3] {
		if r := get(l, 1, "kmirror"); r != nil && r.p99 > 0 {
			figs = append(figs, fmt.Sprintf("lag p99 at %s %.0f ms (target ≤ %d)", l.name, ms(r.p99), l.rttMs+50))
		}
	}
	return fmt.Sprintf("- none, %d partition(s): %s\n", parts, strings.Join(figs, "; "))
}
