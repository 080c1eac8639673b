package soak

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// tracker measures recovery: when a fault ends it notes the source's log
// ends; the fault has recovered when the destination holds as much on every
// partition. It also samples the lag (source minus destination log ends,
// summed) and the kmirror processes' RSS and threads.
type tracker struct {
	w       *world
	topics  func() []string
	mu      sync.Mutex
	pending []pendingRecovery
	// recoveries are milliseconds from a fault's end to caught up.
	recoveries []int64
	maxLag     int64
	peakRSS    map[string]int64 // KiB
	peakThr    map[string]int64
	samples    int
}

type pendingRecovery struct {
	ended  time.Time
	target map[string]int64 // "topic/partition" -> source log end when the fault ended
}

func newTracker(w *world, topics func() []string) *tracker {
	return &tracker{w: w, topics: topics, peakRSS: map[string]int64{}, peakThr: map[string]int64{}}
}

func ends(ctx context.Context, adm *kadm.Client, topics []string) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lo, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	return out, nil
}

// faultEnded notes the source log ends as a fault ends (retrying while a
// source broker restarts).
func (tr *tracker) faultEnded(ctx context.Context, at time.Time) {
	for ctx.Err() == nil {
		src, err := ends(ctx, tr.w.srcAdm, tr.topics())
		if err == nil {
			tr.mu.Lock()
			tr.pending = append(tr.pending, pendingRecovery{ended: at, target: src})
			tr.mu.Unlock()
			return
		}
		hold(ctx, time.Second)
	}
}

// run samples every second until ctx ends.
func (tr *tracker) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tr.sampleProcesses()
		dst, err := ends(ctx, tr.w.dstAdm, tr.topics())
		if err != nil {
			continue
		}
		tr.resolve(dst)
		if src, err := ends(ctx, tr.w.srcAdm, tr.topics()); err == nil {
			tr.lag(src, dst)
		}
	}
}

func (tr *tracker) resolve(dst map[string]int64) {
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	kept := tr.pending[:0]
	for _, p := range tr.pending {
		if caughtUp(p.target, dst) {
			tr.recoveries = append(tr.recoveries, now.Sub(p.ended).Milliseconds())
		} else {
			kept = append(kept, p)
		}
	}
	tr.pending = kept
}

func caughtUp(target, dst map[string]int64) bool {
	for tp, end := range target {
		if dst[tp] < end {
			return false
		}
	}
	return true
}

func (tr *tracker) lag(src, dst map[string]int64) {
	var lag int64
	for tp, end := range src {
		lag += max(0, end-dst[tp])
	}
	tr.mu.Lock()
	tr.maxLag = max(tr.maxLag, lag)
	tr.mu.Unlock()
}

func (tr *tracker) sampleProcesses() {
	for _, p := range tr.w.inst {
		pid := p.pid()
		if pid == 0 {
			continue
		}
		rss, thr, err := procStatus(pid)
		if err != nil {
			continue
		}
		tr.mu.Lock()
		tr.peakRSS[p.name] = max(tr.peakRSS[p.name], rss)
		tr.peakThr[p.name] = max(tr.peakThr[p.name], thr)
		tr.samples++
		tr.mu.Unlock()
	}
}

// percentiles are p50, p99 and max of ms (0s when empty).
func percentiles(ms []int64) (p50, p99, top int64) {
	if len(ms) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	at := func(q float64) int64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.5), at(0.99), s[len(s)-1]
}

// panics counts panics and fatal errors in the instances' logs.
func panics(w *world) (int, []string) {
	n := 0
	var where []string
	for _, p := range w.inst {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
				n++
				where = append(where, p.name+": "+line)
			}
		}
	}
	return n, where
}
