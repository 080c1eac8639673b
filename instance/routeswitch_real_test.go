package instance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/apptest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/mirrorcli"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// TestRealDrivenRouteSwitch is a planned switch driven by the instance itself
// (docs/cutover.md): real primary and standby clusters, a mirror from one to
// the other copying a topic, a franz-go idempotent producer and a franz-go
// consumer group through the route the whole time. SwitchRoute starts it; the
// driver freezes writes (the applier acks), finds no open transaction, drains
// the copy to the primary's recorded log ends, waits for the group's commits,
// copies them to the standby, fails the topic over and switches the route.
// The switch is asked for with `kmirror mirrors --switch --route app`.
// Afterwards every acknowledged record is on the standby once, in order per
// partition; the group saw every record once; nobody was restarted.
func TestRealDrivenRouteSwitch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic, group = "orders", "billing"
	primary, standby, in := startRouteWorld(t, ctx, topic)
	route := in.Proxy.RouteAddr("app")

	app := apptest.Start(t, ctx, []string{route}, topic, group)
	polltest.Until(t, time.Minute, "records flow through the route and are consumed", func() bool { return app.Read() > 200 })

	// The operator's command, through the proxy's SwitchRoute RPC; the request is recorded
	// and answered by the route's driver.
	began := time.Now()
	rec := switchRoute(t, ctx, in, "--switch", "--route", "app")
	t.Logf("switched in %s (write freeze from %s): %s", time.Since(began).Round(time.Millisecond),
		time.UnixMilli(rec.FreezeStartMs).UTC().Format("15:04:05.000"), stepsOf(rec))
	if st := in.Proxy.Routes(); st[0].Upstream != "standby" {
		t.Fatalf("the route leads to %s after the switch", st[0].Upstream)
	}
	// The operator sees the switch, its duration and its write freeze in describe.
	described := describeRoute(t, ctx, in, "app")
	if described.Step != "SWITCHED" || described.Upstream != "standby" || !described.Open || described.Attempt != 1 ||
		described.FreezeMs == nil || *described.FreezeMs <= 0 || described.DurationMs == nil || *described.DurationMs < *described.FreezeMs {
		t.Fatalf("describe shows the route as %+v", described)
	}
	t.Logf("describe: switch took %d ms, writes frozen %d ms, steps %+v", *described.DurationMs, *described.FreezeMs, described.Steps)
	// Every acknowledged record is on the standby once, in order per partition; the group
	// read each once.
	app.Verify(t, ctx, primary, standby, 200)
	cancel()

	// An instance started after the switch never leads the route's clients to the
	// primary: its route opens once it has applied the switched record, and shows the
	// topic id the clients were given (the primary's) though it never saw the primary's
	// metadata.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary.CreateKeptTopic(t, "primary-only", 1)
	srcTopics, err := kadm.NewClient(primary.Client(t)).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	late := instancetest.Start(t, standby, nil, func(c *instance.Config) {
		c.Proxy.Routes = []proxy.RouteConfig{{Name: "app", Listen: "127.0.0.1:0", Mirror: "dr",
			Primary: proxy.RouteUpstream{Bootstrap: primary.Bootstrap()}}}
	})
	refused := 0
	polltest.Until(t, time.Minute, "the late instance's route answers", func() bool {
		md, err := routeMetadata(ctx, late.Proxy.RouteAddr("app"))
		if err != nil {
			refused++ // closed until the switch state is applied
			return false
		}
		for _, tp := range md.Topics {
			if tp.Topic != nil && *tp.Topic == "primary-only" {
				t.Fatalf("the late instance's route led to the primary after the switch")
			}
			if tp.Topic != nil && *tp.Topic == topic && tp.TopicID != srcTopics[topic].ID {
				t.Fatalf("the late instance's route shows %s with id %x, its clients were given the primary's %x", topic, tp.TopicID, srcTopics[topic].ID)
			}
		}
		return true
	})
	if st := late.Proxy.Routes(); st[0].Upstream != "standby" || !st[0].Open {
		t.Fatalf("the late instance's route: %+v", st[0])
	}
	t.Logf("the late instance's route refused %d connections before it applied the switch", refused)
}

// describeRoute is the route as `kmirror mirrors --describe --json` shows it.
func describeRoute(t *testing.T, ctx context.Context, in *instance.Instance, route string) mirrorcli.RouteJSON {
	t.Helper()
	out := mirrorsCLI(t, ctx, in, "--describe", "--json")
	var d mirrorcli.DescribeJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("describe --json: %v\n%s", err, out)
	}
	for _, r := range d.Routes {
		if r.Name == route {
			return r
		}
	}
	t.Fatalf("describe shows no route %s: %s", route, out)
	return mirrorcli.RouteJSON{}
}

// mirrorsCLI runs `kmirror mirrors` with args against the instance and returns what it
// printed; an error fails the test.
func mirrorsCLI(t *testing.T, ctx context.Context, in *instance.Instance, args ...string) string {
	t.Helper()
	out, errOut, err := mirrorsCLIErr(ctx, in, args...)
	if err != nil {
		t.Fatalf("kmirror mirrors %v: %v (%s)", args, err, errOut)
	}
	return out
}

// mirrorsCLIErr runs `kmirror mirrors` with args against the instance and returns what it
// printed and its error.
func mirrorsCLIErr(ctx context.Context, in *instance.Instance, args ...string) (string, string, error) {
	var out, errOut strings.Builder
	err := mirrorcli.Mirrors(ctx, append([]string{"--bootstrap-server", in.Proxy.Addr()}, args...), &out, &errOut)
	return out.String(), errOut.String(), err
}

// routeMetadata asks a route for the metadata of every topic on a connection of its own.
func routeMetadata(ctx context.Context, addr string) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RetryTimeout(time.Second), kgo.RequestRetries(0))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return req.RequestWith(rctx, cl)
}

// startRouteWorld starts a primary and a standby cluster and an instance in front of the
// standby with route "app" leading to the primary, and mirrors topics (created with 3
// partitions) from the primary with mirror "dr".
func startRouteWorld(t *testing.T, ctx context.Context, topics ...string) (primary, standby *kafkatest.Cluster, in *instance.Instance) {
	t.Helper()
	primary, standby = kafkatest.Start(t), kafkatest.Start(t)
	in = instancetest.Start(t, standby, nil, func(c *instance.Config) {
		c.Proxy.Routes = []proxy.RouteConfig{{Name: "app", Listen: "127.0.0.1:0", Mirror: "dr",
			Primary: proxy.RouteUpstream{Bootstrap: primary.Bootstrap()}}}
	})
	for _, topic := range topics {
		primary.CreateKeptTopic(t, topic, 3)
	}
	createMirror(t, ctx, in, primary, "dr", topics...)
	return primary, standby, in
}

// switchRoute runs `kmirror mirrors` with args (a --switch of route app) and waits until
// the switch record says SWITCHED; a rollback fails the test.
func switchRoute(t *testing.T, ctx context.Context, in *instance.Instance, args ...string) *statetopic.RouteSwitch {
	t.Helper()
	return switchRouteAttempt(t, ctx, in, 1, args...)
}

// switchRouteAttempt is switchRoute of the route's attempt-th switch.
func switchRouteAttempt(t *testing.T, ctx context.Context, in *instance.Instance, attempt int, args ...string) *statetopic.RouteSwitch {
	t.Helper()
	if out := mirrorsCLI(t, ctx, in, args...); !strings.Contains(out, fmt.Sprintf("switch of route app (attempt %d)", attempt)) {
		t.Fatalf("kmirror mirrors %v said %q", args, out)
	}
	var rec *statetopic.RouteSwitch
	polltest.Eventually(t, 3*time.Minute, "the switch completes", func() (bool, string) {
		in.Coord.Store().Read(func(v *statetopic.View) { rec = v.RouteSwitch("app") })
		if rec == nil {
			return false, "no record"
		}
		if rec.Step == statetopic.RouteRolledBack {
			t.Fatalf("the switch rolled back: %s", rec.Reason)
		}
		return rec.Step == statetopic.RouteSwitched && rec.Attempt == int32(attempt), rec.Step.String() + " " + rec.Reason
	})
	return rec
}

// freezeBesides is how long a switch's writes were frozen (from FREEZING to SWITCHED), less the
// time spent in step skip.
func freezeBesides(r *statetopic.RouteSwitch, skip statetopic.RouteStep) time.Duration {
	var ms int64
	for i, s := range r.Steps {
		if i+1 < len(r.Steps) && s.Step != skip && s.Step != statetopic.RouteSwitched {
			ms += r.Steps[i+1].AtMs - s.AtMs
		}
	}
	return time.Duration(ms) * time.Millisecond
}

func stepsOf(r *statetopic.RouteSwitch) string {
	var out []string
	for i, s := range r.Steps {
		d := ""
		if i+1 < len(r.Steps) {
			d = fmt.Sprintf(" %dms", r.Steps[i+1].AtMs-s.AtMs)
		}
		out = append(out, s.Step.String()+d)
	}
	return strings.Join(out, ", ")
}

// createMirror creates a mirror from primary through the instance's RPCs and
// adds topics to it.
func createMirror(t *testing.T, ctx context.Context, in *instance.Instance, primary *kafkatest.Cluster, name string, topics ...string) {
	t.Helper()
	createMirrorFrom(t, ctx, in, primary.BootstrapString(), name, topics...)
}

// createMirrorFrom is createMirror from the source at bootstrap (a cluster, or a kmirror in
// front of one).
func createMirrorFrom(t *testing.T, ctx context.Context, in *instance.Instance, bootstrap, name string, topics ...string) {
	t.Helper()
	cl := kafkatest.NewClient(t, []string{in.Proxy.Addr()}, kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	create := protocol.NewPtrCreateMirrorRequest()
	create.MirrorName = name
	for k, v := range map[string]string{"bootstrap.servers": bootstrap, "metadata.refresh.interval.ms": "1000"} {
		create.Configs = append(create.Configs, protocol.CreateMirrorRequestConfig{Name: k, Value: kmsg.StringPtr(v)})
	}
	resp, err := cl.Request(ctx, create)
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.(*protocol.CreateMirrorResponse); r.ErrorCode != 0 {
		t.Fatalf("create mirror %s: %d %v", name, r.ErrorCode, r.ErrorMessage)
	}
	add := protocol.NewPtrAddTopicsToMirrorRequest()
	add.MirrorName = name
	for _, tp := range topics {
		add.Topics = append(add.Topics, protocol.AddTopicsToMirrorRequestTopic{Name: tp, NumPartitions: -1})
	}
	resp, err = cl.Request(ctx, add)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.(*protocol.AddTopicsToMirrorResponse)
	for _, tr := range r.Topics {
		if r.ErrorCode != 0 || tr.ErrorCode != 0 {
			t.Fatalf("add %s to %s: %v %v", tr.Name, name, r.ErrorMessage, tr.ErrorMessage)
		}
	}
}
