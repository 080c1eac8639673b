package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestRealRouteSwitchJavaClients is TestKfakeRouteSwitchKeepsClients on real Apache Kafka
// (primary: the package's 3-broker cluster; standby: a 1-broker cluster of its own) with the
// clients Kafka's own system tests use: VerifiableProducer (idempotent, acks=all) and
// VerifiableConsumer (a consumer group committing after every poll) run through the route
// across the switch, neither restarted nor reconfigured. The mirror's part (the records at
// the same offsets, the group's offsets) is done by hand; the switch is SwitchRoute.
func TestRealRouteSwitchJavaClients(t *testing.T) {
	primaryCluster := sharedReal(t)
	standbyCluster := kafkatest.Start(t)
	p, r := routedProxyTo(t, primaryCluster.Bootstrap()[:1], standbyCluster.Bootstrap(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topic, group := uniqueTopic("switch"), uniqueTopic("switch-g")
	primAdm, standAdm := adminFor(t, primaryCluster.Bootstrap()), adminFor(t, standbyCluster.Bootstrap())
	if _, err := primAdm.CreateTopic(ctx, 3, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := standAdm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	cfgFile := filepath.Join(t.TempDir(), "client.properties")
	if err := os.WriteFile(cfgFile, []byte("enable.idempotence=true\nacks=all\nretries=2147483647\ndelivery.timeout.ms=120000\nretry.backoff.ms=50\nlinger.ms=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prod := startVerifiable(t, ctx, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", r.Addr(), "--topic", topic,
		"--max-messages", "-1", "--throughput", "100", "--producer.config", cfgFile)
	cons := startVerifiable(t, ctx, "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", r.Addr(), "--topic", topic,
		"--group-id", group, "--reset-policy", "earliest", "--verbose", "--group-protocol", "classic")
	polltest.Until(t, 90*time.Second, "the Java clients produce and consume through the route", func() bool {
		return len(prod.values("producer_send_success")) > 100 && len(cons.values("record_data")) > 50
	})

	// Freeze writes; the group commits the log ends; freeze commits.
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{topic: true}}); err != nil {
		t.Fatal(err)
	}
	ends, err := primAdm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	waitCommittedEnds(t, ctx, primAdm, group, topic, ends, 60*time.Second, func() string { return "last consumer events: " + cons.last(3) })
	if err := p.FreezeRoute(ctx, "app", &enforcement.Freeze{Topics: map[string]bool{topic: true}, Commits: true}); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	copyTopic(t, ctx, primaryCluster.Bootstrap(), standbyCluster.Bootstrap(), topic, ends)
	offs := copyGroup(t, ctx, primAdm, standAdm, group)
	acksBefore := len(prod.values("producer_send_success"))
	hold := FetchHold{Topics: map[string]bool{topic: true}, Groups: membersAt(t, ctx, primAdm, group)}
	if err := p.SwitchRoute(ctx, "app", hold); err != nil {
		t.Fatal(err)
	}
	t.Logf("switched after a write freeze of %s", time.Since(frozenAt).Round(time.Millisecond))
	polltest.Until(t, 2*time.Minute, "the Java producer goes on through the switched route", func() bool {
		return len(prod.values("producer_send_success")) > acksBefore+200
	})
	prod.stop(t)
	acked := prod.values("producer_send_success")
	if errs := prod.values("producer_send_error"); len(errs) > 0 {
		t.Errorf("the producer saw %d send errors: a switch must only delay writes", len(errs))
	}
	onStandby := readAll(t, ctx, standbyCluster.Bootstrap(), topic)
	for _, v := range acked {
		if onStandby[v] != 1 {
			t.Errorf("acknowledged %s is %d times on the standby", v, onStandby[v])
		}
	}
	polltest.Until(t, 2*time.Minute, "the Java consumer read everything on the standby", func() bool {
		seen := map[string]bool{}
		for _, v := range cons.values("record_data") {
			seen[v] = true
		}
		return len(seen) >= len(onStandby)
	})
	cons.stop(t)
	// The group saw every record once. A classic group's membership does not cross clusters:
	// its member rejoins on the standby and resumes from the committed offsets copied at the
	// switch; the fetch hold keeps it from reading on the standby before that, so it reads
	// nothing twice (docs/cutover.md, "What clients notice").
	count := map[string]int{}
	for _, rec := range cons.records() {
		count[rec.value]++
		if count[rec.value] == 2 {
			c, _ := offs.Lookup(topic, rec.partition)
			t.Errorf("the consumer group saw %s (%s/%d offset %d) again (offset %d committed at the switch)", rec.value, topic, rec.partition, rec.offset, c.At)
		}
	}
	assertEndsUnchanged(t, ctx, primAdm, topic, ends)
	t.Logf("%d records acknowledged (%d after the switch), %d consumed", len(acked), len(acked)-acksBefore, len(count))
}

// verifiable is a running Kafka Verifiable* tool and the JSON events it printed.
type verifiable struct {
	cmd    interface{ Wait() error }
	pid    int
	mu     sync.Mutex
	events []map[string]any
	done   chan struct{}
}

func startVerifiable(t *testing.T, ctx context.Context, class string, args ...string) *verifiable {
	t.Helper()
	cmd, err := kafkatest.ToolCommand(ctx, class, args...)
	if err != nil {
		t.Fatal(err)
	}
	// KMIRROR_TOOL_LOG4J: a log4j2 configuration for the tools (e.g. the NetworkClient at
	// DEBUG), to see what a client does at a switch.
	if f := os.Getenv("KMIRROR_TOOL_LOG4J"); f != "" {
		for i, a := range cmd.Args {
			if strings.HasPrefix(a, "-Dlog4j2.configurationFile=") {
				cmd.Args[i] = "-Dlog4j2.configurationFile=" + f
			}
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &prefixWriter{t: t, prefix: class}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	v := &verifiable{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		defer close(v.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				v.mu.Lock()
				v.events = append(v.events, ev)
				v.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-v.done; _ = cmd.Wait() })
	return v
}

// values are the "value" fields of the events named name, in order.
func (v *verifiable) values(name string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, ev := range v.events {
		if ev["name"] == name {
			out = append(out, fmt.Sprint(ev["value"]))
		}
	}
	return out
}

// consumed is one record_data event of VerifiableConsumer --verbose.
type consumed struct {
	partition int32
	offset    int64
	value     string
}

// records are the records the consumer printed, in order.
func (v *verifiable) records() []consumed {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []consumed
	for _, ev := range v.events {
		if ev["name"] == "record_data" {
			p, _ := ev["partition"].(float64)
			o, _ := ev["offset"].(float64)
			out = append(out, consumed{partition: int32(p), offset: int64(o), value: fmt.Sprint(ev["value"])})
		}
	}
	return out
}

// last renders the tool's n last events.
func (v *verifiable) last(n int) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, _ := json.Marshal(v.events[max(0, len(v.events)-n):])
	return string(b)
}

// stop asks the tool to shut down (SIGTERM: it prints what it finished) and waits for it.
func (v *verifiable) stop(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(v.pid, syscall.SIGTERM)
	select {
	case <-v.done:
	case <-time.After(30 * time.Second):
		t.Errorf("tool %d did not stop on SIGTERM within 30s", v.pid)
	}
}

// prefixWriter logs a tool's stderr lines into the test log.
type prefixWriter struct {
	t      *testing.T
	prefix string
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s: %s", w.prefix, b)
	return len(b), nil
}

var _ io.Writer = (*prefixWriter)(nil)
