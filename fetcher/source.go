package fetcher

// Source side: one source per source leader broker sends sessionless
// READ_COMMITTED Fetch requests (up to the last stable offset) for the
// partitions it leads, and plans the raw batches it gets back (plan.go). Topic name
// and topic id are both set: Fetch v13+ names topics by id, and an
// UNKNOWN_TOPIC_ID then tells a re-created source topic apart.
//
// Several Fetches may be in flight to one broker (Config.FetchesInFlight), each
// for a disjoint subset of its partitions and each over a connection of its
// own: across a WAN one Fetch at a time moves at most a response per round
// trip. A partition is in at most one outstanding Fetch
// (fetchPosition.fetching), so its answers apply in the order they were asked
// for. One connection would not do: a broker reads a connection's next
// request only after answering the one before, so a Fetch of caught-up
// partitions, held for FetchMaxWait, held up every Fetch queued behind it on
// that connection, those of partitions with data included (copies fell from
// 30 to 5 MiB/s on loopback; docs/DESIGN.md, "Fetches in flight"). Kafka's
// own replica fetchers (num.replica.fetchers) have a connection each too.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/datapath"
)

type fetchPart struct {
	p           *partition
	offset      int64
	leaderEpoch int32       // read under the lock: the admin goroutine updates it
	ahead       *aheadFetch // a read-ahead Fetch (ahead.go); nil: the cursor's own
	maxBytes    int32       // the partition's fetch size when not the request's (a gap's, ahead.go)
}

// source is the fetch side of one source broker: FetchesInFlight goroutines
// (run), each fetching a share of the running partitions the broker leads
// that no other has in flight, as buffer room and the rate limit allow, and
// planning what it gets (plan.go). It owns no lock: the partitions it fetches
// and the buffer budget are under Copier.mu, taken to pick a fetch and to
// handle its answer, never across the request. It is the place for
// per-broker fetch concerns (requests in flight, the broker's throttle).
// Goroutine i fetches over Copier.fetchers[i].
type source struct {
	c    *Copier
	id   int32
	wake chan struct{} // cap 1: a partition became fetchable
	// quotaUntil: the broker throttled a Fetch (a source quota) lately, so
	// nothing is read ahead until then (under Copier.mu; aheadAfterThrottle).
	quotaUntil time.Time
	// mutedUntil: the end of the broker's last throttle of a Fetch; none of
	// the source's goroutines sends one before it (under Copier.mu; fetchWait).
	mutedUntil time.Time
	// idlePolls: this source's Fetches in flight that are idle polls
	// (under Copier.mu; collect).
	idlePolls int
	// inFlight: this source's Fetches in flight (under Copier.mu): one
	// at most while the broker throttles the source (collect).
	inFlight int
}

// noteThrottleLocked takes a Fetch answer's throttle (a source quota).
func (s *source) noteThrottleLocked(resp *kmsg.FetchResponse) {
	if resp.ThrottleMillis > 0 {
		now := time.Now()
		s.quotaUntil = now.Add(aheadAfterThrottle)
		if until := now.Add(time.Duration(resp.ThrottleMillis) * time.Millisecond); until.After(s.mutedUntil) {
			s.mutedUntil = until
		}
	}
}

// fetchWait is how long the source's goroutines wait before their next Fetch:
// the copy's rate limit, or the rest of the broker's last throttle, whichever
// is later (one lock for both, once per Fetch). A broker meters a quota per client
// id but mutes only the connection whose answer it throttled (KIP-219), and
// each of the source's goroutines fetches over a connection of its own: left
// to franz-go, which waits out a throttle per connection, every other
// goroutine took one more answer past the quota in every quota window, and a
// mirror under a 2 MiB/s quota copied at up to 2.63 MiB/s with 8 Fetches in
// flight (e2e.TestSourceQuotaThrottlesOneMirror, CI 2026-12-07).
func (s *source) fetchWait() time.Duration {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return max(s.c.throttleWaitLocked(), time.Until(s.mutedUntil))
}

// aheadAfterThrottle is how long a source reads nothing ahead after the broker
// throttled a Fetch: a source quota, not the round trip, paces the copy then,
// and read-ahead would spend the quota on the partial batches every answer
// sends again (e2e.TestSourceQuotaThrottlesOneMirror copied at 1.49 MiB/s
// under a 2 MiB/s quota when its 4 partitions were read ahead). Longer than
// Kafka's quota window (11 one-second samples), so a quota still in force is
// seen again before it runs out.
const aheadAfterThrottle = 30 * time.Second

// start runs the source's fetch goroutines.
func (s *source) start() {
	s.c.wg.Add(len(s.c.fetchers))
	for _, cl := range s.c.fetchers {
		go s.run(cl)
	}
}

func (s *source) run(cl *kgo.Client) {
	c := s.c
	defer c.wg.Done()
	var sent time.Time // this goroutine's last request to the broker
	for {
		if wait := s.fetchWait(); wait > 0 {
			if !c.sleep(s.wake, wait) {
				return
			}
			continue
		}
		plan := s.collect()
		if len(plan.parts) == 0 {
			if time.Since(sent) >= warmEvery {
				if s.warmable() {
					s.warm(cl)
				}
				sent = time.Now()
				continue
			}
			if !c.sleep(s.wake, 250*time.Millisecond) {
				return
			}
			continue
		}
		sent = time.Now()
		kresp, err := cl.Broker(int(s.id)).Request(c.ctx, s.request(plan))
		if c.ctx.Err() != nil {
			return
		}
		fetch := plan.parts
		c.mu.Lock()
		c.reserved -= plan.reservation
		s.inFlight--
		if plan.idle {
			s.idlePolls--
		}
		for _, f := range fetch {
			if f.ahead == nil {
				f.p.fetching = false
			}
		}
		if err != nil {
			s.failedLocked(fetch, err)
		} else {
			resp := kresp.(*kmsg.FetchResponse)
			s.noteThrottleLocked(resp)
			c.throttleLocked(resp)
			s.handleLocked(fetch, resp)
		}
		c.mu.Unlock()
		signal(s.wake) // the partitions are free for this source's other goroutines
	}
}

// warmEvery is how often a goroutine with nothing to fetch sends an empty
// Fetch: below franz-go's 20 s idle timeout, after which it closes the
// connection. A variable for the tests.
var warmEvery = 10 * time.Second

// warmable: an idle goroutine's connection is worth keeping open. Not while
// the broker throttles the source (below, warm), and not once the broker
// leads none of the copier's running partitions (their leaders moved, or
// their tasks stopped): its goroutines stay, since a partition may come back,
// but an empty Fetch every warmEvery from each would be requests for nothing.
func (s *source) warmable() bool {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	warm := false
	if !time.Now().Before(s.quotaUntil) {
		for _, p := range c.parts {
			if p.srcLeader == s.id && p.state == stateRunning {
				warm = true
				break
			}
		}
	}
	c.cfg.hooks.warmDecided(s.id, warm)
	return warm
}

// warmWait bounds an empty Fetch: a broker that does not answer it is met by
// the next real one.
const warmWait = 5 * time.Second

// warm sends the broker an empty Fetch over cl, so that cl's Fetch connection
// is open before a Fetch needs it, and stays open while idle. A goroutine
// that only reads ahead of a lone partition sends its first Fetch when the
// partition's first answer is in; setting its connection up then (metadata,
// dial, ApiVersions) took 2-4 round trips, and across a 150 ms link the copy
// stalled for about half a second after its first answer (bench/README.md,
// "WAN"). Synchronous, so that a source never has more than FetchesInFlight
// Fetches in flight. Its errors are left to the next real Fetch. None is sent
// while the broker throttles the source (warmable): nothing is read
// ahead then, so no connection needs to be open ahead, and a throttled
// client id's requests are better few.
func (s *source) warm(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(s.c.ctx, warmWait)
	defer cancel()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 0, 0, 1
	req.SessionID, req.SessionEpoch = 0, -1 // sessionless, naming no partition
	kresp, err := cl.Broker(int(s.id)).Request(ctx, req)
	if err != nil {
		if s.c.ctx.Err() == nil {
			s.c.log.Debug("an empty Fetch to keep the connection open failed", "broker", s.id, "err", err)
		}
		return
	}
	s.c.mu.Lock()
	s.noteThrottleLocked(kresp.(*kmsg.FetchResponse))
	s.c.mu.Unlock()
}

// request is the Fetch of the partitions collect picked.
func (s *source) request(plan fetchPlan) *kmsg.FetchRequest {
	fetch, partMax := plan.parts, plan.partMax
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = int32(s.c.cfg.FetchMaxWait / time.Millisecond)
	if plan.idle {
		req.MaxWaitMillis = int32(max(s.c.cfg.FetchMaxWait, idleFetchWait) / time.Millisecond)
	}
	req.MinBytes = 1
	req.MaxBytes = int32(plan.reservation)
	// READ_COMMITTED: up to the last stable offset, so every transaction
	// whose batches are copied is already decided on the source and a
	// destination transaction stays open only while the copy runs from
	// its first batch to its marker. The broker still returns every
	// stored batch below that offset: aborted data and markers too.
	req.IsolationLevel = 1
	req.SessionID = 0
	req.SessionEpoch = -1 // no fetch session: every request is a full fetch
	req.Topics = groupByTopic(fetch, func(f fetchPart) string { return f.p.tp.topic }, func(f fetchPart) kmsg.FetchRequestTopic {
		t := kmsg.NewFetchRequestTopic()
		t.Topic, t.TopicID = f.p.tp.topic, f.p.srcTopicID
		return t
	}, func(t *kmsg.FetchRequestTopic, f fetchPart) {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.CurrentLeaderEpoch = f.p.tp.partition, f.leaderEpoch
		fp.FetchOffset, fp.PartitionMaxBytes = f.offset, partMax
		if f.maxBytes > 0 {
			fp.PartitionMaxBytes = f.maxBytes
		}
		t.Partitions = append(t.Partitions, fp)
	})
	return req
}

// failedLocked: the Fetch got no answer; the partitions it asked for look
// their leader up again.
func (s *source) failedLocked(fetch []fetchPart, err error) {
	for _, f := range fetch {
		if f.ahead != nil {
			s.c.aheadAnsweredLocked(f, nil)
			continue
		}
		if f.p.state == stateRunning && f.p.srcLeader == s.id {
			f.p.srcLeader = -1
			s.c.retryLocked(f.p, fmt.Errorf("fetch from source broker %d: %w", s.id, err))
		}
	}
	signal(s.c.adminWake)
}

// fetchPlan is one Fetch that collect picked: its partitions, the budget
// reserved for its answer, the per-partition fetch size (smaller under a
// rate limit, so bursts stay short) and whether it is an idle poll.
type fetchPlan struct {
	parts       []fetchPart
	reservation int64
	partMax     int32
	idle        bool
}

// Idle polls. Caught up, each of a source's FetchesInFlight Fetches
// long-polls its share of the partitions, and every partition is answered
// (empty) once per FetchMaxWait: at 4,000 partitions that was 4,000
// partition answers a second per instance to encode, decode and handle, most
// of its idle CPU (bench/README.md, "Scale"). A Fetch whose partitions are
// all caught up is an idle poll: it waits up to idleFetchWait, not
// FetchMaxWait. (Its answer is not held smaller than any other's: with
// every caught-up partition in one poll, a steady load spread over
// thousands of partitions goes through it, and a 1 MiB cap copied that load
// at 0.54-0.74 of raw produce against 0.88-0.98.) The broker answers a long
// poll as soon as any of its partitions has data, so a record's lag is the
// same; only the empty answers become fewer, and with
// them the gaps between a long poll's end and the next one's arrival at the
// broker, in which a record waits up to a round trip more. At most
// FetchesInFlight-1 of a source's Fetches are idle polls at once: the one
// left answers within FetchMaxWait, so a partition that starts, or whose
// leader moves to this broker, is fetched as soon as before.
const idleFetchWait = 5 * time.Second

// collect picks the partitions this broker should fetch now and reserves
// buffer budget for the response.
func (s *source) collect() fetchPlan {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	// Under a source quota one Fetch is in flight, as a consumer's is. The
	// broker mutes only the connection whose answer it throttled
	// (KIP-219), and fetchWait holds back only Fetches not yet sent: the
	// others in flight came back past the quota, up to FetchesInFlight-1
	// answers per throttle, and a mirror under a 2 MiB/s quota copied at
	// 2.39 MiB/s on a loaded machine (CI 2026-12-07). The quota, not the
	// round trip, paces the copy then, so nothing is lost by it.
	quota := now.Before(s.quotaUntil)
	if quota && s.inFlight > 0 {
		return fetchPlan{}
	}
	var led []*partition
	for _, p := range c.parts {
		if p.fetchable(s.id, now) && !c.cfg.hooks.fetchHeld(p.tp) {
			led = append(led, p)
		}
	}
	partMax, respMax := c.partitionFetchBytes(len(led)), c.cfg.FetchResponseMaxBytes
	limit := c.partitionBufferLimit(partMax)
	// Partitions with a backlog are shared out over the Fetches in flight;
	// caught-up ones go together, all that no Fetch holds, into one Fetch of
	// a goroutine that has no backlog to take (an idle poll, below). Capped
	// at a share instead, caught-up partitions that no goroutine was free to
	// take waited for the next Fetch to end: up to an idle poll's wait.
	var ps, idle []*partition
	backlog := 0
	for _, p := range led {
		caughtUp := p.idle()
		if !caughtUp {
			backlog++
		}
		switch {
		case p.fetching || p.coveredAhead(p.fetchOffset) || p.buffered >= limit:
		case caughtUp:
			idle = append(idle, p)
		default:
			ps = append(ps, p)
		}
	}
	if r := c.rate.Load(); r > 0 {
		burst := int32(min(max(r/5, 16<<10), int64(respMax)))
		partMax, respMax = min(partMax, burst), min(respMax, burst)
	}
	// This fetch's share of the broker's partitions with a backlog: the
	// others' fetches take the rest, so that FetchesInFlight requests cover
	// them together.
	share := (backlog + c.cfg.FetchesInFlight - 1) / c.cfg.FetchesInFlight
	if quota {
		// The one Fetch in flight (above) asks for every partition, caught up
		// or not: a caught-up partition left out would have its new records
		// fetched only once every other partition's backlog was copied.
		ps, idle = append(ps, idle...), nil
		share = len(ps)
	}
	if s.inFlight > s.idlePolls && !quota && c.cfg.MaxBufferedBytes-c.reserved < fullFetch(len(ps), share, len(idle), partMax, respMax) {
		// Not room for a whole Fetch while another that carries data is in
		// flight: wait for it (popLocked wakes the source as the budget
		// frees). A Fetch holds one of fetch.max.in.flight connections for a
		// round trip whatever it carries, so one sent with the first MiB freed
		// took a slot for a fraction of a response, and the budget freed after
		// it waited for a slot to come back. A copy with a backlog keeps its
		// budget full and hit this most of the time: across 150 ms its Fetches
		// carried 12.3 MiB on average without the wait, 12.1-16 with it
		// (bench/README.md, "WAN", 2026-12-07 17:30). An idle poll does not
		// count: it may be held for idleFetchWait. With no Fetch of data in
		// flight a Fetch takes what fits, so the copy always moves, and a
		// source whose budget other sources' produces keep taking (a pop
		// wakes only its own partition's source) waits a round trip at most.
		return fetchPlan{}
	}
	out, want := c.takeLocked(ps, share, partMax, respMax)
	caughtUp := false // out holds only caught-up partitions
	if len(out) == 0 {
		out, want = c.takeLocked(idle, len(idle), partMax, respMax)
		caughtUp = len(out) > 0
	} else if len(out) == share && len(ps) > share || len(idle) > 0 {
		signal(s.wake) // more to fetch: another of the source's goroutines takes it
	}
	if len(out) == 0 && len(led) < c.cfg.FetchesInFlight && c.reserved+int64(partMax) <= c.cfg.MaxBufferedBytes && !quota {
		// Nothing else to fetch, and fewer partitions than Fetches in flight
		// (more fill them by themselves), and no source quota: read ahead of
		// a partition in flight.
		if f, ok := c.pickAheadLocked(led, partMax, c.cfg.FetchesInFlight); ok {
			out, want = append(out, f), int64(partMax)
		}
	}
	if len(out) == 1 && len(led) < c.cfg.FetchesInFlight && out[0].p.progress.SourceLastStable > out[0].p.fetchOffset {
		signal(s.wake) // a backlog behind a lone Fetch: another goroutine may read ahead
	}
	plan := fetchPlan{parts: out, reservation: want, partMax: partMax}
	// Not under a quota: the one Fetch in flight there has to answer a
	// partition that starts within FetchMaxWait, as the one not idle does
	// otherwise.
	if caughtUp && !quota && s.idlePolls < c.cfg.FetchesInFlight-1 {
		plan.idle = true
		s.idlePolls++
	}
	if len(plan.parts) > 0 {
		s.inFlight++
	}
	c.reserved += plan.reservation
	return plan
}

// fullFetch is what a whole Fetch of the partitions collect has to share out
// reserves: its share of those with a backlog, or every caught-up one when
// none has a backlog, at the partition fetch size, within the response limit.
func fullFetch(backlog, share, caughtUp int, partMax, respMax int32) int64 {
	n := min(backlog, share)
	if n == 0 {
		n = caughtUp
	}
	return min(int64(n)*int64(partMax), int64(respMax))
}

// takeLocked marks up to n of ps as fetched by one Fetch, in a rotated
// order, within the response size and the copy's budget, and returns them
// with the bytes their answer may take.
func (c *Copier) takeLocked(ps []*partition, n int, partMax, respMax int32) ([]fetchPart, int64) {
	sortedParts(ps)
	// Rotate where the request starts: a broker fills a response in request
	// order up to its byte limit, so a fixed order would serve the first
	// partitions again and again while the others wait.
	if len(ps) > 1 && !ps[0].bigFirst {
		c.fetchTurn++
		k := c.fetchTurn % len(ps)
		ps = append(ps[k:], ps[:k]...)
	}
	var out []fetchPart
	var want int64
	for _, p := range ps {
		next := min(want+int64(partMax), int64(respMax))
		if len(out) == n || c.reserved+next > c.cfg.MaxBufferedBytes {
			break
		}
		want = next
		p.fetching = true
		out = append(out, fetchPart{p: p, offset: p.fetchOffset, leaderEpoch: p.srcLeaderEpoch, maxBytes: p.gapFetchBytes(partMax)})
	}
	return out, want
}

// handleLocked hands each partition its part of the answer.
func (s *source) handleLocked(fetch []fetchPart, resp *kmsg.FetchResponse) {
	c := s.c
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		for _, f := range fetch {
			if f.ahead != nil {
				c.aheadAnsweredLocked(f, nil)
				continue
			}
			f.p.srcLeader = -1
			c.retryLocked(f.p, fmt.Errorf("fetch from source broker %d: %w", s.id, err))
		}
		signal(c.adminWake)
		return
	}
	got := indexAnswers(resp.Topics, func(t *kmsg.FetchResponseTopic) (string, [16]byte, []kmsg.FetchResponseTopicPartition) {
		return t.Topic, t.TopicID, t.Partitions
	}, func(p *kmsg.FetchResponseTopicPartition) int32 { return p.Partition })
	for _, f := range fetch {
		p := f.p
		r, ok := got[answerKeyOf(resp.Version, p.tp, p.srcTopicID)]
		if f.ahead != nil {
			if !ok {
				r = nil
			}
			c.aheadAnsweredLocked(f, r)
			continue
		}
		if !ok || p.state != stateRunning || p.fetchOffset != f.offset || c.parts[p.tp] != p {
			continue // not answered, or stale: the partition moved on
		}
		c.handlePartitionFetchLocked(p, r)
		c.applyAheadLocked(p)
	}
}

func (c *Copier) handlePartitionFetchLocked(p *partition, r *kmsg.FetchResponseTopicPartition) {
	p.atEnd = false // until this answer shows it
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		c.fetchFailedLocked(p, err)
		return
	}
	p.errStreak = 0
	p.progress.SourceHighWatermark = r.HighWatermark
	if r.LastStableOffset >= 0 {
		p.progress.SourceLastStable = r.LastStableOffset
	}
	if r.LogStartOffset >= 0 {
		p.progress.SourceLogStart = r.LogStartOffset
	}
	p.progress.UpdatedAt = time.Now()

	it := NewBatchIterator(r.RecordBatches)
	var b Batch
	n, from, applied := 0, p.fetchOffset, 0
	var first, end, maxOffsets int64
	maxBytes := 0
	for it.Next(&b) {
		if n == 0 {
			first = b.BaseOffset
		}
		n++
		end, maxOffsets, maxBytes = b.NextOffset(), max(maxOffsets, b.NextOffset()-b.BaseOffset), max(maxBytes, len(b.Raw))
		if b.NextOffset() <= p.fetchOffset {
			p.progress.RereadBytes += int64(len(b.Raw))
			continue // a batch before the fetch offset (already queued or written)
		}
		if p.gap != nil {
			if b.BaseOffset < p.gap.from {
				c.failLocked(p, datapath.Permanent, fmt.Errorf("%w: %s/%d: source batch %d..%d overlaps destination offsets already written up to %d",
					ErrDiverged, p.tp.topic, p.tp.partition, b.BaseOffset, b.LastOffset(), p.gap.from))
				return
			}
			c.queueFillLocked(p, b.BaseOffset, p.gap.logStart)
			p.fetchOffset = b.BaseOffset
		}
		blocked, fatal := c.planBatchLocked(p, &b)
		if fatal != nil {
			c.failLocked(p, datapath.Permanent, fatal)
			return
		}
		if blocked != nil {
			c.blockLocked(p, blocked)
			break
		}
		p.fetchOffset = b.NextOffset()
		applied += len(b.Raw)
	}
	if err := it.Err(); err != nil && p.blocked == nil {
		c.failLocked(p, datapath.Permanent, fmt.Errorf("%s/%d at offset %d: %w", p.tp.topic, p.tp.partition, p.fetchOffset, err))
		return
	}
	p.bigFirst = n == 0 && it.Remaining() > 0
	srcEnd := r.LastStableOffset // READ_COMMITTED: an answer ends there
	if srcEnd < 0 {
		srcEnd = r.HighWatermark // a source too old to say
	}
	p.atEnd = p.blocked == nil && it.Remaining() == 0 && p.fetchOffset >= srcEnd
	p.learnSpan(applied, p.fetchOffset-from)
	if it.Remaining() > 0 && p.blocked == nil {
		p.learnAnswer(first, end, maxOffsets, maxBytes) // cut by its size: what a full answer covers
	}
	if c.log.Enabled(c.ctx, slog.LevelDebug) {
		// Guarded: the arguments alone are allocations, for every partition of
		// every Fetch answer, most of them empty at idle.
		c.log.Debug("fetched", "topic", p.tp.topic, "partition", p.tp.partition, "batches", n, "partial_bytes", it.Remaining(),
			"next_offset", p.fetchOffset, "high_watermark", r.HighWatermark, "last_stable", r.LastStableOffset)
	}
	if n == 0 && p.gap != nil && r.HighWatermark <= p.fetchOffset && r.HighWatermark >= 0 {
		// The source is empty from its log start on: fill up to it.
		c.queueFillLocked(p, p.gap.logStart, p.gap.logStart)
	}
	c.kickLocked(p)
}

// fetchFailedLocked handles a partition's error in a Fetch answer.
func (c *Copier) fetchFailedLocked(p *partition, err error) {
	switch {
	case errors.Is(err, kerr.OffsetOutOfRange):
		// Below the log start (retention) or above the high watermark
		// (source truncation): the admin loop lists the source offsets.
		p.needOffsets = true
		signal(c.adminWake)
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.FencedLeaderEpoch),
		errors.Is(err, kerr.UnknownLeaderEpoch), errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.LeaderNotAvailable),
		errors.Is(err, kerr.KafkaStorageError), errors.Is(err, kerr.OffsetNotAvailable),
		errors.Is(err, kerr.InconsistentTopicID), errors.Is(err, kerr.ReplicaNotAvailable):
		p.srcLeader = -1
		c.retryLocked(p, fmt.Errorf("fetch %s/%d: %w", p.tp.topic, p.tp.partition, err))
		signal(c.adminWake)
	default:
		c.retryLocked(p, fmt.Errorf("fetch %s/%d: %w", p.tp.topic, p.tp.partition, err))
	}
}

// queueFillLocked ends the pending gap: it queues filler offsets from the
// gap's start up to fillTo (the first source batch at or below the source log
// start), and arranges DeleteRecords(trimTo) on the destination once the
// destination log end has reached trimTo (the source log start).
func (c *Copier) queueFillLocked(p *partition, fillTo, trimTo int64) {
	from := p.gap.from
	p.gap = nil
	if fillTo > from {
		c.pushLocked(p, &op{kind: opRetentionFill, base: from, n: fillTo - from, fillFrom: from, fillTo: fillTo, fillTrimTo: trimTo, fillerMax: p.fillerMax})
		c.log.Info("filling retention gap", "topic", p.tp.topic, "partition", p.tp.partition, "from", from, "to", fillTo, "source_log_start", trimTo)
		return
	}
	p.trimTo = trimTo
}
