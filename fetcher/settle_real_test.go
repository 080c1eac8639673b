package fetcher

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestRealResumeWaitsForFollowers is the regression test of the soak's resume
// bug (docs/RELIABILITY.md, the 1,000-fault run): a new owner read the
// destination's high watermark while an earlier owner's last write sat above
// it, appended by the leader but not yet acknowledged by a follower, and
// wrote those records again after it. On a real 3-broker destination with a
// follower frozen, it proves the facts the fix rests on (ListOffsets LATEST
// answers the high watermark; as the debugging replica, the leader's log end)
// and that a resume's read of the log end waits until the two agree instead
// of answering the high watermark.
func TestRealResumeWaitsForFollowers(t *testing.T) {
	kafkatest.RequireReal(t)
	// A follower stays in the ISR for a minute without fetching: the window
	// in which the high watermark stands below the leader's log end.
	c := kafkatest.Start(t, kafkatest.Brokers(3), kafkatest.ServerProperty("replica.lag.time.max.ms", "60000"))
	cl := c.Client(t, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.DefaultProduceTopic("hw"))
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if resp, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("1")}, "hw"); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	produce := func(n int) {
		t.Helper()
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(5)
	polltest.Until(t, 30*time.Second, "every replica has the first records", func() bool {
		hw, err1 := listOffset(ctx, cl, "hw", 0, -1)
		leo, err2 := listOffset(ctx, cl, "hw", 0, leaderLogEnd)
		return err1 == nil && err2 == nil && hw == 5 && leo == 5
	})

	thaw := freezeFollower(t, ctx, c, adm)

	produce(2) // acks=1: the leader appends, the frozen follower never acknowledges
	hw, err := listOffset(ctx, cl, "hw", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	leo, err := listOffset(ctx, cl, "hw", 0, leaderLogEnd)
	if err != nil {
		t.Fatal(err)
	}
	if hw != 5 || leo != 7 {
		t.Fatalf("with a follower frozen: high watermark %d, leader's log end %d; want 5 and 7", hw, leo)
	}
	t.Logf("fact: ListOffsets LATEST answers the high watermark (%d), as the debugging replica (-2) the leader's log end (%d)", hw, leo)

	// The resume's read of the log end does not answer 5 while 5 and 6 wait.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	end, _, err := settledEnd(short, cl, "hw", 0)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("settledEnd with records above the high watermark: end %d, err %v; want it to wait", end, err)
	}
	thaw()
	end, _, err = settledEnd(ctx, cl, "hw", 0)
	if err != nil || end != 7 {
		t.Fatalf("settledEnd once the follower caught up: end %d, err %v; want 7", end, err)
	}
}

// freezeFollower freezes (SIGSTOP) a follower of partition 0 of hw on c, and returns what
// wakes it up again (SIGCONT) at its first call; the test's cleanup calls it too.
func freezeFollower(t *testing.T, ctx context.Context, c *kafkatest.Cluster, adm *kadm.Client) (thaw func()) {
	t.Helper()
	// Freeze a follower of the partition.
	var leader int32 = -1
	var replicas []int32
	polltest.Until(t, 30*time.Second, "the partition's leader and replicas", func() bool {
		md, err := adm.Metadata(ctx, "hw")
		if err != nil {
			return false
		}
		p := md.Topics["hw"].Partitions[0]
		leader, replicas = p.Leader, p.Replicas
		return leader >= 0 && len(p.ISR) == 3
	})
	ids := c.Real().NodeIDs()
	follower := -1
	for i, id := range ids {
		if id != leader && slices.Contains(replicas, id) {
			follower = i
			break
		}
	}
	if follower < 0 {
		t.Fatalf("no follower among nodes %v (leader %d, replicas %v)", ids, leader, replicas)
	}
	if err := c.Real().SignalNode(follower, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			if err := c.Real().SignalNode(follower, syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(thaw)
	return thaw
}
