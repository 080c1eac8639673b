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
	cli := func(args ...string) string { t.Helper(); return mirrorsCLI(t, ctx, in, args...) }
	mirror := func() (mirrorcli.MirrorJSON, bool) {
		var d mirrorcli.DescribeJSON
		if err := json.Unmarshal([]byte(cli("--describe", "--mirror", "dr", "--json")), &d); err != nil || len(d.Mirrors) != 1 {
			t.Fatalf("describe --json: %v", err)
		}
		m := d.Mirrors[0]
		return m, m.AtRisk != nil && m.AtRisk.PartitionsUnknown == 0
	}

	prod := kafkatest.NewClient(t, []string{route}, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(3*time.Minute))
	produce := func(phase string, n int) {
		t.Helper()
		var rs []*kgo.Record
		for i := range n {
			v := fmt.Sprintf("%s-%04d", phase, i)
			rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)})
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("producing %s through the route: %v", phase, err)
		}
	}
	cons := startFranzConsumer(t, ctx, route, topic, "billing", kgo.HeartbeatInterval(15*time.Second))
	seenAll := func(phase string, n int) bool {
		seen := map[string]bool{}
		for _, v := range cons.values() {
			seen[v] = true
		}
		for i := range n {
			if !seen[fmt.Sprintf("%s-%04d", phase, i)] {
				return false
			}
		}
		return true
	}

	// Copied: 300 records; then, with the copy paused, 200 more only the primary holds.
	produce("copied", 300)
	polltest.Eventually(t, time.Minute, "the copy catches up", func() (bool, string) {
		m, known := mirror()
		return known && m.AtRisk.Records == 0, fmt.Sprintf("%+v", m.AtRisk)
	})
	polltest.Until(t, time.Minute, "the group reads the copied records", func() bool { return seenAll("copied", 300) })
	// The group sync has copied the group's offsets (it stops with the pause): where the
	// group resumes after a forced switch.
	standbyAdm := kadm.NewClient(standby.Client(t))
	polltest.Eventually(t, time.Minute, "the standby has the group's offsets at the copied ends", func() (bool, string) {
		os, err := standbyAdm.FetchOffsets(ctx, "billing")
		if err != nil {
			return false, err.Error()
		}
		var sum int64
		os.Each(func(o kadm.OffsetResponse) { sum += o.At })
		return sum == 300, fmt.Sprintf("offsets sum to %d", sum)
	})
	cli("--pause", "--mirror", "dr", "--topics", topic)
	polltest.Eventually(t, time.Minute, "the copy pauses", func() (bool, string) {
		m, _ := mirror()
		for _, tp := range m.Topics {
			for _, p := range tp.Partitions {
				if p.State != "PAUSED" {
					return false, fmt.Sprintf("partition %d %s", p.Partition, p.State)
				}
			}
		}
		return true, ""
	})
	produce("at-risk", 200)
	polltest.Eventually(t, time.Minute, "describe reports the uncopied records at risk", func() (bool, string) {
		m, known := mirror()
		return known && m.AtRisk.Records == 200, fmt.Sprintf("%+v", m.AtRisk)
	})
	reported := int64(200)
	polltest.Until(t, time.Minute, "the group reads the records at risk", func() bool { return seenAll("at-risk", 200) })
	cons.cl.PauseFetchTopics(topic)

	// The primary dies; writes through the route wait; the operator forces the switch.
	primary.KillBroker(t, 0)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() { defer pwg.Done(); produce("after", 300) }() // acknowledged only once the route leads to the standby
	began := time.Now()
	rec := switchRoute(t, ctx, in, "--switch", "--route", "app", "--force")
	pwg.Wait()
	cons.cl.ResumeFetchTopics(topic)
	t.Logf("forced switch in %s: %s; records at risk recorded %d (the primary did not answer)", time.Since(began).Round(time.Millisecond), stepsOf(rec), rec.RecordsAtRisk)
	if !rec.Forced || rec.FreezeStartMs != 0 || rec.RecordsAtRisk != -1 {
		t.Errorf("the record: forced %v, freeze start %d, records at risk %d; want forced, never frozen, unknown (the primary is dead)",
			rec.Forced, rec.FreezeStartMs, rec.RecordsAtRisk)
	}
	if d := describeRoute(t, ctx, in, "app"); d.Step != "SWITCHED" || !d.Forced || d.Upstream != "standby" || d.FreezeMs != nil {
		t.Errorf("describe shows the route as %+v", d)
	}
	if !maps.Equal(rec.HeldGroups, map[string]int{"billing": 1}) {
		t.Errorf("the switch held the fetches of groups %v, want billing's (it has offsets on the standby)", rec.HeldGroups)
	}

	// Lost: exactly the records describe reported at risk. Kept: everything else, once.
	onStandby := readTopic(t, ctx, standby, topic, 3)
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
		if seenAll("after", 300) {
			return true, ""
		}
		os, err := standbyAdm.FetchOffsets(ctx, "billing")
		var at []string
		os.Each(func(o kadm.OffsetResponse) { at = append(at, fmt.Sprintf("%d=%d", o.Partition, o.At)) })
		return false, fmt.Sprintf("read %d records in all; the group's offsets on the standby %v (%v)", cons.count(), at, err)
	})
	t.Logf("lost %d records, as describe reported; %d records on the standby", lost, len(onStandby))
}
