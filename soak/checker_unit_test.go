package soak

import (
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/fetcher"
)

// The schedule is a function of the seed (make soak SEED=N replays it), and
// every kind comes once in every round of len(kinds) faults.
func TestScheduleIsSeededAndCoversEveryKind(t *testing.T) {
	a, b := schedule(42, 60, false), schedule(42, 60, false)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two schedules of seed 42 differ")
	}
	if reflect.DeepEqual(a, schedule(43, 60, false)) {
		t.Fatal("seeds 42 and 43 give the same schedule")
	}
	seen := map[string]bool{}
	for _, f := range a[:len(kinds)] {
		seen[f.Kind] = true
	}
	if len(seen) != len(kinds) {
		t.Fatalf("the first round has %d kinds of %d: %v", len(seen), len(kinds), seen)
	}
	for _, f := range schedule(7, 1000, true) {
		if f.Kind == "net-blackhole" && f.Hold.Seconds() > 60 {
			t.Fatalf("%s: a blackhole longer than 60s", f)
		}
	}
}

func rec(off int64, key, body string) fetcher.LogEntry {
	return fetcher.LogEntry{Offset: off, Key: []byte(key), Record: []byte(key + body), Timestamp: off}
}

// compareLog counts each kind of difference instead of stopping at the
// first, and counts the destination-only ABORT marker apart.
func TestCompareLogCountsEveryDifference(t *testing.T) {
	src := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), rec(2, "c", "1"),
		{Offset: 3, Control: true, Commit: true}, rec(4, "d", "1")}
	dst := []fetcher.LogEntry{rec(0, "a", "1"), rec(2, "c", "changed"),
		{Offset: 3, Control: true, Commit: true}, rec(4, "d", "1"), rec(5, "e", "1"), {Offset: 6, Control: true}}
	var c counts
	c.compareLog("t/0", src, dst, false)
	want := counts{RecordsVerified: 2, MarkersVerified: 1, Lost: 1, Mismatched: 1, Duplicated: 1, KnownKafkaAbortMarkers: 1}
	c.Findings = nil
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	if c.zero() {
		t.Fatal("zero() with losses")
	}

	// Compaction: an entry whose key has a later record on the other side is
	// compacted away, not lost or extra.
	var k counts
	k.compareLog("c/0", []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "a", "2")},
		[]fetcher.LogEntry{rec(1, "a", "2")}, true)
	if k.CompactedAway != 1 || !k.zero() {
		t.Fatalf("compacted counts %+v", k)
	}
}

func kr(topic string, off int64, v string) *kgo.Record {
	return &kgo.Record{Topic: topic, Offset: off, Value: []byte(v)}
}

// The ground-truth check finds a lost acknowledged record, a duplicate, a
// reordering, a visible aborted record and a write through the proxy.
func TestGroundTruthFindsEachViolation(t *testing.T) {
	dst := map[string][]*kgo.Record{
		"soak.none/0": {kr("soak.none", 0, "p#1#"), kr("soak.none", 1, "p#3#"), kr("soak.none", 2, "p#2#"),
			kr("soak.none", 3, "p#3#"), kr("soak.none", 4, "readonly#1"), kr("soak.none", 5, "tx#9#")},
	}
	acked := []sent{
		{topic: "soak.none", offset: 0, value: "p#1#"},
		{topic: "soak.none", offset: 7, value: "p#7#"},
		{topic: "soak.none", offset: 5, value: "tx#9#", txn: "abort"},
	}
	var c counts
	c.checkGroundTruth(dst, acked, []string{"kcat#1#"})
	if c.Lost != 2 || c.Duplicated != 1 || c.OutOfOrder != 1 || c.Mismatched != 1 || c.ReadOnlyViolations != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// A partition halted by a marker Kafka wrote twice: identical before it,
// the extra marker counted apart, what was appended after it verified one
// offset on, the rest counted as not copied; anything else there is a
// mismatch, and a halt without an extra marker is one too.
func TestCompareHaltedProvesTheShift(t *testing.T) {
	commit := fetcher.LogEntry{Offset: 2, Control: true, Commit: true}
	src := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), commit, rec(3, "c", "1"), rec(4, "d", "1"), rec(5, "e", "1")}
	extra := commit
	extra.Offset = 3
	shifted := func(e fetcher.LogEntry) fetcher.LogEntry { e.Offset++; return e }
	dst := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), commit, extra, shifted(src[3]), shifted(src[4])}
	var c counts
	h := &halt{Message: "got a transaction marker twice"}
	c.compareHalted("tx/0", h, src, dst)
	if h.Marker != 3 || h.CopiedEnd != 5 || c.KnownKafkaExtraMarkers != 1 || c.NotCopiedAfterHalt != 1 ||
		c.RecordsVerified != 4 || c.MarkersVerified != 1 || !c.zero() {
		t.Fatalf("halt %+v, counts %+v", h, c)
	}

	bad := append([]fetcher.LogEntry(nil), dst...)
	bad[5] = rec(5, "x", "1")
	var m counts
	m.compareHalted("tx/0", &halt{}, src, bad)
	if m.Mismatched != 1 {
		t.Fatalf("a wrong entry after the extra marker: counts %+v", m)
	}

	// An extra marker that repeats no earlier one (another producer, or
	// another epoch) is not Kafka's duplicate.
	for _, e := range []fetcher.LogEntry{{Producer: 7}, {Epoch: 1}} {
		other := append([]fetcher.LogEntry(nil), dst...)
		other[3].Producer, other[3].Epoch = e.Producer, e.Epoch
		var o counts
		o.compareHalted("tx/0", &halt{}, src, other)
		if o.Mismatched != 1 || o.KnownKafkaExtraMarkers != 0 {
			t.Fatalf("an extra marker of producer %d epoch %d: counts %+v", e.Producer, e.Epoch, o)
		}
	}

	var n counts
	n.compareHalted("tx/0", &halt{}, src, src[:3])
	if n.Mismatched != 1 || n.KnownKafkaExtraMarkers != 0 {
		t.Fatalf("a halt without an extra marker: counts %+v", n)
	}

	// The ground truth leaves the halted partition to compareHalted.
	c.Halts = map[string]*halt{"tx/0": h}
	c.checkGroundTruth(map[string][]*kgo.Record{}, []sent{{topic: "tx", partition: 0, offset: 9, value: "p#9#"}}, nil)
	if c.Lost != 0 {
		t.Fatalf("an acknowledged record of a halted partition counted lost: %v", c.Findings)
	}
}

// On the compacted topic a destination-only ABORT marker is kmirror's
// filler, and the read_committed views compare each key's last value: one
// side's cleaner may have run and the other's not.
func TestCompactedTopicFillerAndViews(t *testing.T) {
	var c counts
	c.compareLog(topicCompact+"/0", []fetcher.LogEntry{rec(2, "a", "2")},
		[]fetcher.LogEntry{{Offset: 0, Control: true}, {Offset: 1, Control: true}, rec(2, "a", "2")}, true)
	if c.FillerMarkers != 2 || c.KnownKafkaAbortMarkers != 0 || !c.zero() {
		t.Fatalf("filler on the compacted topic: counts %+v", c)
	}
	keyed := func(off int64, k, v string) *kgo.Record {
		return &kgo.Record{Topic: topicCompact, Offset: off, Key: []byte(k), Value: []byte(v)}
	}
	src := map[string][]*kgo.Record{topicCompact + "/0": {keyed(5, "a", "a2"), keyed(6, "b", "b1")}}
	dst := map[string][]*kgo.Record{topicCompact + "/0": {keyed(1, "a", "a1"), keyed(5, "a", "a2"), keyed(6, "b", "b1")}}
	c.compareCommitted(src, dst)
	if !c.zero() {
		t.Fatalf("views differing only by compaction: %v", c.Findings)
	}
	dst[topicCompact+"/0"][2] = keyed(6, "b", "b0")
	dst[topicCompact+"/0"] = append(dst[topicCompact+"/0"], keyed(7, "z", "z1"))
	c.compareCommitted(src, dst)
	if c.Mismatched != 1 || c.Duplicated != 1 {
		t.Fatalf("a wrong last value and a destination-only key: counts %+v", c)
	}
}

// Only the copy's own stop on a duplicate marker, on the transactional topic
// (not the compacted one, whose marker filler makes an extra marker
// ambiguous, nor a plain one, which gets no markers), is a known halt.
func TestKnownKafkaHalt(t *testing.T) {
	dup := "soak.tx/0: the batch of source offset 16 was appended at destination offset 17; ... or got a transaction marker twice (...)"
	filler := "soak.compact/2: marker filler at offset 0: ... or a transaction coordinator that failed over wrote a marker twice"
	if !knownKafkaHalt("soak.tx", dup) || knownKafkaHalt(topicCompact, dup) || knownKafkaHalt(topicCompact, filler) || knownKafkaHalt("soak.tx", "fenced") ||
		knownKafkaHalt(topicNone, strings.Replace(dup, "soak.tx/0", "soak.none/0", 1)) ||
		!knownKafkaHalt(topicTx, "soak.tx/0: end transaction at offset 247: ... destination log end is 249 after markers that should end it at 248; ... or a transaction coordinator that failed over wrote a marker twice") {
		t.Fatal("knownKafkaHalt classified a stop wrongly")
	}
}

// TestRepeatedMarkersNamesOnlyRepeats: the evidence read at a compacted partition's failure
// names a marker that repeats an earlier one's producer, epoch and outcome, and nothing else
// (a later epoch of the same producer, or the other outcome, is a new marker).
func TestRepeatedMarkersNamesOnlyRepeats(t *testing.T) {
	log := []fetcher.LogEntry{
		{Offset: 0, Control: true, Producer: 7, Epoch: 1},
		{Offset: 1, Record: []byte("r")},
		{Offset: 2, Control: true, Producer: 7, Epoch: 2},
		{Offset: 3, Control: true, Producer: 7, Epoch: 2, Commit: true},
		{Offset: 4, Control: true, Producer: 8, Epoch: 1},
		{Offset: 5, Control: true, Producer: 7, Epoch: 2},
	}
	got := repeatedMarkers(log)
	want := "offset 5 repeats the ABORT marker of producer 7 epoch 2 at 2"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("repeatedMarkers = %q, want [%q]", got, want)
	}
	if rep := repeatedMarkers(log[:5]); len(rep) != 0 {
		t.Fatalf("repeatedMarkers of a log without repeats = %q", rep)
	}
}
