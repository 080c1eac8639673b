package fetcher

// Read-ahead: more than one Fetch of a partition in flight, each at an offset
// past the one before it. A partition's next fetch offset is known only once
// the answer before it is in, so a partition alone on its source broker moves
// at most one Fetch answer per round trip: across a 150 ms WAN, 8 MiB per
// round trip is about 50 MB/s however fast the link is (bench/README.md,
// "WAN"). When a source goroutine has nothing else to fetch, and its broker
// leads fewer partitions than it has Fetches in flight (collect), it asks for
// the partition's data past where the Fetches in flight are expected to end (the
// partition's bytes per offset so far, times the fetch size, less a margin)
// and keeps the answer until the partition's cursor reaches its offset.
//
// Exact for any cleanup policy, because answers are applied in offset order
// and only once the cursor has reached the offset they were asked at: an
// answer to a Fetch at offset o is the log's batches from the first whose
// last offset is at least o, and the cursor (fetchOffset) is the end of every
// batch before it, so once fetchOffset >= o the batches of the answer that end
// past fetchOffset are exactly the log's next batches; those ending before it
// were already planned and are skipped (handlePartitionFetchLocked). A guess
// too far leaves a gap: the cursor's own Fetch fills it, and the answer waits.
// A guess too short re-reads a little. Only data below the last stable offset
// is read ahead, which the source will not truncate. Anything unusual (an
// error, a retry, a block, a retention gap, a new leader) drops every answer
// read ahead, and the partition continues one Fetch at a time.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// aheadMargin is the share of the expected span a read-ahead Fetch starts at
// before any answer was cut by its size (expectedSpan): a little short, since
// a little re-read costs less than a gap's round trip.
const aheadMargin = 0.9

// aheadFetch is one read-ahead Fetch of a partition.
type aheadFetch struct {
	offset      int64
	leader      int32 // the source broker and leader epoch it was asked under
	leaderEpoch int32
	answered    bool
	gapCounted  bool                              // counted in ReadAheadGaps (once)
	dropped     bool                              // given up before its answer came
	resp        *kmsg.FetchResponseTopicPartition // the answer, kept until applied
	held        int64                             // resp's bytes, counted in Copier.reserved
	end         int64                             // the offset after resp's last whole batch; 0: none
}

// readAhead is a partition's read-ahead state (fetchPosition).
type readAhead struct {
	// ahead are the read-ahead Fetches in offset order, answered or not.
	ahead []*aheadFetch
	// bytesPerOffset is what the partition's answers so far held per offset
	// (0: none yet): how far an answer of fetchBytes is expected to reach
	// before one was cut by its size.
	bytesPerOffset float64
	// span is how many offsets the last answer cut by its size covered, its
	// partial last batch left out (0: none yet); batchOffsets and batchBytes
	// are its largest batch's. An answer of the same size reaches about as
	// far, give or take a batch: the partial batch at its end.
	span         int64
	batchOffsets int64
	batchBytes   int
}

// learnAnswer records what an answer cut by its size covered: from its first
// batch's base to end, with its largest batch.
func (r *readAhead) learnAnswer(firstBase, end, maxBatchOffsets int64, maxBatchBytes int) {
	if end > firstBase {
		r.span, r.batchOffsets, r.batchBytes = end-firstBase, maxBatchOffsets, maxBatchBytes
	}
}

// expectedSpan is how many offsets past its start a read-ahead of fetchBytes
// may assume the Fetch before it covers: one batch short of what the last full
// answer covered (its partial last batch varies by up to one), so that
// answers overlap by a batch or so rather than leave gaps, each of which costs
// a round trip.
func (p *partition) expectedSpan(fetchBytes int32) int64 {
	if p.span > 0 {
		return max(p.span-p.batchOffsets, p.span/2, 1)
	}
	return max(int64(aheadMargin*float64(fetchBytes)/p.bytesPerOffset), 1)
}

// gapFetchBytes sizes the cursor's own Fetch when an answer read ahead waits
// past it: the gap's bytes and one batch, so that it ends about where the kept
// answer starts instead of fetching all of it again. 0: no gap, the usual size.
func (p *partition) gapFetchBytes(fetchBytes int32) int32 {
	if len(p.ahead) == 0 || !p.ahead[0].answered || p.ahead[0].offset <= p.fetchOffset || p.bytesPerOffset <= 0 {
		return 0
	}
	gap := float64(p.ahead[0].offset-p.fetchOffset) * p.bytesPerOffset
	return int32(min(int64(gap)+int64(p.batchBytes)+(16<<10), int64(fetchBytes)))
}

// fetchesInFlight counts the partition's Fetches in flight: its cursor's own
// and those read ahead still unanswered (kept answers count in the budget,
// not here).
func (p *partition) fetchesInFlight() int {
	n := 0
	if p.fetching {
		n++
	}
	for _, e := range p.ahead {
		if !e.answered {
			n++
		}
	}
	return n
}

// coveredAhead: a read-ahead Fetch still in flight was asked at or below
// offset, so its answer will carry the cursor on: no Fetch of its own needed.
func (r *readAhead) coveredAhead(offset int64) bool {
	return len(r.ahead) > 0 && !r.ahead[0].answered && r.ahead[0].offset <= offset
}

// learnSpan updates bytesPerOffset from an applied answer that moved the
// cursor by offsets with bytes.
func (r *readAhead) learnSpan(bytes int, offsets int64) {
	if bytes > 0 && offsets > 0 {
		r.bytesPerOffset = float64(bytes) / float64(offsets)
	}
}

// nextAheadOffset is where the next read-ahead Fetch starts: the end of the
// last answer kept, or the expected end of the last Fetch in flight (the
// cursor's own when nothing is read ahead yet).
func (p *partition) nextAheadOffset(fetchBytes int32) int64 {
	span := p.expectedSpan(fetchBytes)
	if n := len(p.ahead); n > 0 {
		last := p.ahead[n-1]
		if last.end > 0 {
			return last.end
		}
		return last.offset + span
	}
	return p.fetchOffset + span
}

// answerEnd is the offset after the last whole batch of an answer, 0 if it
// holds none.
func answerEnd(r *kmsg.FetchResponseTopicPartition) int64 {
	it := NewBatchIterator(r.RecordBatches)
	var b Batch
	end := int64(0)
	for it.Next(&b) {
		end = b.NextOffset()
	}
	return end
}

// pickAheadLocked picks a partition of led to read ahead, and the offset: one
// whose cursor is being fetched, with data known to be there (below the last
// stable offset) past what its Fetches in flight cover, and buffer room.
func (c *Copier) pickAheadLocked(led []*partition, fetchBytes int32, maxInFlight int) (fetchPart, bool) {
	if c.rate.Load() > 0 {
		return fetchPart{}, false // a rate limit paces the fetches; read-ahead would only burst
	}
	for _, p := range led {
		if !(p.fetching || p.coveredAhead(p.fetchOffset)) || p.fetchesInFlight() >= maxInFlight || p.bytesPerOffset <= 0 ||
			p.gap != nil || p.bigFirst || p.progress.SourceLastStable <= 0 {
			continue
		}
		// Bounded by the copy's budget (collect checked it) and fetch.max.in.flight, not by
		// the partition's share of the budget (partitionBufferLimit): read-ahead
		// runs only when the source's goroutines have nothing else to fetch, and
		// its answers are applied, freeing the budget, within a round trip or two.
		off := p.nextAheadOffset(fetchBytes)
		if off <= p.fetchOffset || off >= p.progress.SourceLastStable {
			continue
		}
		e := &aheadFetch{offset: off, leader: p.srcLeader, leaderEpoch: p.srcLeaderEpoch}
		p.ahead = append(p.ahead, e) // its reservation is the caller's (collect)
		return fetchPart{p: p, offset: off, leaderEpoch: p.srcLeaderEpoch, ahead: e}, true
	}
	return fetchPart{}, false
}

// aheadAnsweredLocked takes a read-ahead Fetch's answer (nil: none came) and
// applies what the cursor has reached. The Fetch's reservation was returned
// by the caller.
func (c *Copier) aheadAnsweredLocked(f fetchPart, r *kmsg.FetchResponseTopicPartition) {
	e, p := f.ahead, f.p
	if e.dropped {
		return
	}
	if r == nil || kerr.ErrorForCode(r.ErrorCode) != nil {
		// The cursor's own Fetch meets whatever this was and handles it.
		c.dropAheadLocked(p)
		return
	}
	e.answered, e.resp, e.held, e.end = true, r, int64(len(r.RecordBatches)), answerEnd(r)
	c.reserved += e.held
	c.applyAheadLocked(p)
}

// applyAheadLocked applies, in offset order, every kept answer the cursor
// has reached. It stops at a gap (the cursor's own Fetch fills it) and at an
// answer still in flight.
func (c *Copier) applyAheadLocked(p *partition) {
	for len(p.ahead) > 0 {
		e := p.ahead[0]
		if e.answered && e.offset > p.fetchOffset && !e.gapCounted {
			e.gapCounted = true
			p.progress.ReadAheadGaps++
		}
		if !e.answered || e.offset > p.fetchOffset {
			return
		}
		if p.state != stateRunning || p.gap != nil || p.blocked != nil || p.needOffsets ||
			e.leader != p.srcLeader || e.leaderEpoch != p.srcLeaderEpoch || c.parts[p.tp] != p {
			c.dropAheadLocked(p)
			return
		}
		p.ahead[0] = nil
		p.ahead = p.ahead[1:]
		c.reserved -= e.held
		p.progress.ReadAheadAnswers++
		// An answer kept for a gap is older than the gap's answer applied before
		// it: what it says of the source's offsets must not set them back.
		hw, lso, start := p.progress.SourceHighWatermark, p.progress.SourceLastStable, p.progress.SourceLogStart
		c.handlePartitionFetchLocked(p, e.resp)
		pr := &p.progress
		pr.SourceHighWatermark, pr.SourceLastStable, pr.SourceLogStart = max(pr.SourceHighWatermark, hw), max(pr.SourceLastStable, lso), max(pr.SourceLogStart, start)
	}
}

// dropAheadLocked gives up every read-ahead Fetch of p: answers kept return
// their bytes now, those in flight when they come (their reservations are
// returned by the fetch loop).
func (c *Copier) dropAheadLocked(p *partition) {
	for _, e := range p.ahead {
		if e.answered {
			c.reserved -= e.held
		}
		e.dropped = true
	}
	p.ahead = nil
}
