package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/apptest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/mirrorcli"
)

// TestRouteSwitchDriverKilledAtEachStep is issue 21's "an instance SIGKILLed in the middle
// of each switch step" (docs/cutover.md): two kmirror processes serve the same routes in
// front of the standby, one route per step of a planned switch, each with its mirror, its
// topic and an application (a producer and a consumer group bootstrapped to the route's
// address on the load balancer in front of both instances, docs/deploy.md). For each step in turn the operator switches that step's
// route; its driver (a binary built with the kmirror_testhooks tag) pauses once it has
// written the step's record and started the step's actions, and is killed with SIGKILL
// there. The other instance takes the switch over and completes it or rolls it back; the
// killed one restarts at once. A rolled-back switch is asked for again. Then the
// application's checks, the same as for an undisturbed switch: every acknowledged record is
// on the standby once and in order, the group read each once, nobody was restarted or
// reconfigured.
func TestRouteSwitchDriverKilledAtEachStep(t *testing.T) {
	kafkatest.RequireReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	binLater := instancetest.BinaryWithTestHooksLater(t)
	primary, standby := kafkatest.Start(t), kafkatest.Start(t)
	steps := []statetopic.RouteStep{statetopic.RouteFreezing, statetopic.RouteTxnWait, statetopic.RouteDraining,
		statetopic.RouteGroupsQuiet, statetopic.RouteGroupsCopy, statetopic.RouteFailingOver, statetopic.RouteSwitching}
	var pauses []string
	for _, s := range steps {
		primary.CreateKeptTopic(t, stepRoute(s), 2)
		pauses = append(pauses, stepRoute(s)+":"+s.String())
	}
	env := []string{"KMIRROR_TEST_PAUSE_SWITCH=" + strings.Join(pauses, ",")}
	bin := binLater(t)
	w := &routeKillWorld{ctx: ctx, primary: primary, standby: standby}
	w.start(t, bin, env, steps)
	cl := admin(t, w.procs[0].addr)
	for _, s := range steps {
		createMirror(t, cl, stepRoute(s), "bootstrap.servers", primary.BootstrapString(), "metadata.refresh.interval.ms", "1000")
		addTopics(t, cl, stepRoute(s), stepRoute(s))
	}

	for _, step := range steps {
		route := stepRoute(step)
		t.Run(route, func(t *testing.T) { // -run TestRouteSwitchDriverKilledAtEachStep/at-freezing: one step
			i := slices.Index(steps, step)
			w.killDriverIn(t, i, route, step)
		})
	}
}

// stepRoute names the route whose switch is killed in step s: one route per step.
func stepRoute(s statetopic.RouteStep) string {
	return "at-" + strings.ToLower(strings.ReplaceAll(s.String(), "_", "-"))
}

// routeKillWorld is what every step of TestRouteSwitchDriverKilledAtEachStep shares: the
// clusters, the routes' load balancer and the two kmirror processes behind it.
type routeKillWorld struct {
	ctx              context.Context
	primary, standby *kafkatest.Cluster
	// primaryAddr is where the routes and their mirrors reach the primary (nil: the primary's
	// brokers; a switch back needs a kmirror in front of it).
	primaryAddr []string
	lb          routeLayout
	balancer    *haproxy
	procs       []*process
}

// start runs the two kmirror processes (bin, with env) serving a route per step, and the
// load balancer in front of them, and waits until the balancer sees every instance of
// every route up.
func (w *routeKillWorld) start(t *testing.T, bin string, env []string, steps []statetopic.RouteStep) {
	t.Helper()
	// The routes' load balancer (docs/deploy.md, "Routes behind the load balancer"): each
	// instance serves every route on the same ports of its own address, and HAProxy in front
	// gives the applications one address per route and per broker, whichever instance is
	// alive. Without it each instance's route named its own ports, and a group whose
	// coordinator connection went through the killed instance could not dial it again:
	// franz-go ended the group session and read again what it had not committed.
	lb := routeBalancer(t, []string{"127.0.0.12", "127.0.0.13"}, "127.0.0.11", len(steps), w.primary, w.standby)
	for j, s := range steps {
		lb.Routes[j].Name = stepRoute(s)
	}
	procs := make([]*process, 2)
	for i, name := range []string{"a", "b"} {
		host := lb.Instances[i]
		cfg := "routes:\n"
		for j, s := range steps {
			r := lb.Routes[j]
			cfg += fmt.Sprintf("  - {name: %s, listen: \"%s:%d\", advertised_host: %s, broker_port_base: %d, broker_port_count: %d, mirror: %s, primary: {bootstrap: [%s]}}\n",
				stepRoute(s), host, r.Bootstrap, lb.Host, r.BrokerFirst, r.BrokerLast-r.BrokerFirst+1, stepRoute(s), strings.Join(w.primaryAddrs(), ", "))
		}
		path := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		// Info: a failure keeps each log, and the switch's steps are logged at info.
		// No PROXY protocol (docs/deploy.md has it): it would apply to the instance's own
		// listener too, which the test reaches directly.
		procs[i] = startProcessWith(t, bin, name, w.standby, []string{"--config", path, "--log-level", "info",
			"--metrics-addr", fmt.Sprintf("%s:%d", host, lb.Metrics)}, env)
	}
	balancer := startHAProxyWith(t, routeHAProxyConfig(lb), lb.Socket)
	allUp := map[string]string{}
	for _, s := range steps {
		for i := range procs {
			allUp[fmt.Sprintf("%s/kmirror-%d", stepRoute(s), i+1)] = "UP L7OK"
		}
	}
	balancer.waitStatus(t, allUp)
	w.lb, w.balancer, w.procs = lb, balancer, procs
}

// primaryAddrs is where the routes and their mirrors reach the primary.
func (w *routeKillWorld) primaryAddrs() []string {
	if w.primaryAddr != nil {
		return w.primaryAddr
	}
	return w.primary.Bootstrap()
}

// killDriverIn runs an application on route (the i-th), switches the route, kills its
// driver where it paused in step and restarts it, waits for the survivor to end the switch
// (asking again if it rolled back) and checks the application.
func (w *routeKillWorld) killDriverIn(t *testing.T, i int, route string, step statetopic.RouteStep) {
	t.Helper()
	ctx := w.ctx
	app := apptest.Start(t, ctx, []string{fmt.Sprintf("%s:%d", w.lb.Host, w.lb.Routes[i].Bootstrap)}, route, "group-"+route)
	polltest.Until(t, time.Minute, route+"'s application writes and reads through the route", func() bool { return app.Read() > 100 })
	// Steady state first: in one CI run a group killed before its first commit
	// landed re-read its first 126 records (from offset 0) after rejoining.
	app.AwaitCommitted(t, ctx, w.primary, 100)
	began := time.Now()
	if out := mirrorsOf(t, ctx, w.procs[0].addr, "--switch", "--route", route); !strings.Contains(out, "(attempt 1)") {
		t.Fatalf("the switch of %s: %q", route, out)
	}
	w.killPausedDriver(t, route, step, began, 1, "primary", "standby")
	app.Verify(t, ctx, w.primary, w.standby, 100)
}

// killPausedDriver kills route's driver where it paused in step of the route's attempt-th
// switch (asked at began, from upstream from to upstream to) and restarts it at once, waits
// for the other instance to end the switch, and, when it rolled back (only before the
// failover, leading to from), asks for it again; the switch must end leading to to.
func (w *routeKillWorld) killPausedDriver(t *testing.T, route string, step statetopic.RouteStep, began time.Time, attempt int32, from, to string) {
	t.Helper()
	ctx := w.ctx
	killed, survivor := pausedDriver(t, w.procs, route, step)
	killed.kill()
	killedAt := time.Now()
	killed.start()
	defer noConnectionsBeforeOpen(t, killed)
	rec := awaitSwitchEnd(t, ctx, survivor.addr, route)
	redispatched, err := w.balancer.redispatches(route)
	if err != nil {
		redispatched = err.Error()
	}
	t.Logf("%s: the driver (%s) of switch %d killed in %s %s after the request; the switch %s %s after the kill: %s (connections the balancer redispatched so far: %s)",
		route, killed.name, attempt, step, killedAt.Sub(began).Round(time.Millisecond), strings.ToLower(rec.Step),
		time.Since(killedAt).Round(time.Millisecond), rec.Reason, redispatched)
	if rec.Step == statetopic.RouteRolledBack.String() {
		if step >= statetopic.RouteFailingOver {
			t.Fatalf("%s: rolled back after the failover began (%s): only forward from FAILING_OVER", route, rec.Reason)
		}
		// Rolled back consistently: the route still leads where it did, writable.
		if rec.Upstream != from {
			t.Fatalf("%s rolled back leading to %s", route, rec.Upstream)
		}
		if out := mirrorsOf(t, ctx, survivor.addr, "--switch", "--route", route); !strings.Contains(out, fmt.Sprintf("(attempt %d)", attempt+1)) {
			t.Fatalf("the switch of %s asked again: %q", route, out)
		}
		if rec = awaitSwitchEnd(t, ctx, survivor.addr, route); rec.Step != statetopic.RouteSwitched.String() {
			t.Fatalf("%s's switch asked again ended %s: %s", route, rec.Step, rec.Reason)
		}
	}
	if rec.Upstream != to {
		t.Fatalf("%s switched, leading to %s", route, rec.Upstream)
	}
}

// noConnectionsBeforeOpen fails t when the restarted instance p took a connection on a route
// before it opened it. Routes that held such connections unread had the balancer shut them
// down before their first answer when it marked the rejoining instance down, and a franz-go
// group member whose heartbeat was among them ended its session and read records again (CI,
// 2026-12-07; proxy/route_gate.go). The log is the restarted process's own, at info.
func noConnectionsBeforeOpen(t *testing.T, p *process) {
	t.Helper()
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	open := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		route := logField(l, "route")
		switch {
		case route == "":
		case strings.Contains(l, `msg="route open`):
			open[route] = true
		case strings.Contains(l, `msg="connection closed"`) && !open[route]:
			t.Errorf("kmirror %s took a connection on route %s before it opened the route: %s", p.name, route, l)
		}
	}
}

// logField is the value of key in a text log line ("" when absent).
func logField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// pausedDriver waits until one of procs logs that it paused as route's driver in step
// (instance/routedrive_pause.go), and returns it and the other one.
func pausedDriver(t *testing.T, procs []*process, route string, step statetopic.RouteStep) (paused, other *process) {
	t.Helper()
	line := fmt.Sprintf("route=%s step=%s", route, step)
	polltest.Eventually(t, time.Minute, route+"'s driver pauses in "+step.String(), func() (bool, string) {
		for i, p := range procs {
			b, _ := os.ReadFile(p.logPath)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "test hook") && strings.Contains(l, line) {
					paused, other = p, procs[1-i]
					return true, ""
				}
			}
		}
		return false, "no instance paused yet"
	})
	return paused, other
}

// awaitSwitchEnd polls describe at addr until route's switch is SWITCHED or ROLLED_BACK.
func awaitSwitchEnd(t *testing.T, ctx context.Context, addr, route string) mirrorcli.RouteJSON {
	t.Helper()
	var r mirrorcli.RouteJSON
	polltest.Eventually(t, 2*time.Minute, route+"'s switch ends", func() (bool, string) {
		var out, errOut strings.Builder
		if err := mirrorcli.Mirrors(ctx, []string{"--bootstrap-server", addr, "--describe", "--json"}, &out, &errOut); err != nil {
			return false, fmt.Sprintf("describe: %v %s", err, errOut.String())
		}
		var d mirrorcli.DescribeJSON
		if err := json.Unmarshal([]byte(out.String()), &d); err != nil {
			t.Fatalf("describe --json: %v\n%s", err, out.String())
		}
		for _, x := range d.Routes {
			if x.Name == route {
				r = x
			}
		}
		return r.Step == statetopic.RouteSwitched.String() || r.Step == statetopic.RouteRolledBack.String(),
			fmt.Sprintf("%s attempt %d driver %s: %s", r.Step, r.Attempt, r.Driver, r.Reason)
	})
	return r
}

// mirrorsOf runs `kmirror mirrors` with args against addr and returns what it printed.
func mirrorsOf(t *testing.T, ctx context.Context, addr string, args ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	if err := mirrorcli.Mirrors(ctx, append([]string{"--bootstrap-server", addr}, args...), &out, &errOut); err != nil {
		t.Fatalf("kmirror mirrors %v: %v (%s)", args, err, errOut.String())
	}
	return out.String()
}
