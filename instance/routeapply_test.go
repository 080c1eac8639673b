package instance

import (
	"context"
	"errors"
	"github.com/twmb/franz-go/pkg/kgo"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/enforcement"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/proxy"
)

// fakeRouteView is a state view the test writes records into.
type fakeRouteView struct {
	mu      sync.Mutex
	v       *statetopic.View
	changed chan struct{}
}

func newFakeRouteView() *fakeRouteView {
	return &fakeRouteView{v: statetopic.NewView(), changed: make(chan struct{})}
}

func (f *fakeRouteView) Read(fn func(v *statetopic.View)) { f.mu.Lock(); defer f.mu.Unlock(); fn(f.v) }

func (f *fakeRouteView) Changed() <-chan struct{} { f.mu.Lock(); defer f.mu.Unlock(); return f.changed }

func (f *fakeRouteView) put(recs ...coordinator.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range recs {
		f.v.ApplyDecoded(r.Key, r.Value)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// fakeRoutes records what the applier asks of the proxy.
type fakeRoutes struct {
	mu        sync.Mutex
	names     []string
	freezes   []*enforcement.Freeze
	switches  []proxy.FetchHold
	backs     []proxy.FetchHold // SwitchRouteBack
	opened    []string
	freezeErr error
	// what RememberPrimary was told last
	primaryCluster string
	primaryIDs     map[string][16]byte
	writers        enforcement.MirrorWriters // what GuardMirrorWriters was told last
}

func (f *fakeRoutes) GuardMirrorWriters(_ string, w enforcement.MirrorWriters) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writers = w
	return nil
}

func (f *fakeRoutes) OpenRoute(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened = append(f.opened, name)
	return nil
}

func (f *fakeRoutes) RememberPrimary(_, clusterID string, ids map[string][16]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.primaryCluster, f.primaryIDs = clusterID, ids
	return nil
}

func (f *fakeRoutes) openedRoutes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.opened...)
}

func (f *fakeRoutes) switchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.switches)
}

func (f *fakeRoutes) Routes() []proxy.RouteStatus {
	var out []proxy.RouteStatus
	for _, n := range f.names {
		out = append(out, proxy.RouteStatus{Name: n})
	}
	return out
}

func (f *fakeRoutes) FreezeRoute(_ context.Context, _ string, fr *enforcement.Freeze) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.freezeErr != nil && fr != nil {
		return f.freezeErr
	}
	f.freezes = append(f.freezes, fr)
	return nil
}

func (f *fakeRoutes) SwitchRoute(_ context.Context, _ string, h proxy.FetchHold) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.switches = append(f.switches, h)
	return nil
}

func (f *fakeRoutes) SwitchRouteBack(_ context.Context, _ string, h proxy.FetchHold) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backs = append(f.backs, h)
	return nil
}

type routeApplierWorld struct {
	view   *fakeRouteView
	routes *fakeRoutes
	member string
	a      *routeApplier

	mu       sync.Mutex
	notReady error // what ready answers
	asked    int   // ready calls
}

func (w *routeApplierWorld) ready(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked++
	return w.notReady
}

func (w *routeApplierWorld) readyCalls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.asked
}

func (w *routeApplierWorld) setReady(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notReady = err
}

func newRouteApplierWorld(t *testing.T) *routeApplierWorld {
	t.Helper()
	w := &routeApplierWorld{view: newFakeRouteView(), routes: &fakeRoutes{names: []string{"pay"}}, member: "m-1"}
	write := func(_ context.Context, recs ...coordinator.Record) error { w.view.put(recs...); return nil }
	w.a = newRouteApplier(w.view, write, func() string { return w.member }, w.ready, w.routes, slog.New(slog.DiscardHandler))
	w.view.put(
		coordinator.Record{Key: statetopic.Key{Type: statetopic.TypeMirrorConfig, Mirror: "dr"}, Value: &statetopic.MirrorConfig{SourceClusterID: "prim-ary"}},
		coordinator.Record{Key: statetopic.Key{Type: statetopic.TypeMirrorTopic, Mirror: "dr", Topic: "orders"}, Value: &statetopic.MirrorTopic{SourceTopicID: statetopic.UUID{1}}},
		coordinator.Record{Key: statetopic.Key{Type: statetopic.TypeMirrorTopic, Mirror: "dr", Topic: "payments"}, Value: &statetopic.MirrorTopic{SourceTopicID: statetopic.UUID{2}}},
		coordinator.Record{Key: statetopic.PartitionStateKey("dr", statetopic.UUID{1}, 0),
			Value: &statetopic.PartitionState{Topic: "orders", DataWriter: &statetopic.Producer{ID: 5, Epoch: 1}}},
		coordinator.Record{Key: statetopic.PartitionStateKey("dr", statetopic.UUID{1}, 1),
			Value: &statetopic.PartitionState{Topic: "orders"}}, // not prepared yet: no writer
		coordinator.Record{Key: statetopic.PartitionStateKey("dr", statetopic.UUID{2}, 0),
			Value: &statetopic.PartitionState{Topic: "payments", DataWriter: &statetopic.Producer{ID: 0, Epoch: 0}}},
	)
	return w
}

func (w *routeApplierWorld) record(step statetopic.RouteStep, attempt int32, mod func(*statetopic.RouteSwitch)) {
	r := &statetopic.RouteSwitch{Route: "pay", Mirror: "dr", Step: step, Attempt: attempt, DriverTerm: 1,
		Upstream: statetopic.UpstreamPrimary, Target: statetopic.UpstreamStandby, FreezeStartMs: 1}
	if mod != nil {
		mod(r)
	}
	w.view.put(coordinator.Record{Key: statetopic.RouteSwitchKey("pay"), Value: r})
}

func (w *routeApplierWorld) acked(step statetopic.RouteStep, attempt int32) []string {
	var out []string
	w.view.Read(func(v *statetopic.View) { out = v.RouteAcked("pay", step, attempt) })
	return out
}

func frozen(topics ...string) *enforcement.Freeze {
	f := &enforcement.Freeze{Topics: map[string]bool{}}
	for _, t := range topics {
		f.Topics[t] = true
	}
	return f
}

// The instance side of a planned switch: the produce freeze of the mirror's
// topics acked under the member id, the commit freeze acked, the switch with
// the record's held groups acked, each applied once; a rejoin (new member id)
// acks again; nothing happens for a route this instance does not serve.
func TestRouteApplierPlannedSwitch(t *testing.T) {
	w := newRouteApplierWorld(t)
	ctx := context.Background()
	w.a.applyAll(ctx)
	if len(w.routes.freezes) != 0 {
		t.Fatalf("no record, yet the route was frozen: %v", w.routes.freezes)
	}

	w.record(statetopic.RouteFreezing, 1, nil)
	w.a.applyAll(ctx)
	w.a.applyAll(ctx)
	if want := []*enforcement.Freeze{frozen("orders", "payments")}; !reflect.DeepEqual(w.routes.freezes, want) {
		t.Fatalf("freezes %v, want %v", w.routes.freezes, want)
	}
	if got := w.acked(statetopic.RouteFreezing, 1); !reflect.DeepEqual(got, []string{"m-1"}) {
		t.Fatalf("FREEZING acks %v", got)
	}

	w.member = "m-2" // rejoined: the driver counts the new id
	w.a.applyAll(ctx)
	if got := w.acked(statetopic.RouteFreezing, 1); !reflect.DeepEqual(got, []string{"m-1", "m-2"}) {
		t.Fatalf("FREEZING acks after a rejoin %v", got)
	}

	for _, step := range []statetopic.RouteStep{statetopic.RouteTxnWait, statetopic.RouteDraining, statetopic.RouteGroupsQuiet} {
		w.record(step, 1, nil)
		w.a.applyAll(ctx)
	}
	if len(w.routes.freezes) != 1 {
		t.Fatalf("the produce freeze was applied again in the steps after FREEZING: %v", w.routes.freezes)
	}
	w.record(statetopic.RouteGroupsCopy, 1, nil)
	w.a.applyAll(ctx)
	want := frozen("orders", "payments")
	want.Commits = true
	if len(w.routes.freezes) != 2 || !reflect.DeepEqual(w.routes.freezes[1], want) {
		t.Fatalf("freezes %v, want the commit freeze second", w.routes.freezes)
	}
	if got := w.acked(statetopic.RouteGroupsCopy, 1); !reflect.DeepEqual(got, []string{"m-2"}) {
		t.Fatalf("GROUPS_COPY acks %v", got)
	}

	w.record(statetopic.RouteFailingOver, 1, nil)
	w.a.applyAll(ctx)
	held := map[string]int{"billing": 3}
	w.record(statetopic.RouteSwitching, 1, func(r *statetopic.RouteSwitch) { r.Upstream, r.HeldGroups = statetopic.UpstreamStandby, held })
	w.a.applyAll(ctx)
	w.record(statetopic.RouteSwitched, 1, func(r *statetopic.RouteSwitch) { r.Upstream = statetopic.UpstreamStandby })
	w.a.applyAll(ctx)
	wantHold := proxy.FetchHold{Topics: map[string]bool{"orders": true, "payments": true}, Groups: held}
	if len(w.routes.switches) != 1 || !reflect.DeepEqual(w.routes.switches[0], wantHold) {
		t.Fatalf("switches %v, want one with %v", w.routes.switches, wantHold)
	}
	if got := w.acked(statetopic.RouteSwitching, 1); !reflect.DeepEqual(got, []string{"m-2"}) {
		t.Fatalf("SWITCHING acks %v", got)
	}
	// The route is told the primary's ids as the mirror recorded them: a
	// restarted instance never saw the primary's answers.
	if wantIDs := map[string][16]byte{"orders": {1}, "payments": {2}}; w.routes.primaryCluster != "prim-ary" || !reflect.DeepEqual(w.routes.primaryIDs, wantIDs) {
		t.Fatalf("RememberPrimary got %q %v, want prim-ary %v", w.routes.primaryCluster, w.routes.primaryIDs, wantIDs)
	}
	// And the producer ids of the mirror's writers, which the standby gave.
	if want := (enforcement.MirrorWriters{"orders": {0: {{ProducerID: 5, Epoch: 1}}}, "payments": {0: {{ProducerID: 0, Epoch: 0}}}}); !reflect.DeepEqual(w.routes.writers, want) {
		t.Fatalf("GuardMirrorWriters got %v, want %v", w.routes.writers, want)
	}
	if len(w.routes.freezes) != 2 {
		t.Fatalf("a freeze after the switch: %v", w.routes.freezes)
	}

	other := newRouteApplierWorld(t)
	other.routes.names = []string{"elsewhere"}
	other.record(statetopic.RouteSwitching, 1, func(r *statetopic.RouteSwitch) { r.Upstream = statetopic.UpstreamStandby })
	other.a.applyAll(ctx)
	if len(other.routes.switches)+len(other.routes.freezes) != 0 {
		t.Fatal("an instance switched a route it does not serve")
	}
}

// A freeze that cannot drain the writes forwarded before it is not acked
// (the driver rolls back without the ack); tried again, it acks. A rollback
// lifts the freeze, and the next attempt's acks name that attempt.
func TestRouteApplierFreezeFailureAndRollback(t *testing.T) {
	w := newRouteApplierWorld(t)
	ctx := context.Background()
	w.routes.freezeErr = errors.New("2 connections still wait for answers")
	w.record(statetopic.RouteFreezing, 1, nil)
	w.a.applyAll(ctx)
	if got := w.acked(statetopic.RouteFreezing, 1); len(got) != 0 {
		t.Fatalf("acked a freeze that failed: %v", got)
	}
	w.routes.freezeErr = nil
	w.a.applyAll(ctx)
	if got := w.acked(statetopic.RouteFreezing, 1); !reflect.DeepEqual(got, []string{"m-1"}) {
		t.Fatalf("FREEZING acks after the retry %v", got)
	}

	w.record(statetopic.RouteRolledBack, 1, nil)
	w.a.applyAll(ctx)
	if n := len(w.routes.freezes); n != 2 || w.routes.freezes[1] != nil {
		t.Fatalf("freezes %v, want the freeze lifted last", w.routes.freezes)
	}

	w.record(statetopic.RouteFreezing, 2, nil)
	w.a.applyAll(ctx)
	if got := w.acked(statetopic.RouteFreezing, 2); !reflect.DeepEqual(got, []string{"m-1"}) {
		t.Fatalf("attempt 2's FREEZING acks %v", got)
	}
	if n := len(w.routes.freezes); n != 3 || !w.routes.freezes[2].Frozen() {
		t.Fatalf("attempt 2 did not freeze again: %v", w.routes.freezes)
	}

}

// A switch back: a route switched to the standby is frozen there by the next attempt (the
// standby's producers are asked about resends), then led back to the primary with the held
// groups, and acked; a rollback of a switch back leaves it on the standby, unfrozen. An
// instance that starts during a switch back first leads the route to the standby, holding no
// group, and freezes it there.
func TestRouteApplierSwitchBack(t *testing.T) {
	ctx := context.Background()
	for _, rollBack := range []bool{false, true} {
		w := newRouteApplierWorld(t)
		asked := 0
		w.a.destClient = func() (*kgo.Client, error) { asked++; return nil, errors.New("no standby here") }
		onStandby := func(r *statetopic.RouteSwitch) {
			r.Upstream, r.Target = statetopic.UpstreamStandby, statetopic.UpstreamPrimary
		}
		w.record(statetopic.RouteSwitched, 1, func(r *statetopic.RouteSwitch) { r.Upstream = statetopic.UpstreamStandby })
		w.a.applyAll(ctx)
		w.record(statetopic.RouteFreezing, 2, onStandby)
		w.a.applyAll(ctx)
		if n := len(w.routes.freezes); n != 1 || !w.routes.freezes[0].Frozen() || w.routes.freezes[0].Written == nil {
			t.Fatalf("the switch back's freeze on the standby: %v", w.routes.freezes)
		}
		if got := w.acked(statetopic.RouteFreezing, 2); !reflect.DeepEqual(got, []string{"m-1"}) {
			t.Fatalf("attempt 2's FREEZING acks %v", got)
		}
		if rollBack {
			w.record(statetopic.RouteRolledBack, 2, onStandby)
			w.a.applyAll(ctx)
			if len(w.routes.backs) != 0 || len(w.routes.switches) != 1 || w.routes.freezes[len(w.routes.freezes)-1] != nil {
				t.Fatalf("a rolled back switch back: switches %v, backs %v, freezes %v", w.routes.switches, w.routes.backs, w.routes.freezes)
			}
			continue
		}
		w.record(statetopic.RouteSwitching, 2, func(r *statetopic.RouteSwitch) {
			r.Upstream, r.Target, r.HeldGroups = statetopic.UpstreamPrimary, statetopic.UpstreamPrimary, map[string]int{"billing": 2}
		})
		w.a.applyAll(ctx)
		w.a.applyAll(ctx) // applied once
		if len(w.routes.backs) != 1 || w.routes.backs[0].Groups["billing"] != 2 || !w.routes.backs[0].Topics["orders"] {
			t.Fatalf("switched back %v", w.routes.backs)
		}
		if got := w.acked(statetopic.RouteSwitching, 2); !reflect.DeepEqual(got, []string{"m-1"}) {
			t.Fatalf("attempt 2's SWITCHING acks %v", got)
		}

		// An instance started after the switch back leads to the primary already, and is
		// given the producer ids to refuse (none here: no source client).
		after := newRouteApplierWorld(t)
		after.record(statetopic.RouteSwitched, 2, func(r *statetopic.RouteSwitch) { r.Upstream = statetopic.UpstreamPrimary })
		after.a.applyAll(ctx)
		if len(after.routes.switches)+len(after.routes.backs) != 0 || after.routes.writers == nil {
			t.Fatalf("an instance started after the switch back: switches %v, backs %v, writers %v", after.routes.switches, after.routes.backs, after.routes.writers)
		}

		// An instance started during the switch back: led to the standby first, then frozen.
		late := newRouteApplierWorld(t)
		late.record(statetopic.RouteFreezing, 2, onStandby)
		late.a.applyAll(ctx)
		if len(late.routes.switches) != 1 || len(late.routes.switches[0].Groups) != 0 || len(late.routes.freezes) != 1 {
			t.Fatalf("a late instance: switches %v, freezes %v", late.routes.switches, late.routes.freezes)
		}
	}
}

// run follows the view and stops with its context.
func TestRouteApplierRunStopsWithContext(t *testing.T) {
	w := newRouteApplierWorld(t)
	w.a.retry = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.a.run(ctx); close(done) }()
	w.record(statetopic.RouteFreezing, 1, nil)
	polltest.Until(t, 10*time.Second, "run acks the freeze", func() bool { return len(w.acked(statetopic.RouteFreezing, 1)) > 0 })
	cancel()
	<-done
}

// A route opens only once the instance is caught up with the state topic and
// has applied the route's record: a restarting instance whose route was
// switched leads its clients to the standby from the first connection, never
// to the primary (docs/cutover.md). A record it cannot apply keeps the route
// closed; so does a state topic it has not read to the end.
func TestRouteApplierOpensRoutesOnceApplied(t *testing.T) {
	w := newRouteApplierWorld(t)
	w.routes.names = []string{"pay", "web"}
	w.a.retry = 10 * time.Millisecond
	w.setReady(errors.New("catching up with __mirror_state: partition 3 at 10 of 12"))
	w.record(statetopic.RouteSwitched, 1, func(r *statetopic.RouteSwitch) { r.Upstream = statetopic.UpstreamStandby })
	// web's record asks for what this instance cannot apply: a freeze of a mirror it does not
	// know yet.
	w.view.put(coordinator.Record{Key: statetopic.RouteSwitchKey("web"), Value: &statetopic.RouteSwitch{Route: "web", Mirror: "not-read-yet",
		Step: statetopic.RouteFreezing, Attempt: 1, Upstream: statetopic.UpstreamPrimary, Target: statetopic.UpstreamStandby, FreezeStartMs: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.a.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Not caught up: the switch is applied (nothing is served yet), nothing opens.
	polltest.Until(t, 10*time.Second, "the switched record applied", func() bool { return w.routes.switchCount() == 1 })
	polltest.Until(t, 10*time.Second, "three passes not ready", func() bool { return w.readyCalls() >= 3 })
	if got := w.routes.openedRoutes(); len(got) != 0 {
		t.Fatalf("routes opened before the state was read to its end: %v", got)
	}
	w.setReady(nil)
	polltest.Until(t, 10*time.Second, "pay opens once caught up", func() bool { return slices.Contains(w.routes.openedRoutes(), "pay") })
	if got := w.routes.openedRoutes(); !reflect.DeepEqual(got, []string{"pay"}) {
		t.Fatalf("opened %v; web's record cannot be applied and must keep it closed", got)
	}
}
