package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/apptest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
)

// TestRouteSwitchBackDriverKilledAtSteps is TestRouteSwitchDriverKilledAtEachStep for a switch
// back (docs/cutover.md, "Switching back"), in the steps whose work differs from a switch to
// the standby: the drain (the standby's log ends, the primary's as the progress), the group
// copy (to the primary), the failover (the primary's kmirror's) and the switch itself (the
// route led back). A kmirror process in front of the primary holds the mirrors back; the
// routes and their mirrors reach the primary through it. For each step a route is switched to
// the standby with its application running, the mirror back is created on the primary's
// kmirror, and the switch back's driver is SIGKILLed in the middle of the step and restarted
// at once; the other instance completes the switch back or rolls it back (then it is asked
// for again). Then the application's checks on the primary: every record acknowledged across
// both switches there once and in order, the group read each once, nobody restarted.
func TestRouteSwitchBackDriverKilledAtSteps(t *testing.T) {
	kafkatest.RequireReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	binLater := instancetest.BinaryWithTestHooksLater(t)
	primary, standby := kafkatest.Start(t), kafkatest.Start(t)
	steps := []statetopic.RouteStep{statetopic.RouteDraining, statetopic.RouteGroupsCopy, statetopic.RouteFailingOver, statetopic.RouteSwitching}
	var pauses []string
	for _, s := range steps {
		primary.CreateKeptTopic(t, stepRoute(s), 2)
		pauses = append(pauses, stepRoute(s)+":"+s.String()+":2") // the switch back, the route's second
	}
	env := []string{"KMIRROR_TEST_PAUSE_SWITCH=" + strings.Join(pauses, ",")}
	bin := binLater(t)
	atPrimary := startProcessWith(t, bin, "p", primary, []string{"--log-level", "info"}, nil)
	w := &routeKillWorld{ctx: ctx, primary: primary, standby: standby, primaryAddr: []string{atPrimary.addr}}
	w.start(t, bin, env, steps)
	cl := admin(t, w.procs[0].addr)
	for _, s := range steps {
		createMirror(t, cl, stepRoute(s), "bootstrap.servers", atPrimary.addr, "metadata.refresh.interval.ms", "1000")
		addTopics(t, cl, stepRoute(s), stepRoute(s))
	}
	for _, step := range steps {
		route := stepRoute(step)
		t.Run(route, func(t *testing.T) {
			w.killBackDriverIn(t, atPrimary, slices.Index(steps, step), route, step)
		})
	}
}

// killBackDriverIn runs an application on route (the i-th), switches the route to the
// standby, creates the mirror back on the primary's kmirror, switches the route back and
// kills the switch back's driver where it paused in step, restarts it, waits for the survivor
// to end the switch back (asking again if it rolled back) and checks the application.
func (w *routeKillWorld) killBackDriverIn(t *testing.T, atPrimary *process, i int, route string, step statetopic.RouteStep) {
	t.Helper()
	ctx := w.ctx
	// A short session: the members the first switch leaves on the primary are gone before the
	// switch back copies the group's offsets there (docs/cutover.md, "Switching back", 5).
	app := apptest.StartWith(t, ctx, []string{fmt.Sprintf("%s:%d", w.lb.Host, w.lb.Routes[i].Bootstrap)}, route, "group-"+route,
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond))
	polltest.Until(t, time.Minute, route+"'s application writes and reads through the route", func() bool { return app.Read() > 100 })
	app.AwaitCommitted(t, ctx, w.primary, 100)
	if out := mirrorsOf(t, ctx, w.procs[0].addr, "--switch", "--route", route); !strings.Contains(out, "(attempt 1)") {
		t.Fatalf("the switch of %s: %q", route, out)
	}
	if rec := awaitSwitchEnd(t, ctx, w.procs[0].addr, route); rec.Step != statetopic.RouteSwitched.String() || rec.Upstream != "standby" {
		t.Fatalf("%s's switch to the standby ended %s: %s", route, rec.Step, rec.Reason)
	}

	// The failback on the primary's kmirror, from either instance in front of the standby.
	back := "back-" + route
	pcl := admin(t, atPrimary.addr)
	createMirror(t, pcl, back, "bootstrap.servers", w.procs[0].addr+","+w.procs[1].addr, "metadata.refresh.interval.ms", "1000")
	addTopics(t, pcl, back, route)
	adm := kadm.NewClient(w.primary.Client(t))
	polltest.Until(t, time.Minute, "the group's members left on the primary are gone", func() bool {
		d, err := adm.DescribeGroups(ctx, "group-"+route)
		return err == nil && d["group-"+route].Err == nil && len(d["group-"+route].Members) == 0
	})

	began := time.Now()
	if out := mirrorsOf(t, ctx, w.procs[0].addr, "--switch", "--route", route); !strings.Contains(out, "(attempt 2)") {
		t.Fatalf("the switch back of %s: %q", route, out)
	}
	w.killPausedDriver(t, route, step, began, 2, "standby", "primary")
	app.Verify(t, ctx, w.standby, w.primary, 100)
}
