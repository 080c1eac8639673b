package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// demoApp is the application of `kmirror demo --switch`: a producer and a
// consumer group that know the route's address only, as a real application
// configured with the route would. It counts what the switch must keep:
// every acknowledged record read once, in order, at the offset it was
// acknowledged at.
type demoApp struct {
	prod, cons *kgo.Client
	halt       chan struct{} // closed: the producer's loop stops
	stopCons   context.CancelFunc
	loops      sync.WaitGroup
	haltOnce   sync.Once
	closeOnce  sync.Once

	mu       sync.Mutex
	sent     int
	failed   int
	firstErr error
	acked    map[int32][]appRecord // per partition, in acknowledgement (= offset) order
	consumed map[int32][]appRecord // per partition, in the order the group read them
	seen     map[string]int        // times each value was read
	next     map[int32]int64       // per partition, the offset the group should read next
	missing  int                   // offsets the group skipped
}

// appRecord is a record of the application: where it is and what it says.
type appRecord struct {
	offset int64
	value  string
}

// startApp starts the producer and the consumer group on the route and
// their loops, which run until stop (or close).
func startApp(ctx context.Context, route string, rate int) (_ *demoApp, err error) {
	a := &demoApp{halt: make(chan struct{}), acked: map[int32][]appRecord{}, consumed: map[int32][]appRecord{},
		seen: map[string]int{}, next: map[int32]int64{}}
	// Idempotent is franz-go's default with acks=all; the delivery timeout is
	// Kafka's default, the time a client gives a frozen write to land.
	if a.prod, err = kgo.NewClient(kgo.SeedBrokers(route), kgo.DefaultProduceTopic(demoTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(2*time.Minute)); err != nil {
		return nil, fmt.Errorf("the application's producer: %w", err)
	}
	// Auto-commit every second rather than franz-go's 5 s: the switch waits for
	// the group to commit the log end (GROUPS_QUIET), so this shortens the freeze.
	if a.cons, err = kgo.NewClient(kgo.SeedBrokers(route), kgo.ConsumerGroup(demoGroup), kgo.ConsumeTopics(demoTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(time.Second)); err != nil {
		a.prod.Close()
		return nil, fmt.Errorf("the application's consumer: %w", err)
	}
	cctx, stopCons := context.WithCancel(ctx)
	a.stopCons = stopCons
	a.loops.Add(2)
	go a.produce(ctx, rate)
	go a.consume(cctx)
	return a, nil
}

// produce writes numbered records at the rate; ctx is the records' life
// (cancelling it would fail the buffered ones), halt ends the loop.
func (a *demoApp) produce(ctx context.Context, rate int) {
	defer a.loops.Done()
	t := time.NewTicker(time.Second / time.Duration(max(1, rate)))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-a.halt:
			return
		case <-t.C:
		}
		v := fmt.Sprintf("app-%07d", i)
		a.mu.Lock()
		a.sent++
		a.mu.Unlock()
		a.prod.Produce(ctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}, a.onAck)
	}
}

func (a *demoApp) onAck(r *kgo.Record, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.failed++
		if a.firstErr == nil {
			a.firstErr = fmt.Errorf("%s: %w", r.Value, err)
		}
		return
	}
	a.acked[r.Partition] = append(a.acked[r.Partition], appRecord{r.Offset, string(r.Value)})
}

// consume reads with the group until ctx ends.
func (a *demoApp) consume(ctx context.Context) {
	defer a.loops.Done()
	for {
		fs := a.cons.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachRecord(a.onRecord)
	}
}

// onRecord counts a record read: read before (a duplicate), or after a skip
// (the offsets in between are missing: the only writer is this application,
// so a partition's offsets have no holes).
func (a *demoApp) onRecord(r *kgo.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := string(r.Value)
	a.seen[v]++
	a.consumed[r.Partition] = append(a.consumed[r.Partition], appRecord{r.Offset, v})
	next := a.next[r.Partition]
	if r.Offset > next {
		a.missing += int(r.Offset - next)
	}
	if r.Offset >= next {
		a.next[r.Partition] = r.Offset + 1
	}
}

// stop ends the producer's loop, waits for its records' answers and for the
// group to read every acknowledged record, then ends the group's loop.
func (a *demoApp) stop(ctx context.Context) error {
	a.haltOnce.Do(func() { close(a.halt) })
	var errs []error
	if err := a.prod.Flush(ctx); err != nil {
		errs = append(errs, fmt.Errorf("the producer still waited for answers: %w", err))
	}
	if err := a.awaitConsumed(ctx); err != nil {
		errs = append(errs, err)
	}
	a.stopCons()
	a.loops.Wait()
	return errors.Join(errs...)
}

// awaitConsumed polls until the group has read past every acknowledged
// record.
func (a *demoApp) awaitConsumed(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !a.readAll() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group had not read every acknowledged record when the checks began: %w", ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

func (a *demoApp) readAll() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, recs := range a.acked {
		if a.next[p] <= recs[len(recs)-1].offset {
			return false
		}
	}
	return true
}

// close stops the loops (if stop did not) and closes the clients.
func (a *demoApp) close() {
	a.closeOnce.Do(func() {
		a.haltOnce.Do(func() { close(a.halt) })
		a.stopCons()
		a.loops.Wait()
		a.prod.Close()
		a.cons.Close()
	})
}

// appCounts is a snapshot of the application's counts.
type appCounts struct {
	sent, acked, failed, consumed, dups, missing int
}

func (a *demoApp) counts() appCounts {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := appCounts{sent: a.sent, failed: a.failed, consumed: len(a.seen), missing: a.missing}
	for _, recs := range a.acked {
		c.acked += len(recs)
	}
	for _, n := range a.seen {
		c.dups += n - 1
	}
	return c
}

// line is the live line.
func (c appCounts) line(upstream string) string {
	return fmt.Sprintf("route→%s  acked %d, in flight %d, consumed %d, dup %d, missing %d",
		upstream, c.acked, c.sent-c.acked-c.failed, c.consumed, c.dups, c.missing)
}

// summary is the counts at the end; ackedAtSwitch < 0: no switch completed.
func (c appCounts) summary(ackedAtSwitch int) string {
	after := ""
	if ackedAtSwitch >= 0 {
		after = fmt.Sprintf(" (%d after the switch)", c.acked-ackedAtSwitch)
	}
	return fmt.Sprintf("%d records acknowledged%s, %d failed; %d consumed, %d duplicates, %d missing",
		c.acked, after, c.failed, c.consumed, c.dups, c.missing)
}

// verdict lists what the switch broke: failed writes, and each partition
// whose reads or whose log on the destination differ from what was
// acknowledged (the group's reads must be those records once, in order; the
// destination must hold exactly them, at their offsets).
func (a *demoApp) verdict(onDest map[int32][]appRecord) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	if a.failed > 0 {
		out = append(out, fmt.Sprintf("%d writes failed (the first: %v); a switch must only delay them", a.failed, a.firstErr))
	}
	if len(a.acked) == 0 {
		out = append(out, "no record was acknowledged")
	}
	out = append(out, compareLogs("the group's reads", a.acked, a.consumed)...)
	return append(out, compareLogs("the destination cluster", a.acked, onDest)...)
}

// compareLogs compares what was read (got) with what was acknowledged
// (want), partition by partition, and describes each difference.
func compareLogs(what string, want, got map[int32][]appRecord) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(union(want, got))) {
		w, g := want[p], got[p]
		if slices.Equal(w, g) {
			continue
		}
		out = append(out, fmt.Sprintf("%s, partition %d: %d acknowledged, %d read: %s", what, p, len(w), len(g), strings.Join(differences(w, g), ", ")))
	}
	return out
}

func union(a, b map[int32][]appRecord) map[int32]bool {
	out := map[int32]bool{}
	for p := range a {
		out[p] = true
	}
	for p := range b {
		out[p] = true
	}
	return out
}

// differences names how got differs from want: records read twice, never
// read, read but never acknowledged, read at another offset, or out of
// acknowledgement order.
func differences(want, got []appRecord) []string {
	at := map[string]int{} // value -> index in want
	for i, r := range want {
		at[r.value] = i
	}
	seen := map[string]bool{}
	dups, extra, moved, disorder, last := 0, 0, 0, 0, -1
	for _, r := range got {
		if seen[r.value] {
			dups++
			continue
		}
		seen[r.value] = true
		i, ok := at[r.value]
		switch {
		case !ok:
			extra++
		case want[i].offset != r.offset:
			moved++
		}
		if ok && i < last {
			disorder++
		}
		last = max(last, i)
	}
	var out []string
	add := func(n int, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(len(want)-(len(seen)-extra), "never read")
	add(dups, "read twice")
	add(extra, "never acknowledged")
	add(moved, "at another offset")
	add(disorder, "out of order")
	return out
}

// readTopic reads a topic of a cluster directly (not through kmirror), from
// the start to the log ends it has when the read begins.
func readTopic(ctx context.Context, addrs []string, topic string) (map[int32][]appRecord, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, fmt.Errorf("client of the destination cluster: %w", err)
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("the destination cluster's log ends of %s: %w", topic, err)
	}
	ends, next := map[int32]int64{}, map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	out := map[int32][]appRecord{}
	for !reached(next, ends) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("reading %s on the destination cluster: read to %v of the log ends %v: %w", topic, next, ends, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], appRecord{r.Offset, string(r.Value)})
			next[r.Partition] = r.Offset + 1
		})
	}
	return out, nil
}

func reached(next, ends map[int32]int64) bool {
	for p, end := range ends {
		if next[p] < end {
			return false
		}
	}
	return true
}
