package mirrorcli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kmirror/kmirror/protocol"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs (go test -update rewrites it):\n--- got:\n%s\n--- want:\n%s", name, got, want)
	}
}

func sp(s string) *string { return &s }

// describeFixture covers every rendering rule: known and unknown (-1)
// offsets, LMO, a FAILED partition that is retried and one that gave up, a
// multi-line message, a note, a mirror without topics and a mirror error,
// sync jobs (one failed) and groups (synced, active, never synced); records
// at risk and their age (behind, caught up, unknown, failed over), so the
// recovery point totals cover a lagging topic, one with an unknown
// partition, one in sync and one failed over.
func describeFixture() *protocol.DescribeMirrorsResponse {
	return &protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{
		{Name: "dr", Topics: []protocol.DescribeMirrorsResponseTopic{
			{Name: "orders", Partitions: []protocol.DescribeMirrorsResponsePartition{
				{Partition: 0, State: "MIRRORING", SourceHighWatermark: 1200, DestinationHighWatermark: 1187, Lag: 13, LastMirroredOffset: -1,
					RecordsAtRisk: 13, AtRiskAgeMs: 4250},
				{Partition: 1, State: "FAILED", SourceHighWatermark: 900, DestinationHighWatermark: 850, Lag: 50, LastMirroredOffset: -1, RetryAttempt: 3,
					ErrorMessage: sp("offset mismatch: produced at 851,\nexpected 850"), RecordsAtRisk: 50, AtRiskAgeMs: 93500},
				{Partition: 2, State: "STOPPED", SourceHighWatermark: -1, DestinationHighWatermark: 400, Lag: -1, LastMirroredOffset: 400,
					RecordsAtRisk: -1, AtRiskAgeMs: -1},
			}},
			{Name: "payments", Partitions: []protocol.DescribeMirrorsResponsePartition{
				{Partition: 0, State: "FAILED", SourceHighWatermark: -1, DestinationHighWatermark: -1, Lag: -1, LastMirroredOffset: -1, RetryAttempt: -1,
					ErrorMessage: sp("source topic was re-created (id changed)"), RecordsAtRisk: -1, AtRiskAgeMs: -1},
				{Partition: 1, State: "MIRRORING", SourceHighWatermark: 10, DestinationHighWatermark: 10, Lag: 0, LastMirroredOffset: -1,
					ErrorMessage: sp("note: source retention overtook the copy; offsets 0..4 filled")},
			}},
			{Name: "audit", Partitions: []protocol.DescribeMirrorsResponsePartition{
				{Partition: 0, State: "MIRRORING", SourceHighWatermark: 7, DestinationHighWatermark: 7, Lag: 0, LastMirroredOffset: -1},
			}},
			{Name: "logs", Partitions: []protocol.DescribeMirrorsResponsePartition{
				{Partition: 0, State: "STOPPED", SourceHighWatermark: 90, DestinationHighWatermark: 95, Lag: 0, LastMirroredOffset: 88,
					RecordsAtRisk: -1, AtRiskAgeMs: -1},
			}},
		},
			Syncs: []protocol.DescribeMirrorsResponseSync{
				{Job: "topics", LastSuccessAgeMs: 2400, LastRunAgeMs: 2400},
				{Job: "groups", LastSuccessAgeMs: 2400, LastRunAgeMs: 2400, Message: sp("3 groups tracked, 4 partition offsets committed")},
				{Job: "acls", LastSuccessAgeMs: -1, LastRunAgeMs: 2400, ErrorMessage: sp("the destination has no authorizer\n(authorizer.class.name)")},
			},
			Groups: []protocol.DescribeMirrorsResponseGroup{
				{Name: "billing", State: "SYNCED", LastSyncAgeMs: 2400, Partitions: 6},
				{Name: "web", State: "ACTIVE", LastSyncAgeMs: 3723000, Partitions: 3, Message: sp("has members on the destination (state Stable)")},
				{Name: "new", State: "FAILED", LastSyncAgeMs: -1, Message: sp("committing its offsets on the destination: GROUP_AUTHORIZATION_FAILED")},
			}},
		{Name: "empty"},
		{Name: "nosuch", ErrorCode: protocol.ErrUnknownMirror.Code, ErrorMessage: sp(`mirror "nosuch" does not exist; ` + "`kmirror mirrors --list` shows the mirrors")},
	}, Routes: []protocol.DescribeMirrorsResponseRoute{
		{Name: "payments", Mirror: "dr", Bootstrap: "0.0.0.0:19092", Upstream: "standby", Open: true, ClusterID: sp("prim-ary"),
			Attempt: 1, Step: "SWITCHED", Driver: sp("kmirror-state-1-abc"), SwitchAgeMs: 120_000, DurationMs: 3_250, FreezeMs: 2_901, RecordsAtRisk: -1,
			Steps: []protocol.DescribeMirrorsResponseRouteStep{{Step: "FREEZING", DurationMs: 21}, {Step: "TXN_WAIT", DurationMs: 3},
				{Step: "DRAINING", DurationMs: 2_500}, {Step: "GROUPS_QUIET", DurationMs: 120}, {Step: "GROUPS_COPY", DurationMs: 200},
				{Step: "FAILING_OVER", DurationMs: 57}, {Step: "SWITCHING", DurationMs: 349}}},
		{Name: "ledger", Mirror: "dr", Bootstrap: "0.0.0.0:19192", Upstream: "primary", Open: true, Attempt: 2, Step: "ROLLED_BACK",
			Reason: sp("drain timeout after 60s:\nledger/0 lags 5 records"), SwitchAgeMs: 70_000, DurationMs: 60_010, FreezeMs: 60_010, RecordsAtRisk: -1,
			Steps: []protocol.DescribeMirrorsResponseRouteStep{{Step: "FREEZING", DurationMs: 10}, {Step: "DRAINING", DurationMs: 60_000}}},
		{Name: "web", Mirror: "dr", Bootstrap: "0.0.0.0:19292", Upstream: "standby", Open: true, Attempt: 1, Step: "SWITCHED", Forced: true,
			SwitchAgeMs: 5_000, DurationMs: 400, FreezeMs: -1, RecordsAtRisk: 17,
			Steps: []protocol.DescribeMirrorsResponseRouteStep{{Step: "FAILING_OVER", DurationMs: 300}, {Step: "SWITCHING", DurationMs: 100}}},
		{Name: "audit", Mirror: "dr", Bootstrap: "0.0.0.0:19392", Upstream: "primary", Step: "IDLE",
			SwitchAgeMs: -1, DurationMs: -1, FreezeMs: -1, RecordsAtRisk: -1},
	}}
}

func TestRenderDescribe(t *testing.T) {
	var buf bytes.Buffer
	if err := RenderDescribeTable(&buf, describeFixture(), false); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe.golden", buf.Bytes())

	buf.Reset()
	if err := RenderDescribeTable(&buf, describeFixture(), true); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe_failed.golden", buf.Bytes())

	buf.Reset()
	if err := RenderDescribeJSON(&buf, describeFixture(), false); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe.json.golden", buf.Bytes())
	var back DescribeJSON
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}

	buf.Reset()
	if err := RenderDescribeJSON(&buf, describeFixture(), true); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe_failed.json.golden", buf.Bytes())

	errs := MirrorErrors(describeFixture())
	if len(errs) != 1 || errs[0] != "mirror nosuch: UNKNOWN_MIRROR: mirror \"nosuch\" does not exist; `kmirror mirrors --list` shows the mirrors" {
		t.Fatalf("mirror errors %q", errs)
	}
}

func TestRenderList(t *testing.T) {
	resp := &protocol.ListMirrorsResponse{Mirrors: []protocol.ListMirrorsResponseMirror{
		{Name: "dr", SourceBootstrap: "src-a:9092,src-b:9092", SourceClusterID: "Ab3-xYz", TopicCount: 2, TopicNames: []string{"orders", "payments"}},
		{Name: "migration", SourceBootstrap: "old:9092", TopicCount: 0},
	}}
	var buf bytes.Buffer
	if err := RenderListTable(&buf, resp); err != nil {
		t.Fatal(err)
	}
	golden(t, "list.golden", buf.Bytes())
	buf.Reset()
	if err := RenderListJSON(&buf, resp); err != nil {
		t.Fatal(err)
	}
	golden(t, "list.json.golden", buf.Bytes())
}

// TestSyncTimedOut is what --wait-for-sync prints when it gives up: every
// partition not in sync (behind, PAUSED with nothing at risk, unknown) with
// what it would lose, the total, and an error that says nothing was sent.
func TestSyncTimedOut(t *testing.T) {
	resp := &protocol.DescribeMirrorsResponse{Mirrors: []protocol.DescribeMirrorsResponseMirror{{Name: "dr", Topics: []protocol.DescribeMirrorsResponseTopic{
		{Name: "orders", Partitions: []protocol.DescribeMirrorsResponsePartition{
			{Partition: 0, State: "MIRRORING", SourceHighWatermark: 12, DestinationHighWatermark: 5, RecordsAtRisk: 7, AtRiskAgeMs: 12_340},
			{Partition: 1, State: "MIRRORING", SourceHighWatermark: 3, DestinationHighWatermark: 3},
			{Partition: 2, State: "PAUSED", SourceHighWatermark: 4, DestinationHighWatermark: 4},
		}},
		{Name: "payments", Partitions: []protocol.DescribeMirrorsResponsePartition{
			{Partition: 0, State: "MIRRORING", SourceHighWatermark: 9, DestinationHighWatermark: 8, RecordsAtRisk: 1, AtRiskAgeMs: 800},
			{Partition: 1, State: "FAILED", SourceHighWatermark: -1, DestinationHighWatermark: 8, RecordsAtRisk: -1, AtRiskAgeMs: -1},
		}},
	}}}}
	var out bytes.Buffer
	r := &runner{a: &MirrorsArgs{Mirror: "dr", Timeout: 30 * time.Second}, out: &out, errw: &out}
	err := r.syncTimedOut(resp, []string{"orders", "payments"})
	if err == nil {
		t.Fatal("no error: the command would exit 0")
	}
	fmt.Fprintf(&out, "error: %v\n", err)
	golden(t, "wait_for_sync_timeout.golden", out.Bytes())
}

// TestOnlyRetriable: --remove --wait keeps waiting through a mirror error a later describe may
// not have (the soak's seed 3 ran --remove --wait while a destination broker restarted, and the
// command failed on COORDINATOR_NOT_AVAILABLE), and stops on any other.
func TestOnlyRetriable(t *testing.T) {
	resp := func(codes ...int16) *protocol.DescribeMirrorsResponse {
		r := &protocol.DescribeMirrorsResponse{}
		for _, c := range codes {
			r.Mirrors = append(r.Mirrors, protocol.DescribeMirrorsResponseMirror{Name: "m", ErrorCode: c})
		}
		return r
	}
	notAvailable := protocol.ErrCoordinatorNotAvailable.Code
	unknown := protocol.ErrUnknownMirror.Code
	if !onlyRetriable(resp(notAvailable)) || !onlyRetriable(resp(0, notAvailable)) {
		t.Error("COORDINATOR_NOT_AVAILABLE should be waited through")
	}
	if onlyRetriable(resp(unknown)) || onlyRetriable(resp(notAvailable, unknown)) {
		t.Error("UNKNOWN_MIRROR must end the wait")
	}
}
