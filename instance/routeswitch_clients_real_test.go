package instance_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/apptest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestRealRouteSwitchEveryClient is issue 21's acceptance of a planned switch: real primary
// and standby clusters, a mirror between them, and through the route the whole time, with
// clients nobody here wrote: the Java client (Kafka's VerifiableProducer, idempotent with
// acks=all, and VerifiableConsumer in a consumer group), librdkafka (kcat producing and kcat
// consuming in a group of its own) and franz-go (a producer and a group). The operator's
// `kmirror mirrors --switch --route app` switches the route while they run; no client is
// restarted or reconfigured. Afterwards: every record a producer was acknowledged is on the
// standby exactly once, in the order acknowledged per partition; each group read every record
// on the standby, and none twice; describe reports the switch's duration and write freeze.
func TestRealRouteSwitchEveryClient(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found: install the Debian package kcat (make test-deps does it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const topic = "orders"
	_, standby, in := startRouteWorld(t, ctx, topic)
	route := in.Proxy.RouteAddr("app")
	c := &everyClient{}

	// The producers.
	cfgFile := javaProducerConfig(t)
	c.javaProd = kafkatest.StartVerifiable(t, ctx, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", route,
		"--topic", topic, "--max-messages", "-1", "--throughput", "100", "--value-prefix", "1", "--producer.config", cfgFile)
	c.kcatProd = startKcatProducer(t, ctx, kcat, route, topic)
	c.fgProd = startFranzProducer(t, ctx, route, topic)

	// The consumer groups, all from the beginning of the topic.
	c.javaCons = kafkatest.StartVerifiable(t, ctx, "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", route,
		"--topic", topic, "--group-id", "java-g", "--reset-policy", "earliest", "--verbose", "--group-protocol", "classic")
	c.kcatCons = startKcatConsumer(t, ctx, kcat, route, topic, "kcat-g")
	c.fgCons = startFranzConsumer(t, ctx, route, topic, "fg-g")

	polltest.Eventually(t, 2*time.Minute, "every client produces or consumes through the route", func() (bool, string) {
		n := []int{len(c.javaProd.Values("producer_send_success")), c.kcatProd.delivered(), c.fgProd.count(),
			len(c.javaCons.Values("record_data")), c.kcatCons.count(), c.fgCons.count()}
		return slices.Min(n) > 50, fmt.Sprintf("java/kcat/franz-go produced %d/%d/%d, consumed %d/%d/%d", n[0], n[1], n[2], n[3], n[4], n[5])
	})

	// The operator's switch.
	began := time.Now()
	rec := switchRoute(t, ctx, in, "--switch", "--route", "app")
	described := describeRoute(t, ctx, in, "app")
	t.Logf("switched in %s; describe: switch %d ms, writes frozen %d ms; steps: %s", time.Since(began).Round(time.Millisecond),
		*described.DurationMs, *described.FreezeMs, stepsOf(rec))

	// The target, writes frozen at most the copy's lag at the start + 2 s, holds for
	// kmirror's part of the freeze: every step but GROUPS_QUIET, which waits for the groups'
	// own next commits (kcat and the Java consumer auto-commit every 5 s; copying an older
	// commit makes a group read again what it read since: docs/cutover.md, step 4). The lag at
	// the start is a few records here, and counts in DRAINING.
	if own := freezeBesides(rec, statetopic.RouteGroupsQuiet); own > 2*time.Second {
		t.Errorf("writes were frozen %s besides GROUPS_QUIET (target: the lag at the start + 2 s): %s", own, stepsOf(rec))
	}

	before := c.produceOnAndStop(t, ctx)

	// The standby holds every acknowledged record once, in the order acknowledged.
	onStandby := readTopic(t, ctx, standby, topic, 3)
	count := map[string]int{}
	at := map[string]position{}
	for pos, v := range onStandby {
		count[v]++
		at[v] = pos
	}
	acked := c.checkAcknowledged(t, onStandby, count, at)

	// Every group read every record, none twice.
	total := len(onStandby)
	c.checkGroupsRead(t, onStandby, count, at)
	t.Logf("%d records on the standby; acknowledged java %d, kcat %d, franz-go %d; %d/%d/%d of them after the switch",
		total, len(acked["java"]), len(acked["kcat"]), len(acked["franz-go"]),
		len(acked["java"])-before[0], len(acked["kcat"])-before[1], len(acked["franz-go"])-before[2])
}

// everyClient is the clients of TestRealRouteSwitchEveryClient, all through the route: a
// producer and a consumer group each of the Java client, kcat and franz-go.
type everyClient struct {
	javaProd, javaCons *kafkatest.Verifiable
	kcatProd           *kcatProducer
	kcatCons           *kcatConsumer
	fgProd             *franzProducer
	fgCons             *franzConsumer
}

// produceOnAndStop waits until every producer goes on through the switched route, stops
// them and checks none saw an error. It returns how many records each producer (Java, kcat,
// franz-go) had acknowledged at the switch.
func (c *everyClient) produceOnAndStop(t *testing.T, ctx context.Context) []int {
	t.Helper()
	// Every producer goes on through the switched route, then stops.
	before := []int{len(c.javaProd.Values("producer_send_success")), c.kcatProd.delivered(), c.fgProd.count()}
	polltest.Eventually(t, 3*time.Minute, "every producer goes on after the switch", func() (bool, string) {
		n := []int{len(c.javaProd.Values("producer_send_success")), c.kcatProd.delivered(), c.fgProd.count()}
		return n[0] > before[0]+100 && n[1] > before[1]+100 && n[2] > before[2]+100,
			fmt.Sprintf("java/kcat/franz-go acknowledged %v, %v at the switch", n, before)
	})
	c.javaProd.Stop(t)
	c.kcatProd.stop(t)
	c.fgProd.stop(ctx)
	if errs := c.javaProd.SendErrors(); len(errs) > 0 {
		t.Errorf("the Java producer saw %d send errors (first %s): a switch must only delay writes", len(errs), errs[0])
	}
	if n := c.kcatProd.failed(); n > 0 {
		t.Errorf("kcat saw %d failed deliveries: a switch must only delay writes", n)
	}
	return before
}

// checkAcknowledged checks that every record a producer was acknowledged is on the standby
// (onStandby; count and at: how many times and where each value is there) once, where it
// was acknowledged, in the order acknowledged per partition. It returns each producer's
// acknowledged positions, in the order acknowledged.
func (c *everyClient) checkAcknowledged(t *testing.T, onStandby map[position]string, count map[string]int, at map[string]position) map[string][]position {
	t.Helper()
	acked := map[string][]position{} // producer -> acknowledged positions, in ack order
	for _, ev := range c.javaProd.Events("producer_send_success") {
		v := fmt.Sprint(ev["value"])
		p, _ := ev["partition"].(float64)
		o, _ := ev["offset"].(float64)
		acked["java"] = append(acked["java"], position{int32(p), int64(o)})
		if count[v] != 1 || at[v] != (position{int32(p), int64(o)}) {
			t.Errorf("java: acknowledged %s at %d/%d is %d times on the standby (at %v)", v, int(p), int64(o), count[v], at[v])
		}
	}
	for _, pos := range c.kcatProd.positions() {
		acked["kcat"] = append(acked["kcat"], pos)
		if v, ok := onStandby[pos]; !ok || !strings.HasPrefix(v, "kcat-") || count[v] != 1 {
			t.Errorf("kcat: acknowledged at %v, the standby holds %q there (%d times)", pos, v, count[v])
		}
	}
	for _, r := range c.fgProd.acked() {
		pos := position{r.Partition, r.Offset}
		acked["franz-go"] = append(acked["franz-go"], pos)
		if count[string(r.Value)] != 1 || at[string(r.Value)] != pos {
			t.Errorf("franz-go: acknowledged %s at %v is %d times on the standby (at %v)", r.Value, pos, count[string(r.Value)], at[string(r.Value)])
		}
	}
	for prod, positions := range acked {
		last := map[int32]int64{}
		for _, pos := range positions {
			if o, ok := last[pos.partition]; ok && pos.offset <= o {
				t.Errorf("%s: acknowledged at %v after %d/%d: out of order", prod, pos, pos.partition, o)
			}
			last[pos.partition] = pos.offset
		}
	}
	return acked
}

// checkGroupsRead waits until each group has read every record on the standby (onStandby;
// count and at: how many times and where each value is there), and checks none read a
// record twice or one the standby does not hold.
func (c *everyClient) checkGroupsRead(t *testing.T, onStandby map[position]string, count map[string]int, at map[string]position) {
	t.Helper()
	total := len(onStandby)
	groups := map[string]func() []string{
		"java-g": func() []string {
			var vs []string
			for _, r := range c.javaCons.Records() {
				vs = append(vs, r.Value)
			}
			return vs
		},
		"kcat-g": c.kcatCons.values,
		"fg-g":   c.fgCons.values,
	}
	for name, values := range groups {
		polltest.Eventually(t, 3*time.Minute, "group "+name+" read every record on the standby", func() (bool, string) {
			seen := map[string]bool{}
			for _, v := range values() {
				seen[v] = true
			}
			return len(seen) >= total, fmt.Sprintf("%d of %d; not read: %s", len(seen), total, unread(onStandby, seen))
		})
		read := map[string]int{}
		for _, v := range values() {
			if read[v]++; read[v] == 2 {
				t.Errorf("group %s read %s twice (at %v on the standby)", name, v, at[v])
			}
			if count[v] == 0 {
				t.Errorf("group %s read %s, which the standby does not hold", name, v)
			}
		}
	}
}

// unread summarises, per partition, the positions of the topic's records a group has not
// read: how many, and the first and last of them.
func unread(topic map[position]string, seen map[string]bool) string {
	type span struct{ n, lo, hi int64 }
	spans := map[int32]*span{}
	for pos, v := range topic {
		if seen[v] {
			continue
		}
		s := spans[pos.partition]
		if s == nil {
			s = &span{lo: pos.offset, hi: pos.offset}
			spans[pos.partition] = s
		}
		s.n++
		s.lo, s.hi = min(s.lo, pos.offset), max(s.hi, pos.offset)
	}
	var out []string
	for p, s := range spans {
		out = append(out, fmt.Sprintf("p%d: %d in %d..%d", p, s.n, s.lo, s.hi))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// position is a record's place in the topic: identical on both clusters.
type position struct {
	partition int32
	offset    int64
}

// readTopic reads the whole topic from the cluster: position -> value.
func readTopic(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string, partitions int) map[position]string {
	t.Helper()
	// Every partition's end: an answer with a partition error must not shorten the read
	// (one run read 3,668 of 5,710 records, its ends unchecked).
	adm := kadm.NewClient(c.Client(t))
	var ends kadm.ListedOffsets
	polltest.Eventually(t, time.Minute, "the end offsets of "+topic, func() (bool, string) {
		var err error
		ends, err = adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends[topic]) != partitions {
			err = fmt.Errorf("%d of %d partitions answered", len(ends[topic]), partitions)
		}
		if err != nil {
			t.Logf("the end offsets of %s: %v; asking again", topic, err)
			return false, err.Error()
		}
		return true, ""
	})
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	t.Logf("reading %d records of %s (end offsets %v)", want, topic, ends)
	out := map[position]string{}
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	polltest.Eventually(t, time.Minute, "the standby topic read to its end", func() (bool, string) {
		fs := cl.PollRecords(ctx, 10000)
		fs.EachRecord(func(r *kgo.Record) { out[position{r.Partition, r.Offset}] = string(r.Value) })
		return int64(len(out)) >= want, fmt.Sprintf("%d of %d records", len(out), want)
	})
	return out
}

// kcatProducer is kcat producing the lines the test writes to its stdin, idempotent with
// acks=all, printing each delivery report (-v -v).
type kcatProducer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	quit  chan struct{}
	fed   sync.WaitGroup

	mu   sync.Mutex
	dels []position
	errs int
}

var kcatDelivered = regexp.MustCompile(`Message delivered to partition (\d+) \(offset (\d+)\)`)

func startKcatProducer(t *testing.T, ctx context.Context, kcat, bootstrap, topic string) *kcatProducer {
	t.Helper()
	// -E: kcat exits on any error librdkafka reports unless told not to, and the switch
	// closes every connection of the route at once, which librdkafka reports as the
	// informational ALL_BROKERS_DOWN before it reconnects (docs/cutover.md, "What clients
	// notice"); an application using librdkafka goes on, and so does kcat with -E.
	cmd := exec.CommandContext(ctx, kcat, "-P", "-E", "-b", bootstrap, "-t", topic, "-v", "-v",
		"-X", "enable.idempotence=true", "-X", "acks=all", "-X", "message.timeout.ms=120000", "-X", "linger.ms=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &kcatProducer{cmd: cmd, stdin: stdin, done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(k.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			k.mu.Lock()
			if m := kcatDelivered.FindStringSubmatch(line); m != nil {
				p, _ := strconv.Atoi(m[1])
				o, _ := strconv.ParseInt(m[2], 10, 64)
				k.dels = append(k.dels, position{int32(p), o})
			} else {
				if strings.Contains(line, "Delivery failed") {
					k.errs++
				}
				t.Logf("kcat producer: %s", line)
			}
			k.mu.Unlock()
		}
	}()
	k.fed.Add(1)
	go func() {
		defer k.fed.Done()
		tick := time.NewTicker(10 * time.Millisecond) // the application's pace
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-k.quit:
				return
			case <-tick.C:
			}
			if _, err := fmt.Fprintf(stdin, "kcat-%06d\n", i); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-k.done; _ = cmd.Wait() })
	return k
}

func (k *kcatProducer) delivered() int { k.mu.Lock(); defer k.mu.Unlock(); return len(k.dels) }
func (k *kcatProducer) failed() int    { k.mu.Lock(); defer k.mu.Unlock(); return k.errs }
func (k *kcatProducer) positions() []position {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.dels)
}

// stop ends kcat's input: it flushes what it has (each delivery reported) and exits.
func (k *kcatProducer) stop(t *testing.T) {
	t.Helper()
	close(k.quit)
	k.fed.Wait()
	_ = k.stdin.Close()
	select {
	case <-k.done:
	case <-time.After(2 * time.Minute):
		t.Errorf("kcat did not exit within 2 min of its input's end")
	}
}

// kcatConsumer is kcat consuming in a consumer group (-G), printing partition, offset and
// value of each record.
type kcatConsumer struct {
	mu    sync.Mutex
	seen  []string
	lines []string // "partition offset value", as printed
}

func startKcatConsumer(t *testing.T, ctx context.Context, kcat, bootstrap, topic, group string) *kcatConsumer {
	t.Helper()
	// -E: see startKcatProducer. -u: unbuffered output; kcat's stdio buffer holds the last
	// few kilobytes of records it consumed until it exits otherwise.
	cmd := exec.CommandContext(ctx, kcat, "-E", "-u", "-b", bootstrap, "-G", group, "-f", "%p %o %s\n",
		"-X", "auto.offset.reset=earliest", topic)
	if d := os.Getenv("KMIRROR_KCAT_DEBUG"); d != "" { // librdkafka's debug contexts, e.g. cgrp,fetch
		cmd.Args = append(cmd.Args[:1], append([]string{"-d", d}, cmd.Args[1:]...)...)
	}
	logf, err := os.CreateTemp("", "kcat-consumer-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	t.Cleanup(func() {
		_ = logf.Close()
		if t.Failed() {
			t.Logf("kcat consumer %s: its stderr is kept in %s", group, logf.Name())
		} else {
			_ = os.Remove(logf.Name())
		}
	})
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &kcatConsumer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 {
				k.mu.Lock()
				k.seen = append(k.seen, f[2])
				k.lines = append(k.lines, sc.Text())
				k.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			f, err := os.CreateTemp("", "kcat-consumer-*.out")
			if err == nil {
				k.mu.Lock()
				_, _ = f.WriteString(strings.Join(k.lines, "\n") + "\n")
				k.mu.Unlock()
				_ = f.Close()
				t.Logf("kcat consumer %s: what it printed is kept in %s", group, f.Name())
			}
		}
	})
	return k
}

func (k *kcatConsumer) count() int { k.mu.Lock(); defer k.mu.Unlock(); return len(k.seen) }
func (k *kcatConsumer) values() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.seen)
}

// franzProducer is a franz-go idempotent producer (acks=all) at an application's pace.
type franzProducer struct {
	cl   *kgo.Client
	stop func(context.Context)

	mu   sync.Mutex
	recs []*kgo.Record
}

func startFranzProducer(t *testing.T, ctx context.Context, bootstrap, topic string) *franzProducer {
	t.Helper()
	f := &franzProducer{cl: kafkatest.NewClient(t, []string{bootstrap}, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(2*time.Minute))}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond) // the application's pace
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			v := fmt.Sprintf("fg-%06d", i)
			f.cl.Produce(pctx, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err != nil {
					if pctx.Err() == nil {
						t.Errorf("franz-go: produce %s through the route: %v (a switch must only delay writes)", v, err)
					}
					return
				}
				f.mu.Lock()
				f.recs = append(f.recs, r)
				f.mu.Unlock()
			})
		}
	}()
	f.stop = func(ctx context.Context) {
		cancel()
		wg.Wait()
		_ = f.cl.Flush(ctx)
	}
	t.Cleanup(cancel)
	return f
}

func (f *franzProducer) count() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.recs) }
func (f *franzProducer) acked() []*kgo.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.recs)
}

// franzConsumer is a franz-go consumer group member auto-committing every 500 ms.
type franzConsumer struct {
	cl   *kgo.Client
	mu   sync.Mutex
	seen []string
}

func startFranzConsumer(t *testing.T, ctx context.Context, bootstrap, topic, group string, opts ...kgo.Opt) *franzConsumer {
	t.Helper()
	log := apptest.NewClientLog(group + " consumer")
	cl := kafkatest.NewClient(t, []string{bootstrap}, append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.AutoCommitInterval(500 * time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), log.Opt()}, opts...)...)
	f := &franzConsumer{cl: cl}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			fs.EachRecord(func(r *kgo.Record) { f.mu.Lock(); f.seen = append(f.seen, string(r.Value)); f.mu.Unlock() })
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() { // what the consumer did (its rejoins, refused commits) beside what the checks found
			var sb strings.Builder
			log.Dump(&sb)
			t.Log(sb.String())
		}
	})
	return f
}

func (f *franzConsumer) count() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.seen) }
func (f *franzConsumer) values() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seen)
}

// javaProducerConfig writes the Java producer's config of the switch tests (idempotent,
// acks=all, retrying for as long as a switch may take) with extra lines, and returns its path.
func javaProducerConfig(t *testing.T, extra ...string) string {
	t.Helper()
	cfg := "enable.idempotence=true\nacks=all\nretries=2147483647\ndelivery.timeout.ms=120000\nretry.backoff.ms=50\nlinger.ms=0\n"
	for _, e := range extra {
		cfg += e + "\n"
	}
	path := filepath.Join(t.TempDir(), "producer.properties")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
