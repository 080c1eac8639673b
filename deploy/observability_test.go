package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/mirrorcli"
)

// The mirror the test watches: orders copies, paused lags by pausedLag
// records, doomed FAILED (its source topic was deleted under it).
const (
	obsMirror = "obs"
	orders    = "obs-orders"
	paused    = "obs-paused"
	doomed    = "obs-doomed"
	pausedLag = 7
	wait      = 2 * time.Minute
)

// obsEnv is one source and one destination cluster (real Apache Kafka) with
// a kmirror instance in front of the destination, its status page sampled
// every second.
type obsEnv struct {
	src, dst *kafkatest.Cluster
	in       *instance.Instance
}

// TestObservabilityOnRealKafka scrapes a running kmirror with real
// Prometheus and loads its status page in real Chromium, all on one
// cluster pair: every metric rules.yml and the Grafana dashboard use
// exists with the labels they use, every panel returns data, the rules
// load and the FAILED partition's alert goes off, and the page shows the
// FAILED partition and the lag describe shows.
func TestObservabilityOnRealKafka(t *testing.T) {
	promBin := tool(t, "prometheus", "prometheus")
	chromeBin := tool(t, "chromium", "chromium")
	e := &obsEnv{src: kafkatest.Start(t), dst: kafkatest.Start(t)}
	e.in = instancetest.Start(t, e.dst, nil, func(c *instance.Config) { c.StatusPageEvery = time.Second })
	e.setUpMirror(t)
	e.refuseAWrite(t)
	prom := startPrometheus(t, promBin, e.in.Proxy.MetricsAddr())
	qs := append(ruleQueries(t), dashboardQueries(t)...)

	t.Run("MetricsExistWithTheirLabels", func(t *testing.T) { metricsExist(t, prom, qs) })
	t.Run("DashboardPanelsReturnData", func(t *testing.T) { panelsReturnData(t, prom, qs) })
	t.Run("RulesLoadAndFailedPartitionAlerts", func(t *testing.T) { rulesEvaluate(t, prom) })
	t.Run("StatusPageInChromium", func(t *testing.T) { e.statusPage(t, chromeBin) })
}

// cli runs `kmirror mirrors` against the instance, as an operator would.
func (e *obsEnv) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.tryCLI(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *obsEnv) tryCLI(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out, errb bytes.Buffer
	if err := mirrorcli.Mirrors(ctx, append([]string{"--bootstrap-server", e.in.Proxy.Addr()}, args...), &out, &errb); err != nil {
		return "", fmt.Errorf("kmirror mirrors %s: %w\n%s%s", strings.Join(args, " "), err, out.Bytes(), errb.Bytes())
	}
	return out.String(), nil
}

// describe is `kmirror mirrors --describe --json`: partition "topic/p" →
// state and lag (-1 unknown).
func (e *obsEnv) describe(t *testing.T) map[string]pageRow {
	t.Helper()
	var d struct {
		Mirrors []struct {
			Topics []struct {
				Name       string
				Partitions []struct {
					Partition int32
					State     string
					Lag       *int64
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(e.cli(t, "--describe", "--mirror", obsMirror, "--json")), &d); err != nil {
		t.Fatalf("describe --json: %v", err)
	}
	out := map[string]pageRow{}
	for _, m := range d.Mirrors {
		for _, tp := range m.Topics {
			for _, p := range tp.Partitions {
				r := pageRow{state: p.State, lag: -1}
				if p.Lag != nil {
					r.lag = *p.Lag
				}
				out[fmt.Sprintf("%s/%d", tp.Name, p.Partition)] = r
			}
		}
	}
	return out
}

// awaitStates polls describe until every named partition is in its state
// (and, where lag is not -2, at that lag).
func (e *obsEnv) awaitStates(t *testing.T, what string, want map[string]pageRow) {
	t.Helper()
	polltest.Eventually(t, wait, what, func() (bool, string) {
		got := e.describe(t)
		for k, w := range want {
			if g := got[k]; g.state != w.state || (w.lag != -2 && g.lag != w.lag) {
				return false, fmt.Sprintf("%s is %+v, want %+v (all: %v)", k, g, w, got)
			}
		}
		return true, ""
	})
}

func (e *obsEnv) produce(t *testing.T, topic string, partitions int32, n int) {
	t.Helper()
	cl := e.src.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s/%d #%d", topic, p, i)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// setUpMirror mirrors three topics and brings them to MIRRORING, PAUSED
// with pausedLag records behind, and FAILED.
func (e *obsEnv) setUpMirror(t *testing.T) {
	for topic, parts := range map[string]int32{orders: 2, paused: 1, doomed: 1} {
		e.src.CreateKeptTopic(t, topic, parts)
		e.produce(t, topic, parts, 20)
	}
	cfg := filepath.Join(t.TempDir(), "mirror.properties")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "bootstrap.servers=%s\nmetadata.refresh.interval.ms=1000\n", e.src.BootstrapString()), 0o600); err != nil {
		t.Fatal(err)
	}
	e.cli(t, "--create", "--mirror", obsMirror, "--mirror-config", cfg) // a retried create succeeds (apis)
	e.cli(t, "--add", "--mirror", obsMirror, "--topics", orders+","+paused+","+doomed)
	e.awaitStates(t, "every partition MIRRORING and caught up", map[string]pageRow{
		orders + "/0": {"MIRRORING", 0}, orders + "/1": {"MIRRORING", 0}, paused + "/0": {"MIRRORING", 0}, doomed + "/0": {"MIRRORING", 0}})

	e.cli(t, "--pause", "--mirror", obsMirror, "--topics", paused)
	e.awaitStates(t, paused+" PAUSED", map[string]pageRow{paused + "/0": {"PAUSED", 0}})
	e.produce(t, paused, 1, pausedLag)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := kadm.NewClient(e.src.Client(t)).DeleteTopic(ctx, doomed); err != nil {
		t.Fatalf("deleting source topic %s: %v", doomed, err)
	}
	e.awaitStates(t, doomed+" FAILED, "+paused+" behind", map[string]pageRow{
		doomed + "/0": {"FAILED", -2}, paused + "/0": {"PAUSED", pausedLag}, orders + "/0": {"MIRRORING", 0}})
}

// refuseAWrite has the proxy refuse a write on its own authority (a
// Produce to __mirror_state), so the refusals counter has a series.
func (e *obsEnv) refuseAWrite(t *testing.T) {
	cl := kafkatest.NewClient(t, []string{e.in.Proxy.Addr()}, kgo.RequestRetries(0), kgo.RecordRetries(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: e.in.Coord.StateTopic(), Value: []byte("x")}).FirstErr()
	if err == nil {
		t.Fatalf("a Produce to %s through kmirror succeeded", e.in.Coord.StateTopic())
	}
	t.Logf("a Produce to %s through kmirror: %v (refused, as it must be)", e.in.Coord.StateTopic(), err)
}
