package apis_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/apis"
	"github.com/kmirror/kmirror/coordinator/routeswitch"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/polltest"
)

// A consumer that is reading the mirrored topics but has not committed yet
// (kcat's first auto-commit comes 5 s after it starts) is a group the switch
// waits for: with nothing to copy, it would read everything again from its
// reset position on the standby. It was missed once, in
// TestRealRouteSwitchEveryClient: kcat re-read 807 records after a switch.
func TestSwitchGroupsCountLiveMembersThatHaveNotCommitted(t *testing.T) {
	e := newEnv(t)
	if code, msg := e.create("dr", map[string]string{"bootstrap.servers": e.src.BootstrapString()}); code != 0 {
		t.Fatal(msg)
	}
	prod := e.src.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range int32(3) {
		if err := prod.ProduceSync(e.ctx, &kgo.Record{Topic: "orders", Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// payments stays empty: a partition with nothing to read needs no commit.
	targets := []statetopic.DrainTarget{{Topic: "payments", Partition: 0, Offset: 0}}
	for p := range int32(3) {
		targets = append(targets, statetopic.DrainTarget{Topic: "orders", Partition: p, Offset: 1})
	}
	reading := e.src.Client(t, kgo.ConsumerGroup("reading"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	idle := e.src.Client(t, kgo.ConsumerGroup("elsewhere"), kgo.ConsumeTopics("orders-eu"), kgo.DisableAutoCommit())
	quiet := e.src.Client(t, kgo.ConsumerGroup("payments-only"), kgo.ConsumeTopics("payments"), kgo.DisableAutoCommit())
	got := 0
	for got < 3 {
		fs := reading.PollFetches(e.ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	adm := kadm.NewClient(e.src.Client(t))
	polltest.Eventually(t, 30*time.Second, "every group stable", func() (bool, string) {
		for _, cl := range []*kgo.Client{idle, quiet} {
			ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
			cl.PollFetches(ctx) // joins its group; nothing to read
			cancel()
		}
		d, err := adm.DescribeGroups(e.ctx, "reading", "elsewhere", "payments-only")
		if err != nil {
			return false, err.Error()
		}
		for _, g := range d.Sorted() {
			if g.State != "Stable" || len(g.AssignedPartitions()) == 0 {
				return false, g.Group + " is " + g.State
			}
		}
		return true, ""
	})

	acts := apis.SwitchActions{B: e.b}
	groups := func() map[string]routeswitch.GroupCommits {
		gs, err := acts.Groups(e.ctx, "dr", []string{"orders", "payments"}, targets)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]routeswitch.GroupCommits{}
		for _, g := range gs {
			out[g.Name] = g
		}
		return out
	}
	gs := groups()
	if g, ok := gs["reading"]; !ok || g.AtLogEnd {
		t.Fatalf("group reading (members, no commit yet) = %+v, present %v; want it present and short of the log end", g, ok)
	}
	if _, ok := gs["elsewhere"]; ok {
		t.Errorf("group elsewhere reads no mirrored topic, yet it is listed: %+v", gs)
	}
	if g, ok := gs["payments-only"]; !ok || !g.AtLogEnd {
		t.Errorf("group payments-only (assigned empty partitions only) = %+v, present %v; want it at the log end", g, ok)
	}
	if err := reading.CommitUncommittedOffsets(e.ctx); err != nil {
		t.Fatal(err)
	}
	if g := groups()["reading"]; !g.AtLogEnd || g.Fingerprint == "" {
		t.Errorf("group reading after committing the log end = %+v; want it at the log end", g)
	}
}
