package proxy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	prod := kafkatest.StartVerifiable(t, ctx, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", r.Addr(), "--topic", topic,
		"--max-messages", "-1", "--throughput", "100", "--producer.config", cfgFile)
	cons := kafkatest.StartVerifiable(t, ctx, "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", r.Addr(), "--topic", topic,
		"--group-id", group, "--reset-policy", "earliest", "--verbose", "--group-protocol", "classic")
	polltest.Until(t, 90*time.Second, "the Java clients produce and consume through the route", func() bool {
		return len(prod.Values("producer_send_success")) > 100 && len(cons.Values("record_data")) > 50
	})

	// Freeze writes; the group commits the log ends; freeze commits.
	ends := freezeForSwitch(t, ctx, p, primAdm, group, topic, 60*time.Second, func() string { return "last consumer events: " + cons.Last(3) })
	frozenAt := time.Now()
	copyTopic(t, ctx, primaryCluster.Bootstrap(), standbyCluster.Bootstrap(), topic, ends)
	offs := copyGroup(t, ctx, primAdm, standAdm, group)
	acksBefore := len(prod.Values("producer_send_success"))
	hold := FetchHold{Topics: map[string]bool{topic: true}, Groups: membersAt(t, ctx, primAdm, group)}
	if err := p.SwitchRoute(ctx, "app", hold); err != nil {
		t.Fatal(err)
	}
	t.Logf("switched after a write freeze of %s", time.Since(frozenAt).Round(time.Millisecond))
	polltest.Until(t, 2*time.Minute, "the Java producer goes on through the switched route", func() bool {
		return len(prod.Values("producer_send_success")) > acksBefore+200
	})
	prod.Stop(t)
	acked := prod.Values("producer_send_success")
	if errs := prod.SendErrors(); len(errs) > 0 {
		t.Errorf("the producer saw %d send errors (first %s): a switch must only delay writes", len(errs), errs[0])
	}
	onStandby := readAll(t, ctx, standbyCluster.Bootstrap(), topic)
	for _, v := range acked {
		if onStandby[v] != 1 {
			t.Errorf("acknowledged %s is %d times on the standby", v, onStandby[v])
		}
	}
	polltest.Until(t, 2*time.Minute, "the Java consumer read everything on the standby", func() bool {
		seen := map[string]bool{}
		for _, v := range cons.Values("record_data") {
			seen[v] = true
		}
		return len(seen) >= len(onStandby)
	})
	cons.Stop(t)
	// The group saw every record once. A classic group's membership does not cross clusters:
	// its member rejoins on the standby and resumes from the committed offsets copied at the
	// switch; the fetch hold keeps it from reading on the standby before that, so it reads
	// nothing twice (docs/cutover.md, "What clients notice").
	count := map[string]int{}
	for _, rec := range cons.Records() {
		count[rec.Value]++
		if count[rec.Value] == 2 {
			c, _ := offs.Lookup(topic, rec.Partition)
			t.Errorf("the consumer group saw %s (%s/%d offset %d) again (offset %d committed at the switch)", rec.Value, topic, rec.Partition, rec.Offset, c.At)
		}
	}
	assertEndsUnchanged(t, ctx, primAdm, topic, ends)
	t.Logf("%d records acknowledged (%d after the switch), %d consumed", len(acked), len(acked)-acksBefore, len(count))
}
