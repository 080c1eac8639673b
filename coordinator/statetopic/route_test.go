package statetopic

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func testRouteSwitch() *RouteSwitch {
	return &RouteSwitch{Route: "payments", Mirror: "dr", Step: RouteDraining, Upstream: UpstreamPrimary, Target: UpstreamStandby,
		Driver: "instance-1", DriverTerm: 2, Attempt: 3,
		Steps:         []StepStart{{RouteFreezing, 1000}, {RouteTxnWait, 1200}, {RouteDraining, 1300}},
		FreezeStartMs: 1000, DrainTargets: []DrainTarget{{"orders", 0, 120}, {"orders", 1, 7}},
		Reason: "waiting", UpdatedMs: 1400}
}

// Route keys are on-disk format too: pin them byte for byte. The route's
// name sits where mirror records have the mirror's.
func TestRouteKeyGoldenBytes(t *testing.T) {
	for _, c := range []struct {
		key  Key
		want []byte
	}{
		{RouteSwitchKey("p"), []byte{0, 0, 6, 0, 1, 'p'}},
		{RouteAckKey("p", "i1", RouteGroupsCopy), []byte{0, 0, 7, 0, 1, 'p', 0, 2, 'i', '1', 5}},
	} {
		if got := c.key.Bytes(); !bytes.Equal(got, c.want) {
			t.Errorf("%s key bytes\n got %x\nwant %x", c.key.Type, got, c.want)
		}
	}
}

// A route's switch record and all its acks land on one state partition, so
// they are read in the order they were written; routes spread by name.
func TestRouteRecordsSharePartition(t *testing.T) {
	const n = 50
	want := RouteSwitchKey("payments").StatePartition(n)
	for _, inst := range []string{"a", "b", "instance-7"} {
		for s := RouteFreezing; s <= RouteSwitching; s++ {
			if got := RouteAckKey("payments", inst, s).StatePartition(n); got != want {
				t.Fatalf("ack %s/%s on partition %d, switch record on %d", inst, s, got, want)
			}
		}
	}
	seen := map[int32]bool{}
	for i := 1; i <= 100; i++ {
		seen[RouteSwitchKey(strings.Repeat("r", i)).StatePartition(n)] = true
	}
	if len(seen) < n/4 {
		t.Fatalf("100 routes on %d of %d partitions", len(seen), n)
	}
}

func TestRouteStepText(t *testing.T) {
	for s := RouteStep(-1); s <= 12; s++ {
		b, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got RouteStep
		if err := got.UnmarshalText(b); err != nil || got != s {
			t.Fatalf("%d -> %q -> %d, %v", s, b, got, err)
		}
		if s.Known() != (s >= RouteIdle && s <= RouteRolledBack) {
			t.Fatalf("%s.Known() = %v", s, s.Known())
		}
	}
	if s, err := ParseRouteStep("draining"); err != nil || s != RouteDraining {
		t.Fatalf("lower-case name: %v, %v", s, err)
	}
	for _, bad := range []string{"", "DRAIN", "RouteStep(x)", "RouteStep(300)", "RouteStep(1"} {
		if _, err := ParseRouteStep(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The value is readable JSON after the version: steps by name, times in ms,
// and nothing that could be a credential.
func TestRouteSwitchValueFormat(t *testing.T) {
	b, err := EncodeValue(testRouteSwitch())
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0 || b[1] != 0 {
		t.Fatalf("value version %x, want 0000", b[:2])
	}
	var fields map[string]any
	if err := json.Unmarshal(b[2:], &fields); err != nil {
		t.Fatal(err)
	}
	if fields["step"] != "DRAINING" || fields["freeze_start_ms"] != float64(1000) {
		t.Fatalf("value %s", b[2:])
	}
	for name := range fields {
		for _, secret := range []string{"pass", "secret", "sasl", "token", "bootstrap"} {
			if strings.Contains(name, secret) {
				t.Errorf("field %q in a route switch record", name)
			}
		}
	}
	// A newer kmirror's value version is refused with a clear error.
	b[1] = 1
	if _, err := DecodeValue(TypeRouteSwitch, b); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "upgrade kmirror") {
		t.Fatalf("future version: %v", err)
	}
	// A step of a newer kmirror decodes (as a number), it does not make the
	// record unreadable.
	v, err := DecodeValue(TypeRouteSwitch, []byte("\x00\x00"+`{"route":"p","step":"RouteStep(20)"}`))
	if err != nil || v.(*RouteSwitch).Step != 20 || v.(*RouteSwitch).Step.Known() {
		t.Fatalf("unknown step: %+v, %v", v, err)
	}
	if _, err := DecodeValue(TypeRouteSwitch, []byte("\x00\x00"+`{"step":"NOPE"}`)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("garbage step: %v", err)
	}
}

func TestRouteSwitchHelpers(t *testing.T) {
	r := testRouteSwitch()
	if got := r.StepStartMs(); got != 1300 {
		t.Fatalf("StepStartMs %d", got)
	}
	if (&RouteSwitch{Step: RouteDraining}).StepStartMs() != 0 {
		t.Fatal("StepStartMs without steps")
	}
	for s := RouteStep(0); s <= RouteRolledBack; s++ {
		r.Step = s
		produce := s >= RouteFreezing && s <= RouteSwitching
		commits := s >= RouteGroupsCopy && s <= RouteSwitching
		if r.ProduceFrozen() != produce || r.CommitsFrozen() != commits || s.InProgress() != produce {
			t.Errorf("%s: produce frozen %v, commits frozen %v, in progress %v", s, r.ProduceFrozen(), r.CommitsFrozen(), s.InProgress())
		}
	}
	// A forced switch never froze: nothing is frozen in its steps.
	forced := &RouteSwitch{Step: RouteFailingOver, Forced: true}
	if forced.ProduceFrozen() || forced.CommitsFrozen() {
		t.Fatal("forced switch frozen")
	}
	if UpstreamPrimary.Other() != UpstreamStandby || UpstreamStandby.Other() != UpstreamPrimary {
		t.Fatal("Other")
	}
}

func TestViewRoutes(t *testing.T) {
	v := NewView()
	apply := func(k Key, val any) {
		t.Helper()
		r := mustRec(t, k, val)
		if err := v.Apply(r.key, r.value); err != nil {
			t.Fatal(err)
		}
	}
	sw := testRouteSwitch() // attempt 3, term 2
	apply(RouteSwitchKey("payments"), sw)
	apply(RouteAckKey("payments", "b", RouteFreezing), &RouteAck{Attempt: 3})
	apply(RouteAckKey("payments", "a", RouteFreezing), &RouteAck{Attempt: 3})
	apply(RouteAckKey("payments", "c", RouteFreezing), &RouteAck{Attempt: 2}) // an earlier attempt's
	apply(RouteAckKey("payments", "a", RouteGroupsCopy), &RouteAck{Attempt: 3})
	if got := v.RouteAcked("payments", RouteFreezing, 3); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("freeze acks %v", got)
	}
	if got := v.RouteAcked("nosuch", RouteFreezing, 3); got != nil {
		t.Fatalf("acks of no route %v", got)
	}
	if got := v.RouteSwitch("payments"); !reflect.DeepEqual(got, sw) {
		t.Fatalf("switch %+v", got)
	}
	// A replaced driver's late write (term 1) is ignored; the same term and
	// a later attempt are taken.
	old := testRouteSwitch()
	old.DriverTerm, old.Step = 1, RouteRolledBack
	apply(RouteSwitchKey("payments"), old)
	if v.RouteSwitch("payments").Step != RouteDraining {
		t.Fatal("a replaced driver's write was applied")
	}
	same := testRouteSwitch()
	same.Step = RouteGroupsQuiet
	apply(RouteSwitchKey("payments"), same)
	if v.RouteSwitch("payments").Step != RouteGroupsQuiet {
		t.Fatal("the driver's next write was not applied")
	}
	next := &RouteSwitch{Route: "payments", Attempt: 4, DriverTerm: 1, Step: RouteFreezing}
	apply(RouteSwitchKey("payments"), next)
	if v.RouteSwitch("payments").Attempt != 4 {
		t.Fatal("a new attempt was not applied")
	}
	// The copy is the reader's own.
	v.RouteSwitch("payments").Steps = append(v.RouteSwitch("payments").Steps, StepStart{})
	if len(v.RouteSwitch("payments").Steps) != 0 {
		t.Fatal("RouteSwitch shares its steps")
	}
	// Routes are not mirrors.
	if len(v.MirrorNames()) != 0 || len(v.AllMirrorNames()) != 0 || !reflect.DeepEqual(v.RouteNames(), []string{"payments"}) {
		t.Fatalf("mirrors %v, routes %v", v.AllMirrorNames(), v.RouteNames())
	}
	// Tombstones remove the route once nothing is left.
	apply(RouteSwitchKey("payments"), nil)
	for _, id := range []RouteAckID{{"a", RouteFreezing}, {"b", RouteFreezing}, {"c", RouteFreezing}, {"a", RouteGroupsCopy}} {
		apply(RouteAckKey("payments", id.Instance, id.Step), nil)
	}
	apply(RouteAckKey("other", "a", RouteFreezing), nil) // a tombstone of nothing
	if v.RouteSwitch("payments") != nil || len(v.RouteNames()) != 0 {
		t.Fatalf("routes left: %v", v.RouteNames())
	}
}

func TestRouteSwitchTimings(t *testing.T) {
	steps := []StepStart{{RouteFreezing, 1000}, {RouteTxnWait, 1100}, {RouteDraining, 1150}, {RouteGroupsQuiet, 1900},
		{RouteGroupsCopy, 2000}, {RouteFailingOver, 2300}, {RouteSwitching, 2400}, {RouteSwitched, 2450}}
	for _, tc := range []struct {
		name         string
		r            RouteSwitch
		now          int64
		total, frzMs int64
		lastStep     StepDuration
	}{
		{"switched", RouteSwitch{Step: RouteSwitched, FreezeStartMs: 1000, Steps: steps}, 9999, 1450, 1400, StepDuration{RouteSwitching, 50}},
		{"draining, so far", RouteSwitch{Step: RouteDraining, FreezeStartMs: 1000, Steps: steps[:3]}, 1400, 400, 400, StepDuration{RouteDraining, 250}},
		{"rolled back", RouteSwitch{Step: RouteRolledBack, FreezeStartMs: 1000,
			Steps: append(slices.Clone(steps[:3]), StepStart{RouteRolledBack, 61150})}, 70000, 60150, 60150, StepDuration{RouteDraining, 60000}},
		{"forced, never frozen", RouteSwitch{Step: RouteSwitched, Forced: true,
			Steps: []StepStart{{RouteFailingOver, 500}, {RouteSwitching, 700}, {RouteSwitched, 800}}}, 900, 300, -1, StepDuration{RouteSwitching, 100}},
	} {
		got := tc.r.Timings(tc.now)
		if got.Total != tc.total || got.Freeze != tc.frzMs || got.Steps[len(got.Steps)-1] != tc.lastStep {
			t.Errorf("%s: total %d freeze %d last step %+v; want %d %d %+v", tc.name, got.Total, got.Freeze, got.Steps[len(got.Steps)-1], tc.total, tc.frzMs, tc.lastStep)
		}
		for _, s := range got.Steps {
			if s.Step.Final() {
				t.Errorf("%s: a final step has a duration: %+v", tc.name, got.Steps)
			}
		}
	}
	if got := (&RouteSwitch{}).Timings(5); got.Total != -1 || got.Freeze != -1 || got.Steps != nil {
		t.Errorf("no steps: %+v", got)
	}
}
