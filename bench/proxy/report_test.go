package proxybench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// What `make bench` prints per scenario, from the counted rounds. Every comparison is a
// median of per-round figures (each round measures the paths seconds apart, so they meet
// the same load from the machine's other tenants) with its range over the rounds.

// issue 19's targets for the proxy against the relay.
const (
	targetPctOfRelay    = 97  // throughput, % of the relay's
	targetCPUxRelay     = 1.1 // CPU per GiB, multiple of the relay's
	targetP99OverRelayµ = 200 // added p99, µs over the relay's
)

// spread is a median with the range it came from.
type spread struct{ med, lo, hi float64 }

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	slices.Sort(v)
	return spread{median(v), v[0], v[len(v)-1]}
}

// fmt prints the median and range with format f, e.g. "%.0f".
func (s spread) fmt(f string) string {
	return fmt.Sprintf(f+" ("+f+"…"+f+")", s.med, s.lo, s.hi)
}

type measure func(result) float64

var (
	prodMBs    measure = func(r result) float64 { return r.produceMBs }
	consMBs    measure = func(r result) float64 { return r.consumeMBs }
	p50        measure = func(r result) float64 { return float64(r.p50.Microseconds()) }
	p99        measure = func(r result) float64 { return float64(r.p99.Microseconds()) }
	fetchFirst measure = func(r result) float64 { return float64(r.fetchFirst.Microseconds()) }
	fetchTotal measure = func(r result) float64 { return float64(r.fetchTotal.Microseconds()) }
	prodCPU    measure = func(r result) float64 { return float64(r.produceCPU.Microseconds()) / 1000 }
	consCPU    measure = func(r result) float64 { return float64(r.consumeCPU.Microseconds()) / 1000 }
)

// roundSet is one scenario's counted rounds, each by path.
type roundSet []map[string]result

// of is path's value of f over the rounds.
func (rs roundSet) of(path string, f measure) spread {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r[path]))
	}
	return spreadOf(v)
}

// ratio is path's f over base's, round by round (rounds where base is 0 are left out: the
// in-process proxy has no CPU figure of its own).
func (rs roundSet) ratio(path, base string, f measure) spread {
	var v []float64
	for _, r := range rs {
		if d := f(r[base]); d != 0 {
			v = append(v, f(r[path])/d)
		}
	}
	return spreadOf(v)
}

// diff is path's f minus base's, round by round.
func (rs roundSet) diff(path, base string, f measure) spread {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r[path])-f(r[base]))
	}
	return spreadOf(v)
}

// report prints sc's results: the per-path medians as benchmark metrics, the comparison with
// direct per path, and the proxy against the relay with issue 19's targets.
func report(b *testing.B, sc scenario, rs roundSet) {
	for _, path := range pathNames {
		b.Run(sc.name+"/"+path, func(b *testing.B) { reportMetrics(b, rs, path) })
	}
	for _, path := range pathNames[1:] {
		b.Logf("%-5s %-5s medians of %d rounds: produce %.1f -> %.1f MB/s (of direct %s%%), consume %.1f -> %.1f MB/s (%s%%), p50 %.0f -> %.0f µs (added %+.0f µs), p99 %.0f -> %.0f µs (added %+.0f µs), CPU per GiB forwarded: produce %.0f ms, consume %.0f ms",
			sc.name, path, len(rs), rs.of("direct", prodMBs).med, rs.of(path, prodMBs).med, pct(rs.ratio(path, "direct", prodMBs)),
			rs.of("direct", consMBs).med, rs.of(path, consMBs).med, pct(rs.ratio(path, "direct", consMBs)),
			rs.of("direct", p50).med, rs.of(path, p50).med, rs.diff(path, "direct", p50).med,
			rs.of("direct", p99).med, rs.of(path, p99).med, rs.diff(path, "direct", p99).med,
			rs.of(path, prodCPU).med, rs.of(path, consCPU).med)
	}
	var trips []string
	for _, path := range pathNames {
		trips = append(trips, fmt.Sprintf("%s %.0f / %.0f µs", path, rs.of(path, fetchFirst).med, rs.of(path, fetchTotal).med))
	}
	b.Logf("%-5s consumer's Fetch round trips (medians of the rounds' means), first response byte / last: %s",
		sc.name, strings.Join(trips, ", "))
	// Printed, not logged: `make bench` runs without -v, and this line is what it is for.
	for _, path := range proxyPaths() {
		fmt.Println(relayLine(sc, rs, path))
	}
}

// pct prints a ratio's spread in percent.
func pct(s spread) string {
	return spread{100 * s.med, 100 * s.lo, 100 * s.hi}.fmt("%.0f")
}

// relayLine is a proxy path against the relay, with the targets and whether the medians meet
// them.
func relayLine(sc scenario, rs roundSet, path string) string {
	prod, cons := rs.ratio(path, "relay", prodMBs), rs.ratio(path, "relay", consMBs)
	prodC, consC := rs.ratio(path, "relay", prodCPU), rs.ratio(path, "relay", consCPU)
	over := rs.diff(path, "relay", p99) // (proxy − direct) − (relay − direct)
	var missed []string
	if 100*prod.med < targetPctOfRelay {
		missed = append(missed, "produce throughput")
	}
	if 100*cons.med < targetPctOfRelay {
		missed = append(missed, "consume throughput")
	}
	if prodC.med > targetCPUxRelay {
		missed = append(missed, "produce CPU")
	}
	if consC.med > targetCPUxRelay {
		missed = append(missed, "consume CPU")
	}
	if over.med > targetP99OverRelayµ {
		missed = append(missed, "added p99")
	}
	verdict := "targets met"
	if len(missed) > 0 {
		verdict = "targets missed: " + strings.Join(missed, ", ")
	}
	name := "PROXY"
	if path != "proxy" {
		name = "PROXY (" + engine2() + ")"
	}
	return fmt.Sprintf("%-5s %s vs RELAY, medians (range) of %d paired rounds: throughput produce %s%%, consume %s%% of the relay's (target ≥ %d %%); "+
		"CPU per GiB produce %s×, consume %s× the relay's (target ≤ %.1f×); added p99 proxy %s µs, relay %s µs, proxy − relay %s µs (target ≤ +%d µs): %s",
		sc.name, name, len(rs), pct(prod), pct(cons), targetPctOfRelay,
		prodC.fmt("%.2f"), consC.fmt("%.2f"), targetCPUxRelay,
		rs.diff(path, "direct", p99).fmt("%+.0f"), rs.diff("relay", "direct", p99).fmt("%+.0f"), over.fmt("%+.0f"), targetP99OverRelayµ,
		verdict)
}

// reportMetrics reports path's medians as benchmark metrics, and for the relay and the proxy
// the paired comparisons, so that the benchmark lines alone answer the targets.
func reportMetrics(b *testing.B, rs roundSet, path string) {
	b.ReportMetric(rs.of(path, prodMBs).med, "produce-MB/s")
	b.ReportMetric(rs.of(path, consMBs).med, "consume-MB/s")
	b.ReportMetric(rs.of(path, p50).med, "p50-µs")
	b.ReportMetric(rs.of(path, p99).med, "p99-µs")
	b.ReportMetric(rs.of(path, fetchFirst).med, "fetch-first-byte-µs")
	b.ReportMetric(rs.of(path, fetchTotal).med, "fetch-µs")
	if path == "direct" {
		return
	}
	b.ReportMetric(100*rs.ratio(path, "direct", prodMBs).med, "produce-%-of-direct")
	b.ReportMetric(100*rs.ratio(path, "direct", consMBs).med, "consume-%-of-direct")
	b.ReportMetric(rs.diff(path, "direct", p99).med, "added-p99-µs")
	b.ReportMetric(rs.of(path, prodCPU).med, "produce-CPU-ms/GiB")
	b.ReportMetric(rs.of(path, consCPU).med, "consume-CPU-ms/GiB")
	if !slices.Contains(proxyPaths(), path) {
		return
	}
	b.ReportMetric(100*rs.ratio(path, "relay", prodMBs).med, "produce-%-of-relay")
	b.ReportMetric(100*rs.ratio(path, "relay", consMBs).med, "consume-%-of-relay")
	b.ReportMetric(rs.ratio(path, "relay", prodCPU).med, "produce-CPU-x-relay")
	b.ReportMetric(rs.ratio(path, "relay", consCPU).med, "consume-CPU-x-relay")
	b.ReportMetric(rs.diff(path, "relay", p99).med, "p99-over-relay-µs")
}
