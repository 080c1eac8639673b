package groupsync

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// A group that committed past what the copy has reached is not SYNCED: its
// destination offset is the copy's end, so a consumer moved then would read
// records twice. That was the migration walk-through's flake: describe said
// SYNCED while the group's offsets were clamped 9 records short, and the
// consumer the walk-through moved on SYNCED re-read them. The group is
// BEHIND until the copy reaches its offsets, then SYNCED at them.
func TestRunBehindTheCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := kafkatest.Start(t, kafkatest.Fake())
	dst := kafkatest.Start(t, kafkatest.Fake())
	srcAdm, dstAdm := kadm.NewClient(src.Client(t)), kadm.NewClient(dst.Client(t))
	for _, adm := range []*kadm.Client{srcAdm, dstAdm} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
			t.Fatal(err)
		}
	}
	appendRecords(t, ctx, src, 40)
	appendRecords(t, ctx, dst, 31) // the copy is 9 records behind
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 40, LeaderEpoch: -1})
	if resp, err := srcAdm.CommitOffsets(ctx, "app", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit on the source: %v %v", err, resp.Error())
	}
	id := statetopic.UUID{1}
	job := Job{Source: srcAdm, Destination: dstAdm, Groups: mirrorconfig.NewMatcher([]string{".*"}, nil),
		Mirror: &statetopic.Mirror{Name: "old",
			Topics:     map[string]*statetopic.MirrorTopic{"orders": {SourceTopicID: id, Desired: statetopic.DesireMirror, Partitions: 1}},
			Partitions: map[statetopic.PartitionID]*statetopic.PartitionState{{SourceTopicID: id}: {State: protocol.MirrorStateMirroring}},
			Groups:     map[string]*statetopic.GroupSync{}}}

	// Twice: the second run finds the clamped offset already there and must not
	// call it in sync either.
	for range 2 {
		out := runFor(t, ctx, job, dstAdm, 31)
		if out.State != statetopic.GroupBehind || out.Partitions != 0 || !strings.Contains(out.Message, "past what the copy has reached") {
			t.Fatalf("group committed at 40, destination at 31: %+v, want BEHIND, 0 partitions in sync, saying why", out)
		}
	}
	appendRecords(t, ctx, dst, 9) // the copy catches up
	if out := runFor(t, ctx, job, dstAdm, 40); out.State != statetopic.GroupSynced || out.Partitions != 1 || out.Message != "" || out.SourceMembers {
		t.Fatalf("group committed at 40, destination at 40: %+v, want SYNCED, 1 partition, no members on the source", out)
	}

	// A member joins on the source: the run records that the group has members there (what a
	// forced route switch holds consumers for).
	member := src.Client(t, kgo.ConsumerGroup("app"), kgo.ConsumeTopics("orders"))
	polltest.Eventually(t, 30*time.Second, "the member joins on the source", func() (bool, string) {
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		member.PollFetches(pctx)
		pcancel()
		described, err := srcAdm.DescribeGroups(ctx, "app")
		if err != nil {
			return false, err.Error()
		}
		return described["app"].State == "Stable", described["app"].State
	})
	if out := runFor(t, ctx, job, dstAdm, 40); !out.SourceMembers {
		t.Fatalf("a group with a member on the source: %+v, want SourceMembers", out)
	}
}

// runFor runs the job and checks the group's destination offset: never past
// the mirrored data.
func runFor(t *testing.T, ctx context.Context, job Job, dst *kadm.Client, want int64) Outcome {
	t.Helper()
	res, err := job.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.FetchOffsets(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := got.Lookup("orders", 0); o.At != want {
		t.Fatalf("destination offset %d, want %d", o.At, want)
	}
	return res.Groups["app"]
}

// appendRecords writes n records to orders/0.
func appendRecords(t *testing.T, ctx context.Context, c *kafkatest.Cluster, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "orders", Value: fmt.Appendf(nil, "r%d", i)})
	}
	if err := c.Client(t).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
