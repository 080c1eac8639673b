package soak

import (
	"reflect"
	"slices"
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
	c.compareHalted("tx/0", h, src, dst, false)
	if h.Marker != 3 || h.CopiedEnd != 5 || c.KnownKafkaExtraMarkers != 1 || c.NotCopiedAfterHalt != 1 ||
		c.RecordsVerified != 4 || c.MarkersVerified != 1 || !c.zero() {
		t.Fatalf("halt %+v, counts %+v", h, c)
	}

	bad := append([]fetcher.LogEntry(nil), dst...)
	bad[5] = rec(5, "x", "1")
	var m counts
	m.compareHalted("tx/0", &halt{}, src, bad, false)
	if m.Mismatched != 1 {
		t.Fatalf("a wrong entry after the extra marker: counts %+v", m)
	}

	// An extra marker that repeats no earlier one (another producer, or
	// another epoch) is not Kafka's duplicate.
	for _, e := range []fetcher.LogEntry{{Producer: 7}, {Epoch: 1}} {
		other := append([]fetcher.LogEntry(nil), dst...)
		other[3].Producer, other[3].Epoch = e.Producer, e.Epoch
		var o counts
		o.compareHalted("tx/0", &halt{}, src, other, false)
		if o.Mismatched != 1 || o.KnownKafkaExtraMarkers != 0 {
			t.Fatalf("an extra marker of producer %d epoch %d: counts %+v", e.Producer, e.Epoch, o)
		}
	}

	// The extra marker ends the log, where the source has its other
	// producer's marker: the two compare alike (markers differ only by
	// producer and epoch), so only the repeat shows it.
	ofA := fetcher.LogEntry{Offset: 2, Control: true, Commit: true, Producer: 1, Epoch: 66}
	ofB := fetcher.LogEntry{Offset: 3, Control: true, Commit: true, Producer: 5, Epoch: 70}
	twoSrc := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), ofA, ofB, rec(4, "c", "1")}
	copyA := fetcher.LogEntry{Offset: 2, Control: true, Commit: true, Producer: 2015, Epoch: 70}
	again := copyA
	again.Offset = 3
	var l counts
	lh := &halt{Message: "got a transaction marker twice"}
	l.compareHalted("tx/0", lh, twoSrc, []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), copyA, again}, false)
	if lh.Marker != 3 || lh.CopiedEnd != 3 || l.KnownKafkaExtraMarkers != 1 || l.NotCopiedAfterHalt != 2 || !l.zero() {
		t.Fatalf("an extra marker that ends the log: halt %+v, counts %+v", lh, l)
	}
	// The same producer's next transaction ended by a marker of another
	// epoch is not a repeat: the halt then has no extra marker.
	next := again
	next.Epoch++
	var q counts
	q.compareHalted("tx/0", &halt{}, twoSrc, []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), copyA, next}, false)
	if q.Mismatched != 1 || q.KnownKafkaExtraMarkers != 0 {
		t.Fatalf("two markers of one producer, different epochs: counts %+v", q)
	}

	var n counts
	n.compareHalted("tx/0", &halt{}, src, src[:3], false)
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

// TestCompactedHaltProvesRewrittenMarkers: on the compacted topic a FAILED
// partition is Kafka's duplicate marker only when every entry from the offset
// the message names is a marker with an epoch its producer already ended with
// (the CI run of ed614a1: the fill's range 0..173, markers at 173 and 174
// repeating 167's and 172's). A new epoch past the range is a marker kmirror
// asked for: not Kafka's, and the run fails with the evidence.
func TestCompactedHaltProvesRewrittenMarkers(t *testing.T) {
	abort := func(off, producer int64, epoch int16) fetcher.LogEntry {
		return fetcher.LogEntry{Offset: off, Control: true, Producer: producer, Epoch: epoch}
	}
	fill := []fetcher.LogEntry{abort(0, 7, 4), abort(1, 8, 3), abort(2, 7, 5), abort(3, 8, 4)}
	msg := "soak.compact/1: marker filler at offset 0: destination log end 6 is outside the filler range 0..4; ..."
	// 4 repeats 2 exactly; 5 has an epoch below 3's (4's own marker was
	// cleaned away): both rewrites.
	log := append(append([]fetcher.LogEntry(nil), fill...), abort(4, 7, 5), abort(5, 8, 2))
	extra, ev := compactedHalt(msg, log)
	if !reflect.DeepEqual(extra, []int64{4, 5}) || !strings.Contains(ev, "offset 4 rewrites the ABORT marker of producer 7 epoch 5 (after its ABORT marker of epoch 5 at 2)") {
		t.Fatalf("compactedHalt = %v, %q", extra, ev)
	}
	for name, bad := range map[string][]fetcher.LogEntry{
		"a new epoch":      append(append([]fetcher.LogEntry(nil), fill...), abort(4, 7, 6)),
		"another producer": append(append([]fetcher.LogEntry(nil), fill...), abort(4, 9, 1)),
		"a record":         append(append([]fetcher.LogEntry(nil), fill...), rec(4, "a", "1")),
		"nothing past it":  fill,
		"a gap before it":  append(append([]fetcher.LogEntry(nil), fill...), abort(5, 7, 5)),
	} {
		if extra, ev := compactedHalt(msg, bad); extra != nil || !strings.Contains(ev, "proves no marker written twice") {
			t.Errorf("%s past the range: compactedHalt = %v, %q", name, extra, ev)
		}
	}
	if extra, _ := compactedHalt("soak.compact/1: fenced", log); extra != nil {
		t.Fatalf("a message naming no offset: %v", extra)
	}
	for _, m := range []string{
		"end transaction at offset 3: destination log end is 6 after markers that should end it at 4; ...",
		"soak.compact/1: the batch of source offset 4 was appended at destination offset 6; ...",
	} {
		if extra, _ := compactedHalt(m, log); !reflect.DeepEqual(extra, []int64{4, 5}) {
			t.Errorf("%q: extra %v", m, extra)
		}
	}
}

// A compacted partition halted by two rewritten markers, proven at the
// failure and cleaned away since: identical before them (filler markers in
// the source's holes), a filler and a record after them two offsets on, the
// rest not copied; a record the source does not have is a mismatch.
func TestCompareHaltedCompacted(t *testing.T) {
	filler := func(off int64) fetcher.LogEntry { return fetcher.LogEntry{Offset: off, Control: true, Producer: 7} }
	shifted := func(e fetcher.LogEntry) fetcher.LogEntry { e.Offset += 2; return e }
	// The source's cleaner emptied 0, 1, 3 and 4. Kafka's markers at 3 and 4
	// are cleaned away on the destination since; then the filler of source
	// offset 3 landed at 5 and source 5 at 7 (6, source 4, was cleaned too).
	src := []fetcher.LogEntry{rec(2, "a", "1"), rec(5, "c", "1"), rec(6, "d", "1")}
	dst := []fetcher.LogEntry{filler(0), filler(1), rec(2, "a", "1"), shifted(filler(3)), shifted(src[1])}
	var c counts
	h := &halt{Message: "the batch of source offset 3 was appended at destination offset 5", Extra: []int64{3, 4}}
	c.compareHalted(topicCompact+"/0", h, src, dst, true)
	if h.Marker != 3 || h.CopiedEnd != 6 || c.KnownKafkaExtraMarkers != 2 || c.FillerMarkers != 3 ||
		c.RecordsVerified != 2 || c.NotCopiedAfterHalt != 1 || !c.zero() {
		t.Fatalf("halt %+v, counts %+v (%v)", h, c, c.Findings)
	}
	// After the halt the source got a later record of key "a" (offset 9, never copied)
	// and its cleaner removed offset 2, which the destination keeps: compacted away,
	// not a record the source never had.
	cleaned := []fetcher.LogEntry{src[1], src[2], rec(9, "a", "2")}
	var k counts
	kh := &halt{Message: h.Message, Extra: []int64{3, 4}}
	k.compareHalted(topicCompact+"/0", kh, cleaned, dst, true)
	if k.CompactedAway != 1 || k.NotCopiedAfterHalt != 2 || !k.zero() {
		t.Fatalf("a record cleaned on the source after the halt, for a key written after it: counts %+v (%v)", k, k.Findings)
	}
	var m counts
	bad := append(append([]fetcher.LogEntry(nil), dst...), fetcher.LogEntry{Offset: 8, Record: []byte("x"), Key: []byte("x")})
	m.compareHalted(topicCompact+"/0", &halt{Extra: []int64{3, 4}}, src, bad, true)
	if m.Mismatched != 1 {
		t.Fatalf("a record the source does not have after the halt: counts %+v", m)
	}
}

// A halted partition's log may end in an ABORT marker after what kmirror
// appended past the extra marker: its copy transaction, open at the halt,
// aborted when it timed out (the 1,000-fault run's soak.tx/1). Counted
// apart; an ABORT marker followed by anything is still a mismatch.
func TestCompareHaltedAbortTail(t *testing.T) {
	commit := fetcher.LogEntry{Offset: 2, Control: true, Commit: true, Producer: 5, Epoch: 3}
	src := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), commit, rec(3, "c", "1"), rec(4, "d", "1")}
	extra := commit
	extra.Offset = 3
	shifted := func(e fetcher.LogEntry) fetcher.LogEntry { e.Offset++; return e }
	abort := fetcher.LogEntry{Offset: 5, Control: true, Producer: 5, Epoch: 4}
	dst := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), commit, extra, shifted(src[3]), abort}
	var c counts
	h := &halt{Message: "got a transaction marker twice"}
	c.compareHalted("tx/0", h, src, dst, false)
	if !c.zero() || c.HaltAbortMarkers != 1 || c.KnownKafkaExtraMarkers != 1 || h.CopiedEnd != 4 {
		t.Fatalf("halt %+v, counts %+v (%v)", h, c, c.Findings)
	}
	var m counts
	after := append(append([]fetcher.LogEntry(nil), dst...), fetcher.LogEntry{Offset: 6, Record: []byte("x"), Key: []byte("x")})
	m.compareHalted("tx/0", &halt{}, src, after, false)
	if m.Mismatched != 2 || m.HaltAbortMarkers != 0 {
		t.Fatalf("an ABORT marker and a record after the halt: counts %+v (%v)", m, m.Findings)
	}
}

// A marker Kafka wrote three times (seed 2, soak.tx/1): both extra markers are counted apart
// and what follows is compared two offsets on; a source marker of the same transaction's shape
// that follows the extra one is the source's own, shifted, not another extra.
func TestCompareHaltedConsecutiveExtraMarkers(t *testing.T) {
	commit := fetcher.LogEntry{Offset: 2, Control: true, Commit: true, Producer: 11, Epoch: 2}
	src := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), commit, rec(3, "c", "1"), rec(4, "d", "1")}
	at := func(e fetcher.LogEntry, off int64) fetcher.LogEntry { e.Offset = off; return e }
	dst := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), commit, at(commit, 3), at(commit, 4), at(src[3], 5)}
	var c counts
	h := &halt{Message: "got a transaction marker twice"}
	c.compareHalted("tx/1", h, src, dst, false)
	if !slices.Equal(h.Extra, []int64{3, 4}) || c.KnownKafkaExtraMarkers != 2 || h.CopiedEnd != 4 || c.NotCopiedAfterHalt != 1 || !c.zero() {
		t.Fatalf("extra %v, halt %+v, counts %+v %v", h.Extra, h, c, c.Findings)
	}

	// A marker of the same shape that the source holds at that offset is the source's own,
	// copied, not an extra one: only the next one is extra.
	src2 := append(append([]fetcher.LogEntry(nil), src[:3]...), at(commit, 3), rec(4, "d", "1"))
	dst2 := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), commit, at(commit, 3), at(commit, 4), at(src2[4], 5)}
	var k counts
	h2 := &halt{Message: "got a transaction marker twice"}
	k.compareHalted("tx/1", h2, src2, dst2, false)
	if len(h2.Extra) != 1 || k.KnownKafkaExtraMarkers != 1 || !k.zero() {
		t.Fatalf("extra %v, counts %+v %v", h2.Extra, k, k.Findings)
	}
}

// A marker written twice inside a run of markers (seed 4 short, soak.tx/1): the duplicate
// matches the source's next marker at its offset, and the first mismatch is the run's last
// marker, which repeats nothing. The extra one is the run's first marker that repeats an
// earlier one; the rest of the run is the source's markers, shifted.
func TestCompareHaltedExtraMarkerInsideARun(t *testing.T) {
	m := func(off, producer int64, epoch int16) fetcher.LogEntry {
		return fetcher.LogEntry{Offset: off, Control: true, Commit: true, Producer: producer, Epoch: epoch}
	}
	src := []fetcher.LogEntry{rec(0, "a", "1"), m(1, 7, 1), m(2, 8, 1), rec(3, "b", "1")}
	shifted := src[3]
	shifted.Offset = 4
	dst := []fetcher.LogEntry{rec(0, "a", "1"), m(1, 1042, 183), m(2, 1042, 183), m(3, 1043, 174), shifted}
	var c counts
	h := &halt{Message: "got a transaction marker twice"}
	c.compareHalted("tx/1", h, src, dst, false)
	if !slices.Equal(h.Extra, []int64{2}) || c.KnownKafkaExtraMarkers != 1 || h.CopiedEnd != 4 || !c.zero() {
		t.Fatalf("extra %v, halt %+v, counts %+v %v", h.Extra, h, c, c.Findings)
	}
}

// Every message of a stop on a duplicate marker names the offset past what
// kmirror wrote, so the evidence shows the destination log from there.
func TestPastWrittenReadsEveryHaltMessage(t *testing.T) {
	for msg, want := range map[string]int64{
		"destination log end 12 is outside the filler range 5..9; the destination":                             9,
		"the log end is 14 after markers that should end it at 13":                                             13,
		"the batch of source offset 40 was appended at destination offset 41":                                  40,
		"soak.tx/0: the destination's last entry, at offset 271, is a COMMIT marker of producer 2015 epoch 70": 271,
	} {
		if got, ok := pastWritten(msg); !ok || got != want {
			t.Errorf("pastWritten(%q) = %d, %v; want %d", msg, got, ok, want)
		}
	}
	if _, ok := pastWritten("copy stopped: context canceled"); ok {
		t.Error("a message naming no offset was read as naming one")
	}
}

// A coordinator that lost a transaction's end: the destination is the
// source's log up to its end, nothing extra; the rest is not copied. A
// difference before the end is still a mismatch.
func TestCompareLostEnd(t *testing.T) {
	msg := "soak.tx/2: the destination's transaction coordinator lost the end of a transaction its partition has: ..."
	if !knownKafkaHalt(topicTx, msg) || knownKafkaHalt(topicNone, msg) {
		t.Fatal("the coordinator's lost end is a known halt on the transactional topic only")
	}
	commit := fetcher.LogEntry{Offset: 3, Control: true, Commit: true}
	src := []fetcher.LogEntry{rec(0, "a", "1"), rec(1, "b", "1"), rec(2, "c", "1"), commit, rec(4, "d", "1"), rec(5, "e", "1")}
	var c counts
	h := &halt{Message: msg}
	c.compareHalted("tx/2", h, src, src[:4], false)
	if h.CopiedEnd != 4 || c.NotCopiedAfterHalt != 2 || c.RecordsVerified != 3 || c.MarkersVerified != 1 || !c.zero() {
		t.Fatalf("halt %+v, counts %+v", h, c)
	}
	bad := append([]fetcher.LogEntry(nil), src[:4]...)
	bad[1] = rec(1, "x", "1")
	var m counts
	m.compareHalted("tx/2", &halt{Message: msg}, src, bad, false)
	if m.Mismatched != 1 {
		t.Fatalf("a wrong entry before the halt: counts %+v", m)
	}
}
