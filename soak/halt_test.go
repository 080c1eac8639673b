package soak

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/fetcher"
)

// A halt is a destination partition stock Kafka gave a transaction marker
// too many (docs/KAFKA-FACTS.md: a destination transaction coordinator that
// fails over between writing a transaction's markers and completing it makes
// its successor write them again). From that marker on every destination
// offset is one past its source offset; kmirror sees it on its next append
// and stops the partition FAILED ("got a transaction marker twice": nothing
// more is appended; the topic must be re-created). That is loud, not silent:
// the soak counts it apart and proves, from the logs, that it is exactly
// that: identical before the marker, the extra marker, then what kmirror
// appended before it stopped, each entry one offset past its source entry.
// The source entries after that were not copied; they are counted, not
// lost. A halted partition is left out of the read_committed views (its
// sentinel never reaches the destination) and of the ground truth: the
// entry-by-entry comparison here is the stronger check of what it holds.
type halt struct {
	// Message is describe's message of the FAILED partition.
	Message string `json:"message"`
	// Marker is the destination offset of the (first) extra marker (-1
	// until the logs are compared).
	Marker int64 `json:"extra_marker_offset"`
	// Extra are the destination offsets of the extra markers, when they
	// were proven at the failure (compactedHalt: the compacted topic's
	// cleaner may remove them before the run ends); empty on the
	// transactional topic, whose one extra marker the end-of-run logs show.
	Extra []int64 `json:"extra_marker_offsets,omitempty"`
	// Evidence is what the destination log showed at the failure.
	Evidence string `json:"evidence,omitempty"`
	// CopiedEnd is the source offset below which every entry is on the
	// destination (before the marker at its own offset, after the extra
	// markers that many offsets past).
	CopiedEnd int64 `json:"copied_end"`
}

// knownKafkaHalt reports whether a FAILED partition is kmirror's stop for a
// destination that got a transaction marker twice while copying: seen on
// the next append (fetcher/sink.go's "got a transaction marker twice") or
// when kmirror's own EndTxn finds the log end one past its markers
// (fetcher/control.go's "wrote a marker twice"; seed 1 hit it on
// soak.tx/0 at fault 32: the marker of the transaction before written
// again 11 s later, after the coordinator's broker was frozen); the logs
// then decide (compareHalted). Not on
// the compacted topic: there kmirror fills the source's empty offsets with
// ABORT markers of its own, so an extra marker is not told by the source's
// offsets; compactedHalt decides there, from the markers' epochs in the
// destination log read at the failure (a fresh clone's CI run found a fill's
// two last markers written again past its range: docs/RELIABILITY.md). And
// only on the transactional topic: a destination gets markers only where kmirror copies
// transactions, so a plain topic's shift is never Kafka's duplicate marker
// (the 1,000-fault run's soak.none/0 was kmirror's resume bug, labelled
// known Kafka by the message alone).
func knownKafkaHalt(topic, msg string) bool {
	return topic == topicTx && (strings.Contains(msg, "got a transaction marker twice") || strings.Contains(msg, "wrote a marker twice") ||
		coordinatorLostTheEnd(msg))
}

// coordinatorLostTheEnd: kmirror's stop for a destination transaction
// coordinator that has a copy's transaction open although the partition has
// its end (fetcher.ErrCoordinatorBehind; a CI run's soak.tx/2: a broker
// restarted after SIGKILL wrote, as coordinator, the COMMIT marker of an end
// the other replicas never recorded). Nothing is extra on the partition: the
// logs must be identical up to the destination's end.
func coordinatorLostTheEnd(msg string) bool {
	return strings.Contains(msg, "coordinator lost the end")
}

// compareHalted compares a halted partition's logs: before the first extra
// marker as compareLog does; the extra markers as KnownKafkaExtraMarkers;
// after them, each destination entry against the source entry as many
// offsets before as extra markers precede it; the source entries not
// copied as NotCopiedAfterHalt. The extra markers are h.Extra when the
// failure proved them (the compacted topic); otherwise the one extra marker
// is found here, the first destination marker the source does not have at
// its offset, and must repeat an earlier marker.
func (c *counts) compareHalted(tp string, h *halt, src, dst []fetcher.LogEntry, compacting bool) {
	srcAt := make(map[int64]*fetcher.LogEntry, len(src))
	for i := range src {
		srcAt[src[i].Offset] = &src[i]
	}
	proven := len(h.Extra) > 0
	if !proven {
		proven = c.findExtraMarker(tp, h, srcAt, dst)
	}
	if len(h.Extra) == 0 && coordinatorLostTheEnd(h.Message) {
		c.compareLostEnd(tp, h, src, dst, compacting)
		return
	}
	if len(h.Extra) == 0 {
		h.Marker = -1
		c.compareLog(tp, src, dst, compacting)
		c.find(&c.Mismatched, "%s: FAILED (%s), but the destination has no extra marker", tp, h.Message)
		return
	}
	h.Marker = h.Extra[0]
	if proven {
		c.KnownKafkaExtraMarkers += len(h.Extra)
		c.Findings = append(c.Findings, fmt.Sprintf("KNOWN KAFKA BEHAVIOUR: %s: destination offsets %v are extra markers (Kafka wrote them twice); the partition is FAILED (%s)%s",
			tp, h.Extra, h.Message, strings.TrimSuffix("; "+h.Evidence, "; ")))
	}
	var srcBefore []fetcher.LogEntry
	for _, s := range src {
		if s.Offset < h.Marker {
			srcBefore = append(srcBefore, s)
		}
	}
	dstBefore := c.compareShifted(tp, h, srcAt, lastOfKey(src), dst, compacting)
	c.compareLogKeys(tp, srcBefore, dstBefore, compacting, lastOfKey(src))
	for _, s := range src {
		if s.Offset >= h.CopiedEnd {
			c.NotCopiedAfterHalt++
		}
	}
}

// findExtraMarker finds, for compareHalted, the one extra marker of a halted partition
// whose failure proved none: the first destination marker the source does not have at its
// offset (or that repeats the previous entry of its producer), moved back to the first
// marker of its run that repeats an earlier one. It sets h.Extra to that marker's offset
// and, when it repeats an earlier marker, those of the markers repeated after it, and
// reports whether it does; a marker that repeats none is a mismatch.
func (c *counts) findExtraMarker(tp string, h *halt, srcAt map[int64]*fetcher.LogEntry, dst []fetcher.LogEntry) bool {
	for i, d := range dst {
		// A marker equal to the source's at its offset can still be the extra one: when
		// the duplicate ends the log it stands where the source's next marker stands,
		// and markers compare alike but for producer and epoch (seed 1's soak.tx/0: the
		// COMMIT of producer 2015 epoch 70 at 270 and again at 271, the log's end, where
		// the source has its other producer's COMMIT). So a marker that repeats the
		// previous entry of its producer is a candidate too.
		if s := srcAt[d.Offset]; d.Control && (s == nil || !sameEntry(*s, d) || repeatsPrevious(dst, i)) {
			// Markers compare alike but for producer and epoch (the destination's are
			// kmirror's writers'), so a marker Kafka wrote again matches the source's next
			// marker at its offset, and the mismatch shows only where the run of markers
			// ends: the extra one is the first marker of that run that repeats an earlier
			// one (seed 4: the COMMIT of producer 1042 epoch 183 at 712 and 713, then the
			// shifted COMMIT of producer 1043 at 714, blamed until then).
			for j := i - 1; j >= 0 && dst[j].Control && dst[j].Offset == dst[j+1].Offset-1; j-- {
				if repeatsMarker(dst, dst[j]) {
					i, d = j, dst[j]
				}
			}
			proven := repeatsMarker(dst, d)
			if !proven {
				c.find(&c.Mismatched, "%s: destination offset %d is an extra %s marker of producer %d epoch %d that repeats no earlier marker: not Kafka's duplicate marker (%s)",
					tp, d.Offset, markerName(d), d.Producer, d.Epoch, h.Message)
			}
			h.Extra = []int64{d.Offset}
			if proven {
				h.Extra = append(h.Extra, repeatedAfter(srcAt, dst, i)...)
			}
			return proven
		}
	}
	return false
}

// compareShifted compares, for compareHalted, the destination entries from the first extra
// marker h.Marker on: each against the source entry as many offsets before as extra
// markers precede it, counting kmirror's fillers, what the source's cleaner removed
// (srcLast: the last offset of each key on the source) and the ABORT markers that end the
// log after the halt. It sets h.CopiedEnd and returns the destination entries before
// h.Marker, which compareLog compares.
func (c *counts) compareShifted(tp string, h *halt, srcAt map[int64]*fetcher.LogEntry, srcLast map[string]int64,
	dst []fetcher.LogEntry, compacting bool) []fetcher.LogEntry {
	extra := make(map[int64]bool, len(h.Extra))
	for _, o := range h.Extra {
		extra[o] = true
	}
	var dstBefore []fetcher.LogEntry
	h.CopiedEnd = h.Marker
	// The tail of ABORT markers that ends the log: the copy's transaction that
	// was open when the partition stopped, aborted by its coordinator once it
	// timed out (nothing is appended after a halt).
	abortTail := int64(math.MaxInt64)
	for i := len(dst) - 1; i >= 0 && dst[i].Control && !dst[i].Commit && dst[i].Offset > h.Marker; i-- {
		abortTail = dst[i].Offset
	}
	for _, d := range dst {
		if d.Offset < h.Marker {
			dstBefore = append(dstBefore, d)
			continue
		}
		if extra[d.Offset] {
			continue
		}
		shift := int64(0)
		for _, o := range h.Extra {
			if o < d.Offset {
				shift++
			}
		}
		at := d.Offset - shift
		switch s := srcAt[at]; {
		case s != nil && sameEntry(*s, d):
			h.CopiedEnd = at + 1
			if d.Control {
				c.MarkersVerified++
			} else {
				c.RecordsVerified++
			}
		case s == nil && compacting && d.Control && !d.Commit:
			c.FillerMarkers++ // kmirror's filler of a hole the source's cleaner made
		case s == nil && compacting && !d.Control && srcLast[string(d.Key)] > at:
			c.CompactedAway++
		case d.Offset >= abortTail:
			c.HaltAbortMarkers++
			c.Findings = append(c.Findings, fmt.Sprintf("%s: destination offset %d, after the halt, is an ABORT marker of producer %d epoch %d that ends the log: the copy's transaction open at the halt, aborted", tp, d.Offset, d.Producer, d.Epoch))
		default:
			c.find(&c.Mismatched, "%s: destination offset %d after %d extra markers is not source offset %d: %s", tp, d.Offset, shift, at, d)
		}
	}
	return dstBefore
}

// compareLostEnd checks a partition halted on a coordinator that lost a
// transaction's end (coordinatorLostTheEnd): the destination is the source's
// log up to its end, entry by entry; what the source has after it was not
// copied, and is counted, not lost.
func (c *counts) compareLostEnd(tp string, h *halt, src, dst []fetcher.LogEntry, compacting bool) {
	h.Marker = -1
	h.CopiedEnd = 0
	if len(dst) > 0 {
		h.CopiedEnd = dst[len(dst)-1].Offset + 1
	}
	var before []fetcher.LogEntry
	for _, s := range src {
		if s.Offset < h.CopiedEnd {
			before = append(before, s)
		} else {
			c.NotCopiedAfterHalt++
		}
	}
	c.compareLogKeys(tp, before, dst, compacting, lastOfKey(src))
	c.Findings = append(c.Findings, fmt.Sprintf("KNOWN KAFKA BEHAVIOUR: %s: the destination's transaction coordinator lost the end of a transaction the partition has; the partition is FAILED (%s); identical up to %d",
		tp, h.Message, h.CopiedEnd))
}

// compactedHalt decides whether a FAILED partition of the compacted topic is
// Kafka's duplicate marker, from the message and the destination log read at
// once (the cleaner removes markers within seconds there: delete.retention.ms
// 1000). There kmirror's marker filler writes ABORT markers where the source
// has none, so an extra marker is not told by the source's offsets: the
// message names the first offset past what kmirror wrote (the fill's range
// end, the end its markers should have made, or the source offset of the
// batch that landed late), and every entry from there up to the first one
// that is not Kafka's rewrite must be a marker the log proves rewritten
// (rewritten): a marker with the epoch of an earlier marker of its producer or
// an older one. On a transaction.version 2 destination every transaction
// ends with a new epoch, so a marker kmirror asked for has an epoch above all
// earlier ones of its producer id; only a coordinator writing an ended
// transaction's markers again puts an old epoch after a newer one. It
// returns the extra markers' offsets and the evidence in words; none when
// the log does not prove it (the run then fails with the evidence).
func compactedHalt(msg string, log []fetcher.LogEntry) ([]int64, string) {
	from, ok := pastWritten(msg)
	if !ok {
		return nil, "the message names no offset past kmirror's writes: not a duplicate-marker stop"
	}
	var extra []int64
	var said []string
	next := from
	for _, e := range log {
		if e.Offset < from {
			continue
		}
		by, ok := rewritten(log, e)
		if e.Offset != next || !ok {
			said = append(said, fmt.Sprintf("offset %d (%s) is not a rewritten marker", e.Offset, e))
			break
		}
		extra = append(extra, e.Offset)
		said = append(said, fmt.Sprintf("offset %d rewrites the %s marker of producer %d epoch %d (%s)", e.Offset, markerName(e), e.Producer, e.Epoch, by))
		next++
	}
	if len(extra) == 0 {
		if len(said) == 0 {
			said = []string{"the log ends there"}
		}
		return nil, fmt.Sprintf("from offset %d, the first past kmirror's writes: %s; the destination log (%d entries) proves no marker written twice there",
			from, said[0], len(log))
	}
	return extra, fmt.Sprintf("from offset %d, the first past kmirror's writes: %s", from, strings.Join(said, "; "))
}

// pastWritten reads from a duplicate-marker stop's message the first offset
// past what kmirror wrote correctly (fetcher/control.go and fetcher/sink.go).
func pastWritten(msg string) (int64, bool) {
	for _, re := range pastWrittenRes {
		if m := re.FindStringSubmatch(msg); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

var pastWrittenRes = []*regexp.Regexp{
	regexp.MustCompile(`outside the filler range \d+\.\.(\d+)`),
	regexp.MustCompile(`after markers that should end it at (\d+)`),
	regexp.MustCompile(`the batch of source offset (\d+) was appended at destination offset \d+`),
	// A resume that found the extra marker ending the log (fetcher/tail.go): kmirror
	// wrote below it.
	regexp.MustCompile(`the destination's last entry, at offset (\d+), is`),
}

// rewritten reports whether marker m is a marker Kafka wrote again: an ABORT
// or COMMIT whose producer has an earlier marker in log with the same or a
// later epoch (on transaction.version 2 each transaction ends with a new,
// higher epoch), and says which.
func rewritten(log []fetcher.LogEntry, m fetcher.LogEntry) (string, bool) {
	if !m.Control {
		return "", false
	}
	for _, e := range log {
		if e.Offset >= m.Offset {
			break
		}
		if e.Control && e.Producer == m.Producer && e.Epoch >= m.Epoch {
			return fmt.Sprintf("after its %s marker of epoch %d at %d", markerName(e), e.Epoch, e.Offset), true
		}
	}
	return "", false
}

// repeatedAfter returns the offsets of the markers that directly follow the extra marker
// dst[i], each also Kafka's duplicate: at the next offset, repeating an earlier marker, and not
// the source entry the extra markers so far shift to it. Seed 2 found a marker written three
// times (soak.tx/1: the COMMIT of producer 11 epoch 2 at 7, 10 and 11).
func repeatedAfter(srcAt map[int64]*fetcher.LogEntry, dst []fetcher.LogEntry, i int) []int64 {
	var out []int64
	for _, d := range dst[i+1:] {
		if d.Offset != dst[i].Offset+int64(len(out))+1 || !d.Control || !repeatsMarker(dst, d) {
			break
		}
		if s := srcAt[d.Offset-int64(len(out))-1]; s != nil && sameEntry(*s, d) {
			break // the source's own marker, shifted: copied, not extra
		}
		out = append(out, d.Offset)
	}
	return out
}

// repeatsMarker reports whether marker m repeats one before it in log: the
// same producer, epoch and outcome, which is what a transaction coordinator
// that failed over writes again (docs/KAFKA-FACTS.md). An extra marker of
// any other shape is not Kafka's duplicate.
func repeatsMarker(log []fetcher.LogEntry, m fetcher.LogEntry) bool {
	for _, e := range log {
		if e.Offset >= m.Offset {
			return false
		}
		if e.Control && e.Producer == m.Producer && e.Epoch == m.Epoch && e.Commit == m.Commit {
			return true
		}
	}
	return false
}

// repeatsPrevious reports whether marker log[i] has the producer, epoch and
// outcome of the entry of its producer just before it: a transaction's
// marker written twice, with nothing of its producer between. A producer's
// next transaction has its records between (and, on transaction.version 2,
// a higher epoch).
func repeatsPrevious(log []fetcher.LogEntry, i int) bool {
	m := log[i]
	for j := i - 1; j >= 0; j-- {
		if e := log[j]; e.Producer == m.Producer {
			return e.Control && e.Epoch == m.Epoch && e.Commit == m.Commit
		}
	}
	return false
}

func sameEntry(s, d fetcher.LogEntry) bool {
	return s.Control == d.Control && s.Commit == d.Commit && s.Transactional == d.Transactional &&
		s.Timestamp == d.Timestamp && string(s.Record) == string(d.Record)
}

func markerName(e fetcher.LogEntry) string {
	if e.Commit {
		return "COMMIT"
	}
	return "ABORT"
}

// haltNeighbourhood renders the destination entries from a few offsets
// before the one a halt's message names to the log end.
func haltNeighbourhood(ctx context.Context, dst *kgo.Client, topic string, partition int32, msg string) string {
	at, ok := pastWritten(msg)
	if !ok {
		return "the message names no offset"
	}
	log, err := fetcher.LogEntries(ctx, dst, topic, partition, max(0, at-6))
	if err != nil {
		return fmt.Sprintf("the destination log could not be read: %v", err)
	}
	var out []string
	for _, e := range log {
		out = append(out, fmt.Sprintf("%d: %s", e.Offset, e))
	}
	return "destination entries: " + strings.Join(out, "; ")
}
