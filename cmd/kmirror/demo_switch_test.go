package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// TestDemoSwitch runs `kmirror demo --switch` in process, as `make run`'s
// switching variant runs: on the embedded clusters, the application goes
// through a planned switch of its route and the demo's own checks (every
// acknowledged record read once, in order, and on the destination at its
// offset) pass; the route leads to the standby at the end.
func TestDemoSwitch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer // written under the demo's console lock only, read after it returned
	err := runDemoTo(ctx, []string{"--switch", "--switch-after", "3s", "--duration", "25s", "--rate", "100",
		"--listen", "127.0.0.1:0", "--route-listen", "127.0.0.1:0"}, &out)
	printed := strings.ReplaceAll(out.String(), "\r", "\n")
	if err != nil {
		t.Fatalf("demo --switch: %v\n%s", err, printed)
	}
	for _, want := range []string{"switch: FREEZING", "switch: GROUPS_COPY", "switch: SWITCHED", "switched in ",
		"groups held until they rejoin: demo-app (1 member)", "route app leads to the standby", "verdict: PASS"} {
		if !strings.Contains(printed, want) {
			t.Errorf("the demo did not print %q:\n%s", want, printed)
		}
	}
	for _, l := range strings.Split(printed, "\n") {
		if strings.Contains(l, "switched in ") || strings.Contains(l, "route app leads to") {
			t.Log(l)
		}
	}
}

// The checks at the end name every way the reads can differ from what was
// acknowledged.
func TestDemoSwitchVerdict(t *testing.T) {
	acked := map[int32][]appRecord{0: {{0, "a"}, {1, "b"}, {2, "c"}}, 1: {{0, "d"}}}
	if got := compareLogs("reads", acked, acked); len(got) != 0 {
		t.Fatalf("identical logs differ: %v", got)
	}
	for _, c := range []struct {
		got  []appRecord
		want string
	}{
		{[]appRecord{{0, "a"}, {1, "b"}, {1, "b"}, {2, "c"}}, "1 read twice"},
		{[]appRecord{{0, "a"}, {2, "c"}}, "1 never read"},
		{[]appRecord{{0, "a"}, {2, "c"}, {1, "b"}}, "1 out of order"},
		{[]appRecord{{0, "a"}, {1, "b"}, {2, "c"}, {3, "x"}}, "1 never acknowledged"},
		{[]appRecord{{0, "a"}, {1, "b"}, {3, "c"}}, "1 at another offset"},
	} {
		got := compareLogs("reads", acked, map[int32][]appRecord{0: c.got, 1: acked[1]})
		if len(got) != 1 || !strings.HasPrefix(got[0], "reads, partition 0: 3 acknowledged") || !strings.HasSuffix(got[0], c.want) {
			t.Errorf("reads %v: %q, want one difference ending %q", c.got, got, c.want)
		}
	}
	if got := compareLogs("reads", acked, map[int32][]appRecord{0: acked[0]}); len(got) != 1 || !strings.Contains(got[0], "partition 1: 1 acknowledged, 0 read: 1 never read") {
		t.Errorf("a partition never read: %q", got)
	}
}

// Flags with which no switch could be shown are refused before anything starts.
func TestDemoSwitchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--switch", "--switch-after", "10s", "--duration", "5s"},
		{"--switch", "--switch-after", "0s"},
	} {
		if err := runDemoTo(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("demo %v: no error", args)
		}
	}
}

// A switch that rolls back is printed with its reason and timings, each step
// once however many polls see it.
func TestDemoSwitchStepPrinter(t *testing.T) {
	rec := &statetopic.RouteSwitch{Route: demoRoute, Step: statetopic.RouteDraining, FreezeStartMs: 1000,
		Steps: []statetopic.StepStart{{Step: statetopic.RouteFreezing, AtMs: 1000}, {Step: statetopic.RouteTxnWait, AtMs: 1010},
			{Step: statetopic.RouteDraining, AtMs: 1030}}, Reason: "demo/0 lags 5 records (LMO 10, target 15)"}
	var out bytes.Buffer
	con, p := &console{w: &out}, &stepPrinter{}
	p.print(con, rec)
	p.print(con, rec)
	rec.Step, rec.Reason = statetopic.RouteRolledBack, "drain timeout: demo/0 lags 5 records"
	rec.Steps = append(rec.Steps, statetopic.StepStart{Step: statetopic.RouteRolledBack, AtMs: 61030})
	p.print(con, rec)
	printed := out.String()
	for _, want := range []string{"switch: DRAINING", "demo/0 lags 5 records (LMO 10, target 15)",
		"switch: ROLLED_BACK   writes unfrozen, the route stays on the source: drain timeout: demo/0 lags 5 records",
		"rolled back in 60030 ms, writes frozen 60030 ms (FREEZING 10 ms, TXN_WAIT 20 ms, DRAINING 60000 ms)"} {
		if strings.Count(printed, want) != 1 {
			t.Errorf("printed %q %d times, want once:\n%s", want, strings.Count(printed, want), printed)
		}
	}
}
