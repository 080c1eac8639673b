package instance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/mirrorcli"
)

// TestRealForcedRouteSwitchPrimaryKilled is issue 21's forced switch: the primary dies with
// records the mirror has not copied, and `kmirror mirrors --switch --route app --force` leads
// the route's clients to the standby. What is lost is exactly what describe reported at risk
// just before the primary died, and the clients, never restarted, continue on the standby: a
// producer whose writes were stuck on the dead primary gets them acknowledged there, and a
// consumer group reads them.
//
// The copy is paused to make the records at risk known exactly: 300 records are copied, 200
// more are written to the primary while the mirror is paused, describe says 200 at risk, the
// primary is killed.
//
// The standby gives the records written after the switch the offsets the primary had given
// the lost ones, so a consumer that fetched there with the positions it had on the primary
// would skip them (CI saw this test's group miss them). The consumer here does not fetch
// from the kill until the records after the switch are written, and heartbeats only every
// 15 s, so without the switch's fetch hold it fetches before it learns that it must rejoin,
// and skips; with the hold it resumes from the group offsets the standby has (synced,
// clamped to what was copied).
func TestRealForcedRouteSwitchPrimaryKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic = "orders"
	primary, standby, in := startRouteWorld(t, ctx, topic)
	route := in.Proxy.RouteAddr("app")
	f := &forcedSwitch{t: t, ctx: ctx, in: in, topic: topic}
	f.prod = kafkatest.NewClient(t, []string{route}, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(3*time.Minute))
	f.cons = startFranzConsumer(t, ctx, route, topic, "billing", kgo.HeartbeatInterval(15*time.Second))

	// Copied: 300 records; then, with the copy paused, 200 more only the primary holds.
	f.copyThenPause(standby)
	f.produce("at-risk", 200)
	polltest.Eventually(t, time.Minute, "describe reports the uncopied records at risk", func() (bool, string) {
		m, known := f.mirror()
		return known && m.AtRisk.Records == 200, fmt.Sprintf("%+v", m.AtRisk)
	})
	reported := int64(200)
	polltest.Until(t, time.Minute, "the group reads the records at risk", func() bool { return f.seenAll("at-risk", 200) })
	f.cons.cl.PauseFetchTopics(topic)

	f.forceSwitch(primary)
	f.checkLost(standby, reported)
}

// forcedSwitch is what the steps of TestRealForcedRouteSwitchPrimaryKilled share: the
// instance serving the route, and the producer and consumer group that use it.
type forcedSwitch struct {
	t          *testing.T
	ctx        context.Context
	in         *instance.Instance
	topic      string
	prod       *kgo.Client
	cons       *franzConsumer
	standbyAdm *kadm.Client // the standby, directly: where the group's offsets are synced
}

// cli runs `kmirror mirrors` with args against the instance, and returns what it printed.
func (f *forcedSwitch) cli(args ...string) string {
	f.t.Helper()
	return mirrorsCLI(f.t, f.ctx, f.in, args...)
}

// mirror describes the mirror dr, and reports whether its records at risk are known.
func (f *forcedSwitch) mirror() (mirrorcli.MirrorJSON, bool) {
	var d mirrorcli.DescribeJSON
	if err := json.Unmarshal([]byte(f.cli("--describe", "--mirror", "dr", "--json")), &d); err != nil || len(d.Mirrors) != 1 {
		f.t.Fatalf("describe --json: %v", err)
	}
	m := d.Mirrors[0]
	return m, m.AtRisk != nil && m.AtRisk.PartitionsUnknown == 0
}

// produce writes n records named after phase through the route, and waits until they are
// acknowledged.
func (f *forcedSwitch) produce(phase string, n int) {
	f.t.Helper()
	var rs []*kgo.Record
	for i := range n {
		v := fmt.Sprintf("%s-%04d", phase, i)
		rs = append(rs, &kgo.Record{Topic: f.topic, Key: []byte(v), Value: []byte(v)})
	}
	if err := f.prod.ProduceSync(f.ctx, rs...).FirstErr(); err != nil {
		f.t.Fatalf("producing %s through the route: %v", phase, err)
	}
}

// seenAll reports whether the group has read every one of the n records of phase.
func (f *forcedSwitch) seenAll(phase string, n int) bool {
	seen := map[string]bool{}
	for _, v := range f.cons.values() {
		seen[v] = true
	}
	for i := range n {
		if !seen[fmt.Sprintf("%s-%04d", phase, i)] {
			return false
		}
	}
	return true
}

// copyThenPause writes 300 records, waits until they are copied, read by the group and the
// group's offsets synced to the standby, and pauses the copy.
func (f *forcedSwitch) copyThenPause(standby *kafkatest.Cluster) {
	t := f.t
	t.Helper()
	f.produce("copied", 300)
	polltest.Eventually(t, time.Minute, "the copy catches up", func() (bool, string) {
		m, known := f.mirror()
		return known && m.AtRisk.Records == 0, fmt.Sprintf("%+v", m.AtRisk)
	})
	polltest.Until(t, time.Minute, "the group reads the copied records", func() bool { return f.seenAll("copied", 300) })
	// The group sync has copied the group's offsets (it stops with the pause): where the
	// group resumes after a forced switch.
	f.standbyAdm = kadm.NewClient(standby.Client(t))
	polltest.Eventually(t, time.Minute, "the standby has the group's offsets at the copied ends", func() (bool, string) {
		os, err := f.standbyAdm.FetchOffsets(f.ctx, "billing")
		if err != nil {
			return false, err.Error()
		}
		var sum int64
		os.Each(func(o kadm.OffsetResponse) { sum += o.At })
		return sum == 300, fmt.Sprintf("offsets sum to %d", sum)
	})
	f.cli("--pause", "--mirror", "dr", "--topics", f.topic)
	polltest.Eventually(t, time.Minute, "the copy pauses", func() (bool, string) {
		m, _ := f.mirror()
		for _, tp := range m.Topics {
			for _, p := range tp.Partitions {
				if p.State != "PAUSED" {
					return false, fmt.Sprintf("partition %d %s", p.Partition, p.State)
				}
			}
		}
		return true, ""
	})
}

// forceSwitch kills the primary, writes 300 more records through the route while the
// operator forces the switch, and checks what the switch recorded and describe shows.
func (f *forcedSwitch) forceSwitch(primary *kafkatest.Cluster) {
	t := f.t
	t.Helper()
	// The primary dies; writes through the route wait; the operator forces the switch.
	primary.KillBroker(t, 0)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() { defer pwg.Done(); f.produce("after", 300) }() // acknowledged only once the route leads to the standby
	began := time.Now()
	rec := switchRoute(t, f.ctx, f.in, "--switch", "--route", "app", "--force")
	pwg.Wait()
	f.cons.cl.ResumeFetchTopics(f.topic)
	t.Logf("forced switch in %s: %s; records at risk recorded %d (the primary did not answer)", time.Since(began).Round(time.Millisecond), stepsOf(rec), rec.RecordsAtRisk)
	if !rec.Forced || rec.FreezeStartMs != 0 || rec.RecordsAtRisk != -1 {
		t.Errorf("the record: forced %v, freeze start %d, records at risk %d; want forced, never frozen, unknown (the primary is dead)",
			rec.Forced, rec.FreezeStartMs, rec.RecordsAtRisk)
	}
	if d := describeRoute(t, f.ctx, f.in, "app"); d.Step != "SWITCHED" || !d.Forced || d.Upstream != "standby" || d.FreezeMs != nil {
		t.Errorf("describe shows the route as %+v", d)
	}
	if !maps.Equal(rec.HeldGroups, map[string]int{"billing": 1}) {
		t.Errorf("the switch held the fetches of groups %v, want billing's (it has offsets on the standby)", rec.HeldGroups)
	}
}

// checkLost checks that the switch lost exactly the records describe reported at risk and
// kept everything else once, and that the group goes on reading on the standby.
func (f *forcedSwitch) checkLost(standby *kafkatest.Cluster, reported int64) {
	t := f.t
	t.Helper()
	// Lost: exactly the records describe reported at risk. Kept: everything else, once.
	onStandby := readTopic(t, f.ctx, standby, f.topic, 3)
	count := map[string]int{}
	for _, v := range onStandby {
		count[v]++
	}
	lost := int64(0)
	for phase, n := range map[string]int{"copied": 300, "at-risk": 200, "after": 300} {
		for i := range n {
			v := fmt.Sprintf("%s-%04d", phase, i)
			switch {
			case count[v] == 0 && phase == "at-risk":
				lost++
			case count[v] != 1:
				t.Errorf("%s is %d times on the standby", v, count[v])
			}
		}
	}
	if lost != reported {
		t.Errorf("the forced switch lost %d records; describe reported %d at risk just before the primary died", lost, reported)
	}
	// The group continues on the standby: it reads what was written there after the switch.
	polltest.Eventually(t, 2*time.Minute, "the group reads the records written after the switch", func() (bool, string) {
		if f.seenAll("after", 300) {
			return true, ""
		}
		os, err := f.standbyAdm.FetchOffsets(f.ctx, "billing")
		var at []string
		os.Each(func(o kadm.OffsetResponse) { at = append(at, fmt.Sprintf("%d=%d", o.Partition, o.At)) })
		return false, fmt.Sprintf("read %d records in all; the group's offsets on the standby %v (%v)", f.cons.count(), at, err)
	})
	t.Logf("lost %d records, as describe reported; %d records on the standby", lost, len(onStandby))
}
