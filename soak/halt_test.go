package soak

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

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

// markerEvidence reads a FAILED compacted partition's destination log at once and says which
// markers in it repeat an earlier one (Kafka's duplicate marker, repeatsMarker) or that none
// does. The compacted topic's cleaner removes markers within minutes, so the evidence is
// read when the failure is found, not at the end of the run (a seed-1 run lost it that way:
// docs/RELIABILITY.md).
func markerEvidence(ctx context.Context, dst *kgo.Client, topic string, partition int32) string {
	log, err := fetcher.LogEntries(ctx, dst, topic, partition, 0)
	if err != nil {
		return fmt.Sprintf("the destination log could not be read for evidence: %v", err)
	}
	if rep := repeatedMarkers(log); len(rep) > 0 {
		return "the destination log has markers repeating an earlier one (Kafka's duplicate marker): " + strings.Join(rep, "; ")
	}
	return fmt.Sprintf("no marker of the destination log (%d entries) repeats an earlier one: not Kafka's duplicate marker", len(log))
}

// repeatedMarkers names each marker of log that repeats an earlier one's producer, epoch and
// outcome, with the offset of the first.
func repeatedMarkers(log []fetcher.LogEntry) []string {
	type key struct {
		producer int64
		epoch    int16
		commit   bool
	}
	first := map[key]int64{}
	var out []string
	for _, e := range log {
		if !e.Control {
			continue
		}
		k := key{e.Producer, e.Epoch, e.Commit}
		if at, ok := first[k]; ok {
			out = append(out, fmt.Sprintf("offset %d repeats the %s marker of producer %d epoch %d at %d", e.Offset, markerName(e), e.Producer, e.Epoch, at))
			continue
		}
		first[k] = e.Offset
	}
	return out
}
