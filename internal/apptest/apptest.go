// Package apptest is an application that keeps writing and reading a topic through a route
// while it is switched (docs/cutover.md): a franz-go idempotent producer (acks=all, a
// two-minute delivery timeout: a switch must only delay writes) and a franz-go consumer
// group, both bootstrapped to the route's addresses only. Verify is the cut-over's promise:
// every acknowledged record on the standby once, in the order it was acknowledged per
// partition, and read by the group once.
package apptest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// App is one application: its producer's acknowledged values per partition and what its
// group read.
type App struct {
	topic, group string
	prod         *kgo.Client
	logs         []*ClientLog // the producer's and the consumer's, shown when a check fails

	mu    sync.Mutex
	acked map[int32][]string
	at    map[string]int64 // the offset each acknowledged value was acknowledged at
	// failedWrites counts the producer's failed records (each already fails the test).
	failedWrites int
	seen         map[string]int

	stopProducing context.CancelFunc
	stopConsuming context.CancelFunc
	wg            sync.WaitGroup
}

// Start starts the application on topic with group, bootstrapped to seeds (a route's
// addresses, one per kmirror instance). A record the producer could not write fails t: a
// switch must only delay writes.
func Start(t *testing.T, ctx context.Context, seeds []string, topic, group string) *App {
	t.Helper()
	return StartWith(t, ctx, seeds, topic, group)
}

// StartWith is Start with more options for the consumer (a test that switches a route back
// within franz-go's 45 s session timeout shortens it: the members a switch leaves behind keep
// their group from taking the copied offsets until their session ends).
func StartWith(t *testing.T, ctx context.Context, seeds []string, topic, group string, consumerOpts ...kgo.Opt) *App {
	t.Helper()
	a := &App{topic: topic, group: group, acked: map[int32][]string{}, at: map[string]int64{}, seen: map[string]int{}}
	plog, clog := NewClientLog(topic+" producer"), NewClientLog(group+" consumer")
	a.logs = []*ClientLog{plog, clog}
	a.prod = kafkatest.NewClient(t, seeds, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(2*time.Minute), plog.Opt())
	cons := kafkatest.NewClient(t, seeds, append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.AutoCommitInterval(500 * time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), clog.Opt()}, consumerOpts...)...)
	pctx, stopProducing := context.WithCancel(ctx)
	cctx, stopConsuming := context.WithCancel(ctx)
	a.stopProducing, a.stopConsuming = stopProducing, stopConsuming
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		for i := 0; pctx.Err() == nil; i++ {
			v := fmt.Sprintf("%s-%06d", topic, i)
			a.prod.Produce(pctx, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err != nil {
					if pctx.Err() == nil {
						a.mu.Lock()
						a.failedWrites++
						a.mu.Unlock()
						t.Errorf("produce %s through the route: %v (a switch must only delay writes)", v, err)
					}
					return
				}
				a.mu.Lock()
				a.acked[r.Partition] = append(a.acked[r.Partition], v)
				a.at[v] = r.Offset
				a.mu.Unlock()
			})
			time.Sleep(5 * time.Millisecond) // the application's pace, not a wait for a condition
		}
	}()
	go func() {
		defer a.wg.Done()
		for cctx.Err() == nil {
			cons.PollFetches(cctx).EachRecord(func(r *kgo.Record) { a.mu.Lock(); a.seen[string(r.Value)]++; a.mu.Unlock() })
		}
	}()
	t.Cleanup(a.stop)
	return a
}

// AwaitCommitted waits until the group has committed at least n records' worth of offsets
// on c (the cluster the route leads to): the application runs in its steady state, its
// progress durable, as an application does that has been up for a while.
func (a *App) AwaitCommitted(t *testing.T, ctx context.Context, c *kafkatest.Cluster, n int64) {
	t.Helper()
	adm := kadm.NewClient(c.Client(t))
	polltest.Eventually(t, time.Minute, a.group+" commits its progress", func() (bool, string) {
		offs, err := adm.FetchOffsets(ctx, a.group)
		if err != nil {
			return false, err.Error()
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) { sum += max(0, o.At) })
		return sum >= n, fmt.Sprintf("%d committed", sum)
	})
}

// Acked is how many records the producer was acknowledged.
func (a *App) Acked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, vs := range a.acked {
		n += len(vs)
	}
	return n
}

// Read is how many distinct records the group read.
func (a *App) Read() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

func (a *App) stop() {
	a.stopProducing()
	a.stopConsuming()
	a.wg.Wait()
}

// Verify stops the producer once it has been acknowledged more records (so that it wrote
// after whatever the test did), then checks the cut-over's promise against the standby
// cluster: every acknowledged record there once, in acknowledged order per
// partition and nothing else; the group read every one of them, none twice. When a check
// fails it shows the clients' logs and, for a partition that holds a record twice, who wrote
// those batches on the primary.
func (a *App) Verify(t *testing.T, ctx context.Context, primary, standby *kafkatest.Cluster, more int) {
	t.Helper()
	a.mu.Lock()
	failedBefore := t.Failed() && a.failedWrites == 0 // failed by something else than this app
	a.mu.Unlock()
	defer func() {
		if !failedBefore && t.Failed() {
			a.explain(t, ctx, primary, standby)
		}
	}()
	before := a.Acked()
	polltest.Until(t, 2*time.Minute, fmt.Sprintf("%s's producer goes on through the route", a.topic), func() bool { return a.Acked() >= before+more })
	a.stopProducing()
	a.prod.Flush(ctx)
	total := a.Acked()

	cl := standby.Client(t, kgo.ConsumeTopics(a.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	onStandby := map[int32][]string{}
	polltest.Eventually(t, time.Minute, fmt.Sprintf("the standby holds every record of %s acknowledged", a.topic), func() (bool, string) {
		// Bounded: a poll waits for records that may never come (the condition must return
		// for Eventually to fail; a record acknowledged elsewhere hung a run for minutes).
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollRecords(pctx, 10000)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { onStandby[r.Partition] = append(onStandby[r.Partition], string(r.Value)) })
		n := 0
		for _, vs := range onStandby {
			n += len(vs)
		}
		return n >= total, fmt.Sprintf("%d of %d on the standby (fetch errors %v)", n, total, fs.Errors())
	})
	a.mu.Lock()
	for p, vs := range a.acked {
		if !slices.Equal(onStandby[p], vs) {
			t.Errorf("%s/%d: the standby holds %d records, %d were acknowledged, or not in the acknowledged order: %s",
				a.topic, p, len(onStandby[p]), len(vs), firstDifference(onStandby[p], vs, a.at))
		}
	}
	a.mu.Unlock()
	polltest.Until(t, 2*time.Minute, fmt.Sprintf("the group read every record of %s", a.topic), func() bool { return a.Read() >= total })
	a.stopConsuming()
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	for v, n := range a.seen {
		if n > 1 {
			t.Errorf("the group read %s %d times", v, n)
		}
	}
	t.Logf("%s: %d records acknowledged, all on the standby once and in order, %d read by the group", a.topic, total, len(a.seen))
}

// explain logs what the clients logged and who wrote the primary's batches that hold a
// record twice.
func (a *App) explain(t *testing.T, ctx context.Context, primary, standby *kafkatest.Cluster) {
	t.Helper()
	var sb strings.Builder
	for _, l := range a.logs {
		l.Dump(&sb)
	}
	t.Log(sb.String())
	a.mu.Lock()
	parts := slices.Sorted(maps.Keys(a.acked))
	a.mu.Unlock()
	for _, c := range []struct {
		name string
		c    *kafkatest.Cluster
	}{{"primary", primary}, {"standby", standby}} {
		cl := c.c.Client(t)
		for _, p := range parts {
			s, err := writers(ctx, cl, a.topic, p)
			if err != nil {
				s = fmt.Sprintf("%s/%d: reading the batches: %v", a.topic, p, err)
			}
			t.Logf("on the %s: %s", c.name, s)
		}
	}
}

// firstDifference describes where got first departs from want.
// at is where each wanted value was acknowledged.
func firstDifference(got, want []string, at map[string]int64) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			ackedAt := func(v string) string {
				if o, ok := at[v]; ok {
					return fmt.Sprintf("%s (acknowledged at offset %d)", v, o)
				}
				return v + " (never acknowledged)"
			}
			return fmt.Sprintf("position %d holds %s, %s was acknowledged there", i, ackedAt(got[i]), ackedAt(want[i]))
		}
	}
	if len(got) > len(want) {
		return "extra: " + strings.Join(got[len(want):min(len(got), len(want)+5)], ",")
	}
	if len(got) < len(want) {
		return "missing: " + strings.Join(want[len(got):min(len(want), len(got)+5)], ",")
	}
	return "none"
}
