package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/internal/faultnet"
	"github.com/kmirror/kmirror/internal/kafkatest"
)

// kind is one sort of fault; group is what it holds while it runs (one
// fault per group at a time: one broker of a cluster down at a time keeps
// min.insync.replicas 2 writable; one kmirror instance down at a time keeps
// one that answers the CLI).
type kind struct {
	name, group string
	// hold is how long the fault lasts, in seconds, short and long mode.
	short, long [2]float64
}

var kinds = []kind{
	{"kmirror-kill", "kmirror", [2]float64{0, 3}, [2]float64{0, 10}},
	{"kmirror-freeze", "kmirror", [2]float64{7, 10}, [2]float64{7, 20}}, // longer than the 6s session
	{"kmirror-restart", "kmirror", [2]float64{0, 0}, [2]float64{0, 0}},
	{"src-broker-kill", "src", [2]float64{0, 3}, [2]float64{0, 10}},
	{"src-broker-restart", "src", [2]float64{0, 0}, [2]float64{0, 0}},
	{"src-broker-freeze", "src", [2]float64{2, 8}, [2]float64{2, 15}},
	{"src-leader-election", "src", [2]float64{0, 0}, [2]float64{0, 0}},
	{"dst-broker-kill", "dst", [2]float64{0, 3}, [2]float64{0, 10}},
	{"dst-broker-restart", "dst", [2]float64{0, 0}, [2]float64{0, 0}},
	{"dst-broker-freeze", "dst", [2]float64{2, 8}, [2]float64{2, 15}},
	{"dst-leader-election", "dst", [2]float64{0, 0}, [2]float64{0, 0}},
	{"net-latency", "", [2]float64{2, 6}, [2]float64{5, 30}},
	{"net-bandwidth", "", [2]float64{2, 6}, [2]float64{5, 30}},
	{"net-reset", "", [2]float64{1, 3}, [2]float64{1, 10}},
	{"net-blackhole", "", [2]float64{1, 5}, [2]float64{5, 60}},
	{"net-slow-close", "", [2]float64{2, 5}, [2]float64{5, 20}},
	{"mirror-pause", "pause", [2]float64{1, 4}, [2]float64{2, 15}},
	{"throttle-alter", "throttle", [2]float64{2, 5}, [2]float64{5, 20}},
}

// mirroredNames are the topics pause and leader elections pick from.
var mirroredNames = []string{topicNone, topicZstd, topicLz4, topicKcat, topicTx, topicCompact}

// fault is one scheduled fault and, once run, what happened.
type fault struct {
	Index  int           `json:"index"`
	Kind   string        `json:"kind"`
	Target int           `json:"target"` // broker, instance or proxy index; -1: every proxy
	Hold   time.Duration `json:"hold_ns"`
	// Param is the kind's own: latency/jitter ms, KB/s, throttle bytes/s, topic/partition.
	Param string        `json:"param,omitempty"`
	Gap   time.Duration `json:"gap_ns"`
	Began time.Time     `json:"began"`
	Ended time.Time     `json:"ended"`
	Err   string        `json:"error,omitempty"`
	group string
}

func (f *fault) String() string {
	s := fmt.Sprintf("#%d %s target=%d hold=%s", f.Index, f.Kind, f.Target, f.Hold.Round(time.Millisecond))
	if f.Param != "" {
		s += " " + f.Param
	}
	return s
}

// schedule draws n faults from seed: rounds of every kind in a shuffled
// order (so every kind is covered every len(kinds) faults), each with its
// target, hold and parameters. The same seed gives the same schedule.
func schedule(seed uint64, n int, long bool) []*fault {
	rng := rand.New(rand.NewPCG(seed, 0x50a6))
	var out []*fault
	for len(out) < n {
		for _, k := range rng.Perm(len(kinds)) {
			if len(out) == n {
				break
			}
			out = append(out, draw(rng, len(out), kinds[k], long))
		}
	}
	return out
}

func draw(rng *rand.Rand, i int, k kind, long bool) *fault {
	r := k.short
	gapMax := 1.0
	if long {
		r, gapMax = k.long, 5
	}
	secs := r[0] + rng.Float64()*(r[1]-r[0])
	f := &fault{Index: i, Kind: k.name, group: k.group, Target: rng.IntN(3),
		Hold: time.Duration(secs * float64(time.Second)), Gap: time.Duration(rng.Float64() * gapMax * float64(time.Second))}
	switch k.name {
	case "net-latency":
		lat := 20 + rng.IntN(281)
		f.Param = fmt.Sprintf("latency=%d jitter=%d", lat, rng.IntN(lat/2+1))
	case "net-bandwidth":
		f.Param = fmt.Sprintf("rate=%d", 16+rng.IntN(241))
	case "throttle-alter":
		f.Param = fmt.Sprintf("rate=%d", 50_000+rng.IntN(450_000))
	case "mirror-pause", "src-leader-election", "dst-leader-election":
		f.Param = fmt.Sprintf("%s/%d", mirroredNames[rng.IntN(len(mirroredNames))], rng.IntN(3))
	}
	if k.group == "" && rng.IntN(3) == 0 {
		f.Target = -1 // every source broker's proxy at once
	}
	return f
}

// injector runs faults against the world.
type injector struct {
	w     *world
	logf  func(format string, args ...any)
	locks map[string]*sync.Mutex
	ended func(*fault)
}

func newInjector(w *world, logf func(string, ...any), ended func(*fault)) *injector {
	locks := map[string]*sync.Mutex{}
	for _, k := range kinds {
		if k.group != "" {
			locks[k.group] = &sync.Mutex{}
		}
	}
	return &injector{w: w, logf: logf, locks: locks, ended: ended}
}

// run runs the schedule with `workers` faults at a time, in schedule order.
func (in *injector) run(ctx context.Context, faults []*fault, workers int) {
	next := make(chan *fault)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range next {
				in.one(ctx, f)
				select {
				case <-ctx.Done():
				case <-time.After(f.Gap):
				}
			}
		}()
	}
	for _, f := range faults {
		select {
		case next <- f:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
}

func (in *injector) one(ctx context.Context, f *fault) {
	if l := in.locks[f.group]; l != nil {
		l.Lock()
		defer l.Unlock()
	}
	if ctx.Err() != nil {
		return
	}
	f.Began = time.Now()
	in.logf("fault %s begins", f)
	err := in.apply(ctx, f)
	f.Ended = time.Now()
	if err != nil {
		f.Err = err.Error()
		in.logf("fault %s ended after %s with error: %v", f, f.Ended.Sub(f.Began).Round(time.Millisecond), err)
	} else {
		in.logf("fault %s ended after %s", f, f.Ended.Sub(f.Began).Round(time.Millisecond))
	}
	in.ended(f)
}

// hold waits out a fault's duration (the fault's length, not a wait for a
// condition).
func hold(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (in *injector) apply(ctx context.Context, f *fault) error {
	switch f.Kind {
	case "kmirror-kill", "kmirror-freeze", "kmirror-restart":
		return in.instance(ctx, f)
	case "src-broker-kill", "src-broker-restart", "src-broker-freeze":
		return in.broker(ctx, in.w.src, f)
	case "dst-broker-kill", "dst-broker-restart", "dst-broker-freeze":
		return in.broker(ctx, in.w.dst, f)
	case "src-leader-election":
		return electLeader(ctx, in.w.srcAdm, f.Param)
	case "dst-leader-election":
		return electLeader(ctx, in.w.dstAdm, f.Param)
	case "mirror-pause":
		return in.pause(ctx, f)
	case "throttle-alter":
		return in.throttle(ctx, f)
	default:
		return in.network(ctx, f)
	}
}

func (in *injector) instance(ctx context.Context, f *fault) error {
	p := in.w.inst[f.Target]
	in.w.busyMu.Lock()
	in.w.busy = f.Target
	in.w.busyMu.Unlock()
	defer func() {
		in.w.busyMu.Lock()
		in.w.busy = -1
		in.w.busyMu.Unlock()
	}()
	switch f.Kind {
	case "kmirror-freeze":
		p.signal(syscall.SIGSTOP)
		hold(ctx, f.Hold)
		p.signal(syscall.SIGCONT)
		return nil
	case "kmirror-kill":
		p.kill()
		hold(ctx, f.Hold)
	default:
		if err := p.stop(); err != nil {
			return err
		}
	}
	return p.start(context.WithoutCancel(ctx))
}

func (in *injector) broker(ctx context.Context, c *kafkatest.Cluster, f *fault) error {
	r := c.Real()
	var err error
	switch f.Kind[4:] {
	case "broker-freeze":
		if err := r.SignalNode(f.Target, syscall.SIGSTOP); err != nil {
			return err
		}
		hold(ctx, f.Hold)
		return r.SignalNode(f.Target, syscall.SIGCONT)
	case "broker-kill":
		err = r.StopNode(f.Target, true)
		hold(ctx, f.Hold)
	default:
		// A graceful stop that takes over 30s ends in SIGKILL (kafkatest): the
		// broker is down either way and is started again below.
		err = r.StopNode(f.Target, false)
	}
	// A broker left down would turn the next broker fault of its cluster into
	// a lost quorum (the nodes are combined controllers) and end the soak in a
	// state no check means anything in: restart it, retrying, also when the
	// run is being cut short.
	return errors.Join(err, startBroker(context.WithoutCancel(ctx), r, f.Target))
}

func startBroker(ctx context.Context, r *kafkatest.RealCluster, i int) error {
	var err error
	for range 3 {
		sctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		err = r.StartNode(sctx, i)
		cancel()
		if err == nil {
			return nil
		}
		_ = r.StopNode(i, true)
	}
	return fmt.Errorf("broker %d does not start again: %w", i, err)
}

// electLeader moves the preferred leader of a mirrored partition to its
// next replica and elects it: the leader changes under the copy.
func electLeader(ctx context.Context, adm *kadm.Client, param string) error {
	// A broker restarted by an earlier fault may not answer or not be back in
	// the ISR yet: try for up to a minute before calling it not applied.
	deadline := time.Now().Add(time.Minute)
	for {
		err := moveLeader(ctx, adm, param)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		hold(ctx, 2*time.Second)
	}
}

func moveLeader(ctx context.Context, adm *kadm.Client, param string) error {
	var topic string
	var p int32
	if i := strings.LastIndexByte(param, '/'); i > 0 {
		topic = param[:i]
		n, _ := strconv.Atoi(param[i+1:])
		p = int32(n)
	}
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("metadata of %s: %w", topic, err)
	}
	pd, ok := tds[topic].Partitions[p]
	if !ok || len(pd.Replicas) < 2 {
		return fmt.Errorf("%s: no replicas known", param)
	}
	rotated := append(append([]int32(nil), pd.Replicas[1:]...), pd.Replicas[0])
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, p, rotated)
	resp, err := adm.AlterPartitionAssignments(ctx, req)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("reorder replicas of %s to %v: %w", param, rotated, err)
	}
	if err := elect(ctx, adm, topic, p); err != nil {
		return fmt.Errorf("elect %d on %s: %w", rotated[0], param, err)
	}
	return nil
}

func elect(ctx context.Context, adm *kadm.Client, topic string, p int32) error {
	res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {p: {}}})
	if err != nil {
		return err
	}
	for _, ps := range res {
		for _, r := range ps {
			if r.Err != nil && !errors.Is(r.Err, kerr.ElectionNotNeeded) {
				return r.Err
			}
		}
	}
	return nil
}

func (in *injector) network(ctx context.Context, f *fault) error {
	name := "f" + strconv.Itoa(f.Index)
	var toxics []faultnet.Toxic
	switch f.Kind {
	case "net-latency":
		var lat, jit int
		fmt.Sscanf(f.Param, "latency=%d jitter=%d", &lat, &jit)
		for _, s := range []string{"upstream", "downstream"} {
			toxics = append(toxics, faultnet.Toxic{Name: name + s, Type: "latency", Stream: s,
				Attributes: map[string]any{"latency": lat / 2, "jitter": jit / 2}})
		}
	case "net-bandwidth":
		var rate int
		fmt.Sscanf(f.Param, "rate=%d", &rate)
		toxics = append(toxics, faultnet.Toxic{Name: name, Type: "bandwidth", Attributes: map[string]any{"rate": rate}})
	case "net-reset":
		toxics = append(toxics, faultnet.Toxic{Name: name, Type: "reset_peer", Attributes: map[string]any{"timeout": 0}})
	case "net-blackhole":
		toxics = append(toxics, faultnet.Toxic{Name: name, Type: "timeout", Attributes: map[string]any{"timeout": 0}})
	case "net-slow-close":
		toxics = append(toxics, faultnet.Toxic{Name: name, Type: "slow_close", Attributes: map[string]any{"delay": 2000}})
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	targets := []int{f.Target}
	if f.Target < 0 {
		targets = []int{0, 1, 2}
	}
	var added [][2]any
	var err error
	for _, i := range targets {
		for _, tx := range toxics {
			if err = in.w.front.Add(i, tx); err != nil {
				break
			}
			added = append(added, [2]any{i, tx.Name})
		}
	}
	if err == nil {
		hold(ctx, f.Hold)
	}
	for _, a := range added {
		if rerr := in.w.front.Remove(a[0].(int), a[1].(string)); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// pause pauses one topic's mirroring and resumes it after the hold.
func (in *injector) pause(ctx context.Context, f *fault) error {
	topic := f.Param[:len(f.Param)-2]
	if err := in.retryCLI(ctx, time.Minute, "--pause", "--mirror", mirrorName, "--topics", topic); err != nil {
		return err
	}
	hold(ctx, f.Hold)
	return in.retryCLI(ctx, 3*time.Minute, "--resume", "--mirror", mirrorName, "--topics", topic)
}

// throttle sets the mirror's byte-rate limit and lifts it after the hold.
func (in *injector) throttle(ctx context.Context, f *fault) error {
	rate := f.Param[len("rate="):]
	if err := in.retryCLI(ctx, time.Minute, "--alter", "--mirror", mirrorName, "--add-config", "replication.throttled.rate="+rate); err != nil {
		return err
	}
	hold(ctx, f.Hold)
	return in.retryCLI(ctx, 3*time.Minute, "--alter", "--mirror", mirrorName, "--delete-config", "replication.throttled.rate")
}

// retryCLI runs a CLI command until it succeeds or d passes (while brokers
// restart, the mirror state's coordinator can be unavailable for a while).
// Undoing a fault gets 3 minutes, also when the run is cut short: a mirror
// left paused or throttled would never catch up.
func (in *injector) retryCLI(ctx context.Context, d time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if _, err = in.w.cli(ctx, args...); err == nil {
			return nil
		}
		hold(ctx, time.Second)
	}
	return err
}
