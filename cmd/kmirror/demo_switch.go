package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/mirrorcli"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// `kmirror demo --switch` (issue 21's acceptance: a `make run` variant that
// switches while a producer and a consumer run) shows the zero-touch
// cut-over of docs/cutover.md on the embedded clusters: an application
// bootstraps to a route of kmirror, which leads to the source (the primary)
// until the operator's switch and to the destination (the standby) after it;
// the application is never reconfigured or restarted. At the end the demo
// checks what the switch promises and fails (non-zero exit) if it did not
// hold, so a test can rely on it.

const (
	demoRoute = "app"      // the route's name, as the operator's command names it
	demoGroup = "demo-app" // the application's consumer group
	demoTopic = "demo"     // the mirrored topic; the mirror has the same name
)

// Bounds of the phases after the warm-up: a planned switch rolls back or
// completes within its steps' bounds (docs/cutover.md: 10 s acks, 60 s
// drain, 30 s quiet groups, ...), and the checks at the end only wait for
// records already acknowledged.
const (
	switchWait  = 3 * time.Minute
	verdictWait = time.Minute
	routeWait   = 30 * time.Second
)

// switchFlags are the flags of `kmirror demo` that --switch uses.
type switchFlags struct {
	enabled     bool
	after       time.Duration
	routeListen string
}

func (s *switchFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.enabled, "switch", false,
		"run an application through a route and switch the route from the source to the destination while it runs")
	fs.DurationVar(&s.after, "switch-after", 10*time.Second, "with --switch: ask for the switch after this long")
	fs.StringVar(&s.routeListen, "route-listen", "127.0.0.1:19192",
		"with --switch: the route's bootstrap address, the only address the application knows")
}

// check refuses flags with which the demo could not show a switch.
func (s switchFlags) check(duration time.Duration) error {
	if s.after <= 0 {
		return fmt.Errorf("--switch-after %s: want a positive duration", s.after)
	}
	if duration > 0 && duration <= s.after {
		return fmt.Errorf("--duration %s ends before --switch-after %s: the switch would never be asked for", duration, s.after)
	}
	return nil
}

// switchResult is how the switch ended: its last record (nil if none was
// read) or why it could not be followed.
type switchResult struct {
	rec *statetopic.RouteSwitch
	err error
	// ackedAtSwitch is the application's acknowledged count when the demo saw
	// SWITCHED (-1: it did not): the records acknowledged after it went
	// through the standby.
	ackedAtSwitch int
}

// runSwitch is `kmirror demo --switch`.
func (d *demo) runSwitch(ctx context.Context, out io.Writer, sw switchFlags, duration time.Duration) error {
	con, warnings := &console{w: out}, &warnLog{}
	runCtx, stop, err := d.startSwitchWorld(ctx, sw, warnings)
	if err != nil {
		return err
	}
	defer stop()
	routeAddr, err := d.awaitRoute(runCtx)
	if err != nil {
		return err
	}
	app, err := startApp(runCtx, routeAddr, d.rate)
	if err != nil {
		return err
	}
	defer app.close()
	d.switchBanner(con, routeAddr, sw.after)

	appCtx, stopApp := context.WithCancel(ctx) // Ctrl-C ends the application
	defer stopApp()
	if duration > 0 {
		var stopTimer context.CancelFunc
		appCtx, stopTimer = context.WithTimeout(appCtx, duration)
		defer stopTimer()
	}
	switched := make(chan switchResult, 1)
	go func() { switched <- d.switchAfter(appCtx, runCtx, con, app, sw.after, warnings) }()
	d.showApp(appCtx, con, app)
	con.event("%s  stopping the application; waiting for the switch to end, then checking", clock(time.Now()))
	res := <-switched
	return d.finish(runCtx, con, app, res, warnings)
}

// startSwitchWorld starts the clusters, kmirror with the route (logging its
// warnings to warnings) and the mirror. kmirror runs on runCtx, which
// outlives Ctrl-C and --duration (they end the application only): the
// checks at the end still read through it. stop stops kmirror, then the
// clusters.
func (d *demo) startSwitchWorld(ctx context.Context, sw switchFlags, warnings *warnLog) (runCtx context.Context, stop func(), err error) {
	d.log = slog.New(slog.NewTextHandler(warnings, &slog.HandlerOptions{Level: slog.LevelWarn}))
	stopClusters, err := d.startClusters()
	if err != nil {
		return nil, nil, err
	}
	d.routes = []proxy.RouteConfig{{Name: demoRoute, Listen: sw.routeListen, Mirror: demoTopic,
		Primary: proxy.RouteUpstream{Bootstrap: d.src.ListenAddrs()}}}
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	runDone, err := d.startKmirror(runCtx)
	if err != nil {
		stopRun()
		stopClusters()
		return nil, nil, err
	}
	stop = func() {
		stopRun()
		<-runDone
		stopClusters()
	}
	if err := d.createDemoMirror(runCtx); err != nil {
		stop()
		return nil, nil, err
	}
	return runCtx, stop, nil
}

// createDemoMirror creates the mirror "demo" of topic "demo" through
// kmirror's RPCs, as the plain demo does.
func (d *demo) createDemoMirror(ctx context.Context) error {
	adminCl, err := kgo.NewClient(kgo.SeedBrokers(d.in.Proxy.Addr()), kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	if err != nil {
		return fmt.Errorf("client of kmirror: %w", err)
	}
	defer adminCl.Close()
	return setUpMirror(ctx, adminCl, strings.Join(d.src.ListenAddrs(), ","))
}

// awaitRoute waits until the route takes connections (an instance keeps its
// routes closed until it has applied their switch state) and returns its
// bootstrap address.
func (d *demo) awaitRoute(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, routeWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if st := d.in.Proxy.Routes(); len(st) == 1 && st[0].Open {
			return d.in.Proxy.RouteAddr(demoRoute), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("route %s did not open within %s", demoRoute, routeWait)
		case <-tick.C:
		}
	}
}

// routeUpstream is where the route leads now: "primary" or "standby".
func (d *demo) routeUpstream() string {
	if st := d.in.Proxy.Routes(); len(st) == 1 {
		return st[0].Upstream
	}
	return "?"
}

// routeSwitch is the route's switch record in this instance's view (nil:
// none yet).
func (d *demo) routeSwitch() *statetopic.RouteSwitch {
	var rec *statetopic.RouteSwitch
	d.in.Coord.Store().Read(func(v *statetopic.View) { rec = v.RouteSwitch(demoRoute) })
	return rec
}

func (d *demo) switchBanner(con *console, routeAddr string, after time.Duration) {
	addr := d.in.Proxy.Addr()
	con.event(`kmirror demo --switch
  source cluster (embedded, the primary):     %s   topic "demo", %d partitions
  destination cluster (embedded, the standby): %s
  kmirror (in front of the destination):      %s   mirror "demo" copies topic "demo"
  route "app" (the application's address):    %s
  metrics: http://%s/metrics   status page: http://%[6]s/

The application bootstraps to the route only: a franz-go idempotent producer (acks=all, ~%d
records/s) and a franz-go consumer group "demo-app" (auto-commit every second). The route leads
to the source (primary) until the switch, then to the destination (standby). Nobody is
restarted or reconfigured. After %s the demo asks for the planned switch as an operator would:
  bin/kmirror mirrors --bootstrap-server %s --switch --route app
and prints each step as the switch record in __mirror_state reaches it.

Try, in another terminal (make run built bin/kmirror):
  bin/kmirror mirrors --bootstrap-server %s --describe   (the route table: upstream, step, timings)
  kcat -b %s -C -t demo -o beginning -c 100 -q -E | wc -l   (read through the route, as the app does)
The live line: where the route leads, records acknowledged to the producer (and in flight),
consumed by the group, consumed twice (dup) and skipped (missing). --duration or Ctrl-C stops
the application; the demo then checks that every acknowledged record was consumed exactly once
and in order, and is on the destination cluster once, at the offset it was acknowledged at.
`, strings.Join(d.src.ListenAddrs(), ","), d.partitions, strings.Join(d.dst.ListenAddrs(), ","), addr, routeAddr,
		d.in.Proxy.MetricsAddr(), d.rate, after, addr, addr, routeAddr)
}

// showApp redraws the application's live line every second until ctx ends.
func (d *demo) showApp(ctx context.Context, con *console, app *demoApp) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			con.status(app.counts().line(d.routeUpstream()))
		}
	}
}

// switchAfter waits for the warm-up, asks for the switch with the
// operator's command and follows it to its end. The warm-up ends early
// with appCtx (no switch is asked for then); the switch, once asked for, is
// followed on runCtx, since it goes on whatever the application does.
func (d *demo) switchAfter(appCtx, runCtx context.Context, con *console, app *demoApp, after time.Duration, warnings *warnLog) switchResult {
	warmUp := time.NewTimer(after)
	defer warmUp.Stop()
	select {
	case <-appCtx.Done():
		return switchResult{err: errors.New("the application stopped before --switch-after: no switch was asked for"), ackedAtSwitch: -1}
	case <-warmUp.C:
	}
	args := []string{"--bootstrap-server", d.in.Proxy.Addr(), "--switch", "--route", demoRoute}
	con.event("%s  $ bin/kmirror mirrors %s", clock(time.Now()), strings.Join(args, " "))
	var cliOut, cliErr strings.Builder
	if err := mirrorcli.Mirrors(runCtx, args, &cliOut, &cliErr); err != nil {
		return switchResult{err: fmt.Errorf("kmirror mirrors --switch: %w %s", err, strings.TrimSpace(cliErr.String())), ackedAtSwitch: -1}
	}
	for _, l := range strings.Split(strings.TrimSpace(cliOut.String()), "\n") {
		con.event("%s    %s", clock(time.Now()), l)
	}
	rec, err := d.followSwitch(runCtx, con)
	res := switchResult{rec: rec, err: err, ackedAtSwitch: -1}
	switch {
	case rec != nil && rec.Step == statetopic.RouteSwitched:
		res.ackedAtSwitch = app.counts().acked
	case rec != nil && rec.Step == statetopic.RouteRolledBack:
		printWarnings(con, warnings)
	}
	return res
}

// followSwitch polls the route's switch record and prints every step it
// reaches, until a final one (SWITCHED, ROLLED_BACK).
func (d *demo) followSwitch(ctx context.Context, con *console) (*statetopic.RouteSwitch, error) {
	ctx, cancel := context.WithTimeout(ctx, switchWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var f stepPrinter
	for {
		rec := d.routeSwitch()
		if rec != nil {
			f.print(con, rec)
			if rec.Step.Final() {
				return rec, nil
			}
		}
		select {
		case <-ctx.Done():
			return rec, fmt.Errorf("the switch did not end within %s (last step %s)", switchWait, stepOf(rec))
		case <-tick.C:
		}
	}
}

// stepPrinter prints the steps of a switch record that it has not printed
// yet (a poll may see several at once: each step is printed with the time
// the record gives it), and what a step waits for when that changes.
type stepPrinter struct {
	printed int
	reason  string
}

func (p *stepPrinter) print(con *console, rec *statetopic.RouteSwitch) {
	for ; p.printed < len(rec.Steps); p.printed++ {
		s := rec.Steps[p.printed]
		con.event("%s  switch: %-13s %s", clock(time.UnixMilli(s.AtMs)), s.Step, stepMeaning(s.Step, rec.Reason))
	}
	if rec.Reason != p.reason && !rec.Step.Final() && rec.Reason != "" {
		con.event("%s          %-13s %s", clock(time.Now()), "", rec.Reason)
	}
	p.reason = rec.Reason
	if rec.Step.Final() { // followSwitch stops at a final step: printed once
		con.event("%s  %s", clock(time.Now()), switchSummary(rec))
		con.event("%s  %s", clock(time.Now()), switchFacts(rec))
	}
}

// switchFacts is what the driver recorded: the source's log ends the drain
// waited for and the groups whose members the switched route waits for
// before it serves their fetches again.
func switchFacts(rec *statetopic.RouteSwitch) string {
	var ends, groups []string
	for _, t := range rec.DrainTargets {
		ends = append(ends, fmt.Sprintf("%s/%d=%d", t.Topic, t.Partition, t.Offset))
	}
	for _, g := range slices.Sorted(maps.Keys(rec.HeldGroups)) {
		n, members := rec.HeldGroups[g], "members"
		if n == 1 {
			members = "member"
		}
		groups = append(groups, fmt.Sprintf("%s (%d %s)", g, n, members))
	}
	return fmt.Sprintf("drained to the source's log ends %s; groups held until they rejoin: %s",
		orNone(ends), orNone(groups))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// stepMeaning says what a step does, in the demo's terms (docs/cutover.md,
// "The planned switch, step by step").
func stepMeaning(s statetopic.RouteStep, reason string) string {
	switch s {
	case statetopic.RouteFreezing:
		return "the route refuses writes to topic demo (the producer retries them); every instance acknowledges"
	case statetopic.RouteTxnWait:
		return "transactions open on the source finish or are aborted"
	case statetopic.RouteDraining:
		return "the mirror copies the source's last records to the destination"
	case statetopic.RouteGroupsQuiet:
		return "consumer groups read to the end and commit"
	case statetopic.RouteGroupsCopy:
		return "commits frozen; the groups' final offsets are copied to the destination"
	case statetopic.RouteFailingOver:
		return "topic demo fails over: writable on the destination"
	case statetopic.RouteSwitching:
		return "the route leads to the destination; its connections close and the clients reconnect"
	case statetopic.RouteSwitched:
		return "the application runs on the destination"
	case statetopic.RouteRolledBack:
		return "writes unfrozen, the route stays on the source: " + reason
	}
	return reason
}

// switchSummary is the switch's duration and write freeze as describe
// reports them (the same RouteSwitch.Timings), and each step's duration.
func switchSummary(rec *statetopic.RouteSwitch) string {
	t := rec.Timings(time.Now().UnixMilli())
	var steps []string
	for _, s := range t.Steps {
		steps = append(steps, fmt.Sprintf("%s %d ms", s.Step, s.Ms))
	}
	verb := "switched"
	if rec.Step == statetopic.RouteRolledBack {
		verb = "rolled back"
	}
	return fmt.Sprintf("%s in %d ms, writes frozen %d ms (%s)", verb, t.Total, t.Freeze, strings.Join(steps, ", "))
}

func stepOf(rec *statetopic.RouteSwitch) string {
	if rec == nil {
		return "none recorded"
	}
	if rec.Reason != "" {
		return rec.Step.String() + ": " + rec.Reason
	}
	return rec.Step.String()
}

// finish stops the application, reads the destination cluster directly and
// prints the verdict; a failed verdict is the error.
func (d *demo) finish(ctx context.Context, con *console, app *demoApp, res switchResult, warnings *warnLog) error {
	ctx, cancel := context.WithTimeout(ctx, verdictWait)
	defer cancel()
	stopErr := app.stop(ctx)
	onDest, readErr := readTopic(ctx, d.dst.ListenAddrs(), demoTopic)
	c := app.counts()
	upstream := d.routeUpstream()
	con.event("%s  route %s leads to the %s; %s", clock(time.Now()), demoRoute, upstream, c.summary(res.ackedAtSwitch))
	var problems []string
	for _, err := range []error{res.err, stopErr, readErr} {
		if err != nil {
			problems = append(problems, err.Error())
		}
	}
	problems = append(problems, switchProblems(res, upstream, c.acked)...)
	problems = append(problems, app.verdict(onDest)...)
	if len(problems) == 0 {
		con.event("verdict: PASS — every acknowledged record (%d) was consumed exactly once, in order, "+
			"and is on the destination cluster once, at the offset it was acknowledged at", c.acked)
		return nil
	}
	con.event("verdict: FAIL")
	for _, p := range problems {
		con.event("  - %s", p)
	}
	if res.rec == nil || res.rec.Step != statetopic.RouteRolledBack { // a rollback printed them already
		printWarnings(con, warnings)
	}
	return fmt.Errorf("demo --switch: %d check(s) failed: %s", len(problems), strings.Join(problems, "; "))
}

// switchProblems is what the switch itself did not do: complete, lead the
// route to the standby, and carry the application on.
func switchProblems(res switchResult, upstream string, acked int) []string {
	var out []string
	if res.rec != nil && res.rec.Step != statetopic.RouteSwitched {
		out = append(out, "the switch ended "+stepOf(res.rec))
	}
	if upstream != "standby" {
		out = append(out, "the route leads to the "+upstream+", not the standby")
	}
	if res.ackedAtSwitch >= 0 && acked <= res.ackedAtSwitch {
		out = append(out, "no record was acknowledged after the switch (a longer --duration lets the application go on)")
	}
	return out
}

func printWarnings(con *console, w *warnLog) {
	lines := w.lines()
	if len(lines) == 0 {
		con.event("kmirror logged no warnings")
		return
	}
	con.event("kmirror's warnings (the last %d):", len(lines))
	for _, l := range lines {
		con.event("  %s", l)
	}
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }
