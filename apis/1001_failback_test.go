package apis

import (
	"errors"
	"strings"
	"testing"

	"github.com/kmirror/kmirror/protocol"
)

func TestPlanFailback(t *testing.T) {
	ends := map[int32]int64{0: 100, 1: 40}
	cases := []struct {
		name     string
		own      map[int32]int64
		src      sourceMirrorOf
		recreate bool
		note     string // substring; "" for no plan
		err      error
	}{
		{name: "not a failback", src: sourceMirrorOf{}},
		{name: "nothing written since our failover", own: map[int32]int64{0: 100, 1: 40}, note: "prefix"},
		{name: "written here since our failover, source never had it", own: map[int32]int64{0: 90, 1: 40},
			recreate: true, note: "10 records the source never received (partition 0: 10 records after offset 90)"},
		{name: "source mirrored our writes (failback after takeover)", src: sourceMirrorOf{known: true, lmo: map[int32]int64{0: 120, 1: 40}}, note: "prefix"},
		{name: "we diverged past the source's copy of us", src: sourceMirrorOf{known: true, lmo: map[int32]int64{0: 100, 1: 30}},
			recreate: true, note: "partition 1: 10 records after offset 30"},
		{name: "own and source's prefixes: the longer counts", own: map[int32]int64{0: 50, 1: 40}, src: sourceMirrorOf{known: true, lmo: map[int32]int64{0: 100, 1: 0}}, note: "prefix"},
		{name: "loop", src: sourceMirrorOf{known: true, active: true}, err: protocol.ErrInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := planFailback("orders", ends, c.own, c.src)
			if c.err != nil {
				if !errors.Is(err, c.err) || !strings.Contains(err.Error(), "mirror loop") {
					t.Fatalf("error %v, want %v naming the loop", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.recreate != c.recreate || !strings.Contains(plan.note, c.note) || (c.note == "") != (plan.note == "") {
				t.Fatalf("plan %+v, want recreate=%v and a note with %q", plan, c.recreate, c.note)
			}
		})
	}
}

func TestWithinPrefix(t *testing.T) {
	if withinPrefix(map[int32]int64{0: 5}, nil) {
		t.Fatal("no own LMO: not known to be a prefix")
	}
	if !withinPrefix(map[int32]int64{0: 5, 1: 0}, map[int32]int64{0: 5, 1: 3}) {
		t.Fatal("ends at or before the LMOs are a prefix")
	}
	if withinPrefix(map[int32]int64{0: 6}, map[int32]int64{0: 5}) {
		t.Fatal("an end past the LMO is not")
	}
}
