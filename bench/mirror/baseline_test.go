package mirrorbench

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"
)

// baselineBin is another kmirror binary to run side by side with this one,
// in the same rounds (KMIRROR_BENCH_BASELINE_BIN): how a refactoring or an
// optimisation is shown to keep (or move) the figures. One build after the
// other in separate runs would meet different loads; within a round the two
// copies are seconds apart and take turns going first. With a baseline,
// MirrorMaker 2 is left out (the question is build against build).
var baselineBin = os.Getenv("KMIRROR_BENCH_BASELINE_BIN")

const baselinePath = "kmirror-baseline"

// fillBaseline fills the baseline's own source topic with the case's records
// (kmirror mirrors a topic under its own name, so the two builds cannot copy
// the same source topic into one destination) and returns its spec; the zero
// spec without a baseline.
func fillBaseline(ctx context.Context, b *testing.B, e *env, s spec) spec {
	if baselineBin == "" {
		return spec{}
	}
	base := s
	base.topic = s.topic + "-base"
	createTopic(ctx, b, e.src, base.topic, s.partitions)
	if err := produceAll(ctx, producer(b, e.src, s.codec.codec), records(base.topic, s.partitions)); err != nil {
		b.Fatalf("fill %s: %v", base.topic, err)
	}
	base.bytes = logBytes(ctx, b, e.src, base.topic)
	return base
}

// baselineRatios is the case's figures of this build against the baseline:
// medians of the rounds' paired ratios, with their ranges.
func baselineRatios(get func(path string, round int) *result) []string {
	if baselineBin == "" {
		return nil
	}
	var mbps, cpu, fromAdd []float64
	for round := 1; round <= int(mirrorRounds); round++ {
		km, base := get("kmirror", round), get(baselinePath, round)
		if km == nil || base == nil {
			continue
		}
		if x := km.mbps() / base.mbps(); !math.IsNaN(x) && !math.IsInf(x, 0) {
			mbps = append(mbps, x)
		}
		if x := km.cpuPerGB() / base.cpuPerGB(); !math.IsNaN(x) && !math.IsInf(x, 0) {
			cpu = append(cpu, x)
		}
		if base.cpuFromAdd > 0 {
			fromAdd = append(fromAdd, float64(km.cpuFromAdd)/float64(base.cpuFromAdd))
		}
	}
	if len(mbps) == 0 {
		return nil
	}
	figs := fmt.Sprintf("kmirror/baseline MB/s median %.2f of %s, CPU/GB median %.2f of %s",
		median(mbps), list(mbps), median(cpu), list(cpu))
	if len(fromAdd) > 0 {
		// The window starts at the first readable record, so start-up work after it
		// counts and work before it does not; this one counts the whole copy.
		figs += fmt.Sprintf(", CPU from AddTopicsToMirror to done median %.2f of %s", median(fromAdd), list(fromAdd))
	}
	return []string{figs}
}
