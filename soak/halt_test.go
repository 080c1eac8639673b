package soak

import (
	"fmt"
	"strings"

	"github.com/kmirror/kmirror/fetcher"
)

// A halt is a destination partition stock Kafka gave one transaction marker
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
	// Marker is the destination offset of the extra marker (-1 until the
	// logs are compared).
	Marker int64 `json:"extra_marker_offset"`
	// CopiedEnd is the source offset below which every entry is on the
	// destination (before the marker at its own offset, after it at one
	// past).
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
// ABORT markers of its own, so an extra marker cannot be told apart from
// the log alone, and a FAILED compacted partition fails the run (the marker
// filler's own "wrote a marker twice" is such a stop: a seed-1 run found
// two markers too many there, see docs/RELIABILITY.md). And only on the
// transactional topic: a destination gets markers only where kmirror copies
// transactions, so a plain topic's shift is never Kafka's duplicate marker
// (the 1,000-fault run's soak.none/0 was kmirror's resume bug, labelled
// known Kafka by the message alone).
func knownKafkaHalt(topic, msg string) bool {
	return topic == topicTx && (strings.Contains(msg, "got a transaction marker twice") || strings.Contains(msg, "wrote a marker twice"))
}

// compareHalted compares a halted partition's logs: before the extra marker
// as compareLog does; the marker itself as KnownKafkaExtraMarkers; after it,
// each destination entry against the source entry one offset before; the
// source entries not copied as NotCopiedAfterHalt.
func (c *counts) compareHalted(tp string, h *halt, src, dst []fetcher.LogEntry) {
	srcAt := make(map[int64]*fetcher.LogEntry, len(src))
	for i := range src {
		srcAt[src[i].Offset] = &src[i]
	}
	h.Marker = -1
	for _, d := range dst {
		if s := srcAt[d.Offset]; d.Control && (s == nil || !sameEntry(*s, d)) {
			h.Marker = d.Offset
			break
		}
	}
	if h.Marker < 0 {
		c.compareLog(tp, src, dst, false)
		c.find(&c.Mismatched, "%s: FAILED (%s), but the destination has no extra marker", tp, h.Message)
		return
	}
	var srcBefore, dstBefore []fetcher.LogEntry
	for _, s := range src {
		if s.Offset < h.Marker {
			srcBefore = append(srcBefore, s)
		}
	}
	h.CopiedEnd = h.Marker
	for _, d := range dst {
		switch s := srcAt[d.Offset-1]; {
		case d.Offset < h.Marker:
			dstBefore = append(dstBefore, d)
		case d.Offset == h.Marker && !repeatsMarker(dst, d):
			c.find(&c.Mismatched, "%s: destination offset %d is an extra %s marker of producer %d epoch %d that repeats no earlier marker: not Kafka's duplicate marker (%s)",
				tp, d.Offset, markerName(d), d.Producer, d.Epoch, h.Message)
		case d.Offset == h.Marker:
			c.KnownKafkaExtraMarkers++
			c.Findings = append(c.Findings, fmt.Sprintf("KNOWN KAFKA BEHAVIOUR: %s: destination offset %d is an extra %s marker (the source has no such entry there); the partition is FAILED (%s)", tp, d.Offset, markerName(d), h.Message))
		case s == nil || !sameEntry(*s, d):
			c.find(&c.Mismatched, "%s: destination offset %d after the extra marker is not source offset %d: %s", tp, d.Offset, d.Offset-1, d)
		default:
			h.CopiedEnd = d.Offset
			if d.Control {
				c.MarkersVerified++
			} else {
				c.RecordsVerified++
			}
		}
	}
	c.compareLog(tp, srcBefore, dstBefore, false)
	for _, s := range src {
		if s.Offset >= h.CopiedEnd {
			c.NotCopiedAfterHalt++
		}
	}
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
