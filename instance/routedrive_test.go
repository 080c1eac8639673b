package instance

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/routeswitch"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/polltest"
)

// fakeSwitchActions is the primary and the standby as the driver sees them.
type fakeSwitchActions struct {
	mu      sync.Mutex
	ends    []statetopic.DrainTarget
	copied  map[routeswitch.TopicPartition]int64 // the standby's log ends
	open    int                                  // open transactions
	aborted int
	held    map[string]int
	// the standby's groups with offsets of the topics, and the topics asked for
	standbyHeld   map[string]int
	standbyTopics []string
	failedFor     []string // the mirrors failed over
	// the topics each failover was given
	failedTopics [][]string
	atRisk       int64 // describe's records at risk
	atRiskErr    error
	calls        []string
}

func (f *fakeSwitchActions) note(c string) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }

func (f *fakeSwitchActions) OpenTransactions(context.Context, string, []string) (int, error) {
	f.note("open-transactions")
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open, nil
}

func (f *fakeSwitchActions) AbortTransactions(context.Context, string, []string) error {
	f.note("abort")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aborted += f.open
	f.open = 0
	return nil
}

func (f *fakeSwitchActions) LogEnds(context.Context, string, []string) ([]statetopic.DrainTarget, error) {
	f.note("log-ends")
	return f.ends, nil
}

func (f *fakeSwitchActions) CopiedEnds(context.Context, string, []string) (map[routeswitch.TopicPartition]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[routeswitch.TopicPartition]int64{}
	for k, v := range f.copied {
		out[k] = v
	}
	return out, nil
}

func (f *fakeSwitchActions) Groups(context.Context, string, []string, []statetopic.DrainTarget) ([]routeswitch.GroupCommits, error) {
	f.note("groups")
	return []routeswitch.GroupCommits{{Name: "billing", AtLogEnd: true, Fingerprint: "a"}}, nil
}

func (f *fakeSwitchActions) CopyGroups(context.Context, string, []string) (map[string]int, error) {
	f.note("copy-groups")
	return f.held, nil
}

func (f *fakeSwitchActions) StandbyGroups(_ context.Context, _ string, topics []string) (map[string]int, error) {
	f.note("standby-groups")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.standbyTopics = topics
	return maps.Clone(f.standbyHeld), nil
}

func (f *fakeSwitchActions) FailOver(_ context.Context, mirror string, topics []string) (bool, error) {
	f.note("fail-over")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failedFor = append(f.failedFor, mirror)
	f.failedTopics = append(f.failedTopics, topics)
	return true, nil
}

func (f *fakeSwitchActions) RecordsAtRisk(context.Context, string) (int64, error) {
	f.note("records-at-risk")
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.atRisk, f.atRiskErr
}

type routeDriveWorld struct {
	*routeApplierWorld
	acts  *fakeSwitchActions
	d     *routeDriver
	owner atomic.Bool
}

// newRouteDriveWorld is one instance (member m-1) serving and driving route
// pay of mirror dr, its applier and driver running on a fake view.
func newRouteDriveWorld(t *testing.T) *routeDriveWorld {
	t.Helper()
	w := &routeDriveWorld{routeApplierWorld: newRouteApplierWorld(t)}
	w.owner.Store(true)
	w.acts = &fakeSwitchActions{
		ends:   []statetopic.DrainTarget{{Topic: "orders", Partition: 0, Offset: 100}, {Topic: "payments", Partition: 0, Offset: 7}},
		copied: map[routeswitch.TopicPartition]int64{{Topic: "orders", Partition: 0}: 100, {Topic: "payments", Partition: 0}: 7},
		held:   map[string]int{"billing": 2},
	}
	write := func(_ context.Context, recs ...coordinator.Record) error { w.view.put(recs...); return nil }
	w.d = newRouteDriver(w.view, write, func() string { return w.member }, func(string) bool { return w.owner.Load() },
		func(context.Context) ([]string, error) { return []string{w.member}, nil }, func() []string { return []string{"pay"} },
		func(string) string { return "dr" }, w.acts, slog.New(slog.DiscardHandler))
	w.d.policy.Poll = 20 * time.Millisecond
	w.a.retry = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.a.run(ctx) }()
	go func() { defer wg.Done(); w.d.run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

func (w *routeDriveWorld) current() *statetopic.RouteSwitch {
	var r *statetopic.RouteSwitch
	w.view.Read(func(v *statetopic.View) { r = v.RouteSwitch("pay") })
	return r
}

func (w *routeDriveWorld) awaitStep(t *testing.T, step statetopic.RouteStep) *statetopic.RouteSwitch {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, "the switch reaches "+step.String(), func() (bool, string) {
		r := w.current()
		if r == nil {
			return false, "no record"
		}
		return r.Step == step, r.Step.String() + ": " + r.Reason
	})
	return w.current()
}

// A planned switch driven end to end on one instance: the request starts
// it, the applier freezes and acks, open transactions are aborted after
// the transaction wait, the drain targets are recorded and reached, the
// groups copied and their holds recorded, the mirror failed over, and the
// applier switches the route with the hold; a second request meanwhile is
// refused, and one after it would switch back (no mirror that way).
func TestRouteDriverPlannedSwitch(t *testing.T) {
	w := newRouteDriveWorld(t)
	w.acts.open = 2
	w.d.policy.TxnWait = 100 * time.Millisecond
	ctx := context.Background()
	if err := w.d.Request(ctx, "pay", routeswitch.Request{Mirror: "dr", RecordsAtRisk: -1}); err != nil {
		t.Fatalf("request: %v", err)
	}
	err := w.d.Request(ctx, "pay", routeswitch.Request{Mirror: "dr", RecordsAtRisk: -1})
	if r := w.current(); r.Step.InProgress() && !errors.Is(err, routeswitch.ErrSwitchInProgress) {
		t.Fatalf("a second request during %s: %v", r.Step, err)
	}
	r := w.awaitStep(t, statetopic.RouteSwitched)
	if !reflect.DeepEqual(r.DrainTargets, w.acts.ends) || !reflect.DeepEqual(r.HeldGroups, map[string]int{"billing": 2}) ||
		r.Upstream != statetopic.UpstreamStandby || r.Driver != "m-1" {
		t.Fatalf("the SWITCHED record: %+v", r)
	}
	w.acts.mu.Lock()
	aborted, failed := w.acts.aborted, w.acts.failedFor
	w.acts.mu.Unlock()
	if aborted != 2 || len(failed) == 0 || failed[0] != "dr" {
		t.Fatalf("aborted %d transactions, failed over %v", aborted, failed)
	}
	w.routes.mu.Lock()
	switches := w.routes.switches
	freezes := len(w.routes.freezes)
	w.routes.mu.Unlock()
	if len(switches) != 1 || !reflect.DeepEqual(switches[0].Groups, map[string]int{"billing": 2}) || freezes != 2 {
		t.Fatalf("the proxy got %d freezes and switches %v", freezes, switches)
	}
	var steps []string
	for _, s := range r.Steps {
		steps = append(steps, s.Step.String())
	}
	if got := strings.Join(steps, " "); got != "FREEZING TXN_WAIT DRAINING GROUPS_QUIET GROUPS_COPY FAILING_OVER SWITCHING SWITCHED" {
		t.Fatalf("steps %s", got)
	}
	if err := w.d.Request(ctx, "pay", routeswitch.Request{RecordsAtRisk: -1}); !errors.Is(err, routeswitch.ErrNoMirror) {
		t.Fatalf("a switch back without a mirror that way: %v", err)
	}
}

// A drain that does not reach its targets rolls back within the drain
// timeout, naming the lagging partition, and the applier lifts the freeze.
// A request at an instance that does not own the route is refused.
func TestRouteDriverDrainTimeoutRollsBack(t *testing.T) {
	w := newRouteDriveWorld(t)
	w.d.policy.DrainTimeout = 300 * time.Millisecond
	w.acts.mu.Lock()
	w.acts.copied[routeswitch.TopicPartition{Topic: "orders", Partition: 0}] = 60
	w.acts.mu.Unlock()
	if err := w.d.Request(context.Background(), "pay", routeswitch.Request{Mirror: "dr", RecordsAtRisk: -1}); err != nil {
		t.Fatalf("request: %v", err)
	}
	r := w.awaitStep(t, statetopic.RouteRolledBack)
	if !strings.Contains(r.Reason, "orders/0 lags 40 records") {
		t.Fatalf("reason %q", r.Reason)
	}
	polltest.Until(t, 10*time.Second, "the applier lifts the freeze", func() bool {
		w.routes.mu.Lock()
		defer w.routes.mu.Unlock()
		n := len(w.routes.freezes)
		return n >= 2 && w.routes.freezes[n-1] == nil
	})

	w.owner.Store(false)
	if err := w.d.Request(context.Background(), "pay", routeswitch.Request{Mirror: "dr", RecordsAtRisk: -1}); !errors.Is(err, ErrNotRouteDriver) {
		t.Fatalf("a request at an instance that does not drive the route: %v", err)
	}
	if err := w.d.Request(context.Background(), "nope", routeswitch.Request{Mirror: "dr"}); err == nil || !strings.Contains(err.Error(), "no such route") {
		t.Fatalf("a request for a route this instance does not serve: %v", err)
	}
}

// A switch whose driver died mid-drain is taken over by the route's new
// owner: it writes itself as driver with the next term and completes the
// switch from the recorded drain targets.
func TestRouteDriverTakesOver(t *testing.T) {
	w := newRouteDriveWorld(t)
	w.owner.Store(false) // not yet: the record is written first
	now := time.Now().UnixMilli()
	w.view.put(coordinator.Record{Key: statetopic.RouteSwitchKey("pay"), Value: &statetopic.RouteSwitch{
		Route: "pay", Mirror: "dr", Step: statetopic.RouteDraining, Attempt: 1, DriverTerm: 1, Driver: "m-dead",
		Upstream: statetopic.UpstreamPrimary, Target: statetopic.UpstreamStandby, FreezeStartMs: now,
		Steps:        []statetopic.StepStart{{Step: statetopic.RouteFreezing, AtMs: now}, {Step: statetopic.RouteDraining, AtMs: now}},
		DrainTargets: []statetopic.DrainTarget{{Topic: "orders", Partition: 0, Offset: 50}},
	}})
	w.owner.Store(true)
	r := w.awaitStep(t, statetopic.RouteSwitched)
	if r.Driver != "m-1" || r.DriverTerm != 2 {
		t.Fatalf("driver %s term %d after the takeover", r.Driver, r.DriverTerm)
	}
	w.acts.mu.Lock()
	defer w.acts.mu.Unlock()
	for _, c := range w.acts.calls {
		if c == "log-ends" {
			t.Fatal("the new driver read the log ends again instead of waiting for the recorded targets")
		}
	}
}

// A request recorded by the SwitchRoute RPC (on any instance) is served by
// the route's driver and answered in place: the first starts attempt 1, a
// second one while it runs is refused as in progress, and one older than
// the RPC's patience is refused as expired without starting anything.
func TestRouteDriverServesRecordedRequests(t *testing.T) {
	w := newRouteDriveWorld(t)
	w.acts.mu.Lock()
	w.acts.copied[routeswitch.TopicPartition{Topic: "orders", Partition: 0}] = 60 // the drain waits
	w.acts.mu.Unlock()
	w.d.policy.DrainTimeout = time.Hour
	ask := func(id string, at time.Time) *statetopic.RouteRequest {
		w.view.put(coordinator.Record{Key: statetopic.RouteRequestKey("pay"), Value: &statetopic.RouteRequest{ID: id, AtMs: at.UnixMilli()}})
		var got *statetopic.RouteRequest
		polltest.Until(t, 10*time.Second, "the driver answers request "+id, func() bool {
			w.view.Read(func(v *statetopic.View) { got = v.RouteRequest("pay") })
			return got != nil && got.ID == id && got.AnsweredMs != 0
		})
		return got
	}
	if a := ask("r1", time.Now()); a.Refused != "" || a.Attempt != 1 {
		t.Fatalf("the first request: %+v", a)
	}
	w.awaitStep(t, statetopic.RouteDraining)
	if a := ask("r2", time.Now()); !strings.Contains(a.Refused, "in progress") {
		t.Fatalf("a request during the switch: %+v", a)
	}
	if a := ask("r3", time.Now().Add(-time.Minute)); !strings.Contains(a.Refused, "expired") {
		t.Fatalf("an expired request: %+v", a)
	}
	if r := w.current(); r.Attempt != 1 || r.Step != statetopic.RouteDraining {
		t.Fatalf("the refused requests changed the switch: %+v", r)
	}

	// --force while it drains: the switch fails over at once and records
	// describe's records at risk of that moment as what it loses.
	w.acts.mu.Lock()
	w.acts.atRisk = 40
	w.acts.mu.Unlock()
	w.view.put(coordinator.Record{Key: statetopic.RouteRequestKey("pay"), Value: &statetopic.RouteRequest{ID: "r4", Forced: true, AtMs: time.Now().UnixMilli()}})
	w.awaitStep(t, statetopic.RouteSwitched)
	if r := w.current(); !r.Forced || r.RecordsAtRisk != 40 || r.Attempt != 1 {
		t.Fatalf("the forced switch: %+v, want forced with 40 records at risk", r)
	}
}

// A forced switch whose primary does not answer records its records at risk
// as unknown (-1), never as 0.
func TestRouteDriverForcedSwitchPrimaryGone(t *testing.T) {
	w := newRouteDriveWorld(t)
	w.acts.atRiskErr = errors.New("mirror dr: the records at risk of 2 of 2 partitions are unknown")
	w.acts.standbyHeld = map[string]int{"billing": 1, "stale": 1, "untracked": 1}
	// The group sync saw billing with members on the primary and stale without; it has no
	// record of untracked (a paused topic's group, say), which is held to be safe.
	w.view.put(coordinator.Record{Key: statetopic.GroupSyncKey("dr", "billing"), Value: &statetopic.GroupSync{State: statetopic.GroupSynced, SourceMembers: true}},
		coordinator.Record{Key: statetopic.GroupSyncKey("dr", "stale"), Value: &statetopic.GroupSync{State: statetopic.GroupSynced}})
	w.view.put(coordinator.Record{Key: statetopic.RouteRequestKey("pay"), Value: &statetopic.RouteRequest{ID: "f1", Forced: true, AtMs: time.Now().UnixMilli()}})
	w.awaitStep(t, statetopic.RouteSwitched)
	if r := w.current(); !r.Forced || r.RecordsAtRisk != -1 || r.FreezeStartMs != 0 {
		t.Fatalf("the forced switch: %+v, want forced, records at risk unknown, never frozen", r)
	}
	// It copies no groups, so it holds the fetches of the groups the standby has offsets
	// of, until they rejoin there (TestRealForcedRouteSwitchPrimaryKilled).
	if r := w.current(); !maps.Equal(r.HeldGroups, map[string]int{"billing": 1, "untracked": 1}) {
		t.Fatalf("the forced switch holds groups %v, want billing and untracked (1 member each), not stale", r.HeldGroups)
	}
	w.acts.mu.Lock()
	listedFor := w.acts.standbyTopics
	w.acts.mu.Unlock()
	if !slices.Equal(listedFor, []string{"orders", "payments"}) {
		t.Fatalf("the standby's groups were listed for topics %v, want [orders payments]", listedFor)
	}
	// The failover is the first action of a route's first switch, before any record named
	// the mirror: it must still get the mirror's topics (it once got none, "failed over"
	// nothing, and led the route's clients to read-only topics on real Kafka).
	w.acts.mu.Lock()
	defer w.acts.mu.Unlock()
	for _, topics := range w.acts.failedTopics {
		if !slices.Equal(topics, []string{"orders", "payments"}) {
			t.Fatalf("the failovers were given topics %v, want [orders payments] each time", w.acts.failedTopics)
		}
	}
}
