package statuspage

import (
	"time"

	"github.com/kmirror/kmirror/protocol"
)

// point is one sample on the charts, summed over every mirror.
type point struct {
	at time.Time
	// lag is the records the destination lacks (partitions whose lag is
	// known).
	lag int64
	// rate is records per second appended to the destination by the copy
	// since the previous sample; -1 for the first sample (no previous one).
	rate float64
}

// partKey names a mirror partition across samples.
type partKey struct {
	mirror, topic string
	partition     int32
}

// history is a bounded ring of points: memory stays the same however long
// the instance runs.
type history struct {
	points []point
	next   int
	full   bool
	// prev holds the destination high watermarks of the last sample's
	// copied partitions: throughput is their growth.
	prev   map[partKey]int64
	prevAt time.Time
}

func newHistory(n int) *history {
	return &history{points: make([]point, max(n, 2))}
}

func (h *history) add(at time.Time, mirrors []protocol.DescribeMirrorsResponseMirror) {
	pt := point{at: at, rate: -1}
	cur := map[partKey]int64{}
	var grown int64
	for _, m := range mirrors {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if p.Lag > 0 {
					pt.lag += p.Lag
				}
				if !copied(p.State) || p.DestinationHighWatermark < 0 {
					continue
				}
				k := partKey{m.Name, t.Name, p.Partition}
				cur[k] = p.DestinationHighWatermark
				// Only partitions in both samples count: one that appears
				// (a new topic) would count its whole log at once.
				if before, ok := h.prev[k]; ok && p.DestinationHighWatermark > before {
					grown += p.DestinationHighWatermark - before
				}
			}
		}
	}
	if h.prev != nil {
		if secs := at.Sub(h.prevAt).Seconds(); secs > 0 {
			pt.rate = float64(grown) / secs
		}
	}
	h.prev, h.prevAt = cur, at
	h.points[h.next] = pt
	h.next = (h.next + 1) % len(h.points)
	h.full = h.full || h.next == 0
}

// copied says whether the destination partition is written by the copy
// alone in this state: after a failover (STOPPING, STOPPED) producers
// write it, which is not throughput of the mirror.
func copied(state string) bool {
	switch state {
	case protocol.MirrorStateStopping.String(), protocol.MirrorStateStopped.String():
		return false
	}
	return true
}

// series returns the points oldest first.
func (h *history) series() []point {
	if !h.full {
		return append([]point(nil), h.points[:h.next]...)
	}
	return append(append([]point(nil), h.points[h.next:]...), h.points[:h.next]...)
}
