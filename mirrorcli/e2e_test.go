package mirrorcli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/proxy"
)

// describeJSON runs --describe --json for a mirror.
func describeJSON(t *testing.T, s *server, mirror string) (*DescribeJSON, result) {
	t.Helper()
	r := runMirrors(t, "--bootstrap-server", s.addr(), "--describe", "--mirror", mirror, "--json")
	if r.code != 0 {
		return nil, r
	}
	var d DescribeJSON
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("describe --json is not JSON: %v\n%s", err, r.stdout)
	}
	return &d, r
}

// describeStates runs --describe --json for a mirror and returns
// topic -> partition -> state.
func describeStates(t *testing.T, s *server, mirror string) (map[string]map[int32]string, result) {
	t.Helper()
	d, r := describeJSON(t, s, mirror)
	if d == nil {
		return nil, r
	}
	out := map[string]map[int32]string{}
	for _, m := range d.Mirrors {
		for _, tp := range m.Topics {
			out[tp.Name] = map[int32]string{}
			for _, p := range tp.Partitions {
				out[tp.Name][p.Partition] = p.State
			}
		}
	}
	return out, r
}

// waitStates polls describe until every partition of each topic is in the
// wanted state.
func waitStates(t *testing.T, s *server, mirror string, want map[string]string) {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, "partitions reach their states", func() (bool, string) {
		got, r := describeStates(t, s, mirror)
		if got == nil {
			return false, r.String()
		}
		for topic, state := range want {
			if len(got[topic]) == 0 {
				return false, fmt.Sprintf("topic %s not described: %v", topic, got)
			}
			for p, st := range got[topic] {
				if st != state {
					return false, fmt.Sprintf("%s-%d is %s, want %s (all: %v)", topic, p, st, state, got)
				}
			}
		}
		return true, ""
	})
}

// endToEndScenario is what the steps of TestMirrorsEndToEnd share: one
// in-process server, and the ids and files that later steps reuse. The
// steps run in order, each on the state the earlier ones left.
type endToEndScenario struct {
	s       *server
	ctx     context.Context
	srcID   string // the source's cluster id, which create fills in
	cfg     string // dr.properties, the config of mirrors dr and dr2
	cmdConf string // client.properties, given as --command-config by the last steps
}

func TestMirrorsEndToEnd(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc := &endToEndScenario{s: s, ctx: ctx}
	sc.seed(t)
	sc.create(t)
	sc.addTopics(t)
	sc.describeTable(t)
	sc.recoveryPoint(t)
	sc.waitForSyncRefuses(t)
	sc.pauseAndResume(t)
	sc.failOverAndDelete(t)
	sc.waitTimesOut(t)
	sc.otherEndpointsAndDumpState(t)
}

// run runs kmirror mirrors against the server.
func (sc *endToEndScenario) run(t *testing.T, args ...string) result {
	t.Helper()
	return runMirrors(t, append([]string{"--bootstrap-server", sc.s.addr()}, args...)...)
}

// runWithCommandConfig runs kmirror mirrors against the server with the
// client settings of cmdConf.
func (sc *endToEndScenario) runWithCommandConfig(t *testing.T, args ...string) result {
	t.Helper()
	return runMirrors(t, append([]string{"--bootstrap-server", sc.s.addr(), "--command-config", sc.cmdConf}, args...)...)
}

// seed creates the source topics, writes ten records to orders so the
// source has offsets, and learns the source's cluster id.
func (sc *endToEndScenario) seed(t *testing.T) {
	t.Helper()
	ctx := sc.ctx
	srcCl := sc.s.src.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	srcAdm := kadm.NewClient(srcCl)
	for topic, parts := range map[string]int32{"orders": 3, "payments": 2, "logs-a": 1, "logs-b": 1, "poison": 1, "stuck": 1} {
		if _, err := srcAdm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := srcCl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// An empty destination topic (allowed) so DESTINATION-OFFSET shows a number.
	if _, err := kadm.NewClient(sc.s.dst.Client(t)).CreateTopic(ctx, 3, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	srcID, err := sourceclient.ClusterID(ctx, srcCl)
	if err != nil {
		t.Fatal(err)
	}
	sc.srcID = srcID
}

// create creates mirror dr, and checks the errors of create and the list
// before and after.
func (sc *endToEndScenario) create(t *testing.T) {
	t.Helper()
	s := sc.s
	// No mirror yet: the list is just the header.
	r := mustRun(t, 0, sc.run(t, "--list"))
	if got := rows(r.stdout); len(got) != 0 || !strings.HasPrefix(r.stdout, "MIRROR") {
		t.Fatalf("list before any mirror: %s", r)
	}

	// Create: source.cluster.id is filled in by asking the source.
	sc.cfg = writeFile(t, "dr.properties", "# the source\nbootstrap.servers="+s.src.BootstrapString()+"\nfetch.wait.max.ms = 100\n")
	r = mustRun(t, 0, sc.run(t, "--create", "--mirror", "dr", "--mirror-config", sc.cfg))
	mustContain(t, "create output", r.stdout, "Created mirror dr", "cluster id "+sc.srcID)

	// The same create again (a retry) succeeds; errors of create: the name taken with other
	// configs, an unknown config key.
	mustRun(t, 0, sc.run(t, "--create", "--mirror", "dr", "--mirror-config", sc.cfg))
	other := writeFile(t, "other.properties", "bootstrap.servers="+s.src.BootstrapString()+"\nfetch.wait.max.ms = 200\n")
	r = mustRun(t, 1, sc.run(t, "--create", "--mirror", "dr", "--mirror-config", other))
	mustContain(t, "duplicate create", r.stderr, `MIRROR_ALREADY_EXISTS: mirror "dr" already exists with other configs`)
	bad := writeFile(t, "bad.properties", "bootstrap.servers="+s.src.BootstrapString()+"\nbogus.key=1\n")
	r = mustRun(t, 1, sc.run(t, "--create", "--mirror", "other", "--mirror-config", bad))
	mustContain(t, "unknown config key", r.stderr, `INVALID_CONFIG: unknown mirror config "bogus.key"`)

	// A source the CLI cannot reach: the mirror is still created, the proxy
	// checks the source itself (here it cannot either, and says so).
	unreachable := writeFile(t, "far.properties", "bootstrap.servers=127.0.0.1:1\n")
	r = mustRun(t, 1, sc.run(t, "--create", "--mirror", "far", "--mirror-config", unreachable))
	mustContain(t, "unreachable source", r.stderr, "warning: source.cluster.id not filled in: cannot reach the source cluster at 127.0.0.1:1",
		"INVALID_CONFIG: cannot reach the source cluster at 127.0.0.1:1")

	r = mustRun(t, 0, sc.run(t, "--list"))
	if got := rows(r.stdout); len(got) != 1 || strings.Join(got[0], " ") != "dr "+s.src.BootstrapString()+" "+sc.srcID+" 0" {
		t.Fatalf("list after create: %s", r)
	}
}

// addTopics adds orders, payments, logs-a and poison to dr, by name and by
// pattern, and checks the errors of add.
func (sc *endToEndScenario) addTopics(t *testing.T) {
	t.Helper()
	// Add explicit names, then a pattern with an exclude.
	r := mustRun(t, 0, sc.run(t, "--add", "--mirror", "dr", "--topics", "orders, payments"))
	mustContain(t, "add", r.stdout, "Topic orders: added to mirror dr.", "Topic payments: added to mirror dr.")
	r = mustRun(t, 0, sc.run(t, "--add", "--mirror", "dr", "--topics", "logs-.*", "--exclude", "logs-b"))
	mustContain(t, "add pattern", r.stdout, "Topic logs-a: added to mirror dr.", "Pattern /logs-.*/ is stored")
	if strings.Contains(r.stdout, "logs-b") {
		t.Fatalf("excluded topic added: %s", r)
	}
	// One good topic and one unknown: exit 1, the error named per topic.
	r = mustRun(t, 1, sc.run(t, "--add", "--mirror", "dr", "--topics", "poison,nosuch"))
	mustContain(t, "add unknown topic", r.stdout, "Topic poison: added")
	mustContain(t, "add unknown topic", r.stderr, "error: topic nosuch: UNKNOWN_TOPIC_OR_PARTITION: topic \"nosuch\" does not exist", "1 of 2 topics failed")
	r = mustRun(t, 1, sc.run(t, "--add", "--mirror", "dr", "--topics", "orders"))
	mustContain(t, "re-add", r.stderr, "error: topic orders: MIRROR_TOPIC_NOT_STOPPED:")
	r = mustRun(t, 1, sc.run(t, "--add", "--mirror", "nosuch", "--topics", "orders"))
	mustContain(t, "add to unknown mirror", r.stderr, `UNKNOWN_MIRROR: mirror "nosuch" does not exist`)
}

// describeTable waits for the added topics to settle and checks the
// describe table, --failed, and describe of an unknown mirror.
func (sc *endToEndScenario) describeTable(t *testing.T) {
	t.Helper()
	waitStates(t, sc.s, "dr", map[string]string{"orders": "MIRRORING", "payments": "MIRRORING", "logs-a": "MIRRORING", "poison": "FAILED"})

	// The table: orders-0 has 10 source records and an empty destination.
	r := mustRun(t, 0, sc.run(t, "--describe", "--mirror", "dr"))
	t.Logf("describe:\n%s", r)
	header := strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0])
	if strings.Join(header, " ") != strings.Join(DescribeColumns, " ") {
		t.Fatalf("describe header %q", header)
	}
	byKey := map[string][]string{}
	for _, row := range rows(r.stdout) {
		byKey[row[1]+"-"+row[2]] = row
	}
	if got := strings.Join(byKey["orders-0"][:8], " "); got != "dr orders 0 MIRRORING 10 0 10 -" {
		t.Fatalf("orders-0 row %q\n%s", got, r)
	}
	if got := strings.Join(byKey["payments-1"][:8], " "); got != "dr payments 1 MIRRORING 0 - - -" {
		t.Fatalf("payments-1 row %q\n%s", got, r)
	}
	if row := byKey["poison-0"]; row[3] != "FAILED" || !strings.Contains(strings.Join(row, " "), "poisoned (test)") {
		t.Fatalf("poison-0 row %q\n%s", row, r)
	}
	if len(byKey) != 3+2+1+1 {
		t.Fatalf("%d partitions described, want 7:\n%s", len(byKey), r)
	}

	r = mustRun(t, 0, sc.run(t, "--describe", "--failed"))
	if got := rows(r.stdout); len(got) != 1 || !regexp.MustCompile(`^dr poison 0 FAILED 0 - - - - - none \(needs operator\) source partition poison-0 is poisoned \(test\)`).MatchString(strings.Join(got[0], " ")) {
		t.Fatalf("describe --failed: %s", r)
	}
	r = mustRun(t, 1, sc.run(t, "--describe", "--mirror", "nosuch"))
	mustContain(t, "describe unknown mirror", r.stderr, `error: mirror nosuch: UNKNOWN_MIRROR: mirror "nosuch" does not exist`)
}

// recoveryPoint checks the records and seconds at risk in describe --json.
func (sc *endToEndScenario) recoveryPoint(t *testing.T) {
	t.Helper()
	// The recovery point: the fake data path copies nothing, so orders-0's
	// ten source records are at risk, aged by their timestamps (read from
	// the source); payments has no destination topic, so its figures are
	// unknown.
	d, _ := describeJSON(t, sc.s, "dr")
	for _, tj := range d.Mirrors[0].Topics {
		for _, p := range tj.Partitions {
			switch {
			case tj.Name == "orders" && p.Partition == 0:
				if p.RecordsAtRisk == nil || *p.RecordsAtRisk != 10 || p.SecondsAtRisk == nil || *p.SecondsAtRisk <= 0 {
					t.Fatalf("orders-%s; want 10 records at risk and the age of the first", show(p))
				}
			case tj.Name == "payments":
				if p.RecordsAtRisk != nil || p.SecondsAtRisk != nil {
					t.Fatalf("payments-%s without a destination topic; want records and seconds at risk unknown (null)", show(p))
				}
			}
		}
		if tj.Name == "orders" && (tj.AtRisk.Records != 10 || tj.AtRisk.PartitionsBehind != 1 || tj.AtRisk.Partitions != 3) {
			t.Fatalf("orders total at risk %+v", tj.AtRisk)
		}
	}
}

// waitForSyncRefuses checks that --wait-for-sync sends nothing when a topic
// is not in the mirror or never catches up.
func (sc *endToEndScenario) waitForSyncRefuses(t *testing.T) {
	t.Helper()
	// --wait-for-sync: a topic that is not in the mirror, and one that
	// never catches up, end with nothing sent.
	r := mustRun(t, 1, sc.run(t, "--remove", "--mirror", "dr", "--topics", "orders,nosuch", "--wait-for-sync"))
	mustContain(t, "wait for sync, unknown topic", r.stderr, "topic nosuch is not in mirror dr; nothing was sent")
	r = mustRun(t, 1, sc.run(t, "--remove", "--mirror", "dr", "--topics", "orders", "--wait-for-sync", "--timeout", "1s"))
	mustContain(t, "wait for sync timeout", r.stdout, "Waiting for sync: 2 of 3 partitions in sync; pending: orders-0 MIRRORING, 10 records at risk",
		"Not failing over: after --timeout 1s")
	if !regexp.MustCompile(`(?m)^orders\s+0\s+MIRRORING\s+10\s+\d+\.\d$`).MatchString(r.stdout) || strings.Contains(r.stdout, "failover requested") {
		t.Fatalf("wait for sync timeout: %s", r)
	}
	mustContain(t, "wait for sync timeout", r.stderr, "a failover now would lose 10 records", "nothing was sent")
	waitStates(t, sc.s, "dr", map[string]string{"orders": "MIRRORING"})
}

// pauseAndResume pauses orders and resumes it, with the errors of resume.
func (sc *endToEndScenario) pauseAndResume(t *testing.T) {
	t.Helper()
	r := mustRun(t, 0, sc.run(t, "--pause", "--mirror", "dr", "--topics", "orders"))
	mustContain(t, "pause", r.stdout, "Topic orders: paused")
	waitStates(t, sc.s, "dr", map[string]string{"orders": "PAUSED", "payments": "MIRRORING"})
	r = mustRun(t, 1, sc.run(t, "--resume", "--mirror", "dr", "--topics", "orders,payments,nosuch"))
	mustContain(t, "resume", r.stdout, "Topic orders: resumed.")
	mustContain(t, "resume", r.stderr, "error: topic payments: MIRROR_TOPIC_NOT_PAUSED:", "error: topic nosuch: TOPIC_NOT_IN_MIRROR:", "2 of 3 topics failed")
	waitStates(t, sc.s, "dr", map[string]string{"orders": "MIRRORING"})
}

// failOverAndDelete fails over every topic of dr, by name and by pattern,
// then deletes dr; delete is refused before.
func (sc *endToEndScenario) failOverAndDelete(t *testing.T) {
	t.Helper()
	// Delete refuses while topics mirror.
	r := mustRun(t, 1, sc.run(t, "--delete", "--mirror", "dr"))
	mustContain(t, "delete busy mirror", r.stderr, "MIRROR_NOT_EMPTY:")

	// Fail over: names, then a pattern; --wait reports the LMOs. The first two answers are
	// COORDINATOR_NOT_AVAILABLE, as while a destination broker restarts: the command asks
	// again (the soak's failover once failed at its first answer).
	calls := sc.s.unavailableFirst(2)
	r = mustRun(t, 0, sc.run(t, "--remove", "--mirror", "dr", "--topics", "orders,payments", "--wait", "--timeout", "30s"))
	t.Logf("remove --wait:\n%s", r)
	if n := calls.Load(); n != 3 {
		t.Fatalf("the failover was asked %d times, want 3 (two refusals, then the failover)", n)
	}
	mustContain(t, "remove --wait", r.stdout, "Topic orders: failover requested", "All 5 partitions of orders, payments STOPPED")
	if !regexp.MustCompile(`(?m)^dr\s+orders\s+2\s+STOPPED\s+0\s+0\s+0\s+42\s+-\s+-\s*$`).MatchString(r.stdout) {
		t.Fatalf("remove --wait does not show orders-2 STOPPED with LMO 42:\n%s", r)
	}
	r = mustRun(t, 1, sc.run(t, "--remove", "--mirror", "dr", "--topics", "orders", "--wait-for-sync"))
	mustContain(t, "wait for sync of a failed-over topic", r.stderr, "topic orders is already failing over (partition 0 is STOPPED)", "nothing was sent")
	r = mustRun(t, 0, sc.run(t, "--remove", "--mirror", "dr", "--topics", "logs-.*|poison", "--wait"))
	mustContain(t, "remove pattern", r.stdout, "Topic logs-a: failover requested", "Topic poison: failover requested", "STOPPED after")
	r = mustRun(t, 1, sc.run(t, "--pause", "--mirror", "dr", "--topics", "orders"))
	mustContain(t, "pause stopped topic", r.stderr, "error: topic orders: MIRROR_TOPIC_BEING_STOPPED:")

	r = mustRun(t, 0, sc.run(t, "--delete", "--mirror", "dr"))
	mustContain(t, "delete", r.stdout, "Deleted mirror dr")
	r = mustRun(t, 0, sc.run(t, "--list", "--json"))
	var l ListJSON
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || len(l.Mirrors) != 0 {
		t.Fatalf("list after delete: %v\n%s", err, r)
	}
	r = mustRun(t, 1, sc.run(t, "--delete", "--mirror", "dr"))
	mustContain(t, "delete twice", r.stderr, "UNKNOWN_MIRROR:")
}

// waitTimesOut checks that --wait gives up at --timeout and says what is
// still pending. From here on the CLI is given a --command-config.
func (sc *endToEndScenario) waitTimesOut(t *testing.T) {
	t.Helper()
	sc.cmdConf = writeFile(t, "client.properties", "security.protocol=PLAINTEXT\nclient.id=ops-cli\n")
	mustRun(t, 0, sc.runWithCommandConfig(t, "--create", "--mirror", "dr2", "--mirror-config", sc.cfg))
	mustRun(t, 0, sc.runWithCommandConfig(t, "--add", "--mirror", "dr2", "--topics", "stuck"))
	waitStates(t, sc.s, "dr2", map[string]string{"stuck": "MIRRORING"})
	r := mustRun(t, 1, sc.runWithCommandConfig(t, "--remove", "--mirror", "dr2", "--topics", "stuck", "--wait", "--timeout", "2s"))
	mustContain(t, "remove --wait timeout", r.stdout, "Waiting for failover: 0 of 1 partition STOPPED; pending: stuck-0 STOPPING")
	mustContain(t, "remove --wait timeout", r.stderr, "timed out after --timeout 2s: 1 of 1 partition not STOPPED yet (stuck-0 STOPPING)")
}

// otherEndpointsAndDumpState points the CLI at a Kafka broker and at a proxy
// without mirroring, then reads the whole history with dump-state. The proxy
// without mirroring stays up until dump-state has run, and closes before
// the test's context is cancelled.
func (sc *endToEndScenario) otherEndpointsAndDumpState(t *testing.T) {
	t.Helper()
	s := sc.s
	// A Kafka broker is not a kmirror proxy.
	r := mustRun(t, 1, runMirrors(t, "--bootstrap-server", s.dst.BootstrapString(), "--list", "--timeout", "10s"))
	mustContain(t, "not a proxy", r.stderr, "does not serve kmirror's mirror RPCs at keys 1000–1011",
		"it is not kmirror or a different version", "must be a kmirror proxy of this version, not a Kafka broker")

	// A proxy without mirroring enabled answers with a typed error.
	bare, err := proxy.New(proxy.Config{Upstream: s.dst.Bootstrap(), Listen: "127.0.0.1:0", AdvertisedHost: "127.0.0.1", EventLoops: 1}, proxy.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := bare.Start(sc.ctx); err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	r = mustRun(t, 1, runMirrors(t, "--bootstrap-server", bare.AdvertisedAddr(), "--describe"))
	mustContain(t, "mirroring disabled", r.stderr, "INVALID_REQUEST: mirroring is not enabled")

	// dump-state through the proxy shows the whole history, tombstones last.
	r = mustRun(t, 0, runDumpState(t, "--bootstrap-server", s.addr(), "--command-config", sc.cmdConf))
	t.Logf("dump-state:\n%s", r)
	mustContain(t, "dump-state", r.stdout, `MirrorConfig mirror="dr" value={"configs":{`, `MirrorTopic mirror="dr" topic="orders" value=`,
		`"state":"STOPPED"`, `MirrorConfig mirror="dr" TOMBSTONE`)
}
