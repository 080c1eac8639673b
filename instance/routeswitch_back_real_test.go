package instance_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/apptest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/proxy"
)

// TestRealRouteSwitchesBack: a route switched to the standby is switched back to its primary
// with the same command (docs/cutover.md, "Switching back"), on real Kafka, with a franz-go
// producer and consumer group running through the route the whole time. Each cluster has a
// kmirror in front of it, as a deployment that fails back has: the route's primary and its
// mirror's source are the primary's kmirror. After the first switch the operator creates the
// mirror back there (a failback: it continues from the first mirror's last mirrored offsets);
// the switch back finds that mirror, drains it, copies the group's offsets to the primary,
// has the primary's kmirror fail it over, and leads the route back. Every record the producer
// was acknowledged across both switches is on the primary once, in order; the group read each
// once; nobody restarted. Asked before there is a mirror back, the switch back is refused
// with what to do.
func TestRealRouteSwitchesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const topic, group = "orders", "billing"
	primary, standby := kafkatest.Start(t), kafkatest.Start(t)
	atPrimary := instancetest.Start(t, primary, nil)
	atStandby := instancetest.Start(t, standby, nil, func(c *instance.Config) {
		c.Proxy.Routes = []proxy.RouteConfig{{Name: "app", Listen: "127.0.0.1:0", Mirror: "dr",
			Primary: proxy.RouteUpstream{Bootstrap: []string{atPrimary.Proxy.Addr()}}}}
	})
	primary.CreateKeptTopic(t, topic, 3)
	createMirrorFrom(t, ctx, atStandby, atPrimary.Proxy.Addr(), "dr", topic)

	// The consumer's session is short so that the member the first switch leaves on the
	// primary is gone before the switch back copies the group's offsets there.
	app := apptest.StartWith(t, ctx, []string{atStandby.Proxy.RouteAddr("app")}, topic, group,
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond))
	polltest.Until(t, time.Minute, "records flow through the route and are consumed", func() bool { return app.Read() > 200 })
	rec := switchRoute(t, ctx, atStandby, "--switch", "--route", "app")
	t.Logf("switched to the standby: %s", stepsOf(rec))

	// No mirror back yet: refused, saying what to do.
	out, errOut, err := mirrorsCLIErr(ctx, atStandby, "--switch", "--route", "app")
	if err == nil || !strings.Contains(out+errOut+err.Error(), "no mirror on the primary's kmirror copies orders from the standby") {
		t.Fatalf("a switch back with no mirror back: %v %s %s", err, out, errOut)
	}

	// The failback: the primary's kmirror mirrors the standby's topic, from where the first
	// mirror stopped.
	acked := app.Acked()
	createMirrorFrom(t, ctx, atPrimary, atStandby.Proxy.Addr(), "back", topic)
	adm := kadm.NewClient(primary.Client(t))
	polltest.Until(t, 2*time.Minute, "the mirror back copies what the producer writes to the standby", func() bool {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n > int64(acked)+100
	})
	polltest.Until(t, time.Minute, "the group's members left on the primary are gone", func() bool {
		d, err := adm.DescribeGroups(ctx, group)
		return err == nil && d[group].Err == nil && len(d[group].Members) == 0
	})

	began := time.Now()
	rec = switchRouteAttempt(t, ctx, atStandby, 2, "--switch", "--route", "app")
	t.Logf("switched back in %s (write freeze from %s): %s", time.Since(began).Round(time.Millisecond),
		time.UnixMilli(rec.FreezeStartMs).UTC().Format("15:04:05.000"), stepsOf(rec))
	if rec.Upstream != statetopic.UpstreamPrimary || rec.BackMirror != "back" {
		t.Fatalf("the switch back's record: %+v", rec)
	}
	if st := atStandby.Proxy.Routes(); st[0].Upstream != "primary" {
		t.Fatalf("the route leads to %s after the switch back", st[0].Upstream)
	}
	app.Verify(t, ctx, standby, primary, 200)
}
